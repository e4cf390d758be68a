"""``Session``: a JMS session over one AMQP session: its factories and its lifetime.

How this works: the session makes producers, consumers and browsers as links on its AMQP
session and gives each its ``SessionContext`` (haclient.aio.context), the narrow surface of
what they share: the gate, the options, the acknowledgement strategy of the session's mode
(haclient.aio.acks: one class per mode; DUPS_OK's flusher is the only background acknowledger,
A3), the transaction of a TRANSACTED session (haclient.aio.transaction: native or emulated,
which keeps rule F7) and the lock that lets one listener run at a time. The session itself keeps
the factories, the restore after failover and closing.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from failover.manager import RestoreOrder
from haclient.aio.browser import QueueBrowser
from haclient.aio.checks import ensure_open
from haclient.aio.consumer import MessageConsumer
from haclient.aio.context import ConnectionContext, SessionContext
from haclient.aio.emulation import broker_selector
from haclient.aio.gate import Connected, deadline_after
from haclient.aio.producer import MessageProducer
from haclient.aio.termini import (
    SubscriptionKind,
    browser_source,
    consumer_source,
    subscription_source,
)
from haclient.aio.transaction import SessionTransaction
from haclient.amqp.endpoints import Receiver
from haclient.amqp.types import Terminus
from haclient.destination import (
    Destination,
    DestinationPrefixes,
    Queue,
    TemporaryQueue,
    TemporaryTopic,
    Topic,
    _require_destination,
)
from haclient.errors import (
    IllegalStateError,
    InvalidDestinationError,
    ResourceLockedError,
    TransactionRolledBackError,
)
from haclient.modes import AckConfirmation, AckMode
from haclient.selector import compile_selector

if TYPE_CHECKING:
    from haclient.aio.physical import PhysicalConnection

__all__ = ["Session"]

log = logging.getLogger("haclient.session")

T = TypeVar("T")


class Session:
    """A JMS session (single-threaded context for producing and consuming). Made by
    ``Connection.create_session``; use it as an async context manager to close it.

    It is given its connection's context (``haclient.aio.context.ConnectionContext``), never
    the connection itself.
    """

    restore_order: int = RestoreOrder.SESSION

    def __init__(self, connection: ConnectionContext, ack_mode: AckMode) -> None:
        self._connection = connection
        self._ack_mode = AckMode(ack_mode)
        self._consumers: set[MessageConsumer] = set()
        self._producers: set[MessageProducer] = set()
        self._browsers: set[QueueBrowser] = set()
        self._context = SessionContext(
            connection,
            self._ack_mode,
            forget=self._forget,
            prefetched=self._prefetching_receivers,
        )

    async def _open(self, at: Connected) -> None:
        await self._begin(at.physical)
        acks = self._context.acks
        if acks.needs_flusher:
            self._context.start_soon(acks.run, name="dups-ok flusher")

    async def _begin(self, physical: PhysicalConnection) -> None:
        context = self._context
        timeout = context.options.attach_timeout
        context.amqp_session = await physical.amqp.open_session(timeout=timeout)
        if context.transaction is not None:
            await context.transaction.begin(physical.amqp, context.amqp_session, timeout=timeout)

    # Failover ----------------------------------------------------------------------------------

    def connection_lost(self, epoch: int, cause: BaseException) -> None:
        """The connection died: what the session owed the broker is gone with it (F7, F8)."""
        self._context.acks.connection_lost()
        if self._context.transaction is not None:
            self._context.transaction.connection_lost(cause)

    async def restore(self, physical: PhysicalConnection, epoch: int) -> None:
        """Begin the session again on the new connection (its producers and consumers are
        restored in their own tiers, after every session)."""
        await self._begin(physical)

    def _register(self, resource: Any) -> None:
        self._connection.register(resource)

    def _forget(self, resource: Any) -> None:
        self._consumers.discard(resource)
        self._producers.discard(resource)
        self._browsers.discard(resource)

    def _prefetching_receivers(self) -> list[Receiver]:
        """The links whose prefetched messages ``recover()`` and ``rollback()`` give back: not
        a presettled consumer's, which the broker has forgotten (given back, they would be
        lost; kept, they are handed out next: A5, M5)."""
        return [
            c._receiver for c in self._consumers if c._receiver is not None and not c._presettled
        ]

    async def _run(
        self, operation: Callable[[Connected], Awaitable[T]], timeout: float | None
    ) -> T:
        """Run ``operation`` once connected, again after a failover that cut it off (F3);
        ``timeout`` bounds the waits at the gate (F4)."""
        return await self._context.gate.run(operation, deadline=deadline_after(timeout))

    def _check_open(self) -> None:
        self._context.check_open()

    # Properties --------------------------------------------------------------------------------

    @property
    def ack_mode(self) -> AckMode:
        """The acknowledge mode."""
        return self._ack_mode

    @property
    def transacted(self) -> bool:
        """True for a TRANSACTED session."""
        return self._context.transaction is not None

    @property
    def transactions_emulated(self) -> bool:
        """True when this TRANSACTED session's transactions are emulated by the client
        (``transactions=emulate``, E3, E5): sends wait in the client until ``commit()``, which
        is then not atomic."""
        transaction = self._context.transaction
        return transaction is not None and transaction.emulated

    @property
    def ack_confirmation(self) -> AckConfirmation:
        """How acknowledgements are confirmed by the broker in this session (A6).

        For AUTO, CLIENT and INDIVIDUAL: ``SETTLE_SECOND`` where the broker grants it (decided
        by its answer to the first consumer's attach), else the exchange used after the
        dispositions: ``LINK_FLOW`` (RabbitMQ), ``DRAIN`` (ActiveMQ and other brokers with
        dynamic nodes) or ``ROUND_TRIP`` (the last resort, also after a broker failed the
        cheaper one); see ``haclient.aio.confirm``. ``NONE`` for DUPS_OK, NO_ACK and TRANSACTED.
        """
        if not self._context.acks.confirms:
            return AckConfirmation.NONE
        if self._context.confirmation is not None:
            return self._context.confirmation
        physical = self._context.physical()
        if physical.settle_second is False or physical.ack_fallback_only:
            return physical.ack_fallback
        return AckConfirmation.SETTLE_SECOND

    @property
    def is_closed(self) -> bool:
        """True once closed (or the connection closed)."""
        return self._context.closed

    # Factories ---------------------------------------------------------------------------------

    async def create_producer(
        self, destination: Destination | None = None, *, timeout: float | None = None
    ) -> MessageProducer:
        """A producer to ``destination``; None makes an anonymous producer (``send(dest, msg)``).

        Waits while the connection fails over (F2).

        Raises:
            InvalidDestinationError: the broker refused the destination.
            ClosedError: the session is closed.
        """
        await ensure_open(self._check_open)
        if destination is not None:
            _require_destination(destination)

        async def create(at: Connected) -> MessageProducer:
            producer = MessageProducer(self._context, destination)
            await producer._attach(at)
            return producer

        producer = await self._run(create, timeout)
        self._producers.add(producer)
        self._register(producer)
        return producer

    def _check_selector(self, selector: str | None) -> str | None:
        """``selector``, parsed before any frame (InvalidSelectorError, with the column) unless
        ``validate_selector`` is off and the client will not evaluate it itself (E7)."""
        if selector is None or not selector.strip():
            return None
        options = self._context.options
        if options.validate_selector or options.selectors == "client":
            compile_selector(selector)
        return selector

    def _broker_selector(self, selector: str | None) -> str | None:
        """The selector for the link's filter: none when the client evaluates it (E1)."""
        return broker_selector(selector, self._context.options.selectors)

    async def _consumer(
        self,
        destination: Destination,
        source_on: Callable[[DestinationPrefixes], Terminus],
        *,
        link_name: str,
        selector: str | None,
        no_local: bool,
        subscription: str | None = None,
        on_close: Callable[[MessageConsumer], None] | None = None,
        timeout: float | None = None,
    ) -> MessageConsumer:
        async def create(at: Connected) -> MessageConsumer:
            consumer = MessageConsumer(
                self._context,
                destination,
                source_on(at.physical.prefixes),  # per attempt: after failover, the new address
                link_name=link_name,
                selector=selector,
                no_local=no_local,
                subscription=subscription,
                on_close=on_close,
            )
            await consumer._attach(at)
            return consumer

        consumer = await self._run(create, timeout)
        self._consumers.add(consumer)
        self._register(consumer)
        return consumer

    async def create_consumer(
        self,
        destination: Destination,
        selector: str | None = None,
        no_local: bool = False,
        *,
        timeout: float | None = None,
    ) -> MessageConsumer:
        """A consumer of a queue or topic, with an optional JMS selector.

        ``no_local`` (topics) withholds messages published by this connection. Waits while
        the connection fails over (F2).

        Raises:
            InvalidSelectorError: the selector is not valid JMS (the column is given).
            InvalidDestinationError: the destination does not exist or was refused.
        """
        await ensure_open(self._check_open)
        destination = _require_destination(destination)
        selector = self._check_selector(selector)
        link_selector = self._broker_selector(selector)
        return await self._consumer(
            destination,
            lambda prefixes: consumer_source(
                destination, prefixes, selector=link_selector, no_local=no_local
            ),
            link_name=self._connection.link_name("consumer"),
            selector=selector,
            no_local=no_local,
            timeout=timeout,
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
        *,
        timeout: float | None = None,
    ) -> MessageConsumer:
        """A consumer on the unshared durable subscription ``name`` of ``topic`` (S1, S2).

        The subscription is created if it does not exist, and keeps messages while nobody
        consumes until ``unsubscribe(name)``. With a client id the name is scoped to it; without
        one (JMS 2.0) the name is global, and ``no_local`` has no effect (there is no client id
        whose messages it could withhold). Waits while the connection fails over.

        Raises:
            ResourceLockedError: another consumer is active on the subscription.
            InvalidSelectorError: the selector is not valid JMS.
        """
        await ensure_open(self._check_open)
        self._check_topic(topic)
        self._check_name(name)
        is_global = self._connection.client_id is None
        no_local = no_local and not is_global
        selector = self._check_selector(selector)
        link_selector = self._broker_selector(selector)
        return await self._consumer(
            topic,
            lambda prefixes: subscription_source(
                topic,
                prefixes,
                kind=SubscriptionKind.DURABLE,
                is_global=is_global,
                selector=link_selector,
                no_local=no_local,
            ),
            link_name=name,
            selector=selector,
            no_local=no_local,
            subscription=name,
            timeout=timeout,
        )

    async def _shared(
        self, topic: Topic, name: str, selector: str | None, *, durable: bool, timeout: float | None
    ) -> MessageConsumer:
        await ensure_open(self._check_open)
        self._check_topic(topic)
        self._check_name(name)
        selector = self._check_selector(selector)
        names = self._connection.subscription_names
        kind = SubscriptionKind.SHARED_DURABLE if durable else SubscriptionKind.SHARED
        is_global = self._connection.client_id is None
        link_selector = self._broker_selector(selector)
        link_name = names.acquire(name, durable=durable)

        def on_close(consumer: MessageConsumer) -> None:
            names.release(link_name, durable=durable)

        try:
            return await self._consumer(
                topic,
                lambda prefixes: subscription_source(
                    topic, prefixes, kind=kind, is_global=is_global, selector=link_selector
                ),
                link_name=link_name,
                selector=selector,
                no_local=False,
                subscription=name,
                on_close=on_close,
                timeout=timeout,
            )
        except BaseException:
            names.release(link_name, durable=durable)
            raise

    async def create_shared_consumer(
        self, topic: Topic, name: str, selector: str | None = None, *, timeout: float | None = None
    ) -> MessageConsumer:
        """A consumer on the shared non-durable subscription ``name`` (S3).

        Consumers with the same name (and client id, or none: global) share its messages; the
        subscription ends with its last consumer.
        """
        return await self._shared(topic, name, selector, durable=False, timeout=timeout)

    async def create_shared_durable_consumer(
        self, topic: Topic, name: str, selector: str | None = None, *, timeout: float | None = None
    ) -> MessageConsumer:
        """A consumer on the shared durable subscription ``name`` (S1, S3): it outlives its
        consumers until ``unsubscribe(name)``; without a client id its name is global."""
        return await self._shared(topic, name, selector, durable=True, timeout=timeout)

    async def unsubscribe(self, name: str, *, timeout: float | None = None) -> None:
        """Remove the durable subscription ``name`` (S4).

        Raises:
            ResourceLockedError: a consumer is active on it (this connection's or another's).
            InvalidDestinationError: there is no such subscription.
        """
        await ensure_open(self._check_open)
        self._check_name(name)
        if any(c.subscription_name == name and not c.is_closed for c in self._consumers):
            raise ResourceLockedError(
                f"subscription {name!r} has an active consumer in this session"
            )

        async def unsubscribe(at: Connected) -> None:
            amqp_session = self._context.session_on(at)
            amqp = at.amqp
            link = await amqp.open_receiver(
                Terminus.null(),
                session=amqp_session,
                name=name,
                credit=0,
                timeout=self._context.options.attach_timeout,
            )
            amqp.detach(link)
            # The broker removes the subscription when it handles that close: a round trip
            # makes unsubscribe() return after it did (the close is written before the Begin).
            await amqp.flush()
            probe = await amqp.open_session(timeout=self._context.options.attach_timeout)
            amqp.end_session(probe)

        await self._run(unsubscribe, timeout)

    async def create_browser(
        self, queue: Queue, selector: str | None = None, *, timeout: float | None = None
    ) -> QueueBrowser:
        """A browser over ``queue``: iterate to see its messages without consuming them.

        Raises:
            InvalidDestinationError: not a queue, or the broker refused it.
            InvalidSelectorError: the selector is not valid JMS.
        """
        await ensure_open(self._check_open)
        if not isinstance(queue, Queue | TemporaryQueue):
            raise InvalidDestinationError(f"a browser needs a queue, not {queue!r}")
        selector = self._check_selector(selector)

        async def create(at: Connected) -> QueueBrowser:
            browser = QueueBrowser(
                self._context,
                queue,
                browser_source(queue, at.physical.prefixes, selector=selector),  # per attempt
                selector=selector,
                link_name=self._connection.link_name("browser"),
            )
            await browser._attach(at)
            return browser

        browser = await self._run(create, timeout)
        self._browsers.add(browser)
        self._register(browser)
        return browser

    async def create_temporary_queue(self, *, timeout: float | None = None) -> TemporaryQueue:
        """A temporary queue, deleted when the connection closes."""
        await ensure_open(self._check_open)
        created = await self._connection.create_temporary(queue=True, timeout=timeout)
        assert isinstance(created, TemporaryQueue)
        return created

    async def create_temporary_topic(self, *, timeout: float | None = None) -> TemporaryTopic:
        """A temporary topic, deleted when the connection closes."""
        await ensure_open(self._check_open)
        created = await self._connection.create_temporary(queue=False, timeout=timeout)
        assert isinstance(created, TemporaryTopic)
        return created

    # Acknowledgements --------------------------------------------------------------------------

    async def acknowledge(self, *, timeout: float | None = None) -> None:
        """CLIENT mode: acknowledge every message delivered so far; return once the broker
        confirmed them (A2). Other modes: nothing to do. ``Message.acknowledge()`` calls this.

        Waits while the connection fails over (F2).

        Raises:
            IllegalStateError: the session is closed.
            AcknowledgeFailedError: a failover came after messages were delivered and before
                this acknowledge: nothing was acknowledged and the session was recovered, so
                every unacknowledged message comes again; or the failover cut this one off
                (``in_doubt``: treat the messages as acknowledged). Either way drop them (F8).
        """
        await self._context.acks.acknowledge(deadline_after(timeout))

    async def recover(self, *, timeout: float | None = None) -> None:
        """Redeliver every message delivered and not acknowledged (CLIENT, DUPS_OK), from the
        oldest; they come back marked redelivered. Waits while the connection fails over.

        Raises:
            IllegalStateError: the session is transacted (use ``rollback``) or closed.
            AcknowledgeFailedError: CLIENT: a failover came after messages were delivered and
                before an acknowledge (F8); the session is recovered all the same.
        """
        await ensure_open(self._check_open)
        if not self._context.acks.allows_recover:
            raise IllegalStateError(
                "recover() is not allowed in a transacted session: use rollback()"
            )
        await self._context.acks.recover(deadline_after(timeout))

    # Transactions ------------------------------------------------------------------------------

    def _transaction(self, what: str) -> SessionTransaction:
        self._check_open()
        transaction = self._context.transaction
        if transaction is None:
            raise IllegalStateError(
                f"{what}() needs a TRANSACTED session, not {self._ack_mode.name}"
            )
        return transaction

    async def commit(self, *, timeout: float | None = None) -> None:
        """Commit the sends and acknowledgements of the open transaction (A4).

        Waits while the connection fails over (F2).

        Raises:
            TransactionRolledBackError: the broker rolled it back, or a failover did (F7: replay
                it); ``in_doubt=True`` when the connection ended with the commit in flight
                (the broker may have committed).
            IllegalStateError: the session is not transacted, or closed.
        """
        self._transaction("commit")

        async def commit(at: Connected) -> None:
            await self._transaction("commit").commit()

        deadline = deadline_after(timeout)
        await self._traced(
            "commit", self._context.gate.run(commit, on_lost=_commit_cut_off, deadline=deadline)
        )

    async def rollback(self, *, timeout: float | None = None) -> None:
        """Roll the open transaction back: sends are dropped, received messages come back.

        Waits while the connection fails over; a connection lost meanwhile rolled it back.

        Raises:
            IllegalStateError: the session is not transacted, or closed.
        """
        self._transaction("rollback")

        async def rollback(at: Connected) -> None:
            await self._transaction("rollback").rollback()

        deadline = deadline_after(timeout)
        rolling_back = self._context.gate.run(rollback, on_lost=lambda exc: None, deadline=deadline)
        await self._traced("rollback", rolling_back)

    def _traced(self, operation: str, settling: Awaitable[None]) -> Awaitable[None]:
        """``settling`` in a settle span when the connection traces (haclient.aio.tracing)."""
        tracing = self._context.tracing
        return settling if tracing is None else tracing.settle(operation, self._context, settling)

    # Closing -----------------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the session and everything it made. Idempotent; callable from any task.

        An open transaction is rolled back; in CLIENT mode unacknowledged messages are given
        back to the broker for redelivery; DUPS_OK's pending acknowledgements are flushed.
        Running listeners are waited for (unless called from one of them).
        """
        context = self._context
        if context.closed:
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
        current = self._connection.current
        is_open = current is not None and current.amqp.is_open
        try:
            if is_open:
                await context.acks.close()  # TRANSACTED: rolls the transaction back
        except Exception:
            log.debug("settling a closing session's state failed", exc_info=True)
        finally:
            context.closed = True
            context.acks.session_closed()
            self._connection.forget_session(self)
            if current is not None and context.amqp_session is not None and is_open:
                current.amqp.end_session(context.amqp_session)

    def _connection_closed(self) -> None:
        self._context.closed = True
        self._context.acks.session_closed()
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
        state = "closed" if self._context.closed else "open"
        return f"<Session {self._ack_mode.name} ({state})>"


def _commit_cut_off(exc: BaseException) -> None:
    """A commit met the loss of its connection: in doubt if the discharge was on its way."""
    if isinstance(exc, TransactionRolledBackError):
        raise exc
    raise TransactionRolledBackError(
        "the connection was lost before the commit was sent: the transaction was rolled back"
    ) from exc
