"""The blocking ``Session``: requests about one ``haclient.aio.Session`` through the
connection's boundary, plus the session's dispatcher thread, on which its message listeners and
completion callbacks run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from haclient.destination import Destination, Queue, TemporaryQueue, TemporaryTopic, Topic
from haclient.errors import ClosedError
from haclient.modes import AckConfirmation, AckMode
from haclient.sync._boundary import Boundary, Op
from haclient.sync._context import SessionContext
from haclient.sync._dispatch import Dispatcher
from haclient.sync._facts import SessionFacts
from haclient.sync._outbox import Outbox
from haclient.sync.browser import QueueBrowser
from haclient.sync.consumer import MessageConsumer
from haclient.sync.producer import MessageProducer

__all__ = ["Session"]

_session_numbers = itertools.count(1)


class Session:
    """A JMS session; blocking. Made by ``Connection.create_session``; a context manager.

    Its listeners run one at a time on the session's dispatcher thread (started with the first
    listener or ``send_async``, ended by ``close()``). Every method may be called from any
    thread; JMS expects one thread at a time to use a session, listeners included.
    """

    def __init__(
        self,
        boundary: Boundary,
        handle: int,
        facts: SessionFacts,
        dispatcher: Dispatcher,
        forget: Callable[[Session], None],
        close_timeout: float,
    ) -> None:
        self._boundary = boundary
        self._handle = handle
        self._facts = facts
        self._forget = forget  # tells the connection this session is closed
        self._dispatcher = dispatcher
        self._closed = False
        self._context = SessionContext(boundary, handle, dispatcher, facts.ack_mode, close_timeout)

    @staticmethod
    def _new_dispatcher(boundary: Boundary) -> Dispatcher:
        """A session's dispatcher thread (started by its first job)."""
        dispatcher = Dispatcher(f"haclient-session-{next(_session_numbers)}-dispatcher")
        dispatcher.tracing = boundary.tracing
        return dispatcher

    def _call(self, op: Op, *args: Any, timeout: float | None = None) -> Any:
        return self._boundary.call(op, self._handle, *args, timeout=timeout)

    # Properties --------------------------------------------------------------------------------

    @property
    def ack_mode(self) -> AckMode:
        """The acknowledge mode."""
        return self._facts.ack_mode

    @property
    def transacted(self) -> bool:
        """True for a TRANSACTED session."""
        return self._facts.transacted

    @property
    def transactions_emulated(self) -> bool:
        """True when the client emulates this session's transactions (E3): not atomic."""
        return self._facts.transactions_emulated

    @property
    def ack_confirmation(self) -> AckConfirmation:
        """How acknowledgements are confirmed by the broker in this session (A6); see
        ``haclient.aio.Session.ack_confirmation``."""
        return self._call(Op.READ, "ack_confirmation")  # type: ignore[no-any-return]

    @property
    def is_closed(self) -> bool:
        """True once closed (or the connection closed)."""
        if self._closed or self._boundary.closed or self._boundary.loop_thread.forked:
            return True
        try:
            return self._call(Op.READ, "is_closed")  # type: ignore[no-any-return]
        except ClosedError:
            return True

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
        outbox = Outbox()
        handle, terms = self._call(Op.CREATE_PRODUCER, destination, outbox, timeout=timeout)
        return MessageProducer(handle, terms, outbox, self._context)

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
        handle, facts = self._call(
            Op.CREATE_CONSUMER, destination, selector, no_local, timeout=timeout
        )
        return MessageConsumer(handle, facts, self._context)

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
        handle, facts = self._call(
            Op.CREATE_DURABLE_CONSUMER, topic, name, selector, no_local, timeout=timeout
        )
        return MessageConsumer(handle, facts, self._context)

    def create_shared_consumer(
        self, topic: Topic, name: str, selector: str | None = None, *, timeout: float | None = None
    ) -> MessageConsumer:
        """A consumer on the shared non-durable subscription ``name`` (S3); consumers with the
        same name share its messages, and it ends with its last consumer."""
        handle, facts = self._call(
            Op.CREATE_SHARED_CONSUMER, topic, name, selector, timeout=timeout
        )
        return MessageConsumer(handle, facts, self._context)

    def create_shared_durable_consumer(
        self, topic: Topic, name: str, selector: str | None = None, *, timeout: float | None = None
    ) -> MessageConsumer:
        """A consumer on the shared durable subscription ``name`` (S1, S3): it outlives its
        consumers until ``unsubscribe(name)``; without a client id its name is global."""
        handle, facts = self._call(
            Op.CREATE_SHARED_DURABLE_CONSUMER, topic, name, selector, timeout=timeout
        )
        return MessageConsumer(handle, facts, self._context)

    def unsubscribe(self, name: str, *, timeout: float | None = None) -> None:
        """Remove the durable subscription ``name`` (S4).

        Raises:
            ResourceLockedError: a consumer is active on it (this connection's or another's).
            InvalidDestinationError: there is no such subscription.
        """
        self._call(Op.UNSUBSCRIBE, name, timeout=timeout)

    def create_browser(
        self, queue: Queue, selector: str | None = None, *, timeout: float | None = None
    ) -> QueueBrowser:
        """A browser over ``queue``: iterate it to see its messages without consuming them.

        Raises:
            InvalidDestinationError: not a queue, or the broker refused it.
            InvalidSelectorError: the selector is not valid JMS.
        """
        handle, facts = self._call(Op.CREATE_BROWSER, queue, selector, timeout=timeout)
        return QueueBrowser(self._boundary, handle, facts)

    def create_temporary_queue(self, *, timeout: float | None = None) -> TemporaryQueue:
        """A temporary queue, deleted when the connection closes; it survives failover (F6)."""
        return self._call(Op.CREATE_TEMPORARY_QUEUE, timeout=timeout)  # type: ignore[no-any-return]

    def create_temporary_topic(self, *, timeout: float | None = None) -> TemporaryTopic:
        """A temporary topic, deleted when the connection closes; it survives failover (F6)."""
        return self._call(Op.CREATE_TEMPORARY_TOPIC, timeout=timeout)  # type: ignore[no-any-return]

    # Acknowledgements and transactions ---------------------------------------------------------

    def acknowledge(self, *, timeout: float | None = None) -> None:
        """CLIENT mode: acknowledge every message delivered so far; return once the broker
        confirmed them (A2). Other modes: nothing to do.

        Raises:
            IllegalStateError: the session is closed.
            AcknowledgeFailedError: the connection failed over since the delivery (F8).
        """
        self._call(Op.ACKNOWLEDGE, timeout=timeout)

    def recover(self, *, timeout: float | None = None) -> None:
        """Redeliver every message delivered and not acknowledged, from the oldest.

        Raises:
            IllegalStateError: the session is transacted (use ``rollback``) or closed.
            AcknowledgeFailedError: the connection failed over since the delivery (F8).
        """
        self._call(Op.RECOVER, timeout=timeout)

    def commit(self, *, timeout: float | None = None) -> None:
        """Commit the sends and acknowledgements of the open transaction (A4).

        Raises:
            TransactionRolledBackError: the broker rolled it back instead (``in_doubt=True``
                when the connection ended with the commit in flight, F7).
            IllegalStateError: the session is not transacted, or closed.
        """
        self._call(Op.COMMIT, timeout=timeout)

    def rollback(self, *, timeout: float | None = None) -> None:
        """Roll the open transaction back: sends are dropped, received messages come back.

        Raises:
            IllegalStateError: the session is not transacted, or closed.
        """
        self._call(Op.ROLLBACK, timeout=timeout)

    # Closing -----------------------------------------------------------------------------------

    def _running_consumer(self) -> int | None:
        """The handle of the consumer whose listener runs in the calling thread, if any."""
        running = self._dispatcher.running()
        return running if isinstance(running, int) else None

    def close(self) -> None:
        """Close the session and everything it made, then end its dispatcher thread.
        Idempotent; callable from any thread, including from inside one of its listeners.

        An open transaction is rolled back; unacknowledged CLIENT messages go back to the
        broker; DUPS_OK's pending acknowledgements are flushed. A listener running on the
        dispatcher thread is waited for, unless this is called from inside it. The queued
        sends of its producers are handed over first (C9).

        Raises:
            IllegalStateError: called from the event-loop thread.
            AMQPError: the broker's refusal, or the failure, of a producer's queued send not
                reported yet, once closed (C9; ``FailoverTimeoutError`` ... as ``send`` raises
                it).
        """
        try:
            failure = self._boundary.call(
                Op.CLOSE_SESSION, self._handle, self._running_consumer(), close=True
            )
        finally:
            self._closed = True
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
        return f"<blocking session {self._handle} ({self._facts.ack_mode.name})>"
