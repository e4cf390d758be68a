"""An awaitable AMQP connection: one engine and its driver, with calls that wait for answers.

This is the thinnest useful layer over ``Engine`` + ``Driver``: it opens the socket, waits for
the peer's Open, attaches links and waits for the answer, and turns engine events into results
of awaited calls (an attach answered, a delivery settled, a message arrived). The JMS semantics
live above it in ``haclient.aio``; failover lives in ``failover`` and uses it as a connector.

Every waiting call ends when the connection ends: it then raises the error that ended it
(``ConnectionLostError``, ``ProtocolError``, ``AuthenticationError`` ...), never hangs.
"""

from __future__ import annotations

import itertools
import logging
import math
import socket
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import anyio
from anyio.abc import SocketAttribute, TaskGroup

from haclient.amqp.by_priority import ByPriority
from haclient.amqp.conditions import AttachTimeoutError, OpenTimeoutError, error_from_condition
from haclient.amqp.config import EngineConfig
from haclient.amqp.driver import Driver
from haclient.amqp.endpoints import Delivery, Link, Receiver, Sender, Session
from haclient.amqp.engine import Engine
from haclient.amqp.events import (
    ConnectionRemoteClose,
    ConnectionRemoteOpen,
    DeliveryUpdated,
    EngineEvent,
    LinkFlow,
    LinkRemoteClose,
    LinkRemoteOpen,
    MessageReceived,
    SessionRemoteClose,
    SessionRemoteOpen,
    TransportClosed,
)
from haclient.amqp.rawsocket import connect_tcp
from haclient.amqp.types import (
    ErrorCondition,
    Outcome,
    ReceiverSettleMode,
    Released,
    SenderSettleMode,
    Terminus,
)
from haerrors import BrokerNotReadyError, ClosedError, ConnectionLostError, HAClientError

__all__ = [
    "AmqpConnection",
    "Attaching",
    "ReceivedMessage",
    "SocketOption",
    "connect_amqp",
    "open_connection",
]

log = logging.getLogger("haclient.amqp")


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """A message taken from a receiver: its delivery (to settle) and its encoded bytes."""

    delivery: Delivery
    payload: bytes


WRITE_EVERY = 32
"""Pipelined transfers queued between writes from the sending task (see ``send_nowait``)."""


def _fresh(error: BaseException) -> BaseException:
    """A stored error, to raise once more: without the traceback of its earlier raises. Raising
    an exception object appends the raiser's frames to its traceback, so one error that ends a
    connection and is raised by every call waiting on it would keep all their frames (and
    what those hold) alive for as long as anyone keeps the error, such as failover, as a cause.
    """
    return error.with_traceback(None)


@dataclass(slots=True)
class _Answer:
    """A ``drain_then`` or ``flow_then`` waiting for the peer's answering flow on its link."""

    then: Callable[[BaseException | None], None]
    flows_seen: int | None  # flow_then: the link's flows received when asked; None: a drain


def _call_back(then: Callable[[BaseException | None], None], error: BaseException | None) -> None:
    """``then(error)`` from the event handler: an exception is logged, the handler goes on."""
    try:
        then(error)
    except Exception:
        log.exception("a drain callback raised")


class _Slot:
    """One awaited answer: set once with a value or an error.

    The event is made only when someone actually waits: most pipelined deliveries are settled
    before anybody asks, and an ``anyio.Event`` per message is measurable. ``then``, when set,
    is called once with the answer (value, error) as it is set (``when_settled``).
    """

    __slots__ = ("_event", "done", "error", "then", "value")

    def __init__(self) -> None:
        self._event: anyio.Event | None = None
        self.done = False
        self.value: Any = None
        self.error: BaseException | None = None
        self.then: Callable[[Any, BaseException | None], None] | None = None

    def set(self, value: Any = None) -> None:
        if not self.done:
            self.value = value
            self._finish()

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self.error = error
            self._finish()

    def _finish(self) -> None:
        self.done = True
        if self._event is not None:
            self._event.set()
        then, self.then = self.then, None
        if then is not None:
            error = self.error
            try:
                then(self.value, None if error is None else _fresh(error))
            except Exception:  # the event handler goes on: the others' answers
                log.exception("a settlement callback raised")

    async def wait(self) -> Any:
        if not self.done:
            if self._event is None:
                self._event = anyio.Event()
            await self._event.wait()
        if self.error is not None:
            raise _fresh(self.error)
        return self.value


class _Inbox:
    """Messages that arrived on one receiver, waiting to be taken."""

    __slots__ = ("_changed", "messages", "refusing")

    def __init__(self, *, by_priority: bool = False) -> None:
        # By priority: Qpid JMS's jms.localMessagePriority (haclient.amqp.by_priority).
        self.messages: deque[ReceivedMessage] | ByPriority[ReceivedMessage] = (
            ByPriority() if by_priority else deque()
        )
        # Made by the first waiter: most inboxes are never waited on (a listener's, or one
        # restored by failover before anyone receives), and an Event per receiver is garbage
        # the collector walks when thousands of them are restored at once.
        self._changed: anyio.Event | None = None
        self.refusing = False  # nobody will take more: give arrivals back at once

    def wake(self) -> None:
        """Wake whoever waits in ``wait_changed`` (a waiter checks again what it waits for)."""
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    async def wait_changed(self) -> None:
        """Wait until the next ``wake``."""
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()


L = TypeVar("L", bound=Link)


class Attaching(Generic[L]):
    """An attach sent (or queued to be sent) whose answer is still to come.

    ``wait()`` returns the link once the peer accepted it; it waits only if the answer has not
    arrived yet, and never past the deadline fixed when the attach was made, so a caller that
    starts many attaches and then waits for each in turn pays one round trip, not one each.
    """

    __slots__ = ("_connection", "_deadline", "_slot", "link", "timeout")

    def __init__(
        self, connection: AmqpConnection, link: L, slot: _Slot, deadline: float, timeout: float
    ) -> None:
        self._connection = connection
        self._slot = slot
        self._deadline = deadline
        self.link = link
        self.timeout = timeout

    async def wait(self) -> L:
        """The link, once the peer accepted it.

        Raises:
            InvalidDestinationError, NotImplementedByBrokerError ...: the peer refused it.
            AttachTimeoutError: no answer by the deadline (the link is closed).
            ConnectionLostError (and the like): the connection ended first.
        """
        slot = self._slot
        if not slot.done:
            with anyio.move_on_after(self._deadline - anyio.current_time()):
                await slot.wait()
            if not slot.done:
                raise self._connection._attach_timed_out(self)
        if slot.error is not None:
            raise _fresh(slot.error)
        return self.link


class AmqpConnection:
    """One physical AMQP connection with awaitable calls. Build it with ``connect_amqp`` (its
    task in a task group of yours) or ``open_connection`` (a block that owns it).

    All methods must run on the event loop that runs the connection.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.driver: Driver | None = None
        self.remote_open: ConnectionRemoteOpen | None = None
        self._opened = _Slot()
        self._ended = _Slot()
        self._end_error: HAClientError | None = None
        self._sessions: dict[Session, _Slot] = {}
        self._attaches: dict[Link, _Slot] = {}
        self._outcomes: dict[Delivery, _Slot] = {}
        self._inboxes: dict[Receiver, _Inbox] = {}
        self._links: set[Link] = set()
        self._link_errors: dict[Link, HAClientError] = {}  # closed by the peer, and why
        self._session_errors: dict[Session, HAClientError] = {}  # ended by the peer, and why
        self._credit_changed: anyio.Event | None = None  # made when someone waits (see _credit)
        self._flows: dict[Link, int] = {}  # flow frames received per link (see wait_flow)
        self._answers: dict[Receiver, _Answer] = {}  # drain_then, flow_then
        self._names = itertools.count(1)
        self._unwritten = 0  # transfers queued since one was last written from its sender's task
        self._while_waiting: list[Callable[[], None]] = []  # see while_waiting

    # Lifecycle ---------------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """True between the peer's Open and the end of the connection."""
        return self._opened.done and self._end_error is None and not self._ended.done

    def _check_open(self) -> None:
        if self._end_error is not None:
            raise _fresh(self._end_error)
        if self._ended.done:
            raise ClosedError("the AMQP connection is closed")

    def _wake(self) -> None:
        if self.driver is not None:
            self.driver.wakeup()

    def _write_now(self) -> None:
        """Write what is queued from this task (it waits for the peer's answer next, or it
        queued enough to keep the peer busy)."""
        if self.driver is not None:
            self.driver.write_now()

    def while_waiting(self, work: Callable[[], None]) -> None:
        """Run ``work`` once, the next time a call of this connection has written its request
        and is about to wait for the peer's answer: what the client does then overlaps the
        peer's share of the round trip, with no event-loop turn of its own. ``work`` must not
        raise. Work queued on a connection that ends without another wait is dropped."""
        self._while_waiting.append(work)

    def _write_before_waiting(self) -> None:
        """Before waiting for the peer's answer: write what is queued from this task, then do
        the work queued for such a wait (``while_waiting``)."""
        driver = self.driver  # _write_now, inline: this runs per sync send
        if driver is not None:
            driver.write_now()
        if self._while_waiting:
            work, self._while_waiting = self._while_waiting, []
            for job in work:
                job()

    async def close(self, error: ErrorCondition | None = None, *, timeout: float = 5.0) -> None:
        """Close the connection (Close frames exchanged) and wait until it has ended.

        Idempotent. If the peer does not answer within ``timeout`` the socket is dropped.
        """
        if not self._ended.done:
            self.engine.close(error)
            self._wake()
            with anyio.move_on_after(timeout):
                await self._ended.wait()
            if not self._ended.done:
                self.engine.abort(ErrorCondition("amqp:connection:forced", "close timed out"))
                self._wake()
        if self.driver is not None:
            self.driver.stop()  # the Close is exchanged (or given up): no lingering

    @property
    def end_error(self) -> HAClientError | None:
        """The error that ended the connection; None while open or after an orderly close."""
        return self._end_error

    async def wait_closed(self) -> HAClientError | None:
        """Wait for the connection to end; return the error that ended it (None: orderly)."""
        await self._ended.wait()
        return self._end_error

    # Endpoints ---------------------------------------------------------------------------------

    async def open_session(self, *, timeout: float = 30.0) -> Session:
        """Begin a session and wait for the peer's answer.

        Raises:
            OpenTimeoutError: the peer did not answer the Begin within ``timeout``.
        """
        self._check_open()
        session = self.engine.open_session()
        slot = self._sessions[session] = _Slot()
        self._wake()
        with anyio.move_on_after(timeout):
            await slot.wait()
            return session
        self._sessions.pop(session, None)
        raise OpenTimeoutError(f"the broker did not answer a Begin within {timeout:g} s")

    def _check_session(self, session: Session) -> None:
        self._check_open()
        error = self._session_errors.get(session)
        if error is not None:
            raise _fresh(error)

    def _check_link(self, link: Link) -> None:
        self._check_open()
        error = self._link_errors.get(link)
        if error is not None:
            raise _fresh(error)
        if link.is_closed:
            raise ClosedError(f"link {link.name!r} is closed")

    def _link_name(self, prefix: str) -> str:
        return f"{self.engine.config.container_id}:{prefix}:{next(self._names)}"

    def _attach(self, link: L, timeout: float) -> Attaching[L]:
        self._links.add(link)
        slot = self._attaches[link] = _Slot()
        self._wake()
        return Attaching(self, link, slot, anyio.current_time() + timeout, timeout)

    def _attach_timed_out(self, attaching: Attaching[Any]) -> AttachTimeoutError:
        link = attaching.link
        self._attaches.pop(link, None)
        link.close()
        self._wake()
        return AttachTimeoutError(
            f"the broker did not answer the attach of link {link.name!r} within "
            f"{attaching.timeout:g} s"
        )

    async def open_sender(
        self,
        target: Terminus | str | None,
        *,
        session: Session,
        name: str | None = None,
        snd_settle_mode: SenderSettleMode = SenderSettleMode.UNSETTLED,
        rcv_settle_mode: ReceiverSettleMode = ReceiverSettleMode.FIRST,
        source: Terminus | None = None,
        timeout: float = 30.0,
    ) -> Sender:
        """Attach a sender and wait until the peer accepted it.

        Raises:
            InvalidDestinationError, NotImplementedByBrokerError ...: the peer refused it.
            AttachTimeoutError: the peer never answered (RabbitMQ does that for some features).
        """
        attaching = self.open_sender_nowait(
            target,
            session=session,
            name=name,
            snd_settle_mode=snd_settle_mode,
            rcv_settle_mode=rcv_settle_mode,
            source=source,
            timeout=timeout,
        )
        return await attaching.wait()

    def open_sender_nowait(
        self,
        target: Terminus | str | None,
        *,
        session: Session,
        name: str | None = None,
        snd_settle_mode: SenderSettleMode = SenderSettleMode.UNSETTLED,
        rcv_settle_mode: ReceiverSettleMode = ReceiverSettleMode.FIRST,
        source: Terminus | None = None,
        timeout: float = 30.0,
    ) -> Attaching[Sender]:
        """Attach a sender without waiting: ``await .wait()`` on the result for the answer
        (``timeout`` counts from now). Many attaches started in a row cost one round trip."""
        self._check_session(session)
        if isinstance(target, str):
            target = Terminus(address=target)
        sender = session.open_sender(
            name or self._link_name("sender"),
            target,
            source=source,
            snd_settle_mode=snd_settle_mode,
            rcv_settle_mode=rcv_settle_mode,
        )
        return self._attach(sender, timeout)

    async def open_receiver(
        self,
        source: Terminus | str,
        *,
        session: Session,
        name: str | None = None,
        credit: int = 100,
        snd_settle_mode: SenderSettleMode = SenderSettleMode.UNSETTLED,
        rcv_settle_mode: ReceiverSettleMode = ReceiverSettleMode.FIRST,
        timeout: float = 30.0,
    ) -> Receiver:
        """Attach a receiver, grant ``credit``, and wait until the peer accepted it."""
        attaching = self.open_receiver_nowait(
            source,
            session=session,
            name=name,
            credit=credit,
            snd_settle_mode=snd_settle_mode,
            rcv_settle_mode=rcv_settle_mode,
            timeout=timeout,
        )
        return await attaching.wait()

    def open_receiver_nowait(
        self,
        source: Terminus | str,
        *,
        session: Session,
        name: str | None = None,
        credit: int = 100,
        snd_settle_mode: SenderSettleMode = SenderSettleMode.UNSETTLED,
        rcv_settle_mode: ReceiverSettleMode = ReceiverSettleMode.FIRST,
        timeout: float = 30.0,
        by_priority: bool = False,
    ) -> Attaching[Receiver]:
        """Attach a receiver and grant ``credit`` without waiting (see ``open_sender_nowait``);
        ``by_priority``: its arrivals are taken highest priority first (``ByPriority``)."""
        self._check_session(session)
        if isinstance(source, str):
            source = Terminus(address=source)
        receiver = session.open_receiver(
            name or self._link_name("receiver"),
            source,
            snd_settle_mode=snd_settle_mode,
            rcv_settle_mode=rcv_settle_mode,
            credit=credit,
        )
        self._inboxes[receiver] = _Inbox(by_priority=by_priority)
        return self._attach(receiver, timeout)

    def detach(
        self, link: Link, error: ErrorCondition | None = None, *, closed: bool = True
    ) -> None:
        """End ``link`` from this end: closed (``closed=true``: its terminus goes), or only
        detached (``closed=False``: a durable subscription stays). A ``receive()`` waiting on
        it returns None at once."""
        if not link.is_closed:
            if closed:
                link.close(error)
            else:
                link.detach(error)
        inbox = self._inboxes.get(link)  # type: ignore[call-overload]
        if inbox is not None:
            inbox.wake()
        self._signal_credit()
        self._wake()

    def end_session(self, session: Session) -> None:
        """End ``session`` from this end (its links with it)."""
        for link in [link for link in self._links if link.session is session]:
            self.detach(link)
        session.close()
        self._wake()

    # Sending -----------------------------------------------------------------------------------

    async def wait_for_credit(self, sender: Sender) -> None:
        """Wait until ``sender`` has credit to send at least one message."""
        while sender.credit <= 0:
            self._check_link(sender)
            await self._credit().wait()

    def send_nowait(
        self,
        sender: Sender,
        payload: bytes,
        *,
        settled: bool = False,
        state: Outcome | None = None,
        wake_writer: bool = True,
    ) -> Delivery:
        """Queue a message; it goes out as credit allows. ``wait_settled`` waits for its outcome.

        ``wake_writer=False``: the caller writes it next from its own task (one event-loop turn
        fewer than the writer's) by awaiting ``wait_settled``, ``wait_flow`` or ``drain``, or by
        ``cut()``.

        Raises:
            ClosedError, or the peer's reason: the link, its session or the connection is gone.
        """
        self._check_link(sender)
        delivery = sender.send(payload, settled=settled, state=state)
        if not settled:
            self._outcomes[delivery] = _Slot()
        if not wake_writer:
            return delivery
        self._unwritten += 1
        if self._unwritten >= WRITE_EVERY:
            # A sender that never yields (pipelined sends within credit) would have the
            # writer send everything only when it stops: the broker would sit idle until then.
            self._unwritten = 0
            self._write_now()
        else:
            self._wake()
        return delivery

    async def wait_settled(self, delivery: Delivery) -> Outcome | None:
        """Wait until the peer settled ``delivery``; return its outcome."""
        slot = self._outcomes.get(delivery)
        if slot is None:
            return delivery.remote_outcome
        if not slot.done:
            self._write_before_waiting()
        return await slot.wait()  # type: ignore[no-any-return]

    def when_settled(
        self, delivery: Delivery, then: Callable[[Outcome | None, BaseException | None], None]
    ) -> bool:
        """``wait_settled`` without a task: ``then(outcome, None)`` once the peer settled
        ``delivery``, or ``then(None, error)`` once waiting for that fails (its link or this
        connection ended: the error ``wait_settled`` would raise). It is called from the event
        handler of the loop turn that learns it, so nobody resumes a turn later: one event-loop
        turn fewer than awaiting. What is queued is written first, as ``wait_settled`` writes
        it. ``then`` runs inside the event handler: it must not block, and must not raise (an
        exception is logged). ``forget_when_settled`` takes it back.

        Returns:
            False, nothing registered, when no outcome is awaited for ``delivery`` (it was
            sent settled, or its outcome came already: ``delivery.remote_outcome``).
        """
        slot = self._outcomes.get(delivery)
        if slot is None or slot.done:
            return False
        slot.then = then
        self._write_before_waiting()
        return True

    def forget_when_settled(self, delivery: Delivery) -> None:
        """Take back ``when_settled``'s callback for ``delivery``: it will not be called."""
        slot = self._outcomes.get(delivery)
        if slot is not None:
            slot.then = None

    async def send(
        self, sender: Sender, payload: bytes, *, state: Outcome | None = None
    ) -> Outcome | None:
        """Send one message unsettled and wait for the peer's outcome."""
        await self.wait_for_credit(sender)
        delivery = self.send_nowait(sender, payload, state=state, wake_writer=False)
        return await self.wait_settled(delivery)

    # Receiving ---------------------------------------------------------------------------------

    def queued(self, receiver: Receiver) -> int:
        """How many messages arrived on ``receiver`` and wait to be taken."""
        inbox = self._inboxes.get(receiver)
        return len(inbox.messages) if inbox is not None else 0

    def take_all(self, receiver: Receiver) -> list[ReceivedMessage]:
        """Every message waiting on ``receiver``, taken (to release them, say)."""
        inbox = self._inboxes.get(receiver)
        if inbox is None:
            return []
        taken = list(inbox.messages)
        inbox.messages.clear()
        return taken

    def peek(self, receiver: Receiver) -> ReceivedMessage | None:
        """The message ``receive_nowait`` would take next, left where it is; or None."""
        inbox = self._inboxes.get(receiver)
        return inbox.messages[0] if inbox is not None and inbox.messages else None

    def receive_nowait(self, receiver: Receiver) -> ReceivedMessage | None:
        """The next message that arrived on ``receiver``, or None."""
        inbox = self._inboxes.get(receiver)
        return inbox.messages.popleft() if inbox is not None and inbox.messages else None

    async def receive(
        self, receiver: Receiver, timeout: float | None = None
    ) -> ReceivedMessage | None:
        """Wait for the next message on ``receiver``.

        Returns:
            The message; None after ``timeout`` seconds or once this end closed the link.

        Raises:
            AMQPError: the peer's reason (e.g. ``InvalidDestinationError``) when the peer closed
                the link, its session or the connection; messages that arrived before are
                returned first.
        """
        inbox = self._inboxes.get(receiver)
        if inbox is None:  # closed at both ends and forgotten
            return None
        if inbox.messages:  # the common case under load: no cancel scope, no waiting
            return inbox.messages.popleft()
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            while not inbox.messages:
                self._check_open()
                error = self._link_errors.get(receiver)
                if error is not None:
                    raise _fresh(error)
                if receiver.is_closed:
                    return None
                await inbox.wait_changed()
            return inbox.messages.popleft()
        return None

    def settle(
        self,
        message: ReceivedMessage,
        outcome: Outcome,
        *,
        settle: bool = True,
        wake_writer: bool = True,
    ) -> None:
        """Send ``outcome`` for a received message (and settle it unless told not to).

        With ``settle=False`` (receiver settle mode SECOND), ``wait_settled(message.delivery)``
        waits until the peer settles: its confirmation that the outcome took effect.
        ``wake_writer=False``: as in ``send_nowait``.

        Raises:
            ClosedError, or the connection's end error: ``settle=False`` on a connection that
                ended (nobody would ever confirm it; settling outright is harmless there).
        """
        if not settle:
            self._check_link(message.delivery.link)
            self._outcomes.setdefault(message.delivery, _Slot())
        message.delivery.update(outcome, settle=settle)
        if wake_writer:
            self._wake()

    def release_arrivals(self, receiver: Receiver) -> None:
        """Give back (``released``) what waits on ``receiver`` and whatever arrives on it from
        now on: nobody will take it (a closed consumer whose link stays for its acks)."""
        inbox = self._inboxes.get(receiver)
        if inbox is None:
            return
        inbox.refusing = True
        for message in self.take_all(receiver):
            self.settle(message, Released())

    def flow(self, receiver: Receiver, credit: int, *, wake_writer: bool = True) -> None:
        """Grant ``receiver`` more credit (``wake_writer=False``: the caller awaits
        ``wait_flow`` next, which writes it; see ``send_nowait``)."""
        receiver.flow(credit)
        if wake_writer:
            self._wake()

    async def drain(self, receiver: Receiver, credit: int = 0) -> None:
        """Grant ``credit`` more, ask the peer to use it now or give it back, wait for its answer.

        Messages sent to use the credit are in the receiver's inbox when this returns, and the
        link is out of drain mode again (later credit is not drained).
        """
        self._check_link(receiver)
        receiver.drain(credit)
        self._write_before_waiting()
        try:
            while receiver.draining:
                self._check_link(receiver)
                await self._credit().wait()
        finally:
            receiver.end_drain()

    def drain_then(
        self, receiver: Receiver, credit: int, then: Callable[[BaseException | None], None]
    ) -> None:
        """``drain`` without a task: ``then(None)`` is called from the event handler of the
        loop turn in which the peer's answer arrives (the link is then out of drain mode again,
        as after ``drain``), or ``then(error)`` once the link or this connection ended first
        (the error ``drain`` would raise). One drain at a time per link; ``then`` must not
        block, and must not raise (an exception is logged).

        Raises:
            ClosedError, or the peer's reason: the link or the connection is gone (nothing asked).
        """
        self._check_link(receiver)
        assert receiver not in self._answers, "one drain or flow answer at a time per link"
        receiver.drain(credit)
        self._answers[receiver] = _Answer(then, None)
        self._write_before_waiting()

    def flow_then(
        self, receiver: Receiver, credit: int, then: Callable[[BaseException | None], None]
    ) -> None:
        """Grant ``credit`` more and call ``then(None)`` from the event handler of the loop
        turn in which the next flow frame of the peer on ``receiver`` arrives (``flow`` and
        ``wait_flow`` without a task), or ``then(error)`` once the link or this connection
        ended first. For a peer known to answer a flow with its own (RabbitMQ on a link it
        sends on). One drain or flow answer at a time per link; ``then`` as for ``drain_then``.

        Raises:
            ClosedError, or the peer's reason: the link or the connection is gone (nothing asked).
        """
        self._check_link(receiver)
        assert receiver not in self._answers, "one drain or flow answer at a time per link"
        self._answers[receiver] = _Answer(then, self._flows.get(receiver, 0))
        receiver.flow(credit)
        self._write_before_waiting()

    def _answers_came(self) -> None:
        """Call back the ``drain_then`` and ``flow_then`` whose answer came (end of an event
        batch)."""
        came = [
            (receiver, answer)
            for receiver, answer in self._answers.items()
            if (
                not receiver.draining
                if answer.flows_seen is None
                else self._flows.get(receiver, 0) > answer.flows_seen
            )
        ]
        for receiver, answer in came:
            del self._answers[receiver]
            if answer.flows_seen is None:
                receiver.end_drain()
            _call_back(answer.then, None)

    def _answers_failed(self, link: Link | None, failure: HAClientError) -> None:
        """Fail the ``drain_then`` and ``flow_then`` of ``link`` (None: all of them)."""
        for receiver in [r for r in self._answers if link is None or r is link]:
            answer = self._answers.pop(receiver)
            _call_back(answer.then, _fresh(failure))

    async def flush(self) -> None:
        """Wait until every frame queued so far has been written to the socket (in order)."""
        if self.driver is not None:
            await self.driver.flush()

    def cut(self) -> None:
        """Order without waiting: every frame queued so far goes out before any queued later,
        with the next write; queue the next frame and write it (a waiting call, or any call
        that wakes the writer) right after (see ``Driver.cut``)."""
        if self.driver is not None:
            self.driver.cut()

    def flows_received(self, link: Link) -> int:
        """How many flow frames (or drain completions) arrived on ``link`` so far."""
        return self._flows.get(link, 0)

    async def wait_flow(self, link: Link, seen: int) -> None:
        """Wait until more than ``seen`` flow frames arrived on ``link``.

        Raises:
            ConnectionLostError (and the like), ClosedError: the connection or the link ended.
        """
        if self._flows.get(link, 0) <= seen:
            self._write_before_waiting()
        while self._flows.get(link, 0) <= seen:
            self._check_link(link)
            await self._credit().wait()

    # Events ------------------------------------------------------------------------------------

    def handle_events(self, events: list[EngineEvent]) -> None:
        """The driver's event handler: resolve waiting calls.

        A peer that refuses an Open or a Begin answers it and closes or ends it at once, so
        the answers are resolved only at the end of the batch, once a refusal in the same
        batch has had its say.
        """
        received: set[_Inbox] = set()
        begun: list[Session] = []
        attached: list[Link] = []
        opened: ConnectionRemoteOpen | None = None
        for event in events:
            match event:
                case MessageReceived(delivery=delivery, payload=payload):
                    inbox = self._inboxes.get(delivery.link)  # type: ignore[call-overload]
                    if inbox is not None and (inbox.refusing or delivery.link.is_closed):
                        if delivery.remote_settled:
                            delivery.settle()  # pre-settled: nothing to give back
                        else:
                            delivery.update(Released(), settle=True)
                            self._wake()
                    elif inbox is not None:
                        inbox.messages.append(ReceivedMessage(delivery, payload))
                        received.add(inbox)
                case DeliveryUpdated(delivery=delivery, outcome=outcome, settled=True):
                    slot = self._outcomes.pop(delivery, None)
                    if slot is not None:
                        slot.set(outcome)
                    delivery.settle()  # the peer settled first: forget it on our side too
                case LinkFlow(link=link):
                    self._on_flow(link)
                case LinkRemoteOpen(link=link):
                    attached.append(link)
                case LinkRemoteClose(link=link, error=error):
                    self._on_link_close(link, error)
                case SessionRemoteOpen(session=session):
                    begun.append(session)
                case SessionRemoteClose(session=session, error=error):
                    self._on_session_end(session, error)
                case ConnectionRemoteOpen(properties=properties):
                    self.remote_open = event
                    # A peer that refuses says so in its Open and explains in the Close.
                    if "amqp:connection-establishment-failed" not in properties:
                        opened = event
                case ConnectionRemoteClose(error=error):
                    failure = self._error(error, "the broker closed the connection")
                    if error is not None:
                        self._end_error = failure
                    self._opened.fail(failure)  # a refused Open: no-op once it succeeded
                case TransportClosed(error=error):
                    self._on_transport_closed(error)
        for inbox in received:  # wake each receiver once per batch, not once per message
            inbox.wake()
        if received:
            self._signal_credit()  # a transfer uses credit: a drain may be complete (see drain)
        for link in attached:
            self._on_link_open(link)  # no-op when the link was refused in this batch
        for session in begun:
            slot = self._sessions.get(session)
            if slot is not None:
                slot.set(session)  # no-op when the session was refused in this batch
        if opened is not None:
            self._opened.set(opened)  # no-op when the Close came in this batch
        if self._answers:
            self._answers_came()

    def _credit(self) -> anyio.Event:
        """The event the next credit, drain or flow change sets: made only when a call waits,
        not on every batch received (a connection holds none while nobody waits)."""
        if self._credit_changed is None:
            self._credit_changed = anyio.Event()
        return self._credit_changed

    def _signal_credit(self) -> None:
        changed, self._credit_changed = self._credit_changed, None
        if changed is not None:
            changed.set()

    def _on_link_open(self, link: Link) -> None:
        slot = self._attaches.get(link)
        if slot is None:
            return
        if link.refused_by_peer:
            return  # the reason follows in the Detach
        del self._attaches[link]
        slot.set(link)

    def _on_session_end(self, session: Session, error: ErrorCondition | None) -> None:
        """The peer ended a session: it and every link on it are unusable from now on."""
        failure = self._error(error, "the broker ended the session")
        self._session_errors[session] = failure
        slot = self._sessions.pop(session, None)
        if slot is not None:
            slot.fail(failure)
        for link in [link for link in self._links if link.session is session]:
            self._fail_link(link, failure)

    def _on_link_close(self, link: Link, error: ErrorCondition | None) -> None:
        if not link.closed_by_peer and error is None:
            self._fail_link(link, ClosedError(f"link {link.name!r} is closed"), remember=False)
            self._forget(link)
            return  # the peer answered our own close: waiters see the link closed
        if link.locally_opened and link in self._attaches:
            context = f"the broker refused link {link.name!r}"
        else:
            context = f"the broker closed link {link.name!r}"
        self._fail_link(link, self._error(error, context))

    def _on_flow(self, link: Link) -> None:
        self._flows[link] = self._flows.get(link, 0) + 1
        self._signal_credit()

    def _forget(self, link: Link) -> None:
        """Drop the bookkeeping of a link closed at both ends."""
        self._links.discard(link)
        self._flows.pop(link, None)
        self._link_errors.pop(link, None)
        inbox = self._inboxes.get(link)  # type: ignore[call-overload]
        if inbox is not None and not inbox.messages:
            del self._inboxes[link]  # type: ignore[arg-type]

    def _fail_link(self, link: Link, failure: HAClientError, *, remember: bool = True) -> None:
        """Fail everything that waits on ``link`` with ``failure`` (and later calls too)."""
        if remember:
            self._link_errors.setdefault(link, failure)
        slot = self._attaches.pop(link, None)
        if slot is not None:
            slot.fail(failure)
        inbox = self._inboxes.get(link)  # type: ignore[call-overload]
        if inbox is not None:
            inbox.wake()
        for delivery, outcome_slot in list(self._outcomes.items()):
            if delivery.link is link:
                outcome_slot.fail(failure)
                del self._outcomes[delivery]
        if link in self._answers:
            self._answers_failed(link, failure)
        self._signal_credit()

    def _error(self, error: ErrorCondition | None, context: str) -> HAClientError:
        if error is None:
            return ClosedError(context)
        return error_from_condition(
            error.name, error.description, error.info, context=context, local=error.local
        )

    def _on_transport_closed(self, error: ErrorCondition | None) -> None:
        if error is not None and self._end_error is None:
            self._end_error = self._error(error, "the connection ended")
            if self.driver is not None and self.driver.socket_error is not None:
                self._end_error.__cause__ = self.driver.socket_error  # raise ... from the OSError
        failure: HAClientError = self._end_error or ClosedError("the AMQP connection is closed")
        for slot in [self._opened, *self._sessions.values(), *self._attaches.values()]:
            slot.fail(failure)
        for slot in self._outcomes.values():
            slot.fail(failure)
        self._sessions.clear()
        self._attaches.clear()
        self._outcomes.clear()
        self._answers_failed(None, failure)
        for inbox in self._inboxes.values():
            inbox.wake()
        self._signal_credit()
        self._ended.set(self._end_error)


def _unanswered(host: str, port: int, engine: Engine, timeout: float) -> str:
    """Why an open timed out, naming what was awaited."""
    if engine.awaits_tls_handshake:
        awaited = (
            "accepted the TCP connection but did not finish the TLS handshake (awaited: its "
            "TLS answer; is this the broker's TLS port?)"
        )
    elif not engine.head:
        awaited = (
            "accepted the TCP connection but sent nothing back (awaited: its AMQP protocol "
            "header; is this an AMQP 1.0 broker's port?)"
        )
    else:
        awaited = "did not answer the AMQP Open (awaited: its login outcome and Open)"
    return f"{host}:{port} {awaited} within {timeout:g} s"


#: One ``setsockopt(level, name, value)`` call.
SocketOption = tuple[int, int, int | bytes]


def _set_options(sock: socket.socket, options: Sequence[SocketOption]) -> None:
    for level, name, value in options:
        if level != socket.IPPROTO_IP or sock.family == socket.AF_INET:  # IP_TOS: IPv4 only
            sock.setsockopt(level, name, value)


async def connect_amqp(
    host: str,
    port: int,
    config: EngineConfig,
    task_group: TaskGroup,
    *,
    connect_timeout: float = 10.0,
    tcp_timeout: float | None = None,
    socket_options: Sequence[SocketOption] = (),
) -> AmqpConnection:
    """Connect to ``host:port``, exchange Open frames and return the open connection, whose
    driver runs as one task of ``task_group`` until the connection ends (``close()``, the
    peer's end, or the task group's cancellation, which drops the socket without a Close).

    ``tcp_timeout`` bounds the TCP connection alone (within ``connect_timeout``);
    ``socket_options`` are ``setsockopt`` calls made on the socket once connected.

    Raises:
        ConnectionLostError: the TCP connection could not be made or dropped during the open.
        BrokerNotReadyError: the TCP connection was accepted, then closed before the peer sent
            a byte (a broker starting up).
        AuthenticationError: the SASL login was refused.
        ProtocolError: the peer does not speak AMQP 1.0.
        OpenTimeoutError: the peer did not answer the Open within ``connect_timeout``.
    """
    try:
        with anyio.fail_after(min(connect_timeout, tcp_timeout or connect_timeout)):
            stream = await connect_tcp(host, port)
        try:
            _set_options(stream.extra(SocketAttribute.raw_socket), socket_options)
        except OSError:
            await stream.aclose()
            raise
    except TimeoutError as exc:
        raise ConnectionLostError(f"connecting to {host}:{port} timed out") from exc
    except OSError as exc:
        raise ConnectionLostError(f"cannot connect to {host}:{port}: {exc}") from exc
    log.debug("TCP connection to %s:%d made", host, port)
    engine = Engine(config)
    connection = AmqpConnection(engine)
    driver = connection.driver = Driver(engine, stream, connection.handle_events)
    task_group.start_soon(_drive, driver, f"{host}:{port}", name=f"haclient {host}:{port}")
    try:
        engine.open()
        driver.wakeup()
        with anyio.move_on_after(connect_timeout):
            await connection._opened.wait()
        if not connection._opened.done:
            raise OpenTimeoutError(_unanswered(host, port, engine, connect_timeout))
        log.debug("the Open of %s:%d arrived", host, port)
    except BaseException as exc:
        # A peer that never answered the Open will not answer a Close either: do not wait
        # for it (failover is waiting to try the next broker).
        answered = connection._opened.done
        with anyio.CancelScope(shield=True):
            await connection.close(timeout=5.0 if answered else 0.0)
        if type(exc) is ConnectionLostError and not driver.heard:
            raise BrokerNotReadyError(
                f"{host}:{port} accepted the TCP connection and closed it before answering "
                "(a broker starting up?)",
                condition=exc.condition,
                description=exc.description,
            ) from exc
        raise
    return connection


async def _drive(driver: Driver, peer: str) -> None:
    """The connection's task: the driver, whose failure (a bug) ends this connection only."""
    try:
        await driver.run()
    except Exception:
        log.exception("the connection to %s failed", peer)


@asynccontextmanager
async def open_connection(
    host: str,
    port: int,
    config: EngineConfig,
    *,
    connect_timeout: float = 10.0,
) -> AsyncIterator[AmqpConnection]:
    """``connect_amqp`` as a block: the connection's task belongs to the block, and the
    connection is closed (Close frames exchanged) when the block exits.

    Raises:
        ConnectionLostError: the TCP connection could not be made or dropped during the open
            (as ``connect_amqp``).
        BrokerNotReadyError: the TCP connection was closed before the peer sent a byte.
        AuthenticationError: the SASL login was refused.
        ProtocolError: the peer does not speak AMQP 1.0.
        OpenTimeoutError: the peer did not answer the Open within ``connect_timeout``.
    """
    failure: Exception | None = None
    async with anyio.create_task_group() as tg:
        try:
            connection = await connect_amqp(host, port, config, tg, connect_timeout=connect_timeout)
        except Exception as exc:
            # Raised below, outside the task group, so that callers see it unwrapped rather
            # than inside an ExceptionGroup. Cancellation is a BaseException and passes.
            failure = exc
        else:
            try:
                yield connection
            except Exception as exc:
                failure = exc
            finally:
                with anyio.CancelScope(shield=True):
                    await connection.close(timeout=5.0)
    if failure is not None:
        raise failure
