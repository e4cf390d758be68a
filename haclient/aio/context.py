"""What a connection shares with its sessions, and a session with its producers and consumers.

How this works: a ``Connection`` owns one ``ConnectionContext`` and a ``Session`` one
``SessionContext``; the objects they make are given the context, never their parent, so a
session reaches what it needs of its connection (the gate, registration for failover, the
subscription names, the temporary destinations, forgetting itself on close) and a consumer what
it needs of its session (the options, the acknowledgement strategy, the transaction ...) through
a short, typed surface instead of its parents' private members. Nothing here imports the
connection or the session modules.

A session's mode is answered by its acknowledgement strategy (``SessionContext.acks``:
``presettled``, ``needs_flusher``, ``allows_recover``, ``confirms``); whether it is transacted by
``SessionContext.transaction`` (None outside a transaction). Both are made in the constructor.

Thread-safety: none; everything runs on the connection's event loop.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from failover.listeners import Listeners
from failover.manager import ConnectionState
from haclient.aio.acks import AckStrategy, ack_strategy, settle
from haclient.aio.confirm import Confirmer
from haclient.aio.dedup import DuplicateWindow, HandedOut
from haclient.aio.emulated_transaction import EmulatedTransaction
from haclient.aio.gate import Connected, Gate, ReplacedError, deadline_after
from haclient.aio.pending import PendingAck
from haclient.aio.stats import Counters
from haclient.aio.temporaries import TemporaryDestinations
from haclient.aio.termini import SubscriptionNames
from haclient.aio.transaction import NativeTransaction, SessionTransaction
from haclient.amqp.types import ACCEPTED, Modified, Outcome, Released
from haclient.destination import TemporaryQueue, TemporaryTopic
from haclient.errors import (
    ClosedError,
    ConnectionFailedError,
    HAClientError,
    IllegalStateError,
)
from haclient.message import Message, MessageIdGenerator, uuid_message_ids
from haclient.modes import AckConfirmation, AckMode

if TYPE_CHECKING:
    from failover.manager import ConnectionManager
    from haclient.aio.options import ConnectionOptions
    from haclient.aio.physical import PhysicalConnection
    from haclient.aio.tracing import Tracing
    from haclient.amqp.connection import AmqpConnection
    from haclient.amqp.endpoints import Delivery, Receiver
    from haclient.amqp.endpoints import Session as AmqpSession

__all__ = ["ConnectionContext", "Counters", "SessionContext"]

# UUID message ids carry nothing of their connection: no-local (E2) remembers the ids it made,
# the newest this many, for this long (seconds).
_SENT_IDS_KEPT = 10_000
_SENT_IDS_AGE = 600.0
# The messages a session handed out and has not seen consumed, for F8's redelivered mark: at
# least this many of the newest (more with a larger duplicate window).
_HANDED_OUT_KEPT = 10_000

log = logging.getLogger("haclient.session")

_link_numbers = itertools.count(1)

StartSoon = Callable[..., None]
"""``start_soon(fn, *args, name=None)``: run ``fn`` in the connection's task group."""


class StartSwitch:
    """JMS ``start()``/``stop()``: consumers hand out messages only while started."""

    def __init__(self) -> None:
        self.started = False
        self._changed = anyio.Event()
        self._waited_stopped = False

    def first_wait_while_stopped(self) -> bool:
        """True the first time it is asked while stopped (a receive is about to wait for
        ``start()``), then never again: what warns once per connection."""
        if self.started or self._waited_stopped:
            return False
        self._waited_stopped = True
        return True

    def set(self, started: bool) -> None:
        if started != self.started:
            self.started = started
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_started(self, timeout: float) -> bool:
        """Wait until started; False if ``timeout`` seconds passed first."""
        if self.started:
            return True
        if timeout <= 0:
            return False
        with anyio.move_on_after(timeout):
            while not self.started:
                await self._changed.wait()
        return self.started


@dataclass(eq=False)
class ConnectionContext:
    """The part of a logical connection that its sessions and their children use.

    Attributes:
        start_soon: Runs a function in the connection's task group.
        forget_session: Drops a closed session from the connection (called by the session).
        subscription_names: The link names of the connection's shared subscription consumers.
        temporaries: The connection's temporary destinations (restored after failover, F6).
        listeners: The connection's listeners (``Connection.add_listener``), for the events
            that are not failover's (``message_dead_lettered``, E6).
    """

    options: ConnectionOptions
    manager: ConnectionManager[PhysicalConnection]
    container_id: str
    id_base: str
    start_soon: StartSoon
    forget_session: Callable[[Any], None]
    client_id: str | None = None
    closed: bool = False
    current: PhysicalConnection | None = None
    counters: Counters = field(default_factory=Counters)
    switch: StartSwitch = field(default_factory=StartSwitch)
    subscription_names: SubscriptionNames = field(default_factory=SubscriptionNames)
    listeners: Listeners = field(default_factory=Listeners)
    gate: Gate = field(init=False)
    temporaries: TemporaryDestinations = field(init=False)
    _producer_numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    tracing: Tracing | None = None  # haclient.aio.tracing, when the connection traces
    # The UUID ids this connection made lately: no-local (E2) cannot know them by a prefix.
    _sent_uuid_ids: DuplicateWindow = field(
        default_factory=lambda: DuplicateWindow(_SENT_IDS_KEPT, _SENT_IDS_AGE)
    )

    def __post_init__(self) -> None:
        self.gate = Gate(self.manager, lambda: self.closed)
        self.temporaries = TemporaryDestinations(self)

    def check_open(self) -> None:
        """Raise if the connection is closed, or failover gave up (F4)."""
        state = self.manager.state  # read once: this runs per send
        if self.closed or state is ConnectionState.CLOSED:
            raise ClosedError("the connection is closed")
        if state is ConnectionState.FAILED:
            raise ConnectionFailedError(cause=self.manager.failure, failures=self.manager.failures)

    def physical(self) -> PhysicalConnection:
        """The physical connection in use (during restore: the new one)."""
        self.check_open()
        assert self.current is not None
        return self.current

    def register(self, resource: Any) -> None:
        """Restore ``resource`` (a session, producer, consumer ...) after every failover."""
        self.manager.register(resource)

    def unregister(self, resource: Any) -> None:
        """Stop restoring ``resource`` (it closed)."""
        self.manager.unregister(resource)

    async def create_temporary(
        self, *, queue: bool, timeout: float | None
    ) -> TemporaryQueue | TemporaryTopic:
        """A new temporary queue (or topic); waits while the connection fails over (F2)."""
        return await self.gate.run(
            lambda at: self.temporaries.create(queue=queue), deadline=deadline_after(timeout)
        )

    def link_name(self, kind: str) -> str:
        """A link name unique in this process: ``<container id>:<kind>:<n>``."""
        return f"{self.container_id}:{kind}:{next(_link_numbers)}"

    def message_ids(self, *, remember: bool = True) -> Callable[[], str]:
        """Message ids for a new producer: ``ID:<connection>:<producer>:<n>``, or random UUIDs
        as ``jms.messageIDPolicy.messageIDType`` says (``uuid_message_ids``). UUID ids are
        remembered as they are made (no-local, E2), except with ``remember=False``: ids made
        in another thread (a blocking producer's), which ``note_sent`` remembers on the loop."""
        kind = self.options.message_id_type
        if kind in ("original", "default"):
            return MessageIdGenerator(f"{self.id_base}:{next(self._producer_numbers)}")
        made, sent = uuid_message_ids(kind), self._sent_uuid_ids
        if not remember:
            return made

        def remembered() -> str:
            message_id = made()
            sent.add((message_id,))
            return message_id

        return remembered

    def note_sent(self, message_id: str | None) -> None:
        """A message made with ids of ``message_ids(remember=False)`` goes out: remember a
        UUID id (no-local, E2)."""
        if message_id is not None and self.options.message_id_type not in ("original", "default"):
            self._sent_uuid_ids.add((message_id,))

    def published_here(self, message_id: str | None, *, by_client_id: bool = False) -> bool:
        """Whether a message with this id was sent by this connection, or with
        ``by_client_id`` by any connection with this client id (no-local, E2, S2)."""
        if message_id is None:
            return False
        if message_id in self._sent_uuid_ids:  # UUID ids: the last ones made, remembered
            return True
        if by_client_id and self.client_id is not None:
            return message_id.startswith(f"ID:{self.client_id}:")
        return message_id.startswith(f"ID:{self.id_base}:")


class SessionContext:
    """The part of a session that its producers, consumers and browsers use; it is also the
    host of the session's acknowledgement strategy (``haclient.aio.acks.AckHost``).

    Attributes:
        acks: The strategy of the session's acknowledge mode: ask it the mode's questions.
        transaction: The session's transaction (TRANSACTED only); None outside a transaction.
    """

    def __init__(
        self,
        connection: ConnectionContext,
        ack_mode: AckMode,
        *,
        forget: Callable[[Any], None],
        prefetched: Callable[[], list[Receiver]],
    ) -> None:
        self.connection = connection
        self.options = options = connection.options
        self.gate = connection.gate
        self.tracing = connection.tracing
        self.amqp_session: AmqpSession | None = None
        self.confirmation: AckConfirmation | None = None
        self.dispatch_lock = anyio.Lock()  # one listener of the session at a time
        self.ack_stats = connection.counters.acks[ack_mode]
        self.closed = False
        self.window: DuplicateWindow | None = (
            DuplicateWindow(options.dedup_window, options.dedup_age)
            if options.dedup_window > 0
            else None
        )
        # what it handed out and has not seen consumed: marked redelivered if it comes again
        # after a failover (F8)
        self.handed_out = HandedOut(max(options.dedup_window, _HANDED_OUT_KEPT))
        # fast_acquire: an uncontended acknowledgement (AUTO: one per message) takes the lock
        # without a loop turn; contended, it waits in order as before.
        self._ack_lock = anyio.Lock(fast_acquire=True)
        self._confirming_at_once = False  # a settle_acks_then's confirmation is under way
        self._at_once_waiting: anyio.Event | None = None
        self.confirmer = Confirmer(self._downgraded)
        self._forget = forget
        self._prefetched = prefetched
        self.acks: AckStrategy = ack_strategy(
            ack_mode,
            self,
            new_transaction=self._new_transaction,
            dups_ok_batch=options.dups_ok_batch,
            dups_ok_interval=options.dups_ok_interval,
            force_async=options.force_async_acks,
        )
        self.transaction: SessionTransaction | None = self.acks.transaction

    def _new_transaction(self) -> SessionTransaction:
        """The transaction of a TRANSACTED session: the broker's, or emulated (E3)."""
        counters = self.connection.counters
        if self.options.transactions != "emulate":
            link_name = self.connection.link_name("txn")
            return NativeTransaction(self.give_back, self.consumed, link_name, counters=counters)
        log.warning(
            "session transactions are emulated by the client (transactions=emulate): "
            "a commit is not atomic"
        )
        return EmulatedTransaction(
            self.give_back, self.consumed, self.settle_acks, counters=counters
        )

    # What children call ------------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        """True once the session (or its connection) closed."""
        return self.closed

    def check_open(self) -> None:
        """Raise ``ClosedError`` if the session or its connection is closed."""
        if self.closed:
            raise ClosedError("the session is closed")
        self.connection.check_open()

    def physical(self) -> PhysicalConnection:
        return self.connection.physical()

    def amqp(self) -> AmqpConnection:
        return self.connection.physical().amqp

    def session_on(self, at: Connected) -> AmqpSession:
        """The AMQP session to attach a link on for a call admitted on ``at`` (the gate's, or
        a restore's connection): the session begun on ``at``'s connection, never another's.

        Raises:
            ClosedError: the session or its connection is closed.
            ReplacedError: failover replaced ``at``'s connection since the call was admitted
                (the gate runs it again on the new one, F3).
            IllegalStateError: ``at`` is the connection in use but the session was not begun
                on it (its restore failed: ``resource_not_restored``).
        """
        self.check_open()
        session = self.amqp_session
        if session is not None and session.engine is at.amqp.engine:
            return session
        self.check_current(at)
        raise IllegalStateError("the session was not restored on the connection in use")

    def check_current(self, at: Connected) -> None:
        """Raise ``ReplacedError`` if failover replaced ``at``'s connection (the gate's
        answer to a call admitted on it: run it again on the new one, F3)."""
        if at.physical is not self.connection.current:
            raise ReplacedError(
                f"the connection this call was admitted on (epoch {at.epoch}) was replaced"
            )

    def note_confirmation(self, confirmation: AckConfirmation) -> None:
        """A consumer learnt how the broker confirms acknowledgements (A6)."""
        if confirmation is not AckConfirmation.NONE:
            self.confirmation = confirmation

    def _downgraded(self, confirmation: AckConfirmation) -> None:
        """The broker failed the cheaper exchange: say so, and let new consumers skip it."""
        self.note_confirmation(confirmation)
        current = self.connection.current
        if current is not None:
            current.ack_fallback = confirmation

    def start_soon(
        self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: str | None = None
    ) -> None:
        self.connection.start_soon(fn, *args, name=name)

    def forget(self, resource: Any) -> None:
        """``resource`` (a producer, consumer or browser) closed: stop restoring it after
        failovers and drop it from the session."""
        self.connection.unregister(resource)
        self._forget(resource)

    # The acknowledgement strategy's host (AckHost) ---------------------------------------------

    async def settle_acks(self, acks: list[PendingAck], *, confirm: bool = True) -> None:
        """Accept ``acks`` on the connection in use; with ``confirm``, return once the broker
        confirmed them (A6). One acknowledgement exchange at a time per session."""
        if not acks:
            return
        assert self.amqp_session is not None
        async with self._ack_lock:
            while self._confirming_at_once:  # one confirmation at a time (settle_acks_then)
                if self._at_once_waiting is None:
                    self._at_once_waiting = anyio.Event()
                await self._at_once_waiting.wait()
            started = time.perf_counter()
            physical = self.physical()
            await settle(
                physical.amqp,
                self.amqp_session,
                acks,
                ACCEPTED,
                confirm=confirm,
                confirmer=self.confirmer,
                topic_prefix=physical.prefixes.topic,
                timeout=self.options.attach_timeout,
            )
            if confirm:
                self.ack_stats.latency.observe(time.perf_counter() - started)
        self.connection.counters.acknowledged += len(acks)
        self.ack_stats.count += len(acks)

    def settle_acks_then(
        self, acks: list[PendingAck], then: Callable[[BaseException | None], None]
    ) -> bool:
        """``settle_acks(acks)`` without a task, when nothing has to be waited for first (no
        other acknowledgement of the session under way, the connection open, every ack from
        it on a link still open, all confirmed the same way) and their confirmation comes as
        an answer no timer bounds (A6): the broker's settlements (receiver settle mode
        ``second``), or a drain or link flow of the session's probe that the broker answered
        before (or none is asked for: ``NONE``, A7). The outcomes go out now and ``then(error)``
        is called once, on the loop, from the event-loop turn that brings the (last)
        confirmation (None: confirmed; at once when none is awaited, ``acks`` empty included),
        or the first failure (the link or the connection ended: what ``settle_acks`` would
        raise; a probe that failed with the connection open falls back as ``confirm`` does, in
        a task). Until then this session's other acknowledgements wait (one at a time).

        Returns:
            False, nothing done, when any of that does not hold: then ``settle_acks``.
        """
        if self._ack_lock.locked() or self._confirming_at_once:
            return False
        current = self.connection.current
        session = self.amqp_session
        if session is None or current is None or not current.amqp.is_open:
            return False
        amqp = current.amqp
        engine = amqp.engine
        kind = acks[0].confirmation if acks else AckConfirmation.NONE
        for ack in acks:  # one pass: AUTO's one acknowledgement comes this way every receive
            link = ack.raw.delivery.link
            if ack.confirmation is not kind or link.engine is not engine or link.is_closed:
                return False
        second = kind is AckConfirmation.SETTLE_SECOND
        exchanged = kind is not AckConfirmation.NONE and not second
        if exchanged and not self.confirmer.confirms_at_once(session, kind):
            return False
        started = time.perf_counter()
        try:
            for ack in acks:
                amqp.settle(
                    ack.raw, ACCEPTED, settle=not second, wake_writer=kind is AckConfirmation.NONE
                )
                ack.sent = True
        except HAClientError as exc:  # the link ended: settle_acks raises it
            if not any(ack.sent for ack in acks):
                return False
            then(exc)
            return True
        # what is awaited: each settlement (second) or the exchange's answer, and this call's
        # own part (counted down last, so that nothing is told before all is under way)
        outstanding = 1 + (len(acks) if second else int(exchanged))

        def confirmed(error: BaseException | None) -> None:
            nonlocal outstanding
            if outstanding <= 0:  # told already (a failure came first)
                return
            outstanding = outstanding - 1 if error is None else 0
            if outstanding:
                return
            if second:
                self._at_once_done()
            if error is None:
                self.ack_stats.latency.observe(time.perf_counter() - started)
                self.connection.counters.acknowledged += len(acks)
                self.ack_stats.count += len(acks)
            then(error)

        if second:
            self._confirming_at_once = True
            for ack in acks:
                delivery = ack.raw.delivery
                if not amqp.when_settled(
                    delivery, functools.partial(_settled, confirmed, delivery)
                ):
                    confirmed(None)  # cannot be: its slot was just made
        elif exchanged:
            self._confirm_at_once(amqp, acks[0], confirmed)
        confirmed(None)
        return True

    def _confirm_at_once(
        self, amqp: AmqpConnection, ack: PendingAck, then: Callable[[BaseException | None], None]
    ) -> None:
        """The confirmation exchange of ``settle_acks_then`` (``Confirmer.confirm_then``)."""

        def answered(error: BaseException | None) -> None:
            if error is not None and amqp.is_open:  # the probe failed: as ``confirm`` does
                self.start_soon(self._confirm_again, amqp, ack, then)
                return
            self._at_once_done()
            then(error)

        self._confirming_at_once = True
        try:
            self.confirmer.confirm_then(amqp, ack.confirmation, answered)
        except HAClientError as exc:
            answered(exc)

    def _at_once_done(self) -> None:
        """A confirmation without a task ended: the next one may start."""
        self._confirming_at_once = False
        waiting, self._at_once_waiting = self._at_once_waiting, None
        if waiting is not None:
            waiting.set()

    async def _confirm_again(
        self,
        amqp: AmqpConnection,
        ack: PendingAck,
        then: Callable[[BaseException | None], None],
    ) -> None:
        """A drain or link flow without a task whose probe failed, the connection open:
        ``confirm`` (which falls back to a round trip on this session), then ``then`` with its
        outcome."""
        error: BaseException | None = None
        self._at_once_done()  # before the lock: a settle_acks holding it waits for this
        try:
            async with self._ack_lock:
                assert self.amqp_session is not None
                await self.confirmer.confirm(
                    amqp,
                    self.amqp_session,
                    ack.confirmation,
                    address=ack.probe_address,
                    topic_prefix=self.physical().prefixes.topic,
                    timeout=self.options.attach_timeout,
                )
        except Exception as exc:
            error = exc
        except BaseException:  # the connection's tasks cancelled: its close
            self._at_once_done()
            then(ClosedError("the connection closed while the acknowledgement waited"))
            raise
        then(error)

    async def give_back(self, acks: list[PendingAck]) -> None:
        """Return delivered messages (marked redelivered), and the prefetched ones behind them,
        so that the broker hands them out again in order. A delivery of a connection that
        failover replaced is skipped: the next broker delivers it again anyway."""
        current = self.connection.current
        if current is None or not current.amqp.is_open:
            return
        amqp = current.amqp
        failed, untouched = self.give_back_outcomes()
        for ack in acks:
            if ack.raw.delivery.link.engine is amqp.engine:
                amqp.settle(ack.raw, failed)
        for receiver in self._prefetched():
            if not receiver.is_closed:
                for raw in amqp.take_all(receiver):
                    amqp.settle(raw, untouched)
        await amqp.flush()

    def return_one(self, pending: PendingAck) -> None:
        """Return one delivery for redelivery, marked delivery-failed (a listener raised)."""
        self.amqp().settle(pending.raw, self.give_back_outcomes()[0])

    def give_back_outcomes(self) -> tuple[Outcome, Outcome]:
        """The outcomes that return a delivered message (redelivered) and a prefetched one.

        RabbitMQ 3.10 ends the session on a ``modified`` disposition ("Unrecognised state"):
        there ``released`` is used for both. It leaves the delivery-count alone, so such a
        message comes back not marked redelivered (JMSRedelivered needs E4's emulation there).
        """
        if self.physical().product == "RabbitMQ":
            return Released(), Released()
        return Modified(delivery_failed=True), Modified()

    def consumed(self, acks: Iterable[PendingAck]) -> None:
        """These messages count as consumed: the duplicate window suppresses their copies."""
        keys = [ack.window_key for ack in acks]
        self.handed_out.discard(keys)
        if self.window is not None:
            self.window.add(keys)

    def mark_if_delivered_before(
        self, message: Message, window_key: str | None, epoch: int
    ) -> None:
        """Mark ``message``, just received on connection ``epoch``, redelivered when this
        session handed it out on an earlier connection and has not seen it consumed (F8): the
        broker that delivers it now may have kept no count. Its ``delivery_count`` is then at
        least one more than the times it was handed out."""
        times = self.handed_out.deliveries_before(window_key, epoch)
        if times:
            message.redelivered = True
            message.delivery_count = max(message.delivery_count, times + 1)

    def is_duplicate(self, window_key: str | None) -> bool:
        """Whether a message with this key was consumed in this session within the window."""
        return self.window is not None and window_key in self.window

    def detach(self, receiver: Receiver, *, closed: bool) -> None:
        current = self.connection.current
        if current is not None:
            current.amqp.detach(receiver, closed=closed)


def _settled(
    confirmed: Callable[[BaseException | None], None],
    delivery: Delivery,
    outcome: Outcome | None,
    error: BaseException | None,
) -> None:
    """A delivery of ``settle_acks_then`` in mode ``second``: the broker settled it (or failed)."""
    if error is None:
        delivery.settle()
    confirmed(error)
