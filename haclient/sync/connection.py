"""The blocking ``Connection``, ``ConnectionFactory`` and ``connect()``.

How this works: a connection's ``haclient.aio.Connection`` lives on an event-loop thread
(``EventLoop``): the process's shared one by default, or one of its own with
``private_loop=True``. It is opened as ``async with aio.connect(...)`` in a task of that loop
that holds it until the connection closes (so the connection's background tasks belong to
that task); each blocking method is one call into that loop. Failover listeners are called on
a thread of the connection's (started with the first event, never the loop's).

A connection the application never closes does not keep the process alive: at interpreter
exit it is closed within its ``close_timeout`` (``_runtime``'s exit hook), and when the
garbage collector takes it, it is closed in the background; both warn with a
``ResourceWarning`` naming it.
"""

from __future__ import annotations

import threading
from contextlib import suppress
from typing import Any

from failover.listeners import AnyListener
from failover.manager import ConnectionState
from failover.schedule import Stop, Wait
from failover.url import BrokerURL, FailoverURL
from haclient.aio.connection import Connection as AsyncConnection
from haclient.aio.connection import ConnectionFactory as AsyncConnectionFactory
from haclient.aio.connection import ConnectionStatistics
from haclient.aio.consumer import MessageConsumer as AsyncMessageConsumer
from haclient.aio.options import ConnectionOptions
from haclient.destination import TemporaryQueue, TemporaryTopic
from haclient.modes import AckMode
from haclient.sync._dispatch import Dispatcher
from haclient.sync._forward import Forwarded
from haclient.sync._loop import EventLoop
from haclient.sync._outbox import Outbox, settle_all
from haclient.sync._runtime import (
    keep_alive,
    register_for_exit,
    unregister_for_exit,
    warn_unclosed,
)
from haclient.sync.session import Session

__all__ = ["Connection", "ConnectionFactory", "connect"]


class _ThreadedFailoverListener:
    """Calls a failover listener's methods on the connection's notifier thread, in order: it
    has every name of ``failover.listeners.CALLS`` and forwards those the listener has."""

    def __init__(self, listener: AnyListener, notifier: Dispatcher) -> None:
        self.listener = listener
        self._notifier = notifier

    def _forward(self, name: str, *args: Any) -> None:
        method = getattr(self.listener, name, None)
        if method is not None:
            self._notifier.submit(lambda: method(*args))

    def failover_started(self, cause: BaseException) -> None:
        self._forward("failover_started", cause)

    def failover_completed(self, broker: BrokerURL, downtime: float) -> None:
        self._forward("failover_completed", broker, downtime)

    def failover_failed(self, cause: BaseException) -> None:
        self._forward("failover_failed", cause)

    def resource_not_restored(self, resource: Any, error: BaseException) -> None:
        self._forward("resource_not_restored", resource, error)

    def on_connection_established(self, broker: BrokerURL) -> None:
        self._forward("on_connection_established", broker)

    def on_connection_interrupted(self, broker: BrokerURL) -> None:
        self._forward("on_connection_interrupted", broker)

    def on_connection_restored(self, broker: BrokerURL) -> None:
        self._forward("on_connection_restored", broker)

    def on_connection_failure(self, error: BaseException) -> None:
        self._forward("on_connection_failure", error)

    def message_dead_lettered(
        self, destination: Any, message_id: str | None, delivery_count: int, outcome: str
    ) -> None:
        self._forward("message_dead_lettered", destination, message_id, delivery_count, outcome)

    def send_failed(self, destination: Any, message_id: str | None, error: BaseException) -> None:
        self._forward("send_failed", destination, message_id, error)


def _notifier() -> Dispatcher:
    """The thread a connection's failover listeners are called on (started by the first)."""
    return Dispatcher("haclient-failover-listeners")


_ENDED = (ConnectionState.FAILED, ConnectionState.CLOSED)
"""States in which a connection no longer keeps the process alive (``jms.useDaemonThread``)."""


async def _close_from_listener(
    running: AsyncMessageConsumer | None, connection: AsyncConnection, outboxes: list[Outbox]
) -> BaseException | None:
    if running is not None:  # C4: the listener calling this must not be waited for
        await running.close(from_listener=True)
    failure = await settle_all(outboxes)  # C9: the first failure is raised by close()
    await connection.close()
    return failure


class Connection:
    """A logical connection to a list of brokers (JMS ``Connection``); blocking.

    Open it with ``haclient.connect()`` or ``ConnectionFactory.create_connection()``; use it as
    a context manager, or call ``close()``. Messages are delivered only after ``start()``.
    Every method may be called from any thread, ``close()`` also from inside a listener. One
    left open is closed at interpreter exit (C6), or, opened with ``use_daemon_thread=False``
    (``jms.useDaemonThread=false``), keeps the process alive until it is closed (C7).
    """

    def __init__(
        self,
        connection: AsyncConnection,
        loop: EventLoop,
        close_timeout: float,
        notifier: Dispatcher | None = None,
        listener: _ThreadedFailoverListener | None = None,
        *,
        daemon: bool = True,
    ) -> None:
        """``notifier`` and ``listener``: the thread and the wrapped listener given to
        ``connect()``, made before the connection was; ``daemon``: ``use_daemon_thread``."""
        self._connection = connection
        self._loop = loop
        self._close_timeout = close_timeout
        self._notifier = notifier or _notifier()
        self._listeners: dict[int, _ThreadedFailoverListener] = {}
        if listener is not None:
            self._listeners[id(listener.listener)] = listener
        self._sessions: set[Session] = set()
        self._lock = threading.Lock()
        self._closing = threading.Lock()
        # jms.useDaemonThread=false: the process stays alive while this connection is open
        # (C7); else it is closed at exit (C6).
        self._kept: threading.Event | None = None
        if daemon:
            register_for_exit(self)
        else:
            self._kept = keep_alive(self, ended=lambda: connection.state in _ENDED)

    # Properties --------------------------------------------------------------------------------

    client_id = Forwarded[str | None](
        "_connection",
        "The client id (the AMQP container id), or None when the application set none.",
    )
    connection_id = Forwarded[str](
        "_connection", "This connection's id, ``<prefix><uuid>`` (``jms.connectionIDPrefix``)."
    )
    url = Forwarded[FailoverURL]("_connection", "The parsed URL (passwords masked when printed).")
    brokers = Forwarded[tuple[BrokerURL, ...]](
        "_connection",
        "The brokers the next failover walks: the URL's list, or for ``exchange`` the newest"
        " list the brokers gave, followed by the URL's (F12).",
    )
    broker = Forwarded[BrokerURL | None](
        "_connection", "The broker in use, None when not connected."
    )
    state = Forwarded[ConnectionState](
        "_connection",
        "The connection's state (CONNECTED, FAILING_OVER, RESTORING, FAILED, CLOSED ...).",
    )
    is_closed = Forwarded[bool]("_connection", "True once ``close()`` was called.")
    is_started = Forwarded[bool]("_connection", "True between ``start()`` and ``stop()``.")

    # Methods -----------------------------------------------------------------------------------

    def add_listener(self, listener: AnyListener) -> None:
        """Be told of failover (F14): any of ``failover_started(cause)``,
        ``failover_completed(broker, downtime)``, ``failover_failed(cause)`` and
        ``resource_not_restored(resource, error)``, and of Qpid JMS's names
        ``on_connection_interrupted(broker)``, ``on_connection_restored(broker)`` and
        ``on_connection_failure(error)`` (``on_connection_established`` only for a listener
        given to ``connect()``); and of messages a consumer dead-lettered (E6):
        ``message_dead_lettered(destination, message_id, delivery_count, outcome)``. They are
        called in order on a thread of the connection (not the event loop), so they may block
        and use the blocking API."""
        wrapper = _ThreadedFailoverListener(listener, self._notifier)
        with self._lock:
            self._listeners[id(listener)] = wrapper
        self._loop.call(self._connection.add_listener, wrapper)

    def remove_listener(self, listener: AnyListener) -> None:
        """Stop telling ``listener``."""
        with self._lock:
            wrapper = self._listeners.pop(id(listener), None)
        if wrapper is not None:
            self._loop.call(self._connection.remove_listener, wrapper)

    def start(self) -> None:
        """Start (or restart) delivery of messages to consumers and listeners.

        Raises:
            ClosedError: the connection is closed.
        """
        self._loop.run(self._connection.start)

    def stop(self) -> None:
        """Pause delivery: ``receive()`` waits and listeners are not called until ``start()``.
        Sending is not affected.

        Raises:
            ClosedError: the connection is closed.
        """
        self._loop.run(self._connection.stop)

    def create_session(
        self, ack_mode: AckMode = AckMode.AUTO, *, timeout: float | None = None
    ) -> Session:
        """A new session with acknowledge mode ``ack_mode`` (AUTO by default); waits while the
        connection fails over.

        Raises:
            ClosedError: the connection is closed.
            ConfigurationError: ``ack_mode`` is not an acknowledge mode.
            NotImplementedByBrokerError: TRANSACTED on a broker without transactions.
        """
        session = Session(
            self._loop.run(self._connection.create_session, ack_mode, timeout=timeout),
            self._loop,
            self._forget_session,
        )
        with self._lock:
            self._sessions.add(session)
        return session

    def _forget_session(self, session: Session) -> None:
        with self._lock:
            self._sessions.discard(session)

    def delete_temporary(self, destination: TemporaryQueue | TemporaryTopic) -> None:
        """Delete a temporary destination this connection created (JMS ``delete()``).

        Raises:
            InvalidDestinationError: this connection did not create it.
        """
        self._loop.run(self._connection.delete_temporary, destination)

    def statistics(self) -> ConnectionStatistics:
        """A frozen snapshot of the connection's state and counters (touches no network)."""
        return self._loop.call_or_direct(self._connection.statistics)

    def close(self) -> None:
        """Close the connection and everything it made, then end its threads. Idempotent;
        callable from any thread, including from inside a message listener.

        Sessions close as ``Session.close()`` says; an ongoing failover is stopped and the
        calls waiting for it raise ``ClosedError``.

        Raises:
            IllegalStateError: called from the event-loop thread.
            AMQPError: the broker's refusal, or the failure, of a producer's queued send not
                reported yet, once closed (C9; ``FailoverTimeoutError`` ... as ``send`` raises
                it).
        """
        if self._loop.stopped:
            if self._kept is not None:
                self._kept.set()
            return
        with self._lock:
            sessions = list(self._sessions)
        running = next((s._running_consumer() for s in sessions if s._running_consumer()), None)
        # One closer at a time (haclient.aio's close is not meant to run twice at once); the
        # others wait until it is closed. From inside a listener, never wait: the closer in
        # progress waits for this listener to return.
        if not self._closing.acquire(blocking=running is None):
            return
        failure: BaseException | None = None
        try:
            if self._loop.stopped:
                return
            outboxes = [outbox for session in sessions for outbox in session._context.outboxes]
            failure = self._loop.run_close(
                _close_from_listener, running, self._connection, outboxes
            )
        finally:
            try:
                self._loop.stop()
                for session in sessions:
                    session._connection_closed()
                self._notifier.stop()
            finally:
                unregister_for_exit(self)
                if self._kept is not None:
                    self._kept.set()
                self._closing.release()
        if failure is not None:
            raise failure

    def _close_at_exit(self) -> None:
        """At interpreter exit, for a connection still open: close it within ``close_timeout``
        (plus a second), or drop it, then warn. Threads are not waited for."""
        if self._loop.stopped:
            return
        try:
            with suppress(Exception):  # the exit goes on whatever happens here
                self._loop.stop(timeout=self._close_timeout + 1)
        finally:  # last: under -W error the warning raises
            warn_unclosed(self)

    def __del__(self) -> None:
        loop = getattr(self, "_loop", None)  # absent when __init__ failed
        if loop is None or loop.stopped:
            return
        loop.stop_soon()  # first: under -W error the warning raises
        warn_unclosed(self, source=self)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<blocking {self._connection!r}>"


class ConnectionFactory:
    """Makes blocking connections to one URL with one set of options (JMS
    ``ConnectionFactory``); the options are those of ``haclient.aio.ConnectionFactory``, plus
    ``private_loop``: True gives each connection an event-loop thread of its own instead of
    the one the process's blocking connections share (isolation at the price of a thread).

    Raises:
        ConfigurationError: from the constructor, for an invalid URL or option.
    """

    def __init__(
        self,
        url: str,
        *,
        private_loop: bool = False,
        reconnect_wait: Wait | None = None,
        reconnect_stop: Stop | None = None,
        **options: Any,
    ) -> None:
        self._factory = AsyncConnectionFactory(
            url, reconnect_wait=reconnect_wait, reconnect_stop=reconnect_stop, **options
        )
        self._private_loop = private_loop

    url = Forwarded[FailoverURL]("_factory", "The parsed URL.")
    options = Forwarded[ConnectionOptions](
        "_factory", "The options its connections get (the URL's, overridden by keywords)."
    )

    def create_connection(
        self,
        *,
        client_id: str | None = None,
        username: str | None = None,
        password: str | None = None,
        listener: AnyListener | None = None,
    ) -> Connection:
        """Open a connection (see ``connect()``, also for ``listener``) on the shared
        event-loop thread, or on one of its own with ``private_loop``.

        Raises:
            ConfigurationError: the URL or an option is invalid (as ``connect()``).
            ConnectionFailedError: no broker could be reached (``.cause`` says why).
            AuthenticationError: the broker refused the login.
            ClientIdInUseError: another connection uses ``client_id``.
            KeyboardInterrupt: Ctrl-C while connecting (the attempt is cancelled).
        """
        notifier = _notifier()
        wrapper = None if listener is None else _ThreadedFailoverListener(listener, notifier)
        loop = EventLoop.start(private=self._private_loop)
        try:
            # Its background tasks belong to the loop thread's host task group, not to a
            # free-standing task; loop.stop() closes it.
            connecting = self._factory.create_connection(
                client_id=client_id, username=username, password=password, listener=wrapper
            )
            connection = loop.open(connecting.open_in, AsyncConnection.close)
            loop.tracing = connection._context.tracing
        except BaseException:
            loop.stop()
            notifier.stop()  # after on_connection_failure, if the listener has it
            raise
        options = self._factory.options
        return Connection(
            connection,
            loop,
            options.close_timeout,
            notifier,
            wrapper,
            daemon=options.use_daemon_thread,
        )


def connect(
    url: str,
    *,
    client_id: str | None = None,
    username: str | None = None,
    password: str | None = None,
    private_loop: bool = False,
    reconnect_wait: Wait | None = None,
    reconnect_stop: Stop | None = None,
    listener: AnyListener | None = None,
    **options: Any,
) -> Connection:
    """Open a blocking connection to the brokers of ``url`` (a failover URL or a plain
    ``amqp://`` URL); keyword options override the URL's (see ``ConnectionOptions``).

    The connection is not started: call ``start()`` before expecting messages. The blocking
    connections of a process share one event-loop thread; ``private_loop=True`` gives this
    one a thread of its own. Close it (or use ``with``): one left open is closed at
    interpreter exit within ``close_timeout``, with a ``ResourceWarning``.
    ``reconnect_wait`` and ``reconnect_stop`` take any tenacity wait and stop, as
    ``haclient.aio.connect`` does. ``listener`` is added before the first connect, so it also
    hears ``on_connection_established(broker)`` and ``on_connection_failure(error)`` of that
    connect (F14); when ``connect()`` raises, the listener has been called already.

    Raises:
        ConfigurationError: the URL or an option is invalid (named in the message).
        ConnectionFailedError: no broker could be reached (``.cause`` says why).
        AuthenticationError: the broker refused the login.
        ClientIdInUseError: another connection uses ``client_id``.
        KeyboardInterrupt: Ctrl-C while connecting (the attempt is cancelled).
    """
    factory = ConnectionFactory(
        url,
        private_loop=private_loop,
        reconnect_wait=reconnect_wait,
        reconnect_stop=reconnect_stop,
        **options,
    )
    return factory.create_connection(
        client_id=client_id, username=username, password=password, listener=listener
    )
