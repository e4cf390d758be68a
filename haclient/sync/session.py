"""The blocking ``Session``: ``haclient.aio.Session`` through the connection's loop, plus the
session's dispatcher thread, on which its message listeners and completion callbacks run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from haclient.aio.consumer import MessageConsumer as AsyncMessageConsumer
from haclient.aio.producer import MessageProducer as AsyncMessageProducer
from haclient.aio.session import Session as AsyncSession
from haclient.destination import Destination, Queue, TemporaryQueue, TemporaryTopic, Topic
from haclient.modes import AckConfirmation, AckMode
from haclient.sync._context import SessionContext
from haclient.sync._dispatch import Dispatcher
from haclient.sync._forward import Forwarded
from haclient.sync._loop import EventLoop
from haclient.sync._outbox import Outbox, settle_all
from haclient.sync.browser import QueueBrowser
from haclient.sync.consumer import MessageConsumer
from haclient.sync.producer import MessageProducer, ProducerTerms, producer_terms

__all__ = ["Session"]

_session_numbers = itertools.count(1)


async def close_from_listener(
    running: AsyncMessageConsumer | None, session: AsyncSession, outboxes: list[Outbox]
) -> BaseException | None:
    """Close ``session`` from inside the listener of ``running`` (one of its consumers): that
    consumer first, without waiting for its own listener (C4), then its blocking producers'
    queued sends (their outcomes: the first failure is returned, for ``close()`` to raise, C9),
    then the rest."""
    if running is not None:
        await running.close(from_listener=True)
    failure = await settle_all(outboxes)
    await session.close()
    return failure


async def _open_producer(
    session: AsyncSession, destination: Destination | None, timeout: float | None
) -> tuple[AsyncMessageProducer, ProducerTerms]:
    """On the loop: a producer, and what its blocking producer learns of it once."""
    producer = await session.create_producer(destination, timeout=timeout)
    return producer, producer_terms(producer)


class Session:
    """A JMS session; blocking. Made by ``Connection.create_session``; a context manager.

    Its listeners run one at a time on the session's dispatcher thread (started with the first
    listener or ``send_async``, ended by ``close()``). Every method may be called from any
    thread; JMS expects one thread at a time to use a session, listeners included.
    """

    def __init__(
        self, session: AsyncSession, loop: EventLoop, forget: Callable[[Session], None]
    ) -> None:
        self._session = session
        self._loop = loop
        self._forget = forget  # tells the connection this session is closed
        self._dispatcher = Dispatcher(f"haclient-session-{next(_session_numbers)}-dispatcher")
        self._context = SessionContext(loop, self._dispatcher, session.ack_mode)

    # Properties --------------------------------------------------------------------------------

    ack_mode = Forwarded[AckMode]("_session", "The acknowledge mode.")
    transacted = Forwarded[bool]("_session", "True for a TRANSACTED session.")
    transactions_emulated = Forwarded[bool](
        "_session", "True when the client emulates this session's transactions (E3): not atomic."
    )

    @property
    def ack_confirmation(self) -> AckConfirmation:
        """How acknowledgements are confirmed by the broker in this session (A6); see
        ``haclient.aio.Session.ack_confirmation``."""
        return self._loop.call_or_direct(lambda: self._session.ack_confirmation)

    is_closed = Forwarded[bool]("_session", "True once closed (or the connection closed).")

    # Factories ---------------------------------------------------------------------------------
    # Every call that needs the network takes ``timeout``: seconds to wait at most while the
    # connection fails over (None: ``failover.timeout``, else until failover ends); then it
    # raises ``FailoverTimeoutError`` and failover goes on (F4).

    def create_producer(
        self, destination: Destination | None = None, *, timeout: float | None = None
    ) -> MessageProducer:
        """A producer to ``destination``; None makes an anonymous producer (``send(dest, msg)``).

        Raises:
            InvalidDestinationError: the broker refused the destination.
            ClosedError: the session is closed.
        """
        producer, terms = self._loop.run(_open_producer, self._session, destination, timeout)
        return MessageProducer(producer, terms, self._context)

    def create_consumer(
        self,
        destination: Destination,
        selector: str | None = None,
        no_local: bool = False,
        *,
        timeout: float | None = None,
    ) -> MessageConsumer:
        """A consumer of a queue or topic, with an optional JMS selector; ``no_local`` (topics)
        withholds messages published by this connection.

        Raises:
            InvalidSelectorError: the selector is not valid JMS (the column is given).
            InvalidDestinationError: the destination does not exist or was refused.
        """
        consumer = self._loop.run(
            self._session.create_consumer, destination, selector, no_local, timeout=timeout
        )
        return MessageConsumer(consumer, self._context)

    def create_durable_consumer(
        self,
        topic: Topic,
        name: str,
        selector: str | None = None,
        no_local: bool = False,
        *,
        timeout: float | None = None,
    ) -> MessageConsumer:
        """A consumer on the unshared durable subscription ``name`` of ``topic`` (S1, S2),
        created if it does not exist; it keeps messages until ``unsubscribe(name)``.

        Raises:
            IllegalStateError: the connection has no client id (JMS needs one here).
            ResourceLockedError: another consumer is active on the subscription.
        """
        consumer = self._loop.run(
            self._session.create_durable_consumer, topic, name, selector, no_local, timeout=timeout
        )
        return MessageConsumer(consumer, self._context)

    def create_shared_consumer(
        self, topic: Topic, name: str, selector: str | None = None, *, timeout: float | None = None
    ) -> MessageConsumer:
        """A consumer on the shared non-durable subscription ``name`` (S3); consumers with the
        same name share its messages, and it ends with its last consumer."""
        consumer = self._loop.run(
            self._session.create_shared_consumer, topic, name, selector, timeout=timeout
        )
        return MessageConsumer(consumer, self._context)

    def create_shared_durable_consumer(
        self, topic: Topic, name: str, selector: str | None = None, *, timeout: float | None = None
    ) -> MessageConsumer:
        """A consumer on the shared durable subscription ``name`` (S1, S3): it outlives its
        consumers until ``unsubscribe(name)``; without a client id its name is global."""
        consumer = self._loop.run(
            self._session.create_shared_durable_consumer, topic, name, selector, timeout=timeout
        )
        return MessageConsumer(consumer, self._context)

    def unsubscribe(self, name: str, *, timeout: float | None = None) -> None:
        """Remove the durable subscription ``name`` (S4).

        Raises:
            ResourceLockedError: a consumer is active on it (this connection's or another's).
            InvalidDestinationError: there is no such subscription.
        """
        self._loop.run(self._session.unsubscribe, name, timeout=timeout)

    def create_browser(
        self, queue: Queue, selector: str | None = None, *, timeout: float | None = None
    ) -> QueueBrowser:
        """A browser over ``queue``: iterate it to see its messages without consuming them.

        Raises:
            InvalidDestinationError: not a queue, or the broker refused it.
            InvalidSelectorError: the selector is not valid JMS.
        """
        return QueueBrowser(
            self._loop.run(self._session.create_browser, queue, selector, timeout=timeout),
            self._loop,
        )

    def create_temporary_queue(self, *, timeout: float | None = None) -> TemporaryQueue:
        """A temporary queue, deleted when the connection closes; it survives failover (F6)."""
        return self._loop.run(self._session.create_temporary_queue, timeout=timeout)

    def create_temporary_topic(self, *, timeout: float | None = None) -> TemporaryTopic:
        """A temporary topic, deleted when the connection closes; it survives failover (F6)."""
        return self._loop.run(self._session.create_temporary_topic, timeout=timeout)

    # Acknowledgements and transactions ---------------------------------------------------------

    def acknowledge(self, *, timeout: float | None = None) -> None:
        """CLIENT mode: acknowledge every message delivered so far; return once the broker
        confirmed them (A2). Other modes: nothing to do.

        Raises:
            IllegalStateError: the session is closed.
            AcknowledgeFailedError: the connection failed over since the delivery (F8).
        """
        self._loop.run(self._session.acknowledge, timeout=timeout)

    def recover(self, *, timeout: float | None = None) -> None:
        """Redeliver every message delivered and not acknowledged, from the oldest.

        Raises:
            IllegalStateError: the session is transacted (use ``rollback``) or closed.
            AcknowledgeFailedError: the connection failed over since the delivery (F8).
        """
        self._loop.run(self._session.recover, timeout=timeout)

    def commit(self, *, timeout: float | None = None) -> None:
        """Commit the sends and acknowledgements of the open transaction (A4).

        Raises:
            TransactionRolledBackError: the broker rolled it back instead (``in_doubt=True``
                when the connection ended with the commit in flight, F7).
            IllegalStateError: the session is not transacted, or closed.
        """
        self._loop.run(self._session.commit, timeout=timeout)

    def rollback(self, *, timeout: float | None = None) -> None:
        """Roll the open transaction back: sends are dropped, received messages come back.

        Raises:
            IllegalStateError: the session is not transacted, or closed.
        """
        self._loop.run(self._session.rollback, timeout=timeout)

    # Closing -----------------------------------------------------------------------------------

    def _running_consumer(self) -> AsyncMessageConsumer | None:
        """The async consumer whose listener runs in the calling thread, if any."""
        running = self._dispatcher.running()
        return running._consumer if isinstance(running, MessageConsumer) else None

    def close(self) -> None:
        """Close the session and everything it made, then end its dispatcher thread.
        Idempotent; callable from any thread, including from inside one of its listeners.

        An open transaction is rolled back; unacknowledged CLIENT messages go back to the
        broker; DUPS_OK's pending acknowledgements are flushed. A listener running on the
        dispatcher thread is waited for, unless this is called from inside it.

        Raises:
            IllegalStateError: called from the event-loop thread.
            AMQPError: the broker's refusal, or the failure, of a producer's queued send not
                reported yet, once closed (C9; ``FailoverTimeoutError`` ... as ``send`` raises
                it).
        """
        outboxes = self._context.outboxes
        try:
            failure = self._loop.run_close(
                close_from_listener, self._running_consumer(), self._session, list(outboxes)
            )
        finally:
            outboxes.clear()
            self._forget(self)
            self._dispatcher.stop()
        if failure is not None:
            raise failure

    def _connection_closed(self) -> None:
        self._dispatcher.stop()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<blocking {self._session!r}>"
