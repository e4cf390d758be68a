"""``MessageConsumer``: receive, iterate, or listen; acknowledgement as the session's mode says.

How this works: a consumer is one receiver link. Its credit is its prefetch: the broker sends up
to ``prefetch`` messages ahead, and the consumer tops the credit up when half is used. A message
taken from the link is decoded, then acknowledged as the session's mode says *before* it is
handed out (AUTO, A1: confirmed by the broker; TRANSACTED: in the transaction), or remembered
for a later ``acknowledge()`` (CLIENT, DUPS_OK). A listener runs in a task of the connection's
task group; the session's lock makes its listeners run one at a time, as JMS's session thread.

Closing (C1-C5): ``close()`` marks the consumer closed and detaches its link, so a blocked
``receive()`` returns None; it waits for a running listener to return unless it is called from
that listener; it acknowledges nothing and touches no transaction. Deliveries the session still
owes an acknowledgement keep the link attached until the session settles them.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import anyio

from failover.manager import RestoreOrder
from haclient.aio.acks import PendingAck
from haclient.aio.emulation import (
    client_no_local,
    client_selector,
    message_lookup,
    rejects_consume,
)
from haclient.amqp.codec import decode_message
from haclient.amqp.connection import AmqpConnection, ReceivedMessage
from haclient.amqp.endpoints import Receiver
from haclient.amqp.types import (
    Accepted,
    Durability,
    ErrorCondition,
    ReceiverSettleMode,
    Rejected,
    Released,
    SenderSettleMode,
    Terminus,
)
from haclient.destination import Destination, TemporaryQueue, TemporaryTopic, address_of
from haclient.errors import ClosedError, HAClientError, IllegalStateError, MessageFormatError
from haclient.mapping import from_amqp
from haclient.message import Message
from haclient.modes import AckConfirmation, AckMode

if TYPE_CHECKING:
    from haclient.aio.physical import PhysicalConnection
    from haclient.aio.session import Session

__all__ = ["MessageConsumer", "MessageListener"]

log = logging.getLogger("haclient.consumer")

MessageListener = Callable[[Message], Awaitable[None] | None]
"""A message listener: a function or a coroutine function taking the message."""

_listening: contextvars.ContextVar[MessageConsumer | None] = contextvars.ContextVar(
    "haclient_listening", default=None
)


class MessageConsumer:
    """Receives messages from a destination (JMS ``MessageConsumer``). Made by a ``Session``.

    Every method runs on the connection's event loop; ``close()`` may be called from any task.
    """

    def __init__(
        self,
        session: Session,
        destination: Destination,
        source: Terminus,
        *,
        link_name: str,
        selector: str | None,
        no_local: bool,
        subscription: str | None = None,
        on_close: Callable[[MessageConsumer], None] | None = None,
    ) -> None:
        self._session = session
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
        self._gate_waits: set[anyio.CancelScope] = set()  # receives waiting out a failover
        self._restored_epoch: int | None = None  # the epoch whose connection the link is on
        self._prefetch = session._connection._options.prefetch

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
    def message_listener(self) -> MessageListener | None:
        """The listener set with ``set_message_listener``, if any."""
        return self._listener

    # Failover ----------------------------------------------------------------------------------

    restore_order: int = RestoreOrder.CONSUMER

    def connection_lost(self, epoch: int, cause: BaseException) -> None:
        """Nothing to keep: prefetched messages die with the old link (F9)."""

    async def restore(self, physical: PhysicalConnection, epoch: int) -> None:
        """Attach again with the same link name, source, selector and no-local (S5); a
        temporary destination's source takes the node's new address (F6: restored first).
        Nothing to do when the session already restored this consumer for ``epoch``."""
        if self._closed or self._restored_epoch == epoch:
            return
        if isinstance(self._destination, TemporaryQueue | TemporaryTopic):
            self._source = replace(self._source, address=address_of(self._destination))
        await self._attach()
        self._restored_epoch = epoch

    async def _restore_ahead(self, physical: PhysicalConnection, epoch: int) -> None:
        """``restore``, started by the session alongside its other consumers; a failure is
        left for this consumer's own restore turn, which tries again and reports it."""
        try:
            await self.restore(physical, epoch)
        except Exception:
            log.debug("restoring %s alongside its session failed", self._link_name, exc_info=True)

    # Link --------------------------------------------------------------------------------------

    async def _attach(self) -> None:
        """Attach the link (on the session's current connection) and grant the prefetch."""
        session = self._session
        physical, amqp_session = session._link_context()
        mode = session.ack_mode
        presettled = mode is AckMode.NO_ACK
        confirms = session._confirms_acks()
        want_second = confirms and physical.settle_second is not False
        self._receiver = receiver = await physical.amqp.open_receiver(
            self._source,
            session=amqp_session,
            name=self._link_name,
            credit=self._prefetch,
            snd_settle_mode=SenderSettleMode.SETTLED if presettled else SenderSettleMode.UNSETTLED,
            rcv_settle_mode=ReceiverSettleMode.SECOND if want_second else ReceiverSettleMode.FIRST,
            timeout=session._connection._options.attach_timeout,
        )
        if want_second:
            granted = receiver.remote_rcv_settle_mode is ReceiverSettleMode.SECOND
            physical.settle_second = granted
            self._confirmation = (
                AckConfirmation.SETTLE_SECOND if granted else AckConfirmation.ROUND_TRIP
            )
        elif confirms:
            self._confirmation = AckConfirmation.ROUND_TRIP
        session._note_confirmation(self._confirmation)

    def _top_up(self) -> None:
        """Keep about ``prefetch`` messages granted (or one for a receive, with prefetch 0)."""
        receiver = self._receiver
        if receiver is None or receiver.is_closed:
            return
        amqp = self._session._amqp()
        outstanding = receiver.credit + amqp.queued(receiver)
        if self._prefetch == 0:
            if outstanding == 0:
                amqp.flow(receiver, 1)
        elif outstanding <= self._prefetch // 2:
            amqp.flow(receiver, self._prefetch - outstanding)

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the consumer is closed")
        self._session._check_open()

    # Receiving ---------------------------------------------------------------------------------

    async def receive(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to ``timeout`` seconds (None: until one comes).

        Returns None on timeout and once the consumer is closed, also when ``close()`` is called
        while this waits (C2). While the connection is stopped, no message is handed out.
        In AUTO mode the message is acknowledged, and the broker confirmed it, before it is
        returned (A1); one whose confirmation a failover cut off is not returned (F9) but
        comes again from the next broker.

        Raises:
            ClosedError: the consumer, its session or its connection was closed before the call.
            IllegalStateError: the consumer has a message listener.
            InvalidDestinationError ...: the broker closed the link, with its reason.
        """
        self._check_open()
        if self._listener is not None:
            raise IllegalStateError("the consumer has a message listener: receive() is not allowed")
        deadline = math.inf if timeout is None else anyio.current_time() + max(timeout, 0.0)
        while True:
            taken = await self._take(deadline)
            if taken is None:
                return None
            raw, message, physical, epoch = taken
            try:
                await self._acknowledge_on_delivery(raw, message)
            except HAClientError as exc:
                if not self._session._connection._lost(physical, epoch, exc):
                    raise
                # Not confirmed (A1), and from the old broker (F9): not handed out; the next
                # broker delivers it again. The one window this leaves: a broker that recorded
                # the acknowledgement and died before its answer left. The soak test has never
                # hit it with the reference HA pair (the answer goes out in the same step).
                continue
            return message

    async def receive_nowait(self) -> Message | None:
        """A message if one is already here (prefetched), else None at once."""
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

    async def _take(
        self, deadline: float
    ) -> tuple[ReceivedMessage, Message, PhysicalConnection, int] | None:
        """The next decodable message from the link, or None (deadline, or closed).

        While the connection fails over this waits (F2) and then goes on with the restored
        link; what the old link had prefetched is gone with it (F9).
        """
        connection = self._session._connection
        while not self._closed:
            remaining = deadline - anyio.current_time()
            if not await connection._wait_started(remaining):
                return None
            with anyio.move_on_at(deadline) as waiting:
                self._gate_waits.add(waiting)  # close() cancels it: C2 holds during failover
                try:
                    physical, epoch = await connection._gate()
                finally:
                    self._gate_waits.discard(waiting)
            if waiting.cancelled_caught:
                return None  # the deadline passed, or the consumer closed, during failover
            receiver = self._receiver
            if self._closed or receiver is None:
                return None
            amqp = physical.amqp
            self._top_up()
            remaining = deadline - anyio.current_time()
            try:
                if remaining <= 0:
                    raw = amqp.receive_nowait(receiver)
                else:
                    raw = await amqp.receive(receiver, None if math.isinf(remaining) else remaining)
            except HAClientError as exc:
                if connection._lost(physical, epoch, exc):
                    continue  # wait for the failover, then receive on the restored link
                raise
            if raw is None and receiver is not self._receiver:
                continue  # restored while we waited on the old link
            if raw is None or self._closed:
                if raw is not None:  # arrived as we closed: give it back
                    amqp.settle(raw, Released())
                return None
            if self._prefetch:  # prefetch 0 pulls one per receive: no credit ahead of it
                self._top_up()
            try:
                amqp_message = decode_message(raw.payload)
                message = from_amqp(
                    amqp_message,
                    prefixes=self._session._physical().prefixes,
                    consumer_destination=self._destination,
                )
            except MessageFormatError as exc:
                log.warning("rejecting an undecodable message on %s: %s", self._destination, exc)
                amqp.settle(raw, Rejected(ErrorCondition("amqp:decode-error", str(exc))))
                continue
            if not self._selected(message, physical):
                self._discard(amqp, raw)
                continue
            connection._count_received()
            return raw, message, physical, epoch
        return None

    def _selected(self, message: Message, physical: PhysicalConnection) -> bool:
        """False when a selector or no-local the broker does not apply rejects ``message``
        (E1, E2)."""
        connection = self._session._connection
        if client_no_local(self._no_local, physical.product) and connection._published_here(
            message.message_id, by_client_id=self._subscription is not None
        ):
            return False
        selector = client_selector(self._selector, connection._options.selectors, physical.product)
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
        current = self._session._connection._current
        options = self._session._connection._options
        product = current.product if current is not None else None
        return client_selector(self._selector, options.selectors, product) is not None

    @property
    def no_local_emulated(self) -> bool:
        """Whether this client withholds its own messages itself because the broker does not
        (E2, E5); False without ``no_local``."""
        current = self._session._connection._current
        return client_no_local(self._no_local, current.product if current is not None else None)

    async def _acknowledge_on_delivery(self, raw: ReceivedMessage, message: Message) -> None:
        """Do what the session's mode asks as ``message`` is handed out (before a listener)."""
        session = self._session
        mode = session.ack_mode
        pending = PendingAck(raw, self._confirmation, self._source.address)
        if mode is AckMode.AUTO:
            message._bind_acknowledger(_nothing_to_do)
            if self._listener is None:
                await session._settle([pending])
        elif mode is AckMode.TRANSACTED:
            message._bind_acknowledger(_nothing_to_do)
            await session._acknowledge_in_transaction(pending)
        elif mode is AckMode.NO_ACK:
            message._bind_acknowledger(_nothing_to_do)
        else:
            session._track(pending, message)

    # Listener ----------------------------------------------------------------------------------

    def set_message_listener(self, listener: MessageListener | None) -> None:
        """Deliver messages to ``listener`` (a function or coroutine function) from now on.

        The listener runs in a task of the connection, one listener of the session at a time,
        once the connection is started. In AUTO mode each message is acknowledged right after
        the listener returns (A1); if it raises, the message is given back for redelivery.
        ``None`` stops the listener (a message being handled is finished first).

        Raises:
            ClosedError: the consumer is closed.
        """
        self._check_open()
        self._listener = listener
        if listener is not None and not self._listener_task_active:
            self._listener_task_active = True
            self._session._connection._host.start_soon(
                self._listen, name=f"listener {self._link_name}"
            )

    async def _listen(self) -> None:
        try:
            while not self._closed and self._listener is not None:
                taken = await self._take(math.inf)
                if taken is None:
                    break
                raw, message, physical, epoch = taken
                async with self._session._dispatch_lock:
                    if not physical.is_open:
                        continue  # failed over while waiting for the session: never handed (F9)
                    try:
                        await self._run_listener(raw, message)
                    except HAClientError as exc:  # the acknowledgement met a lost connection
                        if not self._session._connection._lost(physical, epoch, exc):
                            raise
        except Exception:
            log.exception("the listener task of %s failed", self._link_name)
        finally:
            self._listener_task_active = False

    async def _run_listener(self, raw: ReceivedMessage, message: Message) -> None:
        listener = self._listener
        if listener is None or self._closed:
            self._session._amqp().settle(raw, Released())
            return
        self._listener_running = True
        self._listener_idle = anyio.Event()
        token = _listening.set(self)
        try:
            await self._acknowledge_on_delivery(raw, message)
            result = listener(message)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("the message listener of %s raised; the message is redelivered", self)
            if self._session.ack_mode in (AckMode.AUTO, AckMode.DUPS_OK):
                self._session._amqp().settle(raw, self._session._give_back_outcomes()[0])
        else:
            if self._session.ack_mode is AckMode.AUTO:
                await self._session._settle(
                    [PendingAck(raw, self._confirmation, self._source.address)]
                )
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
        self._stop_waiting_for_failover()
        inside = from_listener or _listening.get() is self
        running = self._listener_running
        if not running:
            self._release_link()
            await self._write_detach()
        # else the link goes when the listener returns, after its acknowledgement (which
        # needs the link: settled on a detached link, it would never be confirmed)
        if self._on_close is not None:
            self._on_close(self)
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
        current = self._session._connection._current
        receiver = self._receiver
        if current is None or not current.is_open or receiver is None:
            return
        try:
            await current.amqp.flush()
            if self._subscription is not None and receiver.is_closed:
                options = self._session._connection._options
                probe = await current.amqp.open_session(timeout=options.close_timeout)
                current.amqp.end_session(probe)
        except HAClientError:
            log.debug("confirming the detach of %s failed", self._link_name, exc_info=True)

    def _stop_waiting_for_failover(self) -> None:
        for waiting in list(self._gate_waits):
            waiting.cancel()

    def _release_link(self) -> None:
        """Give prefetched messages back and detach, unless the session still owes acks."""
        receiver = self._receiver
        if receiver is None:
            return
        amqp = self._session._amqp()
        # A durable subscription's link is only detached (closed=false), as Qpid JMS does: a
        # closed=true detach would end the subscription on brokers that follow the spec.
        closed = self._source.durable is Durability.NONE
        if amqp.is_open and not receiver.is_closed:
            amqp.release_arrivals(receiver)
            if not self._session._owes_acks(receiver):
                amqp.detach(receiver, closed=closed)
            else:
                self._session._linger(receiver, closed=closed)
        else:
            amqp.detach(receiver, closed=closed)

    def _session_closed(self) -> None:
        """The session closed: mark closed and wake waiters (the session ends the link)."""
        self._closed = True
        self._listener = None
        self._stop_waiting_for_failover()
        current = self._session._connection._current
        if self._receiver is not None and current is not None and current.is_open:
            current.amqp.detach(self._receiver, closed=self._source.durable is Durability.NONE)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<MessageConsumer {self._link_name!r} on {self._destination} ({state})>"


async def _nothing_to_do() -> None:
    """The acknowledger of a message whose session acknowledges by itself (AUTO, TRANSACTED)."""
