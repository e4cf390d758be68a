"""Sessions, links and deliveries: thin wrappers that keep proton's objects private.

Each session and link wrapper holds its proton object and is stored on it (proton keeps Python
attributes of an endpoint in the endpoint's record), so an event for a proton endpoint always
finds the same wrapper. A delivery, one per message, holds proton's C delivery itself and is
found through its engine's map of unsettled deliveries: no proton Python object per message.
All methods only change engine state; the bytes they cause go out with the engine's next
``data_to_send()``. What the wrappers need of their engine is ``EngineState`` (the engine
imports this module, never the other way round).

Thread-safety: none. Like the engine, these objects belong to the connection's event-loop thread.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import cproton
import proton

from haclient.amqp import _convert
from haclient.amqp.types import (
    ErrorCondition,
    Outcome,
    ReceiverSettleMode,
    SenderSettleMode,
    Terminus,
)
from haerrors import ClosedError

__all__ = ["Delivery", "EngineState", "Link", "Receiver", "Sender", "Session"]

_WRAPPER_ATTR = "_haclient_wrapper"
_LOCAL_CLOSED = proton.Endpoint.LOCAL_CLOSED


class EngineState(Protocol):
    """What the endpoints need of the engine they belong to (``haclient.amqp.engine.Engine``):
    the map by which an event finds the ``Delivery`` of proton's C delivery."""

    unsettled: dict[Any, Delivery]


def _wrapper_of(pn_object: Any) -> Any:
    return getattr(pn_object, _WRAPPER_ATTR, None)


def wrapper_in(record: Any) -> Any:
    """Our wrapper stored on a proton object, read from its C record (``pn_*_attachments``)
    without building proton's Python wrapper (and its reference count traffic) first; None when
    the object has none yet. For the engine's event loop, where that is per message."""
    attrs = cproton.pn_record_get_py(record)
    return None if attrs is None else attrs.get(_WRAPPER_ATTR)


def drop_wrapper_in(record: Any) -> None:
    """Take our wrapper off a proton object's C record (see ``Engine.release``)."""
    attrs = cproton.pn_record_get_py(record)
    if attrs:
        attrs.pop(_WRAPPER_ATTR, None)


class Session:
    """An AMQP session: a window of transfers shared by its links."""

    def __init__(self, engine: EngineState, pn_session: proton.Session) -> None:
        self._engine = engine
        self._pn = pn_session
        setattr(pn_session, _WRAPPER_ATTR, self)

    @classmethod
    def _of(cls, engine: EngineState, pn_session: proton.Session) -> Session:
        existing = _wrapper_of(pn_session)
        return existing if existing is not None else cls(engine, pn_session)

    @property
    def engine(self) -> EngineState:
        """The engine (physical connection) this session belongs to."""
        return self._engine

    @property
    def remote_error(self) -> ErrorCondition | None:
        """The error the peer gave when it ended this session, if any."""
        return _convert.condition_from_pn(self._pn.remote_condition)

    def open(self) -> None:
        """Begin the session (or, in the server role, accept the peer's Begin)."""
        self._pn.open()

    def close(self, error: ErrorCondition | None = None) -> None:
        """End the session, optionally with an error condition."""
        if error is not None:
            self._pn.condition = _convert.condition_to_pn(error)
        self._pn.close()

    def open_sender(
        self,
        name: str,
        target: Terminus | None,
        *,
        source: Terminus | None = None,
        snd_settle_mode: SenderSettleMode = SenderSettleMode.UNSETTLED,
        rcv_settle_mode: ReceiverSettleMode = ReceiverSettleMode.FIRST,
        properties: Mapping[str, Any] | None = None,
    ) -> Sender:
        """Attach a sending link. The peer's answer arrives as ``LinkRemoteOpen``.

        ``target=None`` attaches an anonymous sender (each message's ``to`` decides).
        """
        sender = Sender(self._engine, self._pn.sender(name))
        sender._configure(
            source or Terminus(), target or Terminus(), snd_settle_mode, rcv_settle_mode, properties
        )
        sender._pn.open()
        return sender

    def open_receiver(
        self,
        name: str,
        source: Terminus | None,
        *,
        target: Terminus | None = None,
        snd_settle_mode: SenderSettleMode = SenderSettleMode.UNSETTLED,
        rcv_settle_mode: ReceiverSettleMode = ReceiverSettleMode.FIRST,
        properties: Mapping[str, Any] | None = None,
        credit: int = 0,
    ) -> Receiver:
        """Attach a receiving link and grant ``credit`` (0 leaves flow to the caller)."""
        receiver = Receiver(self._engine, self._pn.receiver(name))
        receiver._configure(
            source or Terminus(), target or Terminus(), snd_settle_mode, rcv_settle_mode, properties
        )
        receiver._pn.open()
        if credit:
            receiver.flow(credit)
        return receiver

    def open_coordinator(
        self, name: str, capabilities: tuple[str, ...] = ("amqp:local-transactions",)
    ) -> Sender:
        """Attach a sender to the peer's transaction coordinator."""
        return self.open_sender(
            name,
            Terminus.coordinator(capabilities),
            source=Terminus(outcomes=("amqp:accepted:list", "amqp:rejected:list")),
        )


class Link:
    """Common state of a sending or receiving link."""

    _pn: proton.Link

    def __init__(self, engine: EngineState, pn_link: proton.Link) -> None:
        self._engine = engine
        self._pn = pn_link
        self.locally_opened = False
        self.closed_by_peer = False  # the peer detached or closed it before this end did
        self._detached = False  # detached with closed=false (proton keeps it LOCAL_ACTIVE)
        setattr(pn_link, _WRAPPER_ATTR, self)

    @staticmethod
    def _of(engine: EngineState, pn_link: proton.Link) -> Link:
        existing = _wrapper_of(pn_link)
        if isinstance(existing, Link):
            return existing
        if pn_link.is_sender:
            return Sender(engine, pn_link)
        return Receiver(engine, pn_link)

    def _configure(
        self,
        source: Terminus,
        target: Terminus,
        snd_settle_mode: SenderSettleMode,
        rcv_settle_mode: ReceiverSettleMode,
        properties: Mapping[str, Any] | None,
    ) -> None:
        self.locally_opened = True
        impl = self._pn._impl
        _convert.write_terminus(cproton.pn_link_source(impl), source, is_source=True)
        _convert.write_terminus(cproton.pn_link_target(impl), target, is_source=False)
        self._pn.snd_settle_mode = int(snd_settle_mode)
        self._pn.rcv_settle_mode = int(rcv_settle_mode)
        if properties:
            self._pn.properties = _convert.symbol_keys(properties)

    def __repr__(self) -> str:
        kind = "Sender" if self.is_sender else "Receiver"
        return f"<{kind} {self.name!r}>"

    @property
    def name(self) -> str:
        """The link name (unique per connection and direction)."""
        return str(self._pn.name)

    @property
    def is_sender(self) -> bool:
        """True for a sending link."""
        return bool(self._pn.is_sender)

    @property
    def session(self) -> Session:
        """The session this link belongs to."""
        return Session._of(self._engine, self._pn.session)

    @property
    def engine(self) -> EngineState:
        """The engine (physical connection) this link belongs to."""
        return self._engine

    @property
    def source(self) -> Terminus:
        """The local source terminus."""
        return _convert.read_terminus(cproton.pn_link_source(self._pn._impl))

    @property
    def target(self) -> Terminus:
        """The local target terminus."""
        return _convert.read_terminus(cproton.pn_link_target(self._pn._impl))

    @property
    def remote_source(self) -> Terminus:
        """The source the peer attached with (null when the peer refused a receiver)."""
        return _convert.read_terminus(cproton.pn_link_remote_source(self._pn._impl))

    @property
    def remote_target(self) -> Terminus:
        """The target the peer attached with (null when the peer refused a sender)."""
        return _convert.read_terminus(cproton.pn_link_remote_target(self._pn._impl))

    @property
    def refused_by_peer(self) -> bool:
        """True when the peer answered this end's attach with a null terminus where this end
        named one (the target of a sender, the source of a receiver): a refusal, whose reason
        follows in its Detach. Cheaper than ``remote_source``: nothing is decoded."""
        impl = self._pn._impl
        is_sender = cproton.pn_link_is_sender(impl)
        remote = (cproton.pn_link_remote_target if is_sender else cproton.pn_link_remote_source)(
            impl
        )
        return _convert.is_null_terminus(remote)

    @property
    def remote_snd_settle_mode(self) -> SenderSettleMode:
        """The sender settle mode the peer answered with."""
        return SenderSettleMode(self._pn.remote_snd_settle_mode)

    @property
    def remote_rcv_settle_mode(self) -> ReceiverSettleMode:
        """The receiver settle mode the peer answered with (a broker may downgrade SECOND)."""
        return ReceiverSettleMode(self._pn.remote_rcv_settle_mode)

    @property
    def remote_properties(self) -> dict[str, Any]:
        """The peer's link properties."""
        return _convert.plain_keys(self._pn.remote_properties)

    @property
    def remote_error(self) -> ErrorCondition | None:
        """The error the peer detached or closed this link with, if any."""
        return _convert.condition_from_pn(self._pn.remote_condition)

    @property
    def is_coordinator(self) -> bool:
        """True for a link whose target is a transaction coordinator."""
        target = self._pn.target if self.locally_opened else self._pn.remote_target
        return bool(target.type == proton.Terminus.COORDINATOR)

    @property
    def credit(self) -> int:
        """Credit: messages the sender may still send (as this end knows it)."""
        return int(cproton.pn_link_credit(self._pn._impl))  # per send: without proton's wrapper

    @property
    def unsettled(self) -> int:
        """Deliveries on this link not yet settled locally."""
        return int(self._pn.unsettled)

    @property
    def is_closed(self) -> bool:
        """True once this end has closed or detached the link."""
        return self._detached or bool(cproton.pn_link_state(self._pn._impl) & _LOCAL_CLOSED)

    def open(
        self,
        source: Terminus | None = None,
        target: Terminus | None = None,
        *,
        snd_settle_mode: SenderSettleMode | None = None,
        rcv_settle_mode: ReceiverSettleMode | None = None,
        properties: Mapping[str, Any] | None = None,
    ) -> None:
        """Answer the peer's attach (server role).

        The termini default to the peer's. Pass ``Terminus.null()`` for the one the peer asked
        for to refuse the attach, then ``close(error)``.
        """
        impl = self._pn._impl
        _answer(cproton.pn_link_source(impl), source, cproton.pn_link_remote_source(impl), True)
        _answer(cproton.pn_link_target(impl), target, cproton.pn_link_remote_target(impl), False)
        self._pn.snd_settle_mode = int(
            snd_settle_mode if snd_settle_mode is not None else self.remote_snd_settle_mode
        )
        self._pn.rcv_settle_mode = int(
            rcv_settle_mode if rcv_settle_mode is not None else self.remote_rcv_settle_mode
        )
        if properties:
            self._pn.properties = _convert.symbol_keys(properties)
        self._pn.open()

    def close(self, error: ErrorCondition | None = None) -> None:
        """Close the link (detach with ``closed=true``), optionally with an error."""
        if error is not None:
            self._pn.condition = _convert.condition_to_pn(error)
        self._pn.close()

    def detach(self, error: ErrorCondition | None = None) -> None:
        """Detach without closing (the link may be resumed; a durable subscription stays)."""
        if error is not None:
            self._pn.condition = _convert.condition_to_pn(error)
        self._detached = True
        self._pn.detach()


def _answer(local: Any, given: Terminus | None, remote: Any, is_source: bool) -> None:
    """Set a local terminus (proton's C ``pn_terminus_t``) to ``given``, or, when None, to a
    copy of the peer's (made inside proton: nothing decoded)."""
    if given is None:
        cproton.pn_terminus_copy(local, remote)
    else:
        _convert.write_terminus(local, given, is_source=is_source)


class Sender(Link):
    """A sending link."""

    def __init__(self, engine: EngineState, pn_link: proton.Link) -> None:
        super().__init__(engine, pn_link)
        self._tags = itertools.count(1)

    @property
    def drain_requested(self) -> bool:
        """True while the peer asks this sender to use up or give back its credit."""
        return bool(self._pn.drain_mode)

    def send(
        self,
        payload: bytes,
        *,
        tag: bytes | None = None,
        settled: bool = False,
        state: Outcome | None = None,
    ) -> Delivery:
        """Queue one encoded message for transfer.

        The message goes out as soon as the link has credit. ``settled=True`` sends it
        pre-settled (at most once); otherwise the peer's outcome arrives as
        ``DeliveryUpdated``. ``state`` (a ``TransactionalState``) enlists the transfer in a
        transaction.
        """
        impl = self._pn._impl
        delivery_tag = tag if tag is not None else str(next(self._tags)).encode()
        delivery = Delivery(self, cproton.pn_delivery(impl, delivery_tag))
        if state is not None:
            delivery.set_state(state)
        written = cproton.pn_link_send(impl, payload)
        if written < 0:
            raise ClosedError(f"link {self.name!r} cannot send (proton error {written})")
        cproton.pn_link_advance(impl)
        if settled:
            # A pre-settled delivery is done (and proton 0.40 answers no drain while one is
            # alive): settling forgets it at once.
            delivery.settle()
        return delivery

    def drained(self) -> int:
        """Answer a drain request: give back the credit this sender will not use."""
        return int(self._pn.drained())

    def offered(self, count: int) -> None:
        """Tell the peer how many messages are waiting (a hint for its credit)."""
        self._pn.offered(count)


class Receiver(Link):
    """A receiving link."""

    def flow(self, credit: int) -> None:
        """Grant ``credit`` more messages."""
        self._pn.flow(credit)

    def drain(self, credit: int = 0) -> None:
        """Grant ``credit`` and ask the sender to use it now or give it back.

        A ``LinkFlow`` event follows once the sender answered; ``draining`` is then False.
        """
        self._pn.drain(credit)

    @property
    def draining(self) -> bool:
        """True while a drain is outstanding."""
        return bool(self._pn.draining())

    def end_drain(self) -> None:
        """Leave drain mode (a drain answered): credit granted later is kept by the sender
        until used, not given back at once."""
        self._pn.drain_mode = False


class Delivery:
    """One transfer on a link, in either direction, until both ends settle it.

    It holds proton's C delivery directly (a reference of its own, given back when this object
    is freed) and is found again through its engine's map of unsettled deliveries: proton's
    Python wrapper, with its record entry and two disposition objects, is built only for the
    rare outcomes that need it. Events find this object in ``Engine.unsettled``.
    """

    __slots__ = ("_impl", "_wrapper", "link", "received")

    def __init__(self, link: Link, impl: Any) -> None:
        cproton.pn_incref(impl)
        self._impl = impl
        self._wrapper: proton.Delivery | None = None
        self.link = link
        self.received = False
        link._engine.unsettled[impl] = self

    def __del__(self, _decref: Callable[[Any], None] = cproton.pn_decref) -> None:
        _decref(self._impl)  # bound at definition: module globals may be gone at exit

    def _proton(self) -> proton.Delivery:
        if self._wrapper is None:
            self._wrapper = proton.Delivery.wrap(self._impl)
        return self._wrapper

    def __repr__(self) -> str:
        return f"<Delivery {self.tag!r} on {self.link.name!r}>"

    @property
    def tag(self) -> bytes:
        """The delivery tag."""
        tag = cproton.pn_delivery_tag(self._impl)
        return tag if isinstance(tag, bytes) else str(tag).encode()

    @property
    def remote_outcome(self) -> Outcome | None:
        """The peer's latest state for this delivery, if it sent one."""
        return _convert.read_state(self._impl, self._proton)

    @property
    def remote_settled(self) -> bool:
        """True once the peer has settled this delivery."""
        return bool(cproton.pn_delivery_settled(self._impl))

    def set_state(self, outcome: Outcome) -> None:
        """Set the local state (sent with the transfer, or as a disposition)."""
        _convert.update_delivery(self._impl, outcome, self._proton)

    def update(self, outcome: Outcome, *, settle: bool = True) -> None:
        """Send a disposition with ``outcome``; settle it too unless ``settle=False``.

        Keep it unsettled when the link's receiver settle mode is SECOND: the peer settles first
        and its ``DeliveryUpdated(settled=True)`` confirms the outcome was applied.
        """
        self.set_state(outcome)
        if settle:
            self.settle()

    def settle(self) -> None:
        """Settle this end and forget the delivery."""
        cproton.pn_delivery_settle(self._impl)
        self.forget()

    def forget(self) -> None:
        """Events for this delivery no longer find this object (it is settled here)."""
        unsettled = self.link._engine.unsettled
        if unsettled.get(self._impl) is self:
            del unsettled[self._impl]
