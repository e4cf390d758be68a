"""``Connection``, ``connect()`` and ``ConnectionFactory``: the logical connection.

How this works: ``connect()`` parses the URL (``failover.url``), builds the options, and opens a
physical connection to the first broker that answers, in a task group hosted by a task of its own
(``TaskHost``), so that the connection can be closed from any task. The connection owns its
sessions, the temporary destinations (dynamic nodes, made on an internal session and kept by the
link that created them) and the start/stop switch of message delivery.

Thread-safety: none; every method runs on the event loop that opened the connection. The
blocking facade (``haclient``) gives threads the same calls.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any

import anyio

from failover.url import BrokerURL, FailoverURL, parse_url
from haclient.aio._host import TaskHost
from haclient.aio.options import ConnectionOptions, generated_client_id
from haclient.aio.physical import PhysicalConnection, open_physical
from haclient.aio.session import Session
from haclient.aio.termini import SubscriptionNames
from haclient.amqp.endpoints import Link
from haclient.amqp.endpoints import Session as AmqpSession
from haclient.amqp.types import Terminus
from haclient.destination import TemporaryQueue, TemporaryTopic
from haclient.errors import (
    ClosedError,
    ConfigurationError,
    ConnectionFailedError,
    HAClientError,
)
from haclient.modes import AckMode

__all__ = [
    "Connection",
    "ConnectionFactory",
    "ConnectionState",
    "ConnectionStatistics",
    "connect",
]

log = logging.getLogger("haclient.connection")


class ConnectionState(enum.Enum):
    """Where a logical connection is in its life."""

    CONNECTING = "connecting"
    CONNECTED = "connected"
    FAILING_OVER = "failing-over"
    RESTORING = "restoring"
    FAILED = "failed"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class ConnectionStatistics:
    """A snapshot of a connection (``Connection.statistics()``).

    Attributes:
        state: The connection's state.
        broker: The broker in use (password masked), None when not connected.
        client_id: The client id, None if the application set none.
        container_id: The AMQP container id in use (the client id, or a generated one).
        failovers: Completed failovers.
        sessions / producers / consumers: How many are open.
        messages_sent / messages_received / messages_acknowledged: Counters since connect.
    """

    state: ConnectionState
    broker: str | None
    client_id: str | None
    container_id: str
    failovers: int
    sessions: int
    producers: int
    consumers: int
    messages_sent: int
    messages_received: int
    messages_acknowledged: int


class _StartSwitch:
    """JMS ``start()``/``stop()``: consumers hand out messages only while started."""

    def __init__(self) -> None:
        self.started = False
        self._changed = anyio.Event()

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


class Connection:
    """A logical connection to a broker (JMS ``Connection``). Open it with ``connect()``.

    Use it as an async context manager, or call ``close()``. Messages are delivered to
    consumers only after ``start()``.
    """

    def __init__(self, url: FailoverURL, options: ConnectionOptions) -> None:
        self._url = url
        self._options = options
        self._has_client_id = options.client_id is not None
        self._container_id = options.client_id or generated_client_id()
        self._host: TaskHost = None  # type: ignore[assignment]  # set by _open
        self._current: PhysicalConnection | None = None
        self._state = ConnectionState.CONNECTING
        self._switch = _StartSwitch()
        self._sessions: set[Session] = set()
        self._subscription_names = SubscriptionNames()
        self._internal_session: AmqpSession | None = None
        self._temporary_links: dict[TemporaryQueue | TemporaryTopic, Link] = {}
        self._failovers = 0
        self._sent = 0
        self._received = 0
        self._acknowledged = 0

    async def _open(self) -> None:
        self._host = await TaskHost.open()
        try:
            self._current = await self._connect_first()
        except BaseException:
            self._state = ConnectionState.FAILED
            await self._host.close()
            raise
        self._state = ConnectionState.CONNECTED

    async def _connect_first(self) -> PhysicalConnection:
        last: HAClientError | None = None
        for broker in self._url.brokers:
            try:
                return await self._connect(broker)
            except HAClientError as exc:
                log.info("cannot connect to %s: %s", broker, exc)
                last = exc
        raise ConnectionFailedError(
            f"no broker of {self._url} could be reached: {last}", cause=last
        )

    async def _connect(self, broker: BrokerURL) -> PhysicalConnection:
        """Open one physical connection (the connector the failover manager will use)."""
        return await open_physical(self._host.task_group, broker, self._options, self._container_id)

    # Plumbing ----------------------------------------------------------------------------------

    def _physical(self) -> PhysicalConnection:
        self._check_open()
        assert self._current is not None
        return self._current

    def _check_open(self) -> None:
        if self._state is ConnectionState.CLOSED:
            raise ClosedError("the connection is closed")
        if self._state is ConnectionState.FAILED:
            raise ConnectionFailedError("the connection failed")

    async def _wait_started(self, timeout: float) -> bool:
        return await self._switch.wait_started(timeout)

    def _count_sent(self) -> None:
        self._sent += 1

    def _count_received(self) -> None:
        self._received += 1

    def _count_acknowledged(self, count: int) -> None:
        self._acknowledged += count

    def _forget_session(self, session: Session) -> None:
        self._sessions.discard(session)

    # Public API --------------------------------------------------------------------------------

    @property
    def client_id(self) -> str | None:
        """The client id (the AMQP container id), or None when the application set none."""
        return self._container_id if self._has_client_id else None

    @property
    def url(self) -> FailoverURL:
        """The parsed URL (passwords masked when printed)."""
        return self._url

    @property
    def broker(self) -> BrokerURL | None:
        """The broker in use, None when not connected."""
        return self._current.broker if self._current is not None else None

    @property
    def state(self) -> ConnectionState:
        """The connection's state."""
        return self._state

    @property
    def is_closed(self) -> bool:
        """True once ``close()`` was called."""
        return self._state is ConnectionState.CLOSED

    @property
    def is_started(self) -> bool:
        """True between ``start()`` and ``stop()``."""
        return self._switch.started

    async def start(self) -> None:
        """Start (or restart) delivery of messages to consumers and listeners.

        Raises:
            ClosedError: the connection is closed.
        """
        self._check_open()
        self._switch.set(True)

    async def stop(self) -> None:
        """Pause delivery: ``receive()`` waits and listeners are not called until ``start()``.
        Sending is not affected."""
        self._check_open()
        self._switch.set(False)

    async def create_session(self, ack_mode: AckMode = AckMode.AUTO) -> Session:
        """A new session with acknowledge mode ``ack_mode`` (AUTO by default).

        Raises:
            ClosedError: the connection is closed.
            NotImplementedByBrokerError: TRANSACTED on a broker without transactions.
        """
        self._check_open()
        if not isinstance(ack_mode, AckMode):
            try:
                ack_mode = AckMode(ack_mode)
            except ValueError:
                raise ConfigurationError(
                    f"unknown acknowledge mode {ack_mode!r}", option="ack_mode"
                ) from None
        session = Session(self, ack_mode)
        await session._open()
        self._sessions.add(session)
        return session

    async def _create_temporary(
        self, session: Session, *, queue: bool
    ) -> TemporaryQueue | TemporaryTopic:
        physical = self._physical()
        amqp = physical.amqp
        if self._internal_session is None:
            self._internal_session = await amqp.open_session(timeout=self._options.attach_timeout)
        capability = "temporary-queue" if queue else "temporary-topic"
        link = await amqp.open_sender(
            Terminus(dynamic=True, capabilities=(capability,)),
            session=self._internal_session,
            name=session._link_name(capability),
            timeout=self._options.attach_timeout,
        )
        address = link.remote_target.address
        if not address:
            amqp.detach(link)
            raise HAClientError("the broker created a temporary destination without an address")
        destination: TemporaryQueue | TemporaryTopic = (
            TemporaryQueue(address) if queue else TemporaryTopic(address)
        )
        self._temporary_links[destination] = link
        return destination

    async def delete_temporary(self, destination: TemporaryQueue | TemporaryTopic) -> None:
        """Delete a temporary destination this connection created (JMS ``delete()``).

        Raises:
            InvalidDestinationError: this connection did not create it.
        """
        from haclient.errors import InvalidDestinationError

        link = self._temporary_links.pop(destination, None)
        if link is None:
            raise InvalidDestinationError(f"{destination} was not created by this connection")
        self._physical().amqp.detach(link)

    def statistics(self) -> ConnectionStatistics:
        """A snapshot of the connection's state and counters (touches no network)."""
        return ConnectionStatistics(
            state=self._state,
            broker=str(self.broker) if self.broker is not None else None,
            client_id=self.client_id,
            container_id=self._container_id,
            failovers=self._failovers,
            sessions=len(self._sessions),
            producers=sum(len(s._producers) for s in self._sessions),
            consumers=sum(len(s._consumers) for s in self._sessions),
            messages_sent=self._sent,
            messages_received=self._received,
            messages_acknowledged=self._acknowledged,
        )

    async def close(self) -> None:
        """Close the connection and everything it made. Idempotent; callable from any task.

        Sessions close as ``Session.close()`` says (open transactions roll back, unacknowledged
        CLIENT messages go back to the broker); temporary destinations are deleted by the broker
        with the connection; then Close frames are exchanged.
        """
        if self._state is ConnectionState.CLOSED:
            return
        for session in list(self._sessions):
            try:
                await session.close()
            except Exception:
                log.debug("closing a session failed", exc_info=True)
        self._state = ConnectionState.CLOSED
        for session in list(self._sessions):
            session._connection_closed()
        self._switch.set(False)
        current = self._current
        try:
            if current is not None:
                with anyio.move_on_after(self._options.close_timeout + 1):
                    await current.close()
        finally:
            await self._host.close()

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<Connection {self._container_id!r} to {self.broker} ({self._state.value})>"


async def connect(
    url: str,
    *,
    client_id: str | None = None,
    username: str | None = None,
    password: str | None = None,
    **options: Any,
) -> Connection:
    """Open a connection to the brokers of ``url`` (a failover URL or a plain ``amqp://`` URL).

    Keyword options override the URL's (see ``ConnectionOptions``: ``prefetch``,
    ``idle_timeout``, ``attach_timeout`` ...). The connection is not started: call ``start()``
    before expecting messages.

    Raises:
        ConfigurationError: the URL or an option is invalid (named in the message).
        ConnectionFailedError: no broker could be reached (``.cause`` says why).
        AuthenticationError: the broker refused the login.
        ClientIdInUseError: another connection uses ``client_id``.
    """
    return await ConnectionFactory(url, **options).create_connection(
        client_id=client_id, username=username, password=password
    )


class ConnectionFactory:
    """Makes connections to one URL with one set of options (JMS ``ConnectionFactory``).

    Raises:
        ConfigurationError: from the constructor, for an invalid URL or option.
    """

    def __init__(self, url: str, **options: Any) -> None:
        self._url = parse_url(url) if isinstance(url, str) else url
        self._options = ConnectionOptions.build(self._url, options)

    @property
    def url(self) -> FailoverURL:
        """The parsed URL."""
        return self._url

    async def create_connection(
        self,
        *,
        client_id: str | None = None,
        username: str | None = None,
        password: str | None = None,
    ) -> Connection:
        """Open a connection (see ``connect()``)."""
        options = ConnectionOptions.build(
            self._url,
            {
                **{k: getattr(self._options, k) for k in ("prefetch", "attach_timeout")},
                "client_id": client_id or self._options.client_id,
                "username": username or self._options.username,
                "password": password or self._options.password,
            },
        )
        options = _merge(self._options, options)
        connection = Connection(self._url, options)
        await connection._open()
        return connection


def _merge(base: ConnectionOptions, override: ConnectionOptions) -> ConnectionOptions:
    from dataclasses import replace

    return replace(
        base,
        client_id=override.client_id,
        username=override.username,
        password=override.password,
    )
