"""``MessageConsumer``: receive, iterate, or listen; acknowledgement as the session's mode says.

How this works: a consumer is one receiver link. Its credit is its prefetch (its kind's, Qpid
JMS's prefetch policy): the broker sends up to ``prefetch`` messages ahead, and the consumer tops
the credit up when half is used; prefetched messages are taken in arrival order, or highest
priority first with ``local_message_priority`` (M8). A consumer the presettle policy presettles
(M5) attaches as a NO_ACK one does and acknowledges nothing. A message
taken from the link is decoded, then acknowledged as the session's mode says *before* it is
handed out (AUTO, A1: confirmed by the broker; TRANSACTED: in the transaction), or remembered
for a later ``acknowledge()`` (CLIENT, DUPS_OK). One redelivered more often than
``max_redeliveries`` allows is settled with ``redelivery_outcome`` as it is taken, and never
handed out (E6, ``haclient.aio.redelivery``); so is one whose expiration has passed, with
``local_message_expiry`` (M4). A listener runs in a task of the connection's
task group; the session's lock makes its listeners run one at a time, as JMS's session thread.

Closing (C1-C5): ``close()`` marks the consumer closed and detaches its link, so a blocked
``receive()`` returns None; it waits for a running listener to return unless it is called from
that listener; it acknowledges nothing and touches no transaction. Deliveries the session still
owes an acknowledgement keep the link attached until the session settles them.
"""

from __future__ import annotations

import collections
import contextvars
import enum
import functools
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

import anyio
from anyio.lowlevel import checkpoint_if_cancelled

from failover.manager import RestoreOrder
from haclient.aio.checks import ensure_open
from haclient.aio.decoding import Decoder
from haclient.aio.emulation import (
    client_no_local,
    client_selector,
    message_lookup,
    rejects_consume,
)
from haclient.aio.gate import Connected
from haclient.aio.pending import PendingAck
from haclient.aio.pull import drain, drain_timed_out, drainable, pulls
from haclient.aio.received_in_flight import ReceiveInFlight
from haclient.aio.redelivery import dead_letter_outcome, exceeds
from haclient.amqp.connection import AmqpConnection, ReceivedMessage
from haclient.amqp.endpoints import Receiver
from haclient.amqp.types import (
    Accepted,
    Durability,
    ErrorCondition,
    Outcome,
    ReceiverSettleMode,
    Rejected,
    Released,
    SenderSettleMode,
    Terminus,
)
from haclient.destination import Destination, Queue, TemporaryQueue, TemporaryTopic, address_of
from haclient.errors import (
    ClosedError,
    ConnectionFailedError,
    ConnectionLostError,
    FailoverTimeoutError,
    HAClientError,
    IllegalStateError,
    MessageFormatError,
)
from haclient.message import Message
from haclient.modes import AckConfirmation

if TYPE_CHECKING:
    from haclient.aio.context import SessionContext
    from haclient.aio.physical import PhysicalConnection

__all__ = ["MessageConsumer", "MessageListener"]

log = logging.getLogger("haclient.consumer")

MessageListener = Callable[[Message], Awaitable[None] | None]
"""A message listener: a function or a coroutine function taking the message."""

T = TypeVar("T")

_Taken = tuple[ReceivedMessage, Message, Connected]
"""A message taken from the link: the delivery, the decoded message, the connection it came on."""


class _Skip(enum.Enum):
    """What a wait gave instead of a message: nothing yet (go on), or the wait is over."""

    AGAIN = enum.auto()
    ENDED = enum.auto()  # a wait ended by its deadline or by close()


_listening: contextvars.ContextVar[MessageConsumer | None] = contextvars.ContextVar(
    "haclient_listening", default=None
)


class MessageConsumer:
    """Receives messages from a destination (JMS ``MessageConsumer``). Made by a ``Session``.

    Every method runs on the connection's event loop; ``close()`` may be called from any task.
    """

    def __init__(
        self,
        context: SessionContext,
        destination: Destination,
        source: Terminus,
        *,
        link_name: str,
        selector: str | None,
        no_local: bool,
        subscription: str | None = None,
        on_close: Callable[[MessageConsumer], None] | None = None,
    ) -> None:
        self._context = context
        self._destination = destination
        self._source = source
        self._link_name = link_name
        self._selector = selector
        self._no_local = no_local
        self._subscription = subscription
        self._on_close = on_close
        self._receiver: Receiver | None = None
        self._confirmation = AckConfirmation.NONE
        self._closed = False
        self._listener: MessageListener | None = None
        self._listener_running = False
        self._listener_idle = anyio.Event()
        self._listener_idle.set()
        self._listener_task_active = False
        self._waits: set[anyio.CancelScope] = set()  # receives waiting, cancelled by close (C2)
        self._held: collections.deque[Message] = collections.deque()  # acknowledged, not returned
        durable = source.durable is not Durability.NONE
        self._prefetch = context.options.prefetch_for(destination, durable=durable)
        transacted = context.transaction is not None
        presettled = context.options.presettled_consumer(destination, transacted=transacted)
        # A consumer the presettle policy presettles acknowledges as NO_ACK does (M5).
        self._acks = context.acks.settled() if presettled else context.acks
        self._decoder = Decoder(destination)
        if context.tracing is not None:  # a span per message received (haclient.aio.tracing)
            context.tracing.instrument_consumer(self)

    # Properties --------------------------------------------------------------------------------

    @property
    def destination(self) -> Destination:
        """The destination messages come from."""
        return self._destination

    @property
    def message_selector(self) -> str | None:
        """The JMS selector, if any."""
        return self._selector

    @property
    def no_local(self) -> bool:
        """Whether messages published by this connection's client id are withheld."""
        return self._no_local

    @property
    def subscription_name(self) -> str | None:
        """The durable or shared subscription's name, if this consumes one."""
        return self._subscription

    @property
    def is_closed(self) -> bool:
        """True once ``close()`` was called (or the session or connection closed)."""
        return self._closed

    @property
    def _presettled(self) -> bool:
        """Whether the broker sends this consumer's messages settled (NO_ACK, or M5)."""
        return self._acks.presettled

    @property
    def message_listener(self) -> MessageListener | None:
        """The listener set with ``set_message_listener``, if any."""
        return self._listener

    # Failover ----------------------------------------------------------------------------------

    restore_order: int = RestoreOrder.CONSUMER

    def connection_lost(self, epoch: int, cause: BaseException) -> None:
        """Nothing to keep: prefetched messages die with the old link (F9)."""

    async def restore(self, physical: PhysicalConnection, epoch: int) -> None:
        """Attach again with the same link name, source, selector and no-local (S5); a
        temporary destination's source takes the node's new address (F6: restored first)."""
        finish = self.begin_restore(physical, epoch)
        if finish is not None:
            await finish()

    def begin_restore(
        self, physical: PhysicalConnection, epoch: int
    ) -> Callable[[], Awaitable[None]] | None:
        """``restore`` in two steps (a ``StagedResource``): the attach is sent now, the call
        returned waits for its answer (None: closed, nothing to restore)."""
        if self._closed:
            return None
        if isinstance(self._destination, TemporaryQueue | TemporaryTopic):
            self._source = replace(self._source, address=address_of(self._destination))
        return self._begin_attach(Connected(physical, epoch))

    # Link --------------------------------------------------------------------------------------
    #
    # The link comes from the ``at`` a call was admitted on (the gate's, or the restore's
    # connection): it is attached only on ``at``'s connection, in the session begun on it, and
    # a call takes messages only from the link attached on its own connection (``_link_on``).

    async def _attach(self, at: Connected) -> None:
        """Attach the link on ``at``'s connection and grant the prefetch."""
        await self._begin_attach(at)()

    def _begin_attach(self, at: Connected) -> Callable[[], Awaitable[None]]:
        """Send the attach on ``at``'s connection (granting the prefetch); the call returned
        waits for the answer.

        Raises:
            ReplacedError: failover replaced ``at``'s connection (``SessionContext.session_on``).
        """
        context = self._context
        amqp_session = context.session_on(at)
        physical = at.physical
        # E7: a selector this client evaluates on this broker parses before the attach, also
        # one `validate_selector=false` let through unparsed (InvalidSelectorError).
        client_selector(self._selector, context.options.selectors, physical.product)
        presettled = self._acks.presettled
        confirms = self._acks.confirms
        want_second = (
            confirms and physical.settle_second is not False and not physical.ack_fallback_only
        )
        attaching = physical.amqp.open_receiver_nowait(
            self._source,
            session=amqp_session,
            name=self._link_name,
            credit=self._prefetch,
            snd_settle_mode=SenderSettleMode.SETTLED if presettled else SenderSettleMode.UNSETTLED,
            rcv_settle_mode=ReceiverSettleMode.SECOND if want_second else ReceiverSettleMode.FIRST,
            timeout=context.options.attach_timeout,
            by_priority=context.options.local_message_priority,
        )

        async def attached() -> None:
            self._receiver = receiver = await attaching.wait()
            if want_second:
                granted = receiver.remote_rcv_settle_mode is ReceiverSettleMode.SECOND
                physical.settle_second = granted
                self._confirmation = (
                    AckConfirmation.SETTLE_SECOND if granted else physical.ack_fallback
                )
            elif confirms:
                self._confirmation = physical.ack_fallback
            context.note_confirmation(self._confirmation)

        return attached

    def _link_on(self, at: Connected) -> Receiver | None:
        """The link attached on ``at``'s connection; None when there is none on it (not
        restored there: nothing to receive, as from a link that ended).

        Raises:
            ReplacedError: failover replaced ``at``'s connection since the call was admitted.
        """
        receiver = self._receiver
        if receiver is not None and receiver.engine is at.amqp.engine:
            return receiver
        self._context.check_current(at)
        return None

    def _top_up(self) -> None:
        """Keep about ``prefetch`` messages granted (or one for a receive, with prefetch 0)."""
        receiver = self._receiver
        if receiver is None or receiver.is_closed:
            return
        amqp = self._context.amqp()
        if receiver.engine is not amqp.engine:  # not restored on the connection in use
            return
        outstanding = receiver.credit + amqp.queued(receiver)
        if self._prefetch == 0:
            if outstanding == 0:
                amqp.flow(receiver, 1)
        elif outstanding <= self._prefetch // 2:
            amqp.flow(receiver, self._prefetch - outstanding)

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the consumer is closed")
        self._context.check_open()

    # Receiving ---------------------------------------------------------------------------------

    async def receive(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to ``timeout`` seconds (None: until one comes).

        Returns None on timeout (having asked the broker for a message it still has, unless
        ``receive_local_only``: M9) and once the consumer is closed, also when ``close()`` is
        called while this waits (C2). While the connection is stopped, no message is handed out.
        In AUTO mode the message is acknowledged, and the broker confirmed it, before it is
        returned (A1). One whose acknowledgement a failover cut off in flight is returned once
        the connection is back (F2), flagged ``ack_in_doubt`` (F9); its copy from the next
        broker is suppressed by the session's duplicate window. Should the failover give up
        instead, or the consumer be closed meanwhile, that message is returned all the same
        (the broker may have applied its acknowledgement); the next call raises (F4).

        Raises:
            ClosedError: the consumer, its session or its connection was closed before the call.
            IllegalStateError: the consumer has a message listener.
            InvalidDestinationError ...: the broker closed the link, with its reason.
            ClosedError: the broker left a drain unanswered past ``drain_timeout`` (M9).
        """
        await ensure_open(self._check_open)
        if self._listener is not None:
            raise IllegalStateError("the consumer has a message listener: receive() is not allowed")
        deadline = math.inf if timeout is None else anyio.current_time() + max(timeout, 0.0)
        return await self._receive_until(deadline, timeout)

    async def _receive_until(
        self,
        deadline: float,
        timeout: float | None,
        taken: _Taken | None = None,
        pending: PendingAck | None = None,
    ) -> Message | None:
        """``receive``'s work from its deadline on (from ``taken``, already taken, when given,
        its acknowledgement ``pending`` when it was booked)."""
        options = self._context.options
        while not self._held:
            if taken is None:
                taken = await self._take(deadline)
                if taken is None and not self._closed and pulls(timeout, self._prefetch, options):
                    taken = await self._pull()
                if taken is None:
                    return None
            handed = await self._hand_out(taken, pending)
            message = taken[1]
            taken = pending = None
            if handed:
                if not message.ack_in_doubt:
                    return message
                self._held.append(message)
        return await self._release_held(deadline)

    def receive_then(
        self,
        timeout: float | None,
        completed: Callable[[Message | None, BaseException | None], None],
    ) -> ReceiveInFlight | None:
        """``receive(timeout)`` without a task when a message is already prefetched and
        nothing has to be waited for first (open, no listener, started, connected, nothing
        held, not traced, AUTO confirmed by the broker's settlement or by a drain or link flow
        of a probe it answered before, no other acknowledgement of the session under way): the
        message is taken and its acknowledgement sent now, and ``completed(message, error)`` is
        called once, on the loop, from the event-loop turn in which the broker confirms it (A1).
        CLIENT and INDIVIDUAL wait for nothing: the message is tracked for its
        ``acknowledge()`` (A2) and ``completed`` called before this returns. When waiting for
        the confirmation fails, the general path takes the receive over from where it is
        (``haclient.aio.received_in_flight``: in doubt and held through a failover, F2/F9,
        within ``timeout``, F4), and ``completed`` gets that path's outcome.

        Returns:
            None, nothing done, when any of that does not hold: then ``receive``.
        """
        context = self._context
        if (
            self._closed
            or self._listener is not None
            or self._held
            or context.tracing is not None
            or not self._acks.hands_out_at_once(self._confirmation)
        ):
            return None
        try:
            self._check_open()
        except HAClientError:
            return None
        ready = self._take_ready()
        while ready is _Skip.AGAIN:
            ready = self._take_ready()
        if not isinstance(ready, tuple):
            return None
        taken = ready
        raw, message, at = taken
        pending = self._handing_out(raw, message, at)
        in_flight = ReceiveInFlight(completed, context.start_soon)
        started = time.monotonic()

        def resumed_after(timeout_left: float | None) -> float:
            if timeout_left is None:
                return math.inf
            return anyio.current_time() + max(timeout_left - (time.monotonic() - started), 0.0)

        def acknowledged(error: BaseException | None) -> None:
            if error is None:
                in_flight.handed_out(message)
            else:
                in_flight.hand_back(
                    lambda: self._acknowledge_failed(
                        taken, pending, error, resumed_after(timeout), timeout
                    )
                )

        self._decode_while_confirming(at)
        if not self._acks.delivered_then(pending, message, acknowledged):
            # another acknowledgement came first: the general path, from the message taken
            in_flight.hand_back(
                lambda: self._receive_until(resumed_after(timeout), timeout, taken, pending)
            )
        return in_flight

    async def _acknowledge_failed(
        self,
        taken: _Taken,
        pending: PendingAck,
        error: BaseException,
        deadline: float,
        timeout: float | None,
    ) -> Message | None:
        """A ``receive_then`` whose acknowledgement's wait failed: what ``_hand_out`` does
        after that wait raised (``gate.run``'s ``on_lost``), then the rest of ``receive``."""
        _raw, message, at = taken
        if not isinstance(error, HAClientError) or not self._context.gate.lost(at, error):
            raise error
        if pending.sent:  # in doubt: handed out, flagged, once the failover ended (F2, F9)
            message.redelivered = message.ack_in_doubt = True
            self._held.append(message)
        return await self._receive_until(deadline, timeout)

    async def _pull(self) -> _Taken | None:
        """Drain the link (granting one credit if it has none) and take what the broker sent
        to use the credit; None when it had nothing, while stopped or failing over, on a broker
        that cannot be drained, or once closed (C2). The credit is granted again afterwards.

        Raises:
            ClosedError: the broker did not answer within ``amqp.drainTimeout``: the consumer
                was closed, as Qpid JMS closes it.
        """
        asked = False  # one drain per receive: a message given back (a client-side selector's
        # release) would come back with the next drain, and the next, for ever
        while not self._closed and self._context.connection.switch.started:
            at = self._context.gate.connected_nowait()
            receiver = None if at is None else self._link_on(at)
            if at is None or receiver is None or receiver.is_closed or not drainable(at):
                return None
            raw = at.amqp.receive_nowait(receiver)
            if raw is None and not asked:
                asked = True
                drained = await self._waiting(math.inf, functools.partial(drain, at, receiver))
                if drained is None:  # unanswered: closed, as Qpid JMS closes it
                    await self.close()
                    raise drain_timed_out(at.physical.drain_timeout)
                if drained is not True or receiver is not self._receiver:
                    return None  # closed (C2), or the connection was lost meanwhile
                raw = at.amqp.receive_nowait(receiver)
            if raw is None:
                self._top_up()
                return None
            taken = self._taken(at, raw)
            if isinstance(taken, tuple):
                return taken
        return None

    async def _release_held(self, deadline: float) -> Message | None:
        """The oldest message held for its failover to end: acknowledged (in doubt), it waits
        at the gate like any call (F2) and is not given up when that wait ends early (a
        deadline, a cancellation): the next ``receive()`` returns it. When the failover gives
        up, or the consumer is closed meanwhile, it is returned all the same: the broker may
        have applied its acknowledgement, so nobody else will ever get it (F4); the next call
        raises."""
        try:
            waited = await self._waiting(deadline, lambda: self._context.gate.wait(deadline))
        except (ConnectionFailedError, ClosedError):
            return self._held.popleft()
        if waited is _Skip.ENDED and not self._closed:
            return None
        return self._held.popleft()

    async def _waiting(self, deadline: float, wait: Callable[[], Awaitable[T]]) -> T | _Skip:
        """``wait()``, unless ``deadline`` passes or ``close()`` is called first (C2, also
        during failover): then ``_Skip.ENDED``."""
        with anyio.CancelScope(deadline=deadline) as waiting:
            self._waits.add(waiting)
            try:
                return await wait()
            except FailoverTimeoutError:
                if anyio.current_time() < deadline:
                    raise  # failover.timeout (F4), not this receive's own deadline
                return _Skip.ENDED
            finally:
                self._waits.discard(waiting)
        return _Skip.ENDED

    async def _hand_out(self, taken: _Taken, pending: PendingAck | None = None) -> bool:
        """Acknowledge ``taken`` as the session's mode says before it is handed out (A1).

        False when the connection it came on was lost before the acknowledgement went out:
        then it is not handed out (F9) and the next broker delivers it again. When the
        acknowledgement went out and the connection was lost before the broker confirmed it,
        nobody knows whether the broker applied it: the message is handed out, flagged
        (``redelivered`` and ``ack_in_doubt``), and counted as consumed, so that the next
        broker's copy is suppressed by the session's duplicate window. Nothing is lost either
        way.

        Shielded from cancellation: once a message is taken from the link, a cancelled
        ``receive()`` must not leave it acknowledged and never returned."""
        raw, message, at = taken
        if pending is None:
            pending = self._handing_out(raw, message, at)

        async def acknowledge(at: Connected) -> bool:
            await self._acks.delivered(pending, message, listener=False)
            return True

        def in_doubt(exc: HAClientError) -> bool:
            if pending.sent:
                message.redelivered = message.ack_in_doubt = True
            return pending.sent

        self._decode_while_confirming(at)
        with anyio.CancelScope(shield=True):
            handed = await self._context.gate.run(acknowledge, on=at, on_lost=in_doubt)
        return handed

    def _decode_while_confirming(self, at: Connected) -> None:
        """An acknowledgement the broker confirms is a wait for its answer: decode the next
        message meanwhile (``haclient.aio.decoding``), from the link on ``at``'s connection."""
        receiver = self._receiver
        if self._acks.confirms and receiver is not None and receiver.engine is at.amqp.engine:
            self._decoder.decode_ahead(at.amqp, receiver, at.physical.prefixes)

    def _handing_out(self, raw: ReceivedMessage, message: Message, at: Connected) -> PendingAck:
        """The pending acknowledgement of ``message``, about to be handed out, which the
        session records as handed out on ``at`` until it is consumed (F8's mark)."""
        key = self._window_key(message.message_id)
        self._context.handed_out.add(key, at.epoch)
        return PendingAck(raw, self._confirmation, self._source.address, key)

    def _window_key(self, message_id: str | None) -> str | None:
        """The message's key in the session's duplicate window: its id, scoped to the queue
        (a redelivery may come to another consumer of it) or to this consumer's link (each
        subscription of a topic gets its own copy of a message, with the same id)."""
        if message_id is None:
            return None
        scope = self._source.address if isinstance(self._destination, Queue) else self._link_name
        return f"{scope}|{message_id}"

    async def receive_nowait(self) -> Message | None:
        """A message if one is already here (prefetched); else, unless
        ``receive_no_wait_local_only``, one the broker sends when asked (a drain, one round
        trip: M9); else None.

        Raises:
            ClosedError: the consumer, its session or its connection was closed before the
                call (as ``receive()``).
            IllegalStateError: the consumer has a message listener.
            InvalidDestinationError ...: the broker closed the link, with its reason.
        """
        return await self.receive(timeout=0)

    def __aiter__(self) -> MessageConsumer:
        return self

    async def __anext__(self) -> Message:
        """Iterate until the consumer is closed."""
        if self._closed:
            raise StopAsyncIteration
        message = await self.receive()
        if message is None:
            raise StopAsyncIteration
        return message

    async def _take(self, deadline: float) -> _Taken | None:
        """The next decodable message from the link, or None (deadline, or closed).

        While the connection fails over this waits (F2) and then goes on with the restored
        link; what the old link had prefetched is gone with it (F9).
        """
        await checkpoint_if_cancelled()  # the fast path below never yields
        while not self._closed:
            ready = self._take_ready()
            if isinstance(ready, tuple):
                return ready
            if ready is _Skip.AGAIN:
                continue
            remaining = deadline - anyio.current_time()
            switch = self._context.connection.switch
            if remaining > 0 and switch.first_wait_while_stopped():
                log.warning(
                    "a receive on %s of connection %s waits because the connection is stopped: "
                    "no message is delivered until connection.start() is called (JMS allows "
                    "this; said once per connection)",
                    self.destination,
                    self._context.connection.container_id,
                )
            if not await switch.wait_started(remaining):
                return None
            taken = await self._waiting(
                deadline,
                lambda: self._context.gate.run(
                    lambda at: self._take_on(at, deadline), deadline=deadline
                ),
            )
            if taken is _Skip.ENDED:
                return None  # the deadline passed, or the consumer closed
            if taken is not _Skip.AGAIN:
                return taken
        return None

    def _take_ready(self) -> _Taken | _Skip | None:
        """The fast path of ``_take``: a message already prefetched, while started and
        connected, taken without waiting (no cancel scope, no loop turn). None: nothing
        ready, take the waiting path; ``_Skip.AGAIN``: one was taken and dropped
        (undecodable, filtered out, a duplicate)."""
        if self._receiver is None or not self._context.connection.switch.started:
            return None
        at = self._context.gate.connected_nowait()
        receiver = None if at is None else self._link_on(at)
        raw = None if at is None or receiver is None else at.amqp.receive_nowait(receiver)
        return None if at is None or raw is None else self._taken(at, raw)

    async def _take_on(self, at: Connected, deadline: float) -> _Taken | _Skip | None:
        """One message from the link on ``at``: None at the deadline or once closed.

        Raises:
            ReplacedError: failover replaced ``at``'s connection (the gate runs this again).
        """
        receiver = None if self._closed else self._link_on(at)
        if receiver is None:
            return None
        amqp = at.amqp
        self._top_up()
        remaining = deadline - anyio.current_time()
        if remaining <= 0:
            raw = amqp.receive_nowait(receiver)
        else:
            raw = await amqp.receive(receiver, None if math.isinf(remaining) else remaining)
        if raw is None and receiver is not self._receiver:
            return _Skip.AGAIN  # restored while we waited on the old link
        if raw is None and not self._closed and not at.physical.is_open:
            # The link ended with its connection, before failover restored it: wait for that.
            raise ConnectionLostError("the connection ended while receiving")
        if raw is None or self._closed:
            if raw is not None:  # arrived as we closed: give it back
                amqp.settle(raw, Released())
            return None
        return self._taken(at, raw)

    def _taken(self, at: Connected, raw: ReceivedMessage) -> _Taken | _Skip:
        """``raw``, just taken from the link on ``at``: decoded and counted, or
        ``_Skip.AGAIN`` when it was dropped (see ``_decode``)."""
        if self._prefetch:  # prefetch 0 pulls one per receive: no credit ahead of it
            self._top_up()
        message = self._decode(at.amqp, raw, at.physical)
        if message is None:
            return _Skip.AGAIN
        if self._context.tracing is not None:
            self._context.tracing.adopt(message, raw)
        self._context.mark_if_delivered_before(
            message, self._window_key(message.message_id), at.epoch
        )
        self._context.connection.counters.received += 1
        self._context.connection.counters.redelivered += message.redelivered
        return raw, message, at

    def _decode(
        self, amqp: AmqpConnection, raw: ReceivedMessage, physical: PhysicalConnection
    ) -> Message | None:
        """The message, or None when it was rejected (undecodable), filtered out (E1, E2), a
        duplicate, expired (M4), or dead-lettered (E6)."""
        try:
            message = self._decoder.decode(raw, physical.prefixes)
        except MessageFormatError as exc:
            log.warning("rejecting an undecodable message on %s: %s", self._destination, exc)
            amqp.settle(raw, Rejected(ErrorCondition("amqp:decode-error", str(exc))))
            return None
        if not self._selected(message, physical):
            self._discard(amqp, raw)
            return None
        if self._context.is_duplicate(self._window_key(message.message_id)):
            # consumed before in this session (a redelivery or an F11 re-send): not again
            _settle_unless_presettled(amqp, raw, Accepted())
            self._context.connection.counters.duplicates_suppressed += 1
            return None
        expiration = message.expiration
        if expiration and self._expired(expiration):  # None or 0: never (as Qpid JMS)
            self._drop_expired(amqp, raw, message, physical)
            return None
        if exceeds(message.delivery_count, self._context.options.max_redeliveries):
            self._dead_letter(amqp, raw, message, physical)
            return None
        return message

    def _expired(self, expiration: float) -> bool:
        """Whether a message expiring at ``expiration`` (epoch seconds) is past it and the
        connection drops such messages (``local_message_expiry``, M4)."""
        return self._context.options.local_message_expiry and expiration < time.time()

    def _drop_expired(
        self,
        amqp: AmqpConnection,
        raw: ReceivedMessage,
        message: Message,
        physical: PhysicalConnection,
    ) -> None:
        """Settle an expired message as Qpid JMS does (``modified`` with delivery-failed and
        undeliverable-here; ``rejected`` on RabbitMQ, E6), outside any transaction; it is
        never handed out (M4). A pre-settled one (NO_ACK) is only dropped."""
        outcome = dead_letter_outcome("MODIFIED_FAILED_UNDELIVERABLE", physical.product)
        _settle_unless_presettled(amqp, raw, outcome)
        log.debug("%s: message %s expired: dropped", self._destination, message.message_id)

    def _dead_letter(
        self,
        amqp: AmqpConnection,
        raw: ReceivedMessage,
        message: Message,
        physical: PhysicalConnection,
    ) -> None:
        """Settle a message redelivered more often than ``max_redeliveries`` allows with
        ``redelivery_outcome``, outside any transaction, count it and tell the connection's
        listeners; it is never handed out (E6). A pre-settled one (NO_ACK) is only dropped."""
        name = self._context.options.redelivery_outcome
        _settle_unless_presettled(amqp, raw, dead_letter_outcome(name, physical.product))
        log.info(
            "%s: message %s delivered %d times, past max_redeliveries: settled as %s",
            self._destination,
            message.message_id,
            message.delivery_count,
            name,
        )
        connection = self._context.connection
        connection.counters.dead_lettered += 1
        connection.listeners.notify(
            "message_dead_lettered",
            self._destination,
            message.message_id,
            message.delivery_count,
            name,
        )

    def _selected(self, message: Message, physical: PhysicalConnection) -> bool:
        """False when a selector or no-local the broker does not apply rejects ``message``
        (E1, E2)."""
        connection = self._context.connection
        if client_no_local(self._no_local, physical.product) and connection.published_here(
            message.message_id, by_client_id=self._subscription is not None
        ):
            return False
        selector = client_selector(self._selector, connection.options.selectors, physical.product)
        return selector is None or selector.matches(message_lookup(message))

    def _discard(self, amqp: AmqpConnection, raw: ReceivedMessage) -> None:
        """Settle a message the client-side selector rejected: consumed on an exclusive topic
        subscription, released for other consumers on a queue or shared subscription."""
        if raw.delivery.remote_settled:
            return  # pre-settled (NO_ACK): already gone from the broker
        shared = "shared" in (self._source.capabilities or ())
        consume = rejects_consume(self._destination, shared=shared)
        amqp.settle(raw, Accepted() if consume else Released())

    @property
    def selector_emulated(self) -> bool:
        """Whether this client evaluates the consumer's selector itself because the broker
        does not (E1, E5); False without a selector."""
        current = self._context.connection.current
        product = current.product if current is not None else None
        return client_selector(self._selector, self._context.options.selectors, product) is not None

    @property
    def no_local_emulated(self) -> bool:
        """Whether this client withholds its own messages itself because the broker does not
        (E2, E5); False without ``no_local``."""
        current = self._context.connection.current
        return client_no_local(self._no_local, current.product if current is not None else None)

    # Listener ----------------------------------------------------------------------------------

    async def set_message_listener(self, listener: MessageListener | None) -> None:
        """Deliver messages to ``listener`` (a function or coroutine function) from now on.

        The listener runs in a task of the connection, one listener of the session at a time,
        once the connection is started. In AUTO mode each message is acknowledged right after
        the listener returns (A1); if it raises, the message is given back for redelivery.
        ``None`` stops the listener (a message being handled is finished first). During a
        failover the listener is not called; it goes on with the new broker's deliveries (F9).

        Raises:
            ClosedError: the consumer is closed.
        """
        await ensure_open(self._check_open)
        self._listener = listener
        if listener is not None and not self._listener_task_active:
            self._listener_task_active = True
            self._context.start_soon(self._listen, name=f"listener {self._link_name}")

    async def _listen(self) -> None:
        try:
            while not self._closed and self._listener is not None:
                taken = await self._take(math.inf)
                if taken is None:
                    break
                async with self._context.dispatch_lock:
                    await self._context.gate.run(
                        self._listener_runner(taken), on=taken[2], on_lost=_ignored
                    )
        except Exception:
            log.exception("the listener task of %s failed", self._link_name)
        finally:
            self._listener_task_active = False

    def _listener_runner(self, taken: _Taken) -> Callable[[Connected], Awaitable[None]]:
        return lambda at: self._run_listener(taken)

    async def _run_listener(self, taken: _Taken) -> None:
        raw, message, at = taken
        listener = self._listener
        if not at.physical.is_open:
            return  # failed over while waiting for the session: never handed out (F9)
        if listener is None or self._closed:
            at.amqp.settle(raw, Released())
            return
        acks = self._acks
        pending = self._handing_out(raw, message, at)
        if self._context.tracing is not None:  # run in a process span
            listener = self._context.tracing.processing(self, listener)
        self._listener_running = True
        self._listener_idle = anyio.Event()
        token = _listening.set(self)
        try:
            failed = False
            try:
                await acks.delivered(pending, message, listener=True)
                result = listener(message)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("the message listener of %s raised; the message is redelivered", self)
                failed = True
            if self._context.closed:  # the listener closed its session or connection: the
                return  # acknowledgement cannot go; the broker delivers the message again
            if not failed:
                self._decode_while_confirming(at)
            await acks.listener_done(pending, failed=failed)
        finally:
            _listening.reset(token)
            self._listener_running = False
            self._listener_idle.set()
            if self._closed:  # closed from inside the listener: the link goes now (C4)
                self._release_link()

    # Closing -----------------------------------------------------------------------------------

    async def close(self, *, from_listener: bool = False) -> None:
        """Close the consumer (C1-C5). Idempotent.

        A ``receive()`` blocked in another task returns None (C2); a listener running in
        another task is waited for (C3), but not when ``close()`` is called from inside it (C4,
        or ``from_listener=True`` from the blocking facade's dispatcher thread). Nothing is
        acknowledged or rolled back (C5): messages delivered but not acknowledged stay the
        session's to acknowledge or recover; prefetched ones go back to the broker.
        """
        if self._closed:
            return
        self._closed = True
        self._listener = None
        self._stop_waiting()
        inside = from_listener or _listening.get() is self
        running = self._listener_running
        if not running:
            self._release_link()
            await self._write_detach()
        # else the link goes when the listener returns, after its acknowledgement (which
        # needs the link: settled on a detached link, it would never be confirmed)
        if self._on_close is not None:
            self._on_close(self)
        self._context.forget(self)
        if running and not inside:
            await self._listener_idle.wait()
            await self._write_detach()

    async def _write_detach(self) -> None:
        """Put the detach on the wire before anything sent after ``close()`` returns.

        Proton writes a batch's attaches and transfers before its detaches, so without this a
        commit right after ``close()`` could reach the broker first and be delivered to this
        closing link. A subscription's link name is reused by a later attach (re-subscribe,
        ``unsubscribe``): there wait for a round trip too, so the broker has ended the old link
        before the new attach arrives (else it refuses it: "link name already attached").
        """
        current = self._context.connection.current
        receiver = self._receiver
        if current is None or not current.is_open or receiver is None:
            return
        try:
            await current.amqp.flush()
            if self._subscription is not None and receiver.is_closed:
                timeout = self._context.options.close_timeout
                probe = await current.amqp.open_session(timeout=timeout)
                current.amqp.end_session(probe)
        except HAClientError:
            log.debug("confirming the detach of %s failed", self._link_name, exc_info=True)

    def _stop_waiting(self) -> None:
        for waiting in list(self._waits):
            waiting.cancel()

    def _release_link(self) -> None:
        """Give prefetched messages back and detach, once the session owes no acks on it."""
        receiver = self._receiver
        current = self._context.connection.current
        if receiver is None or current is None:
            return
        amqp = current.amqp
        # A durable subscription's link is only detached (closed=false), as Qpid JMS does: a
        # closed=true detach would end the subscription on brokers that follow the spec.
        closed = self._source.durable is Durability.NONE
        if amqp.is_open and not receiver.is_closed:
            amqp.release_arrivals(receiver)
            self._acks.linger(receiver, closed=closed)
        else:
            amqp.detach(receiver, closed=closed)

    def _session_closed(self) -> None:
        """The session closed: mark closed and wake waiters (the session ends the link)."""
        self._closed = True
        self._listener = None
        self._stop_waiting()
        current = self._context.connection.current
        if self._receiver is not None and current is not None and current.is_open:
            current.amqp.detach(self._receiver, closed=self._source.durable is Durability.NONE)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<MessageConsumer {self._link_name!r} on {self._destination} ({state})>"


def _ignored(exc: HAClientError) -> None:
    """A listener's acknowledgement met a lost connection: the next broker redelivers."""


def _settle_unless_presettled(amqp: AmqpConnection, raw: ReceivedMessage, outcome: Outcome) -> None:
    """Settle a message the consumer takes without handing it out (a duplicate, an expired
    one, one past ``max_redeliveries``); one that came settled (NO_ACK) needs nothing."""
    if not raw.delivery.remote_settled:
        amqp.settle(raw, outcome)
