"""``Session``: a JMS session over one AMQP session, with its acknowledge mode and transaction.

How this works: the session makes producers, consumers and browsers as links on its AMQP
session, and owns what they share: the acknowledgement bookkeeping (``Acknowledger``), the
transaction (``Transactions``, TRANSACTED only), the DUPS_OK flusher task (the only background
acknowledger, A3) and the lock that lets one listener run at a time.
"""

from __future__ import annotations

import itertools
import logging
from typing import TYPE_CHECKING, Any

import anyio

from failover.manager import RestoreOrder
from haclient.aio.acks import Acknowledger, PendingAck, StaleDeliveryError
from haclient.aio.browser import QueueBrowser
from haclient.aio.consumer import MessageConsumer
from haclient.aio.emulated_transaction import BufferedSend, EmulatedTransaction
from haclient.aio.emulation import broker_selector
from haclient.aio.producer import MessageProducer
from haclient.aio.termini import (
    SubscriptionKind,
    browser_source,
    consumer_source,
    subscription_source,
)
from haclient.aio.transaction import Transactions
from haclient.amqp.connection import AmqpConnection, ReceivedMessage
from haclient.amqp.endpoints import Receiver
from haclient.amqp.endpoints import Session as AmqpSession
from haclient.amqp.types import ACCEPTED, Modified, Outcome, Released, Terminus, TransactionalState
from haclient.destination import (
    Destination,
    Queue,
    TemporaryQueue,
    TemporaryTopic,
    Topic,
    _require_destination,
)
from haclient.errors import (
    AcknowledgeFailedError,
    ClosedError,
    HAClientError,
    IllegalStateError,
    InvalidDestinationError,
    ResourceLockedError,
    TransactionRolledBackError,
)
from haclient.message import Message
from haclient.modes import AckConfirmation, AckMode
from haclient.selector import compile_selector

if TYPE_CHECKING:
    from haclient.aio.connection import Connection
    from haclient.aio.physical import PhysicalConnection

__all__ = ["Session"]

log = logging.getLogger("haclient.session")

_link_numbers = itertools.count(1)


class Session:
    """A JMS session (single-threaded context for producing and consuming). Made by
    ``Connection.create_session``; use it as an async context manager to close it.
    """

    restore_order: int = RestoreOrder.SESSION

    def __init__(self, connection: Connection, ack_mode: AckMode) -> None:
        self._connection = connection
        self._ack_mode = AckMode(ack_mode)
        self._amqp_session: AmqpSession | None = None
        self._closed = False
        self._acks = Acknowledger()
        self._transactions: Transactions | None = None
        self._emulated: EmulatedTransaction | None = None  # TRANSACTED with transactions=emulate
        self._consumers: set[MessageConsumer] = set()
        self._producers: set[MessageProducer] = set()
        self._browsers: set[QueueBrowser] = set()
        self._lingering: dict[Receiver, bool] = {}  # receiver -> close it (False: detach only)
        self._confirmation: AckConfirmation | None = None
        self._dispatch_lock = anyio.Lock()
        self._flush_due = anyio.Event()
        self._ack_lock = anyio.Lock()
        self._acks_lost = False  # F8: deliveries were unacknowledged when the connection failed
        self._transaction_lost = False  # F7: the open transaction died with the connection

    async def _open(self) -> None:
        await self._begin(self._connection._physical())
        if self._ack_mode is AckMode.DUPS_OK:
            self._connection._host.start_soon(self._dups_ok_flusher, name="dups-ok flusher")

    async def _begin(self, physical: PhysicalConnection) -> None:
        options = self._connection._options
        self._amqp_session = await physical.amqp.open_session(timeout=options.attach_timeout)
        if self._ack_mode is AckMode.TRANSACTED and options.transactions == "emulate":
            if self._emulated is None:
                log.warning(
                    "session transactions are emulated by the client (transactions=emulate): "
                    "a commit is not atomic"
                )
                self._emulated = EmulatedTransaction()
        elif self._ack_mode is AckMode.TRANSACTED:
            self._transactions = await Transactions.attach(
                physical.amqp,
                self._amqp_session,
                self._link_name("txn"),
                timeout=options.attach_timeout,
            )

    # Failover ----------------------------------------------------------------------------------

    def connection_lost(self, epoch: int, cause: BaseException) -> None:
        """The connection died: what the session owed the broker is gone with it (F7, F8)."""
        if self._acks.take_pending() and self._ack_mode in (AckMode.CLIENT, AckMode.INDIVIDUAL):
            self._acks_lost = True
        transactions = self._transactions
        if transactions is not None and (transactions.dirty or transactions.txn_id is not None):
            self._transaction_lost = True
        if self._emulated is not None and self._emulated.dirty:
            self._emulated.rolled_back(cause)  # the broker redelivers what was received
            self._transaction_lost = True
        self._lingering.clear()

    async def restore(self, physical: PhysicalConnection, epoch: int) -> None:
        """Begin the session again on the new connection, then re-attach its consumers side
        by side: one round trip for all of them rather than one each (restoring 1,000
        consumers is bound by it). A consumer that fails here is tried again, and reported,
        in its own restore turn."""
        await self._begin(physical)
        consumers = [consumer for consumer in self._consumers if not consumer.is_closed]
        if len(consumers) > 1:
            async with anyio.create_task_group() as group:
                for consumer in consumers:
                    group.start_soon(consumer._restore_ahead, physical, epoch)

    def _register(self, resource: Any) -> None:
        self._connection._manager.register(resource)

    def _unregister(self, resource: Any) -> None:
        self._connection._manager.unregister(resource)

    # Plumbing for producers and consumers ------------------------------------------------------

    def _physical(self) -> PhysicalConnection:
        return self._connection._physical()

    def _amqp(self) -> AmqpConnection:
        return self._connection._physical().amqp

    def _link_context(self) -> tuple[PhysicalConnection, AmqpSession]:
        self._check_open()
        assert self._amqp_session is not None
        return self._physical(), self._amqp_session

    def _link_name(self, kind: str) -> str:
        return f"{self._connection._container_id}:{kind}:{next(_link_numbers)}"

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the session is closed")
        self._connection._check_open()

    # Properties --------------------------------------------------------------------------------

    @property
    def ack_mode(self) -> AckMode:
        """The acknowledge mode."""
        return self._ack_mode

    @property
    def transacted(self) -> bool:
        """True for a TRANSACTED session."""
        return self._ack_mode is AckMode.TRANSACTED

    @property
    def transactions_emulated(self) -> bool:
        """True when this TRANSACTED session's transactions are emulated by the client
        (``transactions=emulate``, E3, E5): sends wait in the client until ``commit()``, which
        is then not atomic."""
        return self._emulated is not None

    def _confirms_acks(self) -> bool:
        """Whether acknowledgements in this session wait for the broker's confirmation."""
        confirming = (AckMode.AUTO, AckMode.CLIENT, AckMode.INDIVIDUAL)
        return self._ack_mode in confirming or self._emulated is not None

    @property
    def ack_confirmation(self) -> AckConfirmation:
        """How acknowledgements are confirmed by the broker in this session (A6).

        ``SETTLE_SECOND`` or ``ROUND_TRIP`` for AUTO, CLIENT and INDIVIDUAL (decided by the
        broker's answer to the first consumer's attach, and known before it when the broker
        is known to lack mode ``second``); ``NONE`` for DUPS_OK, NO_ACK and TRANSACTED.
        """
        if not self._confirms_acks():
            return AckConfirmation.NONE
        if self._confirmation is not None:
            return self._confirmation
        second = self._physical().settle_second
        return AckConfirmation.ROUND_TRIP if second is False else AckConfirmation.SETTLE_SECOND

    @property
    def is_closed(self) -> bool:
        """True once closed (or the connection closed)."""
        return self._closed

    def _note_confirmation(self, confirmation: AckConfirmation) -> None:
        if confirmation is not AckConfirmation.NONE:
            self._confirmation = confirmation

    # Factories ---------------------------------------------------------------------------------

    async def create_producer(self, destination: Destination | None = None) -> MessageProducer:
        """A producer to ``destination``; None makes an anonymous producer (``send(dest, msg)``).

        Raises:
            InvalidDestinationError: the broker refused the destination.
            ClosedError: the session is closed.
        """
        self._check_open()
        if destination is not None:
            _require_destination(destination)

        async def create() -> MessageProducer:
            producer = MessageProducer(self, destination)
            await producer._attach()
            return producer

        producer = await self._connection._retrying(create)
        self._producers.add(producer)
        self._register(producer)
        return producer

    def _check_selector(self, selector: str | None) -> str | None:
        if selector is None or not selector.strip():
            return None
        compile_selector(selector)  # InvalidSelectorError, with the column, before any frame
        return selector

    def _broker_selector(self, selector: str | None) -> str | None:
        """The selector for the link's filter: none when the client evaluates it (E1)."""
        return broker_selector(selector, self._connection._options.selectors)

    async def _consumer(
        self,
        destination: Destination,
        source: Terminus,
        *,
        link_name: str,
        selector: str | None,
        no_local: bool,
        subscription: str | None = None,
        on_close: Any = None,
    ) -> MessageConsumer:

        async def create() -> MessageConsumer:
            consumer = MessageConsumer(
                self,
                destination,
                source,
                link_name=link_name,
                selector=selector,
                no_local=no_local,
                subscription=subscription,
                on_close=on_close or self._forget_consumer,
            )
            await consumer._attach()
            return consumer

        consumer = await self._connection._retrying(create)
        self._consumers.add(consumer)
        self._register(consumer)
        return consumer

    async def create_consumer(
        self, destination: Destination, selector: str | None = None, no_local: bool = False
    ) -> MessageConsumer:
        """A consumer of a queue or topic, with an optional JMS selector.

        ``no_local`` (topics) withholds messages published by this connection.

        Raises:
            InvalidSelectorError: the selector is not valid JMS (the column is given).
            InvalidDestinationError: the destination does not exist or was refused.
        """
        self._check_open()
        destination = _require_destination(destination)
        selector = self._check_selector(selector)
        prefixes = self._physical().prefixes
        source = consumer_source(
            destination, prefixes, selector=self._broker_selector(selector), no_local=no_local
        )
        return await self._consumer(
            destination,
            source,
            link_name=self._link_name("consumer"),
            selector=selector,
            no_local=no_local,
        )

    def _check_topic(self, topic: Destination) -> Destination:
        if not isinstance(topic, Topic | TemporaryTopic):
            raise InvalidDestinationError(f"a subscription needs a topic, not {topic!r}")
        return topic

    def _check_name(self, name: str) -> str:
        if not isinstance(name, str) or not name or "|" in name:
            raise InvalidDestinationError(
                f"a subscription name must be a non-empty str without '|', not {name!r}"
            )
        return name

    async def create_durable_consumer(
        self,
        topic: Topic,
        name: str,
        selector: str | None = None,
        no_local: bool = False,
    ) -> MessageConsumer:
        """A consumer on the unshared durable subscription ``name`` of ``topic`` (S1, S2).

        The subscription is created if it does not exist, and keeps messages while nobody
        consumes until ``unsubscribe(name)``. The name is scoped to the client id.

        Raises:
            IllegalStateError: the connection has no client id (JMS needs one here).
            ResourceLockedError: another consumer is active on the subscription.
        """
        self._check_open()
        self._check_topic(topic)
        self._check_name(name)
        if not self._connection._has_client_id:
            raise IllegalStateError(
                "an unshared durable subscription needs a client id: connect with client_id=..."
            )
        selector = self._check_selector(selector)
        source = subscription_source(
            topic,
            self._physical().prefixes,
            kind=SubscriptionKind.DURABLE,
            is_global=False,
            selector=self._broker_selector(selector),
            no_local=no_local,
        )
        return await self._consumer(
            topic, source, link_name=name, selector=selector, no_local=no_local, subscription=name
        )

    async def _shared(
        self, topic: Topic, name: str, selector: str | None, *, durable: bool
    ) -> MessageConsumer:
        self._check_open()
        self._check_topic(topic)
        self._check_name(name)
        selector = self._check_selector(selector)
        names = self._connection._subscription_names
        source = subscription_source(
            topic,
            self._physical().prefixes,
            kind=SubscriptionKind.SHARED_DURABLE if durable else SubscriptionKind.SHARED,
            is_global=not self._connection._has_client_id,
            selector=self._broker_selector(selector),
        )
        link_name = names.acquire(name, durable=durable)

        def on_close(consumer: MessageConsumer) -> None:
            names.release(link_name, durable=durable)
            self._forget_consumer(consumer)

        try:
            return await self._consumer(
                topic,
                source,
                link_name=link_name,
                selector=selector,
                no_local=False,
                subscription=name,
                on_close=on_close,
            )
        except BaseException:
            names.release(link_name, durable=durable)
            raise

    async def create_shared_consumer(
        self, topic: Topic, name: str, selector: str | None = None
    ) -> MessageConsumer:
        """A consumer on the shared non-durable subscription ``name`` (S3).

        Consumers with the same name (and client id, or none: global) share its messages; the
        subscription ends with its last consumer.
        """
        return await self._shared(topic, name, selector, durable=False)

    async def create_shared_durable_consumer(
        self, topic: Topic, name: str, selector: str | None = None
    ) -> MessageConsumer:
        """A consumer on the shared durable subscription ``name`` (S1, S3): it outlives its
        consumers until ``unsubscribe(name)``; without a client id its name is global."""
        return await self._shared(topic, name, selector, durable=True)

    async def unsubscribe(self, name: str) -> None:
        """Remove the durable subscription ``name`` (S4).

        Raises:
            ResourceLockedError: a consumer is active on it (this connection's or another's).
            InvalidDestinationError: there is no such subscription.
        """
        self._check_open()
        self._check_name(name)
        if any(c.subscription_name == name and not c.is_closed for c in self._consumers):
            raise ResourceLockedError(
                f"subscription {name!r} has an active consumer in this session"
            )

        async def unsubscribe() -> None:
            physical, amqp_session = self._link_context()
            link = await physical.amqp.open_receiver(
                Terminus.null(),
                session=amqp_session,
                name=name,
                credit=0,
                timeout=self._connection._options.attach_timeout,
            )
            physical.amqp.detach(link)
            # The broker removes the subscription when it handles that close: a round trip
            # makes unsubscribe() return after it did (the close is written before the Begin).
            await physical.amqp.flush()
            probe = await physical.amqp.open_session(
                timeout=self._connection._options.attach_timeout
            )
            physical.amqp.end_session(probe)

        await self._connection._retrying(unsubscribe)

    async def create_browser(self, queue: Queue, selector: str | None = None) -> QueueBrowser:
        """A browser over ``queue``: iterate to see its messages without consuming them.

        Raises:
            InvalidDestinationError: not a queue, or the broker refused it.
            InvalidSelectorError: the selector is not valid JMS.
        """
        self._check_open()
        if not isinstance(queue, Queue | TemporaryQueue):
            raise InvalidDestinationError(f"a browser needs a queue, not {queue!r}")
        selector = self._check_selector(selector)
        source = browser_source(queue, self._physical().prefixes, selector=selector)

        async def create() -> QueueBrowser:
            browser = QueueBrowser(
                self, queue, source, selector=selector, link_name=self._link_name("browser")
            )
            await browser._attach()
            return browser

        browser = await self._connection._retrying(create)
        self._browsers.add(browser)
        self._register(browser)
        return browser

    async def create_temporary_queue(self) -> TemporaryQueue:
        """A temporary queue, deleted when the connection closes."""
        self._check_open()
        created = await self._connection._create_temporary(self, queue=True)
        assert isinstance(created, TemporaryQueue)
        return created

    async def create_temporary_topic(self) -> TemporaryTopic:
        """A temporary topic, deleted when the connection closes."""
        self._check_open()
        created = await self._connection._create_temporary(self, queue=False)
        assert isinstance(created, TemporaryTopic)
        return created

    # Acknowledgements --------------------------------------------------------------------------

    def _track(self, pending: PendingAck, message: Message) -> None:
        """CLIENT, INDIVIDUAL and DUPS_OK: remember a delivered message until acknowledged."""
        self._acks.track(pending)
        if self._ack_mode is AckMode.INDIVIDUAL:
            raw = pending.raw

            async def acknowledge_one() -> None:
                await self._acknowledge_individual(raw)

            message._bind_acknowledger(acknowledge_one)
        elif self._ack_mode is AckMode.CLIENT:
            message._bind_acknowledger(self.acknowledge)
        else:
            message._bind_acknowledger(_nothing)
            if (
                len(self._acks.pending) >= self._connection._options.dups_ok_batch
                or len(self._acks.pending) == 1
            ):
                self._flush_due.set()

    def _owes_acks(self, receiver: Receiver) -> bool:
        return any(a.raw.delivery.link is receiver for a in self._acks.pending)

    def _linger(self, receiver: Receiver, *, closed: bool = True) -> None:
        """Keep a closed consumer's link until its acks are settled; then detach it."""
        self._lingering[receiver] = closed

    def _detach_settled_lingerers(self) -> None:
        for receiver in [r for r in self._lingering if not self._owes_acks(r)]:
            closed = self._lingering.pop(receiver)
            self._amqp().detach(receiver, closed=closed)

    async def _settle(self, acks: list[PendingAck], *, confirm: bool = True) -> None:
        if not acks:
            return
        assert self._amqp_session is not None
        async with self._ack_lock:
            await Acknowledger.settle(
                self._amqp(),
                self._amqp_session,
                acks,
                ACCEPTED,
                confirm=confirm,
                timeout=self._connection._options.attach_timeout,
            )
        self._connection._count_acknowledged(len(acks))

    async def acknowledge(self) -> None:
        """CLIENT mode: acknowledge every message delivered so far; return once the broker
        confirmed them (A2). Other modes: nothing to do. ``Message.acknowledge()`` calls this.

        Raises:
            IllegalStateError: the session is closed.
        """
        if self._closed:
            raise IllegalStateError(
                "the session is closed: its messages can no longer be acknowledged"
            )
        if self._ack_mode not in (AckMode.CLIENT, AckMode.INDIVIDUAL):
            return
        await self._settle_client_acks(self._acks.take_pending())

    def _check_acks_kept(self) -> None:
        """F8: raise once if the connection failed over with deliveries unacknowledged."""
        if self._acks_lost:
            self._acks_lost = False
            raise AcknowledgeFailedError(
                "the connection failed over after messages were delivered and before they were "
                "acknowledged: the broker will deliver them again"
            )

    async def _settle_client_acks(self, acks: list[PendingAck]) -> None:
        physical, epoch = await self._connection._gate()
        self._check_acks_kept()
        try:
            await self._settle(acks)
        except HAClientError as exc:
            stale = isinstance(exc, StaleDeliveryError)  # delivered before a failover (F8)
            if not (self._connection._lost(physical, epoch, exc) or stale):
                raise
            raise AcknowledgeFailedError(
                "the connection was lost before the broker confirmed the acknowledgement: "
                "it will deliver the messages again"
            ) from exc
        self._detach_settled_lingerers()

    async def _acknowledge_individual(self, raw: ReceivedMessage) -> None:
        if self._closed:
            raise IllegalStateError(
                "the session is closed: its messages can no longer be acknowledged"
            )
        pending = self._acks.take_one(raw)
        if pending is None:
            await self._connection._gate()
            self._check_acks_kept()
            return
        await self._settle_client_acks([pending])

    async def _dups_ok_flusher(self) -> None:
        """DUPS_OK: flush pending acknowledgements by count or after the interval (A3)."""
        options = self._connection._options
        while not self._closed:
            await self._flush_due.wait()
            self._flush_due = anyio.Event()
            if len(self._acks.pending) < options.dups_ok_batch:
                with anyio.move_on_after(options.dups_ok_interval):
                    while len(self._acks.pending) < options.dups_ok_batch:
                        await self._flush_due.wait()
                        self._flush_due = anyio.Event()
            await self._flush_dups_ok()

    async def _flush_dups_ok(self) -> None:
        acks = self._acks.take_pending()
        if acks and self._amqp().is_open:
            try:
                await self._settle(acks, confirm=False)
            except Exception:  # the connection went: the broker redelivers (DUPS_OK allows it)
                log.debug("DUPS_OK flush failed", exc_info=True)
            self._detach_settled_lingerers()

    async def recover(self) -> None:
        """Redeliver every message delivered and not acknowledged (CLIENT, DUPS_OK), from the
        oldest; they come back marked redelivered.

        Raises:
            IllegalStateError: the session is transacted (use ``rollback``) or closed.
        """
        self._check_open()
        if self._ack_mode is AckMode.TRANSACTED:
            raise IllegalStateError(
                "recover() is not allowed in a transacted session: use rollback()"
            )
        await self._connection._gate()
        self._check_acks_kept()
        await self._give_back(self._acks.take_pending())
        self._detach_settled_lingerers()

    async def _give_back(self, acks: list[PendingAck]) -> None:
        """Return delivered messages (marked redelivered), and the prefetched ones behind them,
        so that the broker hands them out again in order."""
        amqp = self._amqp()
        if not amqp.is_open:
            return
        failed, untouched = self._give_back_outcomes()
        for ack in acks:
            amqp.settle(ack.raw, failed)
        for consumer in self._consumers:
            receiver = consumer._receiver
            if receiver is not None and not receiver.is_closed:
                for raw in amqp.take_all(receiver):
                    amqp.settle(raw, untouched)
        await amqp.flush()

    def _give_back_outcomes(self) -> tuple[Outcome, Outcome]:
        """The outcomes that return a delivered message (redelivered) and a prefetched one.

        RabbitMQ 3.10 ends the session on a ``modified`` disposition ("Unrecognised state"):
        there ``released`` is used for both. It leaves the delivery-count alone, so such a
        message comes back not marked redelivered (JMSRedelivered needs E4's emulation there).
        """
        if self._physical().product == "RabbitMQ":
            return Released(), Released()
        return Modified(delivery_failed=True), Modified()

    # Transactions ------------------------------------------------------------------------------

    def _require_transacted(self, what: str) -> None:
        self._check_open()
        if self._transactions is None and self._emulated is None:
            raise IllegalStateError(
                f"{what}() needs a TRANSACTED session, not {self._ack_mode.name}"
            )

    def _broker_transactions(self, what: str) -> Transactions:
        """The coordinator of a natively TRANSACTED session (the current one after failover)."""
        self._require_transacted(what)
        assert self._transactions is not None, "emulated transactions have no coordinator"
        return self._transactions

    async def _transaction_state(self) -> TransactionalState:
        transactions = self._broker_transactions("send")
        return await transactions.state()

    async def _acknowledge_in_transaction(self, pending: PendingAck) -> None:
        self._require_transacted("receive")
        if self._emulated is not None:
            self._emulated.track(pending)  # acknowledged by commit()
            return
        state = await self._broker_transactions("receive").state()
        self._amqp().settle(pending.raw, TransactionalState(state.txn_id, ACCEPTED))

    def _buffer_send(self, send: BufferedSend) -> bool:
        """Hold a send until commit when transactions are emulated; False otherwise."""
        if self._emulated is None:
            return False
        self._emulated.buffer(send)
        return True

    async def commit(self) -> None:
        """Commit the sends and acknowledgements of the open transaction (A4).

        Raises:
            TransactionRolledBackError: the broker rolled it back instead; ``in_doubt=True``
                when the connection ended with the commit in flight (the broker may have
                committed).
            IllegalStateError: the session is not transacted, or closed.
        """
        self._require_transacted("commit")
        physical, epoch = await self._connection._gate()
        if self._emulated is not None:
            self._check_open()
            await self._commit_emulated(self._emulated)
            return
        transactions = self._broker_transactions("commit")  # a new one after failover
        if self._transaction_lost:
            self._transaction_lost = False
            await transactions.discharge(fail=True)  # what was done since the failover too
            raise TransactionRolledBackError(
                "the connection failed over during the transaction, which was rolled back: "
                "replay it"
            )
        try:
            await transactions.discharge(fail=False)
        except TransactionRolledBackError as exc:
            if exc.in_doubt:
                self._connection._lost(physical, epoch, exc)
            raise

    async def _commit_emulated(self, emulated: EmulatedTransaction) -> None:
        if self._transaction_lost:
            self._transaction_lost = False
            await self._give_back(emulated.rolled_back(TransactionRolledBackError("rolled back")))
            raise TransactionRolledBackError(
                "the connection failed over during the (emulated) transaction, which was rolled "
                "back: replay it"
            )
        await emulated.commit(self._settle)

    async def rollback(self) -> None:
        """Roll the open transaction back: sends are dropped, received messages come back.

        Raises:
            IllegalStateError: the session is not transacted, or closed.
        """
        self._require_transacted("rollback")
        physical, epoch = await self._connection._gate()
        self._require_transacted("rollback")
        self._transaction_lost = False
        try:
            if self._emulated is not None:
                cause = TransactionRolledBackError("the transaction was rolled back")
                await self._give_back(self._emulated.rolled_back(cause))
                return
            await self._broker_transactions("rollback").discharge(fail=True)
            await self._give_back([])
        except HAClientError as exc:  # a lost connection rolled the transaction back anyway
            if not self._connection._lost(physical, epoch, exc):
                raise

    # Closing -----------------------------------------------------------------------------------

    def _forget_consumer(self, consumer: MessageConsumer) -> None:
        self._consumers.discard(consumer)
        self._unregister(consumer)

    def _forget_producer(self, producer: MessageProducer) -> None:
        self._producers.discard(producer)
        self._unregister(producer)

    def _forget_browser(self, browser: QueueBrowser) -> None:
        self._browsers.discard(browser)
        self._unregister(browser)

    async def close(self) -> None:
        """Close the session and everything it made. Idempotent; callable from any task.

        An open transaction is rolled back; in CLIENT mode unacknowledged messages are given
        back to the broker for redelivery; DUPS_OK's pending acknowledgements are flushed.
        Running listeners are waited for (unless called from one of them).
        """
        if self._closed:
            return
        for consumer in list(self._consumers):
            await consumer.close()
        for producer in list(self._producers):
            try:
                await producer.close()
            except Exception:
                log.debug("closing a producer of a closing session failed", exc_info=True)
        for browser in list(self._browsers):
            await browser.close()
        amqp = self._amqp()
        try:
            if amqp.is_open:
                if self._ack_mode is AckMode.DUPS_OK:
                    await self._flush_dups_ok()
                elif self._transactions is not None:
                    await self._transactions.discharge(fail=True)
                elif self._emulated is not None:
                    cause = ClosedError("the session closed with its transaction open")
                    await self._give_back(self._emulated.rolled_back(cause))
                else:
                    await self._give_back(self._acks.take_pending())
        except Exception:
            log.debug("settling a closing session's state failed", exc_info=True)
        finally:
            self._closed = True
            self._flush_due.set()
            self._connection._forget_session(self)
            if self._amqp_session is not None and amqp.is_open:
                amqp.end_session(self._amqp_session)

    def _connection_closed(self) -> None:
        self._closed = True
        self._flush_due.set()
        for consumer in list(self._consumers):
            consumer._session_closed()
        for producer in list(self._producers):
            producer._session_closed()
        for browser in list(self._browsers):
            browser._session_closed()

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<Session {self._ack_mode.name} ({'closed' if self._closed else 'open'})>"


async def _nothing() -> None:
    """The acknowledger of a DUPS_OK message: the session flushes by itself."""
