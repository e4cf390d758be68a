"""``MessageProducer``: send with JMS headers; PERSISTENT waits for the broker, the rest pipelines.

How this works: a producer with a destination owns one sender link to it. An anonymous producer
(``create_producer(None)``) sends each message where ``send(destination, message)`` says: over
one link without a target address when the broker offers ``ANONYMOUS-RELAY``, else over a link
per destination, kept in a small cache.

``send()`` fills in the headers (id, timestamp, destination, delivery mode, priority, expiration,
delivery time), encodes the message with Qpid JMS's mapping, waits for credit and transfers it.
A PERSISTENT message is sent unsettled and ``send()`` returns once the broker accepted it (F11);
a NON_PERSISTENT one returns once queued, and a refusal is raised by a later call of this
producer (or reported to the completion callback of ``send_async``). ``jms.forceSyncSend`` and
``jms.forceAsyncSend`` make every send wait, or none (M6); a producer the presettle policy
presettles sends settled and waits for nothing (M5). In a transacted session
every transfer carries the transaction's id and is confirmed by the commit.

The blocking API sends through the same paths with a message already encoded in the
application's thread (``haclient.outgoing.Encoded``): ``send_encoded_nowait`` and
``send_encoded``, called on the loop by the blocking producer's outbox
(``haclient.sync._outbox``), the one place where a send crosses from another thread. Like every
method here they run on the event loop only; a loss of the connection before such a message went
out encodes it again from its own bytes for the new connection.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from failover.manager import RestoreOrder
from haclient.aio.checks import ensure_open
from haclient.aio.gate import Connected, deadline_after
from haclient.aio.in_flight import InFlight
from haclient.aio.termini import producer_target
from haclient.aio.transaction import BufferedSend
from haclient.amqp.endpoints import Delivery, Sender
from haclient.amqp.types import (
    Accepted,
    Outcome,
    Rejected,
    SenderSettleMode,
    TransactionalState,
)
from haclient.destination import Destination
from haclient.errors import (
    AMQPError,
    ClosedError,
    HAClientError,
    IllegalStateError,
    error_from_condition,
)
from haclient.message import DeliveryMode, Message
from haclient.outgoing import Encoded, EncodingTerms, OutgoingEncoder, resolve_send, stamp_send

if TYPE_CHECKING:
    from haclient.aio.context import SessionContext
    from haclient.aio.physical import PhysicalConnection

__all__ = ["CompletionListener", "MessageProducer"]

log = logging.getLogger("haclient.producer")

CompletionListener = Callable[[Message, BaseException | None], Any]
"""Called once per ``send_async``: the message, and None or the exception that failed it."""

Sent = Message | Encoded
"""What a send transfers: the application's message (async API, on the loop) or its snapshot
encoded in the application's thread (blocking API)."""

_ANONYMOUS_RELAY = "ANONYMOUS-RELAY"
_LINK_CACHE_SIZE = 32
_MAX_PIPELINED = 10_000


class MessageProducer:
    """Sends messages (JMS ``MessageProducer``). Made by ``Session.create_producer``.

    Attributes:
        delivery_mode: Default delivery mode of ``send`` (PERSISTENT).
        priority: Default priority, 0-9 (4).
        time_to_live: Default time to live in seconds (0: never expires).
        delivery_delay: Default delay in seconds before the broker delivers a message (0).
        disable_message_id / disable_message_timestamp: Hints (JMS); ids are always set,
            because a re-sent message is recognised by its id (F11).
        preserve_message_id: Keep the id a message already carries instead of assigning one
            (False, as JMS). For a sender that makes ids deterministic (a replayed Spark task,
            say) so that consumers can recognise a replay as a duplicate.
    """

    def __init__(self, context: SessionContext, destination: Destination | None) -> None:
        self._context = context
        self._destination = destination
        self._closed = False
        self._ids = context.connection.message_ids()
        self._links: OrderedDict[Destination | None, Sender] = OrderedDict()
        self._unconfirmed: OrderedDict[Delivery, Sent] = OrderedDict()
        self._failure: HAClientError | None = None
        options = context.options
        self._encoder = OutgoingEncoder(validate_names=options.validate_property_names)
        # The presettle policy (M5): every link of this producer sends settled, and no send
        # waits for an outcome that never comes. An anonymous producer is decided by the
        # policy's destination-free flags (presettleAll, presettleProducers).
        self._presettled = options.presettled_producer(
            destination, transacted=context.transaction is not None
        )
        self._uuid_ids = options.message_id_type not in ("original", "default")  # note_sent
        self._force_sync = options.force_sync_send
        self._force_async = options.force_async_send
        self.delivery_mode = DeliveryMode.PERSISTENT
        self.priority = 4
        self.time_to_live = 0.0
        self.delivery_delay = 0.0
        self.disable_message_id = False
        self.disable_message_timestamp = False
        self.preserve_message_id = False
        if context.tracing is not None:  # spans around its sends (haclient.aio.tracing)
            context.tracing.instrument_producer(self)

    @property
    def destination(self) -> Destination | None:
        """The destination, or None for an anonymous producer."""
        return self._destination

    @property
    def is_closed(self) -> bool:
        """True once closed (or its session or connection closed)."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the producer is closed")
        self._context.check_open()

    # Failover ----------------------------------------------------------------------------------

    restore_order: int = RestoreOrder.PRODUCER

    def connection_lost(self, epoch: int, cause: BaseException) -> None:
        """The links died; pipelined sends not yet confirmed are not re-sent (NON_PERSISTENT
        is at most once)."""
        self._links.clear()
        self._unconfirmed.clear()

    async def restore(self, physical: PhysicalConnection, epoch: int) -> None:
        """Attach the producer's link again."""
        if not self._closed:
            await self._attach(Connected(physical, epoch))

    # Links -------------------------------------------------------------------------------------
    #
    # Every link comes from the ``at`` a call was admitted on (the gate's, or the restore's
    # connection): a cached link is used only on the connection it was attached on, and a new
    # one is attached only on ``at``'s connection, in the session begun on it. A call admitted
    # on a connection that failover has replaced gets ``ConnectionLostError`` (the gate runs it
    # again on the new one), never a link of another connection.

    async def _attach(self, at: Connected) -> None:
        """Attach the default link (a producer with a destination, or an anonymous relay)."""
        if self._destination is not None or self._relay_offered(at):
            await self._link_for(at, self._destination)

    @staticmethod
    def _relay_offered(at: Connected) -> bool:
        return _ANONYMOUS_RELAY in at.physical.offered_capabilities

    def _link_key(self, at: Connected, destination: Destination | None) -> Destination | None:
        if (
            destination is not self._destination  # first: no comparison for the usual case
            and destination is not None
            and destination != self._destination
            and self._relay_offered(at)
        ):
            return None  # one relay link for every destination
        return destination

    def _attached_link(self, at: Connected, key: Destination | None) -> Sender | None:
        """The open link cached under ``key`` on ``at``'s connection (marked most recently
        used), or None."""
        link = self._links.get(key)
        if link is None or link.is_closed or link.engine is not at.amqp.engine:
            return None
        self._links.move_to_end(key)
        return link

    async def _link_for(self, at: Connected, destination: Destination | None) -> Sender:
        """The link to send to ``destination`` on ``at``'s connection: cached, or attached now.

        Raises:
            ConnectionLostError: failover replaced ``at``'s connection since the call was
                admitted (``SessionContext.session_on``).
        """
        key = self._link_key(at, destination)
        link = self._attached_link(at, key)
        if link is not None:
            return link
        self._check_open()
        amqp_session = self._context.session_on(at)
        link = await at.amqp.open_sender(
            producer_target(key, at.physical.prefixes),
            session=amqp_session,
            snd_settle_mode=(
                SenderSettleMode.SETTLED if self._presettled else SenderSettleMode.UNSETTLED
            ),
            timeout=self._context.options.attach_timeout,
        )
        self._links[key] = link
        if len(self._links) > _LINK_CACHE_SIZE:
            _, oldest = self._links.popitem(last=False)
            if oldest.engine is at.amqp.engine:
                at.amqp.detach(oldest)
        return link

    # Sending -----------------------------------------------------------------------------------

    def _resolve(
        self, first: Destination | Message, message: Message | None
    ) -> tuple[Destination, Message]:
        return resolve_send(self._destination, first, message)

    def _stamp(
        self,
        destination: Destination,
        message: Message,
        delivery_mode: DeliveryMode | None,
        priority: int | None,
        time_to_live: float | None,
        delivery_delay: float | None,
    ) -> None:
        """Set the headers a send sets (JMS: visible on the message object afterwards)."""
        stamp_send(
            message,
            destination,
            self,
            self._ids,
            delivery_mode=delivery_mode,
            priority=priority,
            time_to_live=time_to_live,
            delivery_delay=delivery_delay,
        )

    async def send(
        self,
        destination_or_message: Destination | Message,
        message: Message | None = None,
        *,
        delivery_mode: DeliveryMode | None = None,
        priority: int | None = None,
        time_to_live: float | None = None,
        delivery_delay: float | None = None,
        timeout: float | None = None,
    ) -> None:
        """Send ``message`` (``send(message)``, or ``send(destination, message)`` when anonymous).

        The message's headers are set as JMS says (id, timestamp, destination ...). A
        PERSISTENT message returns once the broker accepted it; NON_PERSISTENT once it is
        queued for the socket (pipelined); ``force_sync_send`` / ``force_async_send`` make every
        send wait, or none (M6), and a presettled producer never waits (M5). In a transacted
        session the message is part of the transaction and becomes visible on commit. While
        the connection fails over the send waits (F2), at most ``timeout`` seconds (None: the
        connection's ``send_timeout``, ``jms.sendTimeout``; ``failover.timeout`` bounds it
        too), and a send that waits for its outcome, cut off, is sent again with the same id
        (F11).

        Raises:
            MessageFormatError: a property or header cannot be sent.
            InvalidDestinationError: no destination, or the broker refused it.
            ResourceLimitError, AMQPError ...: the broker rejected the message.
            ClosedError: the producer, session or connection is closed.
            FailoverTimeoutError: still failing over after ``timeout`` seconds (F4).
        """
        await ensure_open(self._check_open)
        self._raise_pipelined_failure()
        deadline = deadline_after(self._send_timeout(timeout))
        destination, message = self._resolve(destination_or_message, message)
        self._stamp(destination, message, delivery_mode, priority, time_to_live, delivery_delay)
        if self._buffered(lambda: BufferedSend(self._committed_send(destination, message))):
            return  # emulated transaction (E3): sent by commit()
        if self._pipelined_at_once(destination, message):
            return
        await self._send_until_done(destination, message, wait=None, deadline=deadline)

    # The blocking API's sends (haclient.sync._outbox), on the loop ----------------------------

    def encoding_terms(self, known: EncodingTerms | None = None) -> EncodingTerms | None:
        """What a message sent now is encoded for (the physical connection in use); None
        while there is none (failing over). ``known`` is returned as it is while its
        connection is the one in use (no new object per call)."""
        at = self._context.gate.connected_nowait()
        if at is None:
            return None
        if known is not None and known.epoch == at.epoch:
            return known
        return self._terms(at)

    def _terms(self, at: Connected) -> EncodingTerms:
        physical = at.physical
        user_id = physical.user_id if physical.populate_user_id else None
        return EncodingTerms(at.epoch, physical.prefixes, user_id)

    def message_ids(self) -> Callable[[], str]:
        """Ids for the messages a blocking producer stamps in its caller's thread (their
        own generator: nothing shared with the loop; ``note_sent`` on the loop)."""
        return self._context.connection.message_ids(remember=False)

    @property
    def validate_names(self) -> bool:
        """Whether property names are checked when a message is encoded (M10)."""
        return self._encoder.validate_names

    def send_timeout(self) -> float | None:
        """The connection's ``send_timeout`` (``jms.sendTimeout``), for a send given none."""
        return self._send_timeout(None)

    def close_timeout(self) -> float:
        """The connection's ``close_timeout``: how long a close waits for outcomes."""
        return self._context.options.close_timeout

    def pipelined_modes(self) -> frozenset[DeliveryMode]:
        """The delivery modes whose sends do not wait (for an outcome, or for a transaction's
        enlisting): fixed for the producer's life (M5, M6, the session's transactedness)."""
        if self._context.transaction is not None:
            return frozenset()
        return frozenset(mode for mode in DeliveryMode if not self._waits(mode))

    def send_encoded_nowait(self, encoded: Encoded) -> bool:
        """``send()`` of a message encoded in another thread, when that needs no wait (it
        pipelines, and the connection, a link and credit are there); False, nothing done,
        otherwise: then ``send_encoded``.

        Raises:
            ClosedError: the producer, session or connection is closed.
            MessageFormatError ...: encoding it again for a new connection failed.
        """
        self._check_open()
        return self._pipelined_at_once(encoded.destination, encoded)

    async def send_encoded(self, encoded: Encoded, deadline: float) -> None:
        """``send()`` of a message encoded in another thread, waiting at the gate until
        ``deadline`` (``anyio.current_time()``; F4) for a connection.

        Raises:
            MessageFormatError: a property or header cannot be sent (as ``send``).
            InvalidDestinationError: no destination, or the broker refused it.
            ResourceLimitError, AMQPError ...: the broker rejected the message; an earlier
                pipelined send's refusal is raised first, as ``send`` raises it.
            ClosedError: the producer, session or connection is closed.
            FailoverTimeoutError: still failing over past ``deadline`` (F4).
        """
        await ensure_open(self._check_open)
        self._raise_pipelined_failure()
        tracing = self._context.tracing
        if tracing is not None and self._context.transaction is not None:
            tracing.enlisted(self._context)  # the send's span, carried from its caller
        destination = encoded.destination
        if self._buffered(lambda: BufferedSend(self._committed_send(destination, encoded))):
            return  # emulated transaction (E3): sent by commit()
        if self._pipelined_at_once(destination, encoded):
            return
        await self._send_until_done(destination, encoded, wait=None, deadline=deadline)

    def send_encoded_then(
        self,
        encoded: Encoded,
        deadline: float,
        completed: Callable[[BaseException | None], None],
    ) -> InFlight | None:
        """``send_encoded`` of a message that waits for the broker's outcome, without a task
        when nothing has to be waited for first (connected, an attached link with credit, no
        transaction, no earlier refusal to raise first, not traced): it is transferred now,
        and ``completed(error)`` is called once, on the loop, from the event-loop turn that
        brings its outcome (None: accepted; else the refusal). When the connection is lost
        first, the general path takes it over from where it is (re-sent with the same id on
        the next connection, F11, waiting at the gate until ``deadline``, F4) and
        ``completed`` gets that path's outcome (``haclient.aio.in_flight``). The returned
        ``InFlight``'s ``cancel()`` lets go of it (``completed`` is then not called).

        Returns:
            None, nothing done, when any of that does not hold: then ``send_encoded``.
        """
        if (
            self._closed
            or self._unconfirmed
            or self._failure is not None
            or self._context.transaction is not None
            or self._context.tracing is not None
            or not self._waits(encoded.delivery_mode)
        ):
            return None
        at = self._context.gate.connected_nowait()
        if at is None or not at.physical.is_open:
            return None
        link = self._attached_link(at, self._link_key(at, encoded.destination))
        if link is None or link.credit <= 0 or encoded.terms.epoch != at.epoch:
            return None
        try:
            self._check_open()
        except HAClientError:
            return None
        amqp = at.amqp
        delivery = self._booked(amqp.send_nowait(link, encoded.payload, wake_writer=False), encoded)
        in_flight = InFlight(
            at,
            delivery,
            completed,
            unconfirmed=self._unconfirmed,
            check=lambda outcome: self._check_outcome(outcome, encoded),
            resume=lambda error: self._resume_send(at, encoded, delivery, deadline, error),
            spawn=self._context.start_soon,
        )
        if not amqp.when_settled(delivery, in_flight.settled):  # cannot be: just sent
            in_flight.settled(delivery.remote_outcome, None)
        return in_flight

    async def _resume_send(
        self,
        at: Connected,
        encoded: Encoded,
        delivery: Delivery,
        deadline: float,
        error: BaseException,
    ) -> None:
        """An ``InFlight`` send from its failed wait: what ``_send_until_done``'s attempt does
        after that wait raised (``gate.run``): the loss of the connection re-sends it, same id,
        on the next one (F11), within ``deadline`` at the gate (F4); any other error is the
        send's."""
        if not isinstance(error, HAClientError) or not self._context.gate.lost(at, error):
            raise error
        await self._send_until_done(
            encoded.destination,
            encoded,
            wait=True,
            in_transaction=False,
            sent=(at, delivery),
            deadline=deadline,
        )

    @property
    def traced(self) -> bool:
        """Whether the connection traces this producer's sends (``send`` and ``send_async``
        make the spans; ``send_encoded_all`` makes none)."""
        return self._context.tracing is not None

    async def send_encoded_all(
        self, items: Sequence[Encoded], *, timeout: float | None = None
    ) -> list[HAClientError | None]:
        """Send ``items`` (encoded beforehand, each with its own id) in order, pipelined, and
        wait for every outcome; one result per item: None when the broker accepted it, else
        the error it refused it with. The outbox relay's send: the outcome of each message, as
        ``send_async`` gives it, without a task per message.

        While the connection fails over the call waits (F2), until ``timeout`` seconds after
        the call at most (None: the connection's ``send_timeout``); a loss re-sends every item
        whose outcome had not come, in order, with the same ids (F11). A presettled producer
        (M5) waits for nothing: every result is None once queued.

        Raises:
            IllegalStateError: the session is transacted (a transaction's sends are confirmed
                by its commit: use ``send``).
            ClosedError: the producer, session or connection is closed.
            ConnectionFailedError, FailoverTimeoutError: failover gave up, or took longer
                than ``timeout`` (F4); the items without a result may have been sent or not.
        """
        await ensure_open(self._check_open)
        if self._context.transaction is not None:
            raise IllegalStateError("send_encoded_all sends outside a transaction: use send")
        results: list[HAClientError | None] = [None] * len(items)
        waiting = deque(range(len(items)))  # the items without an outcome yet, in order
        sent: dict[int, Delivery] = {}
        epoch = -1

        async def attempt(at: Connected) -> None:
            nonlocal epoch
            if at.epoch != epoch:
                if sent:
                    log.info("re-sending %d messages after the connection was lost", len(waiting))
                    self._context.connection.counters.resent += len(waiting)
                sent.clear()
                epoch = at.epoch
            await self._transfer_all(at, items, waiting, sent)
            if self._presettled:
                waiting.clear()
                return
            while waiting:
                index = waiting[0]
                outcome = await at.amqp.wait_settled(sent[index])
                try:
                    self._check_outcome(outcome, items[index])
                except HAClientError as exc:
                    results[index] = exc
                waiting.popleft()

        await self._context.gate.run(attempt, deadline=deadline_after(self._send_timeout(timeout)))
        return results

    async def _transfer_all(
        self,
        at: Connected,
        items: Sequence[Encoded],
        waiting: Iterable[int],
        sent: dict[int, Delivery],
    ) -> None:
        """Queue a transfer, on ``at``'s connection, of each item of ``waiting`` not in
        ``sent`` yet (and note it there): ``_transfer``'s work with the terms and the links
        looked up once, not per message. Their outcomes are the caller's to take (not in
        ``_unconfirmed``)."""
        amqp = at.amqp
        terms = self._terms(at)
        links: dict[Destination, Sender] = {}
        counters = self._context.connection.counters
        for index in waiting:
            if index in sent:
                continue
            item = items[index]
            link = links.get(item.destination)
            if link is None or link.is_closed:
                link = links[item.destination] = await self._link_for(at, item.destination)
            if link.credit <= 0:
                await amqp.wait_for_credit(link)
                self._check_open()
            fits = item.terms.epoch == at.epoch or item.terms.fit(terms)
            payload = item.payload if fits else self._encoder.again(item, terms)
            sent[index] = amqp.send_nowait(link, payload, settled=self._presettled)
            counters.sent += 1
            if self._uuid_ids:
                self._context.connection.note_sent(item.message_id)

    def take_failure(self) -> HAClientError | None:
        """The first refusal of a pipelined send not reported yet, taken (not raised)."""
        try:
            self._raise_pipelined_failure()
        except HAClientError as exc:
            return exc
        return None

    def report_lost(self, error: BaseException, message_id: str | None = None) -> None:
        """A send's failure that no call of the application can raise any more (C9): counted
        in ``statistics().sends_failed`` and told to the connection's listeners
        (``send_failed(destination, message_id, error)``)."""
        connection = self._context.connection
        connection.counters.sends_failed += 1
        log.warning("a send to %s failed and no call was left to raise it: %s", self, error)
        connection.listeners.notify("send_failed", self._destination, message_id, error)

    def _buffered(self, send: Callable[[], BufferedSend]) -> bool:
        """Hold ``send()`` until commit when the transaction holds sends (emulated, E3); False
        otherwise (``send`` is not called)."""
        transaction = self._context.transaction
        if transaction is None or not transaction.holds_sends:
            return False
        transaction.buffer(send())
        return True

    def _pipelined_at_once(self, destination: Destination, message: Sent) -> bool:
        """The common pipelined send, without a wait: a NON_PERSISTENT message outside a
        transaction, while connected, on an attached link with credit, with room in the
        pipeline. True once it is queued for the socket, as ``_send_until_done`` would have
        queued it; False (nothing sent) when any of that does not hold: then
        ``_send_until_done`` waits for what is missing (F2, F3).
        """
        if (
            self._waits(message.delivery_mode)
            or self._context.transaction is not None
            or len(self._unconfirmed) >= _MAX_PIPELINED
        ):
            return False
        at = self._context.gate.connected_nowait()
        if at is None or not at.physical.is_open:  # failing over, or its loss not yet reported
            return False
        link = self._attached_link(at, self._link_key(at, destination))
        if link is None or link.credit <= 0:
            return False
        payload = self._encode(at, message)
        # its errors are not the connection's loss
        delivery = at.amqp.send_nowait(link, payload, settled=self._presettled)
        self._booked(delivery, message)
        return True

    def _committed_send(
        self, destination: Destination, message: Sent
    ) -> Callable[[], Awaitable[None]]:
        """The send an emulated transaction's commit makes: confirmed, re-sent on failover."""

        async def transmit() -> None:
            self._check_open()
            await self._send_until_done(destination, message, wait=True, in_transaction=False)

        return transmit

    async def _send_until_done(
        self,
        destination: Destination,
        message: Sent,
        *,
        wait: bool | None,
        in_transaction: bool | None = None,
        sent: tuple[Connected, Delivery] | None = None,
        deadline: float = math.inf,
    ) -> None:
        """Transfer ``message`` (unless ``sent`` says it already went out on a connection);
        wait for the broker's outcome when ``wait`` (None: as ``_waits`` says; never when
        presettled). A loss of the connection before that outcome sends it again, same id, on
        the next connection (F11); in a transaction it does not (F7: the commit will fail)."""
        if wait is None:
            wait = self._waits(message.delivery_mode)
        wait = wait and not self._presettled
        if in_transaction is None:
            in_transaction = self._context.transaction is not None

        async def attempt(at: Connected) -> None:
            nonlocal sent
            if sent is not None and sent[0].epoch == at.epoch:
                delivery = sent[1]
            else:
                if sent is not None:
                    log.info("re-sending %s after the connection was lost", message.message_id)
                    self._context.connection.counters.resent += 1
                    if self._context.tracing is not None:
                        self._context.tracing.resent(message)
                delivery = await self._transfer(
                    at, destination, message, in_transaction, wake_writer=not wait
                )
            sent = (at, delivery)
            if wait:
                try:
                    outcome = await at.amqp.wait_settled(delivery)
                finally:  # settled, or failed here: this call reports it, no later one
                    self._unconfirmed.pop(delivery, None)
                self._check_outcome(outcome, message)
            elif len(self._unconfirmed) > _MAX_PIPELINED:
                await self._confirm_oldest()

        on_lost = self._not_repeated if in_transaction else None
        await self._context.gate.run(attempt, on_lost=on_lost, deadline=deadline)

    def _not_repeated(self, exc: HAClientError) -> None:
        """A send in a transaction cut off by failover is not sent again: the transaction is
        lost, and the next commit raises ``TransactionRolledBackError`` (F7)."""
        if self._context.transaction is not None:
            self._context.transaction.cut_off()

    async def send_async(
        self,
        destination_or_message: Destination | Message,
        message: Message | None = None,
        *,
        on_completion: CompletionListener,
        delivery_mode: DeliveryMode | None = None,
        priority: int | None = None,
        time_to_live: float | None = None,
        delivery_delay: float | None = None,
        timeout: float | None = None,
    ) -> None:
        """Send without waiting for the broker; ``on_completion(message, error)`` says how it went.

        Returns once the message is queued for the socket. ``on_completion`` is called exactly
        once, on the event loop, with ``error=None`` when the broker accepted the message (JMS
        2.0's ``CompletionListener``). Errors found before anything was sent are raised here,
        among them ``FailoverTimeoutError`` after ``timeout`` seconds of failover (None: the
        connection's ``send_timeout``).
        """
        await ensure_open(self._check_open)
        self._raise_pipelined_failure()
        destination, message = self._resolve(destination_or_message, message)
        self._stamp(destination, message, delivery_mode, priority, time_to_live, delivery_delay)
        sent = message
        await self._send_then_complete(
            destination,
            sent,
            deadline_after(self._send_timeout(timeout)),
            lambda error: self._complete(on_completion, sent, error),
        )

    async def send_encoded_async(
        self,
        encoded: Encoded,
        deadline: float,
        completed: Callable[[BaseException | None], None],
    ) -> None:
        """``send_async()`` of a message encoded in another thread: returns once it is queued
        for the socket; ``completed(error)`` is called exactly once, on the loop, with its
        outcome (None: accepted).

        Raises:
            MessageFormatError: a property or header cannot be sent (found before anything
                was sent, as ``send_async``).
            InvalidDestinationError: no destination.
            ClosedError: the producer, session or connection is closed.
        """
        await ensure_open(self._check_open)
        self._raise_pipelined_failure()
        await self._send_then_complete(encoded.destination, encoded, deadline, completed)

    async def _send_then_complete(
        self,
        destination: Destination,
        message: Sent,
        deadline: float,
        completed: Callable[[BaseException | None], None],
    ) -> None:
        """Queue ``message`` for the socket (waiting at the gate until ``deadline``), then tell
        ``completed`` its outcome from a task of the connection (re-sent on loss, F11)."""
        buffered = lambda: BufferedSend(  # noqa: E731 - built only in an emulated transaction
            self._committed_send(destination, message), completed=completed
        )
        if self._buffered(buffered):
            return  # emulated transaction (E3): sent, and completed, by commit()
        in_transaction = self._context.transaction is not None
        at = await self._context.gate.wait(deadline)
        sent = (at, await self._transfer(at, destination, message, in_transaction))

        async def complete() -> None:
            error: BaseException | None = None
            try:
                await self._send_until_done(
                    destination, message, wait=True, in_transaction=in_transaction, sent=sent
                )
            except Exception as exc:
                error = exc
            completed(error)

        if self._presettled:  # no outcome will come: done once queued (M5)
            completed(None)
            return
        self._context.start_soon(complete)

    def _waits(self, mode: DeliveryMode | None) -> bool:
        """Whether a send of a message with delivery ``mode`` waits for the broker's outcome:
        PERSISTENT ones, unless ``jms.forceSyncSend`` (every one) or ``jms.forceAsyncSend``
        (none) says otherwise, as Qpid JMS decides; a presettled producer never does."""
        if self._presettled:
            return False
        if self._force_sync:
            return True
        return not self._force_async and mode == DeliveryMode.PERSISTENT

    def _send_timeout(self, timeout: float | None) -> float | None:
        """A send's ``timeout``, or the connection's ``send_timeout`` (``jms.sendTimeout``)
        when the call gives none."""
        return self._context.options.send_timeout if timeout is None else timeout

    @staticmethod
    def _complete(
        on_completion: CompletionListener, message: Message, error: BaseException | None
    ) -> None:
        try:
            on_completion(message, error)
        except Exception:
            log.exception("a completion listener raised")

    async def _transfer(
        self,
        at: Connected,
        destination: Destination,
        message: Sent,
        in_transaction: bool,
        *,
        wake_writer: bool = True,
    ) -> Delivery:
        """Queue one transfer of ``message`` (already stamped) on ``at``'s connection, in the
        session's broker transaction when ``in_transaction``; ``wake_writer=False`` when the
        caller awaits its outcome next (that writes it: ``AmqpConnection.send_nowait``)."""
        payload = self._encode(at, message)
        link = await self._link_for(at, destination)
        state: TransactionalState | None = None
        if in_transaction and self._context.transaction is not None:
            state = await self._context.transaction.enlist_send()
        await at.amqp.wait_for_credit(link)
        self._check_open()
        delivery = at.amqp.send_nowait(
            link, payload, settled=self._presettled, state=state, wake_writer=wake_writer
        )
        return self._booked(delivery, message)

    def _encode(self, at: Connected, message: Sent) -> bytes:
        """``message``'s payload for ``at``'s broker. Its JMSXUserID is the logged-in user's
        with ``jms.populateJMSXUserID``, else none: an application's own is cleared, as Qpid
        JMS clears it (a user id the client did not check would let a sender pose as
        another, M7). A message encoded in another thread keeps its bytes while the
        connection it was encoded for is in use, and is encoded again from them on another."""
        if type(message) is Encoded:
            if message.terms.epoch == at.epoch:
                return message.payload
            terms = self._terms(at)
            if message.terms.fit(terms):  # a stored payload, right for this broker as it is
                return message.payload
            return self._encoder.again(message, terms)
        assert isinstance(message, Message)
        physical = at.physical
        user_id = physical.user_id if physical.populate_user_id else None
        return self._encoder.encode(message, physical.prefixes, user_id, stamp_user_id=True)

    def _booked(self, delivery: Delivery, message: Sent) -> Delivery:
        """``delivery`` (of ``message``, just handed to proton) counted as sent, unconfirmed
        (unless presettled: no outcome will come)."""
        if not self._presettled:
            self._unconfirmed[delivery] = message
        connection = self._context.connection
        connection.counters.sent += 1
        if self._uuid_ids and type(message) is Encoded:
            connection.note_sent(message.message_id)
        return delivery

    def _check_outcome(self, outcome: Outcome | None, message: Sent) -> None:
        if isinstance(outcome, TransactionalState):
            outcome = outcome.outcome or Accepted()
        if isinstance(outcome, Accepted):
            return
        if isinstance(outcome, Rejected) and outcome.error is not None:
            raise error_from_condition(
                outcome.error.name,
                outcome.error.description,
                outcome.error.info,
                context=f"the broker rejected message {message.message_id}",
            )
        raise AMQPError(
            f"the broker did not accept message {message.message_id}: {outcome!r}",
        )

    async def _confirm_oldest(self) -> None:
        delivery, message = next(iter(self._unconfirmed.items()))
        try:
            outcome = await self._context.amqp().wait_settled(delivery)
            self._check_outcome(outcome, message)
        except HAClientError as exc:
            self._failure = self._failure or exc
        finally:
            self._unconfirmed.pop(delivery, None)

    def _raise_pipelined_failure(self) -> None:
        """Forget the settled sends at the head of the pipeline; raise the first refusal.

        Looks at the head only (sends settle in order), so a send costs O(1) however many
        pipelined sends are still unconfirmed; copying the whole map here made it quadratic.
        """
        unconfirmed = self._unconfirmed
        while unconfirmed:
            delivery = next(iter(unconfirmed))
            if not delivery.remote_settled:
                break
            message = unconfirmed.pop(delivery)
            try:
                self._check_outcome(delivery.remote_outcome, message)
            except HAClientError as exc:
                self._failure = self._failure or exc
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    async def flush(self) -> None:
        """Wait until the broker settled every message sent so far; raise the first refusal."""
        while self._unconfirmed:
            await self._confirm_oldest()
        self._raise_pipelined_failure()

    # Closing -----------------------------------------------------------------------------------

    async def close(self) -> None:
        """Wait for the outcome of pipelined sends, then detach. Idempotent.

        Raises:
            AMQPError: the broker's refusal of a pipelined (NON_PERSISTENT) send not reported
                yet (``ResourceLimitError`` ... as ``send`` raises it).
        """
        if self._closed:
            return
        current = self._context.connection.current
        try:
            if current is not None and current.amqp.is_open:
                with anyio.move_on_after(self._context.options.close_timeout):
                    await self.flush()
        finally:
            self._closed = True
            self._context.forget(self)
            if current is not None:
                for link in self._links.values():
                    current.amqp.detach(link)
            self._links.clear()

    def _session_closed(self) -> None:
        self._closed = True
        self._links.clear()

    def __repr__(self) -> str:
        where = self._destination if self._destination is not None else "(anonymous)"
        return f"<MessageProducer to {where} ({'closed' if self._closed else 'open'})>"
