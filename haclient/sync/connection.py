"""The blocking ``Connection``, ``ConnectionFactory`` and ``connect()``.

How this works: a connection's ``haclient.aio.Connection`` lives on an event-loop thread: the
process's shared one by default, or one of its own with ``private_loop=True``. The blocking
objects never touch it: they hold handles (numbers) and the facts learnt once when each object
was made, and every blocking method is one request through the connection's ``Boundary``
(``haclient.sync._boundary``), the one thread boundary between the application's threads and
the loop, carried out by the loop's half (``haclient.sync._served``). The connection is opened
by an ``OPEN`` request, on the loop, in the loop thread's host task group (so its background
tasks belong to that group). Failover listeners are called on a thread of the connection's
(started with the first event, never the loop's): the loop tells it each event's name and
arguments, and the listeners themselves never cross.

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
from haclient.aio.connection import ConnectionFactory as AsyncConnectionFactory
from haclient.aio.connection import ConnectionStatistics
from haclient.aio.options import ConnectionOptions
from haclient.destination import TemporaryQueue, TemporaryTopic
from haclient.errors import ClosedError, HAClientError
from haclient.modes import AckMode
from haclient.sync._boundary import CONNECTION, Boundary, Op, Reply
from haclient.sync._dispatch import Dispatcher
from haclient.sync._facts import ConnectionFacts
from haclient.sync._forward import Forwarded
from haclient.sync._runtime import (
    LoopThread,
    keep_alive,
    register_for_exit,
    shared_loop,
    unregister_for_exit,
    warn_unclosed,
)
from haclient.sync._served import Serving
from haclient.sync.session import Session

__all__ = ["Connection", "ConnectionFactory", "connect"]


def _notifier() -> Dispatcher:
    """The thread a connection's failover listeners are called on (started by the first)."""
    return Dispatcher("haclient-failover-listeners")


_ENDED = (ConnectionState.FAILED, ConnectionState.CLOSED)
"""States in which a connection no longer keeps the process alive (``jms.useDaemonThread``)."""


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
        boundary: Boundary,
        facts: ConnectionFacts,
        close_timeout: float,
        notifier: Dispatcher,
        *,
        daemon: bool = True,
    ) -> None:
        """``boundary``: the connection's way into its loop; ``facts``: what ``OPEN``
        returned; ``notifier``: the thread its failover listeners are called on;
        ``daemon``: ``use_daemon_thread``."""
        self._boundary = boundary
        self._facts = facts
        self._close_timeout = close_timeout
        self._notifier = notifier
        self._sessions: set[Session] = set()
        self._lock = threading.Lock()
        self._closing = threading.Lock()
        self._final: ConnectionStatistics | None = None  # the statistics once closed
        # jms.useDaemonThread=false: the process stays alive while this connection is open
        # (C7); else it is closed at exit (C6).
        self._kept: threading.Event | None = None
        if daemon:
            register_for_exit(self)
        else:
            self._kept = keep_alive(self, ended=self._ended)

    # Properties --------------------------------------------------------------------------------

    @property
    def client_id(self) -> str | None:
        """The client id (the AMQP container id), or None when the application set none."""
        return self._facts.client_id

    @property
    def connection_id(self) -> str:
        """This connection's id, ``<prefix><uuid>`` (``jms.connectionIDPrefix``)."""
        return self._facts.connection_id

    @property
    def url(self) -> FailoverURL:
        """The parsed URL (passwords masked when printed)."""
        return self._facts.url  # type: ignore[no-any-return]

    def _read(self, name: str, closed: Any) -> Any:
        """The async connection's attribute ``name``, read on the loop (``closed`` once the
        connection is closed)."""
        if self._boundary.closed or self._boundary.loop_thread.forked:
            return closed
        try:
            return self._boundary.call(Op.READ, CONNECTION, name)
        except ClosedError:
            if self._boundary.closed:
                return closed
            raise

    @property
    def brokers(self) -> tuple[BrokerURL, ...]:
        """The brokers the next failover walks: the URL's list, or for ``exchange`` the newest
        list the brokers gave, followed by the URL's (F12)."""
        return self._read("brokers", tuple(self.url.brokers))  # type: ignore[no-any-return]

    @property
    def broker(self) -> BrokerURL | None:
        """The broker in use, None when not connected."""
        return self._read("broker", None)  # type: ignore[no-any-return]

    @property
    def state(self) -> ConnectionState:
        """The connection's state (CONNECTED, FAILING_OVER, RESTORING, FAILED, CLOSED ...)."""
        return self._read("state", ConnectionState.CLOSED)  # type: ignore[no-any-return]

    @property
    def is_closed(self) -> bool:
        """True once ``close()`` was called."""
        return self._read("is_closed", True)  # type: ignore[no-any-return]

    @property
    def is_started(self) -> bool:
        """True between ``start()`` and ``stop()``."""
        return self._read("is_started", False)  # type: ignore[no-any-return]

    def _ended(self) -> bool:
        """For ``keep_alive``: whether the connection ended without ``close()``."""
        try:
            return self.state in _ENDED
        except HAClientError:
            return True

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
        and use the blocking API. The listener stays on this side: the loop tells that thread
        each event's name and arguments."""
        self._boundary.check_caller()
        with self._lock:
            if all(known is not listener for known in self._notifier.observers):
                self._notifier.observers = [*self._notifier.observers, listener]

    def remove_listener(self, listener: AnyListener) -> None:
        """Stop telling ``listener``."""
        with self._lock:
            self._notifier.observers = [
                known for known in self._notifier.observers if known is not listener
            ]

    def start(self) -> None:
        """Start (or restart) delivery of messages to consumers and listeners.

        Raises:
            ClosedError: the connection is closed.
        """
        self._boundary.call(Op.START, CONNECTION)

    def stop(self) -> None:
        """Pause delivery: ``receive()`` waits and listeners are not called until ``start()``.
        Sending is not affected.

        Raises:
            ClosedError: the connection is closed.
        """
        self._boundary.call(Op.STOP, CONNECTION)

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
        dispatcher = Session._new_dispatcher(self._boundary)
        try:
            handle, facts = self._boundary.call(
                Op.CREATE_SESSION, CONNECTION, ack_mode, dispatcher, timeout=timeout
            )
        except BaseException:
            dispatcher.stop()
            raise
        session = Session(
            self._boundary, handle, facts, dispatcher, self._forget_session, self._close_timeout
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
        self._boundary.call(Op.DELETE_TEMPORARY, CONNECTION, destination)

    def statistics(self) -> ConnectionStatistics:
        """A frozen snapshot of the connection's state and counters (touches no network);
        once closed, the last one, taken as it closed."""
        if not self._boundary.closed and not self._boundary.loop_thread.forked:
            try:
                return self._boundary.call(Op.STATISTICS, CONNECTION)  # type: ignore[no-any-return]
            except ClosedError:
                if not self._boundary.closed:
                    raise
        if self._final is None:
            raise ClosedError("the connection is closed (it closed without its statistics)")
        return self._final

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
        boundary = self._boundary
        if boundary.closed or boundary.loop_thread.forked:
            if self._kept is not None:
                self._kept.set()
            return
        with self._lock:
            sessions = list(self._sessions)
        running = next((h for s in sessions if (h := s._running_consumer()) is not None), None)
        # One closer at a time; the others wait until it is closed. From inside a listener,
        # never wait: the closer in progress waits for this listener to return.
        if not self._closing.acquire(blocking=running is None):
            return
        failure: BaseException | None = None
        try:
            if boundary.closed:
                return
            outcome = boundary.call(Op.CLOSE_CONNECTION, CONNECTION, running, False, close=True)
            if outcome is not None:
                failure, self._final = outcome
        finally:
            try:
                self._end_threads(sessions)
            finally:
                unregister_for_exit(self)
                if self._kept is not None:
                    self._kept.set()
                self._closing.release()
        if failure is not None:
            raise failure

    def _end_threads(self, sessions: list[Session]) -> None:
        self._boundary.closed = True
        if self._boundary.private:
            self._boundary.loop_thread.stop()
        for session in sessions:
            session._connection_closed()
        self._notifier.stop()

    def _close_at_exit(self) -> None:
        """At interpreter exit, for a connection still open: close it within ``close_timeout``
        (plus a second), or drop it, then warn. Threads are not waited for."""
        boundary = self._boundary
        if boundary.closed:
            return
        try:
            with suppress(Exception):  # the exit goes on whatever happens here
                reply = Reply()
                boundary.put(
                    boundary.request(Op.CLOSE_CONNECTION, CONNECTION, (None, True), None, reply)
                )
                reply.done.acquire(True, self._close_timeout + 1)
                boundary.closed = True
        finally:  # last: under -W error the warning raises
            warn_unclosed(self)

    def __del__(self) -> None:
        boundary = getattr(self, "_boundary", None)  # absent when __init__ failed
        if boundary is None or boundary.closed or boundary.loop_thread.forked:
            return
        with suppress(ClosedError):  # first: under -W error the warning raises
            boundary.post(Op.CLOSE_CONNECTION, CONNECTION, None, True)
        warn_unclosed(self, source=self)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<blocking connection {self._facts.connection_id}>"


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
        if listener is not None:
            notifier.observers.append(listener)
        loop_thread = LoopThread.start(Serving) if self._private_loop else shared_loop(Serving)
        boundary = Boundary(loop_thread, private=self._private_loop)
        try:
            # Opened on the loop, with its background tasks in the loop thread's host task
            # group; what crosses: the factory's settings, the credentials, the notifier.
            facts = boundary.call(
                Op.OPEN, CONNECTION, self._factory, client_id, username, password, notifier
            )
        except BaseException:
            with suppress(ClosedError):
                boundary.post(Op.CLOSE_CONNECTION, CONNECTION, None, True)
            boundary.closed = True
            if self._private_loop:
                loop_thread.stop()
            notifier.stop()  # after on_connection_failure, if the listener has it
            raise
        boundary.tracing = facts.tracing
        options = self._factory.options
        return Connection(
            boundary, facts, options.close_timeout, notifier, daemon=options.use_daemon_thread
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
