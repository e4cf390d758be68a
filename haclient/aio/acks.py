"""Acknowledgement modes, one strategy each, and their confirmation by the broker (A1-A6, F8).

How this works: a session has one ``AckStrategy``, chosen by its mode. A consumer calls
``delivered()`` as it hands a message out (before a listener runs) and ``listener_done()`` after
the listener; the strategy settles the delivery as its mode says:

- AUTO (``AutoAck``): settles the one message and waits for the broker's confirmation before
  the consumer hands the message out, or right after the listener returned (A1).
- CLIENT (``ClientAck``): deliveries pile up; ``acknowledge()`` settles all and waits for the
  confirmation (A2). INDIVIDUAL (``IndividualAck``) settles one message.
- DUPS_OK (``DupsOkAck``): deliveries are flushed by count (``dups_ok_batch``) or after
  ``dups_ok_interval``, by the session's only background task; nobody waits (A3).
- TRANSACTED (``TransactedAck``): the acknowledgement joins the transaction (A4).
- NO_ACK (``NoAck``): deliveries arrive settled; nothing to do (A5).

Confirmation (A6), chosen per link from the broker's attach answer:

- ``SETTLE_SECOND``: the link runs in receiver settle mode ``second``; the outcome goes out
  unsettled and the broker settles it once applied. We wait for those settlements.
- otherwise (RabbitMQ, ActiveMQ settle in mode ``first`` only): the outcomes go out settled, then
  one exchange on the same session proves the broker processed them (``haclient.aio.confirm``:
  ``LINK_FLOW``, ``DRAIN`` or, as the last resort, ``ROUND_TRIP``).
- with ``jms.forceAsyncAcks`` (A7) AUTO and CLIENT are not confirmed: ``confirms`` is False,
  so the outcomes go out settled and nobody waits.

A delivery is settled only on the connection it came from: one from a connection that failover
replaced raises ``StaleDeliveryError`` (the broker that sent it is gone; the next one delivers
the message again), never waits for an answer that cannot come.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import anyio

from haclient.aio.confirm import Confirmer
from haclient.aio.gate import Connected, Gate, StaleDeliveryError, deadline_after
from haclient.aio.pending import PendingAck
from haclient.aio.received_in_flight import CallInFlight, Completed
from haclient.amqp.connection import AmqpConnection, ReceivedMessage
from haclient.amqp.endpoints import Receiver, Session
from haclient.amqp.types import ACCEPTED, Outcome
from haclient.errors import (
    AcknowledgeFailedError,
    ConnectionLostError,
    HAClientError,
    IllegalStateError,
)
from haclient.modes import AckConfirmation, AckMode

if TYPE_CHECKING:
    from haclient.aio.tracing import Tracing
    from haclient.aio.transaction import SessionTransaction
    from haclient.message import Message

__all__ = ["AckStrategy", "PendingAck", "TrackedAcknowledger", "ack_strategy", "settle"]


class AckHost(Protocol):
    """What an acknowledgement strategy uses of its session."""

    gate: Gate
    tracing: Tracing | None

    @property
    def is_closed(self) -> bool: ...

    async def settle_acks(self, acks: list[PendingAck], *, confirm: bool = True) -> None:
        """Accept ``acks`` on the current connection (confirmed unless ``confirm`` is False)."""

    def settle_acks_then(
        self, acks: list[PendingAck], then: Callable[[BaseException | None], None]
    ) -> bool:
        """``settle_acks(acks)`` without a task when nothing has to be waited for first;
        ``then(error)`` once confirmed or failed. False: nothing done."""

    async def give_back(self, acks: list[PendingAck]) -> None:
        """Return ``acks`` for redelivery (and the prefetched messages behind them)."""

    def return_one(self, pending: PendingAck) -> None:
        """Return one delivery for redelivery, marked delivery-failed."""

    def detach(self, receiver: Receiver, *, closed: bool) -> None:
        """Detach a consumer's link on the current connection."""

    def consumed(self, acks: Iterable[PendingAck]) -> None:
        """These messages count as consumed (their duplicates are suppressed from now on)."""


Acknowledger = Callable[..., Awaitable[None]]
"""What ``Message.acknowledge(timeout=...)`` calls in the async API."""


async def _nothing(*, timeout: float | None = None) -> None:
    """The acknowledger of a message whose session acknowledges by itself."""


class TrackedAcknowledger:
    """What ``Message.acknowledge()`` calls for a message of a CLIENT or INDIVIDUAL session
    (A2): awaited, ``acknowledge_message``; ``then(completed)``, the same without a task where
    nothing has to be waited for first (``acknowledge_message_then``: None when it cannot)."""

    __slots__ = ("_pending", "_strategy")

    def __init__(self, strategy: ClientAck, pending: PendingAck) -> None:
        self._strategy = strategy
        self._pending = pending

    async def __call__(self, *, timeout: float | None = None) -> None:
        await self._strategy.acknowledge_message(self._pending, deadline_after(timeout))

    def then(self, completed: Completed) -> CallInFlight | None:
        return self._strategy.acknowledge_message_then(self._pending, completed)


class AckStrategy:
    """How one session acknowledges; the base has nothing to acknowledge.

    Every question that depends on the session's mode is asked of its strategy (the class
    attributes below), so that no other module branches on ``AckMode``.
    """

    mode: AckMode
    confirms = False
    """Whether acknowledgements wait for the broker's confirmation (A6)."""
    presettled = False
    """Whether the broker sends deliveries settled (NO_ACK, A5): consumers attach that way."""
    needs_flusher = False
    """Whether the mode acknowledges in the background: the session runs ``run()`` (A3)."""
    allows_recover = True
    """Whether ``Session.recover()`` is allowed (not in a transacted session: rollback)."""
    transaction: SessionTransaction | None = None
    """The session's transaction (TRANSACTED only); None outside a transaction."""

    def __init__(self, host: AckHost) -> None:
        self._host = host

    def settled(self) -> AckStrategy:
        """The strategy of a consumer whose deliveries arrive settled (NO_ACK, or a consumer
        the presettle policy presettles, M5): nothing to acknowledge."""
        return self if self.presettled else NoAck(self._host)

    async def delivered(self, pending: PendingAck, message: Message, *, listener: bool) -> None:
        """``message`` is being handed out (to ``receive()``, or to a listener about to run)."""
        message._bind_acknowledger(_nothing)
        self._host.consumed([pending])

    def hands_out_at_once(self, confirmation: AckConfirmation) -> bool:
        """Whether ``delivered_then`` may hand out, without a task, a message received on a
        link whose acknowledgements ``confirmation`` confirms (asked before one is taken):
        AUTO where the broker's answer needs no timer (A6), CLIENT and INDIVIDUAL always
        (nothing to wait for: the message is tracked)."""
        return False

    def delivered_then(
        self,
        pending: PendingAck,
        message: Message,
        completed: Callable[[BaseException | None], None],
    ) -> bool:
        """``delivered(pending, message, listener=False)`` without a task, when the mode can
        (``hands_out_at_once``) and nothing has to be waited for first: ``completed(error)``
        is called once, on the loop, from the event-loop turn that brings the outcome (at
        once when nothing is awaited; None: done; else what ``delivered`` would raise).

        Returns:
            False, nothing done: then ``delivered``.
        """
        return False

    async def listener_done(self, pending: PendingAck, *, failed: bool) -> None:
        """The listener returned (or raised, ``failed``) for ``pending``'s message."""

    def owes(self, receiver: Receiver) -> bool:
        """Whether deliveries of ``receiver`` still wait for an acknowledgement."""
        return False

    def linger(self, receiver: Receiver, *, closed: bool) -> None:
        """A closed consumer's link: detach it once its deliveries are acknowledged."""
        self._host.detach(receiver, closed=closed)

    def connection_lost(self) -> None:
        """The connection ended: unacknowledged deliveries are gone with it."""

    async def acknowledge(self, deadline: float = math.inf) -> None:
        """``Session.acknowledge()``: nothing to do in this mode."""

    async def recover(self, deadline: float = math.inf) -> None:
        """``Session.recover()``: give back every delivered, unacknowledged message, and the
        prefetched ones behind them, so that the broker delivers them again in order; waits at
        the gate until ``deadline`` at most."""
        await self._host.gate.run(self._recover_on, deadline=deadline)

    async def _recover_on(self, at: Connected) -> None:
        await self._host.give_back([])

    async def close(self) -> None:
        """The session closes: settle, give back or roll back what is left."""

    async def run(self) -> None:
        """The mode's background work, for the session's lifetime (DUPS_OK only)."""

    def session_closed(self) -> None:
        """The session is closed: background work ends."""


class NoAck(AckStrategy):
    """NO_ACKNOWLEDGE: deliveries arrive settled; nothing to acknowledge (A5)."""

    mode = AckMode.NO_ACK
    presettled = True


class AutoAck(AckStrategy):
    """AUTO_ACKNOWLEDGE: each message confirmed by the broker before it is handed out (A1)."""

    mode = AckMode.AUTO
    confirms = True

    def hands_out_at_once(self, confirmation: AckConfirmation) -> bool:
        return confirmation in _CONFIRMED_AT_ONCE

    async def delivered(self, pending: PendingAck, message: Message, *, listener: bool) -> None:
        message._bind_acknowledger(_nothing)
        if not listener:
            try:
                await self._host.settle_acks([pending])
            finally:
                if pending.sent:  # confirmed, or in doubt: either way it is handed out
                    self._host.consumed([pending])

    def delivered_then(
        self,
        pending: PendingAck,
        message: Message,
        completed: Callable[[BaseException | None], None],
    ) -> bool:
        def settled(error: BaseException | None) -> None:
            if pending.sent:  # as ``delivered``: confirmed, or in doubt
                self._host.consumed([pending])
            completed(error)

        if not self._host.settle_acks_then([pending], settled):
            return False
        message._bind_acknowledger(_nothing)
        return True

    async def listener_done(self, pending: PendingAck, *, failed: bool) -> None:
        if failed:
            self._host.return_one(pending)
        else:
            self._host.consumed([pending])  # the listener had it, whatever the ack meets
            await self._host.settle_acks([pending])


class TransactedAck(AckStrategy):
    """SESSION_TRANSACTED: acknowledgements are part of the transaction (A4)."""

    mode = AckMode.TRANSACTED
    allows_recover = False

    def __init__(self, host: AckHost, transaction: SessionTransaction) -> None:
        super().__init__(host)
        self.transaction = self._transaction = transaction
        self.confirms = transaction.emulated  # an emulated commit confirms each ack

    async def delivered(self, pending: PendingAck, message: Message, *, listener: bool) -> None:
        message._bind_acknowledger(_nothing)
        await self._transaction.enlist_receipt(pending)

    async def close(self) -> None:
        """The session closes: its open transaction is rolled back."""
        await self._transaction.close()


class _Tracked(AckStrategy):
    """Modes that remember deliveries until acknowledged (CLIENT, INDIVIDUAL, DUPS_OK)."""

    def __init__(self, host: AckHost) -> None:
        super().__init__(host)
        self.pending: list[PendingAck] = []
        self._lingering: dict[Receiver, bool] = {}  # receiver -> close it (False: detach only)

    async def delivered(self, pending: PendingAck, message: Message, *, listener: bool) -> None:
        self._track(pending, message)

    def _track(self, pending: PendingAck, message: Message) -> None:
        """``message`` is handed out: its delivery waits for an acknowledgement."""
        self.pending.append(pending)
        message._bind_acknowledger(self._acknowledger(pending))

    def _acknowledger(self, pending: PendingAck) -> Acknowledger:
        return _nothing

    async def _recover_on(self, at: Connected) -> None:
        await self._host.give_back(self.take_pending())
        self.detach_settled_lingerers()

    def take_pending(self) -> list[PendingAck]:
        """Every tracked delivery, forgotten here (the caller settles or gives them back)."""
        taken, self.pending = self.pending, []
        return taken

    def owes(self, receiver: Receiver) -> bool:
        return any(ack.raw.delivery.link is receiver for ack in self.pending)

    def take_one(self, pending: PendingAck) -> bool:
        """Forget ``pending`` if it is still tracked; False if it is not."""
        for i, tracked in enumerate(self.pending):
            if tracked is pending:
                del self.pending[i]
                return True
        return False

    def linger(self, receiver: Receiver, *, closed: bool) -> None:
        if self.owes(receiver):
            self._lingering[receiver] = closed
        else:
            self._host.detach(receiver, closed=closed)

    def detach_settled_lingerers(self) -> None:
        for receiver in [r for r in self._lingering if not self.owes(r)]:
            self._host.detach(receiver, closed=self._lingering.pop(receiver))

    def connection_lost(self) -> None:
        self.pending.clear()
        self._lingering.clear()

    async def close(self) -> None:
        await self._host.give_back(self.take_pending())


class ClientAck(_Tracked):
    """CLIENT_ACKNOWLEDGE: ``acknowledge()`` confirms every message delivered so far (A2, F8)."""

    mode = AckMode.CLIENT
    confirms = True

    def __init__(self, host: AckHost) -> None:
        super().__init__(host)
        # F8: a failover came with deliveries unacknowledged. The next acknowledge() and the
        # next recover() each raise once; a recover() that raised, or an acknowledge() that
        # went through, ends it.
        self._unreported: set[str] = set()

    def hands_out_at_once(self, confirmation: AckConfirmation) -> bool:
        return True

    def delivered_then(
        self,
        pending: PendingAck,
        message: Message,
        completed: Callable[[BaseException | None], None],
    ) -> bool:
        self._track(pending, message)
        completed(None)
        return True

    def _acknowledger(self, pending: PendingAck) -> Acknowledger:
        return TrackedAcknowledger(self, pending)

    def _taking(self, pending: PendingAck) -> Callable[[], list[PendingAck]]:
        """What acknowledging ``pending``'s message settles: every tracked delivery (A2)."""
        return self.take_pending

    async def acknowledge_message(self, pending: PendingAck, deadline: float = math.inf) -> None:
        """``Message.acknowledge()`` of ``pending``'s message: CLIENT, every message delivered
        so far; INDIVIDUAL, that one (A2); waits at the gate until ``deadline`` at most."""
        self._check_session()
        await self._confirm(self._taking(pending), deadline)

    def acknowledge_message_then(
        self, pending: PendingAck, completed: Completed
    ) -> CallInFlight | None:
        """``acknowledge_message(pending)`` without a task when nothing has to be waited for
        first (the session open, connected, not traced, no failover report owed (F8), and
        ``settle_acks_then`` settles at once): ``completed(None, error)`` is called once, on
        the loop, from the event-loop turn that brings the broker's confirmation (A2, A6),
        with what ``acknowledge_message`` would raise (None: confirmed). The returned call's
        ``cancel()`` lets its caller go; the acknowledgement in flight goes on.

        Returns:
            None, nothing done, when any of that does not hold: then ``acknowledge_message``.
        """
        host = self._host
        if host.is_closed or host.tracing is not None or self._unreported:
            return None
        at = host.gate.connected_nowait()
        if at is None:
            return None
        in_flight = CallInFlight(completed)
        tracked = list(self.pending)
        acks = self._taking(pending)()

        def settled(error: BaseException | None) -> None:
            host.consumed(ack for ack in acks if ack.sent)  # confirmed, or in doubt
            if error is None:
                self._unreported.clear()
                self.detach_settled_lingerers()
            elif isinstance(error, HAClientError) and host.gate.lost(at, error):
                error = _acknowledge_failure(error)
            in_flight.finish(None, error)

        if not host.settle_acks_then(acks, settled):
            self.pending = tracked  # nothing was settled: every delivery stays tracked, in order
            return None
        return in_flight

    def connection_lost(self) -> None:
        if self.pending:
            self._unreported = {"acknowledge", "recover"}
        super().connection_lost()

    def _failed_over(self, call: str) -> bool:
        """F8: whether the connection failed over with deliveries unacknowledged and ``call``
        (acknowledge or recover) has not said so yet (then it must, once)."""
        if call not in self._unreported:
            return False
        self._unreported.discard(call)
        if call == "recover":
            self._unreported.clear()
        return True

    async def _recover_and_raise(self, taken: Iterable[PendingAck] = ()) -> NoReturn:
        """F8: give back ``taken`` and every tracked delivery, so that the broker delivers each
        message this session has not acknowledged again; then raise."""
        await self._host.give_back([*taken, *self.take_pending()])
        self.detach_settled_lingerers()
        raise AcknowledgeFailedError(_RECOVERED)

    def _check_session(self) -> None:
        if self._host.is_closed:
            raise IllegalStateError(
                "the session is closed: its messages can no longer be acknowledged"
            )

    async def acknowledge(self, deadline: float = math.inf) -> None:
        self._check_session()
        await self._confirm(self.take_pending, deadline)

    async def _confirm(
        self, take: Callable[[], list[PendingAck]], deadline: float = math.inf
    ) -> None:
        """Settle what ``take`` gives, confirmed, unless a failover came since the last
        acknowledge (F8: raise, and take nothing)."""

        async def settle(at: Connected) -> None:
            if self._failed_over("acknowledge"):
                await self._recover_and_raise()
            acks = take()
            try:
                await self._host.settle_acks(acks)
            except StaleDeliveryError:  # nothing was settled: they all come again
                await self._recover_and_raise(acks)
            finally:  # confirmed, or in doubt: their duplicates are suppressed
                self._host.consumed(ack for ack in acks if ack.sent)

        running = self._host.gate.run(settle, on_lost=_acknowledge_failed, deadline=deadline)
        tracing = self._host.tracing
        await (running if tracing is None else tracing.settle("ack", self._host, running))
        self._unreported.clear()
        self.detach_settled_lingerers()

    async def _recover_on(self, at: Connected) -> None:
        await super()._recover_on(at)
        if self._failed_over("recover"):
            raise AcknowledgeFailedError(_RECOVERED)


class IndividualAck(ClientAck):
    """INDIVIDUAL_ACKNOWLEDGE: ``message.acknowledge()`` confirms that message only."""

    mode = AckMode.INDIVIDUAL

    def _taking(self, pending: PendingAck) -> Callable[[], list[PendingAck]]:
        return lambda: [pending] if self.take_one(pending) else []

    async def acknowledge(self, deadline: float = math.inf) -> None:
        """Session-wide acknowledge does nothing in INDIVIDUAL mode."""


class DupsOkAck(_Tracked):
    """DUPS_OK_ACKNOWLEDGE: batched by count and time, flushed in the background (A3)."""

    mode = AckMode.DUPS_OK
    needs_flusher = True

    def __init__(self, host: AckHost, batch: int, interval: float) -> None:
        super().__init__(host)
        self._batch = batch
        self._interval = interval
        self._flush_due = anyio.Event()

    async def delivered(self, pending: PendingAck, message: Message, *, listener: bool) -> None:
        await super().delivered(pending, message, listener=listener)
        self._host.consumed([pending])  # DUPS_OK allows duplicates; this keeps them rare
        if len(self.pending) >= self._batch or len(self.pending) == 1:
            self._flush_due.set()

    async def listener_done(self, pending: PendingAck, *, failed: bool) -> None:
        if failed:
            self._host.return_one(pending)

    async def run(self) -> None:
        """Flush pending acknowledgements by count or after the interval, until closed."""
        while not self._host.is_closed:
            await self._flush_due.wait()
            self._flush_due = anyio.Event()
            if len(self.pending) < self._batch:
                with anyio.move_on_after(self._interval):
                    while len(self.pending) < self._batch and not self._host.is_closed:
                        await self._flush_due.wait()
                        self._flush_due = anyio.Event()
            await self.flush()

    async def flush(self) -> None:
        """Settle what is pending, unconfirmed; a lost connection makes the broker redeliver."""
        acks = self.take_pending()
        if acks:
            # A lost connection makes the broker redeliver them, which DUPS_OK allows.
            with contextlib.suppress(HAClientError):
                await self._host.settle_acks(acks, confirm=False)
            self.detach_settled_lingerers()

    async def close(self) -> None:
        await self.flush()

    def session_closed(self) -> None:
        self._flush_due.set()


def ack_strategy(
    mode: AckMode,
    host: AckHost,
    *,
    new_transaction: Callable[[], SessionTransaction],
    dups_ok_batch: int,
    dups_ok_interval: float,
    force_async: bool = False,
) -> AckStrategy:
    """The strategy for ``mode``; ``new_transaction()`` is called for TRANSACTED only, to make
    the session's transaction (the strategy's ``transaction``). ``force_async``
    (``jms.forceAsyncAcks``, A7): AUTO, CLIENT and INDIVIDUAL acknowledgements are sent settled
    and not confirmed."""
    if mode is AckMode.TRANSACTED:
        return TransactedAck(host, new_transaction())
    if mode is AckMode.DUPS_OK:
        return DupsOkAck(host, dups_ok_batch, dups_ok_interval)
    strategy = _SIMPLE[mode](host)
    if force_async:
        strategy.confirms = False  # the consumers attach in mode first: nothing to wait for
    return strategy


_CONFIRMED_AT_ONCE = frozenset(
    {AckConfirmation.SETTLE_SECOND, AckConfirmation.DRAIN, AckConfirmation.LINK_FLOW}
)
"""Confirmations an AUTO receive can wait for without a task (``AutoAck.delivered_then``)."""

_SIMPLE: dict[AckMode, type[AckStrategy]] = {
    AckMode.AUTO: AutoAck,
    AckMode.CLIENT: ClientAck,
    AckMode.INDIVIDUAL: IndividualAck,
    AckMode.NO_ACK: NoAck,
}


_RECOVERED = (
    "a failover came after messages were delivered and before they were acknowledged, so "
    "none of them was acknowledged; the session was recovered: drop them, every message this "
    "session had not acknowledged is delivered again (marked redelivered)"
)

_IN_DOUBT = (
    "the connection was lost before the broker confirmed the acknowledgement, so it may have "
    "applied it or not; nothing is lost either way: treat the messages as acknowledged, since "
    "the broker delivers again (marked redelivered) those it did not apply, and the duplicate "
    "window suppresses such copies"
)


def _acknowledge_failure(exc: HAClientError) -> AcknowledgeFailedError:
    """What an acknowledgement whose connection was lost raises (F8), caused by ``exc``."""
    if isinstance(exc, StaleDeliveryError):  # nothing went out: the next broker redelivers
        failure = AcknowledgeFailedError(_RECOVERED)
    else:
        failure = AcknowledgeFailedError(_IN_DOUBT, in_doubt=True)
    failure.__cause__ = exc
    return failure


def _acknowledge_failed(exc: HAClientError) -> Any:
    raise _acknowledge_failure(exc)


async def settle(
    amqp: AmqpConnection,
    session: Session,
    acks: Iterable[PendingAck],
    outcome: Outcome = ACCEPTED,
    *,
    confirmer: Confirmer,
    topic_prefix: str,
    confirm: bool = True,
    timeout: float = 30.0,
) -> None:
    """Send ``outcome`` for ``acks``; with ``confirm``, return once the broker confirmed.

    Acknowledgements on links in mode ``second`` wait for the broker's settlement; the others
    are confirmed by one exchange of ``confirmer`` (``haclient.aio.confirm``) after them all.

    Raises:
        StaleDeliveryError: one of ``acks`` came on another (older) connection than ``amqp``;
            nothing was settled.
        ConnectionLostError (and the like): the connection or the link ended first; the
            broker will redeliver what it did not confirm.
    """
    acks = list(acks)
    if not amqp.is_open:
        raise ConnectionLostError("the connection ended before the acknowledgement went out")
    if any(ack.raw.delivery.link.engine is not amqp.engine for ack in acks):
        raise StaleDeliveryError(
            "the message came on a connection that failover replaced: it cannot be "
            "acknowledged, and the broker will deliver it again"
        )
    second: list[ReceivedMessage] = []
    exchange: PendingAck | None = None  # one whose link needs a confirmation exchange
    for ack in acks:
        if confirm and ack.confirmation is AckConfirmation.SETTLE_SECOND:
            amqp.settle(ack.raw, outcome, settle=False, wake_writer=False)
            second.append(ack.raw)
        elif confirm and ack.confirmation is not AckConfirmation.NONE:
            amqp.settle(ack.raw, outcome, wake_writer=False)  # the exchange's cut writes it
            exchange = exchange or ack
        else:
            amqp.settle(ack.raw, outcome)
        ack.sent = True
    for raw in second:
        await amqp.wait_settled(raw.delivery)
        raw.delivery.settle()
    if exchange is not None:
        await confirmer.confirm(
            amqp,
            session,
            exchange.confirmation,
            address=exchange.probe_address,
            topic_prefix=topic_prefix,
            timeout=timeout,
        )
