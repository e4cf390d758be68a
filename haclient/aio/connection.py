"""``Connection``, ``connect()`` and ``ConnectionFactory``: the logical connection.

How this works: ``connect()`` parses the URL (``failover.url``), builds the options, and opens a
physical connection to the first broker that answers, in a task group hosted by a task of its own
(``TaskHost``), so that the connection can be closed from any task. ``async with connect(...)``
puts that task in a task group of the caller's (structured); ``await connect(...)`` leaves it
unowned until ``close()`` (see ``Connecting``). The connection owns its
sessions, the temporary destinations (dynamic nodes, made on an internal session and kept by the
link that created them, ``haclient.aio.temporaries``) and the start/stop switch of message
delivery. Its sessions are given its context (``haclient.aio.context``), never the connection.

Thread-safety: none; every method runs on the event loop that opened the connection. The
blocking facade (``haclient``) gives threads the same calls.
"""

from __future__ import annotations

import contextvars
import logging
import uuid
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

import anyio
from anyio.abc import TaskGroup

from failover.listeners import AnyListener
from failover.manager import ConnectionManager, ConnectionState
from failover.policy import FailoverMethod
from failover.schedule import Stop, Wait, checked_strategies
from failover.url import BrokerURL, FailoverURL, parse_url
from failover.walk import StandIn
from haclient.aio._host import TaskHost
from haclient.aio.checks import ensure_open
from haclient.aio.context import ConnectionContext
from haclient.aio.gate import Connected, deadline_after
from haclient.aio.membership import advertised_brokers, follow_membership
from haclient.aio.options import ConnectionOptions, generated_client_id
from haclient.aio.physical import PhysicalConnection, open_physical
from haclient.aio.session import Session
from haclient.aio.stats import PROCESS_NAMES, HistogramSnapshot, broker_address
from haclient.destination import TemporaryQueue, TemporaryTopic
from haclient.errors import (
    AuthenticationError,
    ClientIdInUseError,
    ConfigurationError,
    ConnectionFailedError,
    HAClientError,
)
from haclient.modes import AckMode, ack_mode_of
from haclient.options import CLIENT_OPTIONS

if TYPE_CHECKING:
    from haclient.aio.tracing import Tracing

__all__ = [
    "Connecting",
    "Connection",
    "ConnectionFactory",
    "ConnectionState",
    "ConnectionStatistics",
    "connect",
]

log = logging.getLogger("haclient.connection")

_running_in: contextvars.ContextVar[Connection | None] = contextvars.ContextVar(
    "haclient_running_in", default=None
)
"""The connection whose background task (a listener, say) the current task is."""


@dataclass(frozen=True, slots=True)
class ConnectionStatistics:
    """A snapshot of a connection (``Connection.statistics()``).

    Attributes:
        state: The connection's state.
        broker: The broker in use (password masked), None when not connected.
        client_id: The client id, None if the application set none.
        container_id: The AMQP container id in use (the client id, or a generated one).
        connection_id: The connection's own id, ``<jms.connectionIDPrefix><uuid>``.
        epoch: The number of the physical connection in use (0 first, +1 per loss).
        failovers: Completed failovers.
        last_downtime: Seconds the last failover took (loss to restored), None before one.
        sessions / producers / consumers: How many are open.
        messages_sent / messages_received / messages_acknowledged: Counters since connect.
        method: The failover method (``roundrobin`` ...).
        broker_address: ``host:port`` of the broker in use (no credentials), None when none.
        connection_attempts: Connection attempts by broker ``host:port`` (first connect too).
        connection_attempts_failed: ... and how many of them failed, by broker.
        failovers_failed: Failovers that gave up (F4).
        failover_durations: Downtime of each completed failover (loss to restored).
        calls_blocked: Calls waiting at the gate now, for failover to end (F2).
        blocked_durations: How long each call that found the gate closed waited there.
        acknowledgements: Acknowledgements settled with the broker, by mode (``auto`` ...).
        ack_latency: How long the broker took to confirm them (A6), by mode.
        transactions: Transactions by outcome: committed, rolled_back,
            rolled_back_by_failover (F7), in_doubt (a commit cut off in flight).
        messages_resent: Sends repeated on a new connection after a loss (F11).
        messages_redelivered: Messages received marked redelivered.
        temporaries_restored: Temporary destinations made again after failovers (F6).
        resources_not_restored: Resources failover could not restore (F14).
        duplicates_suppressed: Messages the sessions' duplicate windows kept from the
            application.
        name: Unique among the open connections of this process: the client id (else the
            container id), ``#2``, ``#3`` ... appended for a second or third open connection
            with the same client id. The metrics' ``connection`` label.
        last_failover_at: Unix time at which the last failover began; None before one.
        state_since: Unix time of the last state change (of the creation before any).
        messages_dead_lettered: Messages past ``max_redeliveries`` that consumers settled
            with ``redelivery_outcome`` instead of handing them out (E6).
        failovers_returned: Completed failovers that were returns to a preferred broker
            (F16, ``failover.priorityBackup``); ``failovers`` counts them too.
        standby_broker: The broker of the warm spare held now (F17, ``failover.backup``;
            password masked), None when there is none.
        sends_failed: Failures of blocking sends queued without waiting that no call could
            raise any more (C9), each also told to the listeners' ``send_failed``.
        client_id_refusals: Connection attempts a broker refused because it held the client
            id (``ClientIdInUseError``), mostly our own dead connection; a failover tries
            again (F4).
    """

    state: ConnectionState
    broker: str | None
    client_id: str | None
    container_id: str
    epoch: int
    failovers: int
    last_downtime: float | None
    sessions: int
    producers: int
    consumers: int
    messages_sent: int
    messages_received: int
    messages_acknowledged: int
    method: str
    broker_address: str | None
    connection_attempts: Mapping[str, int]
    failovers_failed: int
    failover_durations: HistogramSnapshot
    calls_blocked: int
    blocked_durations: HistogramSnapshot
    acknowledgements: Mapping[str, int]
    ack_latency: Mapping[str, HistogramSnapshot]
    transactions: Mapping[str, int]
    messages_resent: int
    messages_redelivered: int
    temporaries_restored: int
    resources_not_restored: int
    duplicates_suppressed: int
    connection_attempts_failed: Mapping[str, int]
    name: str
    last_failover_at: float | None
    state_since: float
    messages_dead_lettered: int = 0
    failovers_returned: int = 0
    standby_broker: str | None = None
    connection_id: str = ""
    sends_failed: int = 0
    client_id_refusals: int = 0

    def __repr__(self) -> str:
        """A summary: where the connection is, its traffic, and the counters that are not 0
        (a histogram as its count and mean; the fields hold the whole snapshot)."""
        downtime = "" if self.last_downtime is None else f" (last {self.last_downtime:.3f} s)"
        parts = [
            f"state={self.state.name}",
            f"broker={self.broker!r}",
            f"failovers={self.failovers}{downtime}",
            f"sessions={self.sessions}, producers={self.producers}, consumers={self.consumers}",
            f"sent={self.messages_sent}, received={self.messages_received}, "
            f"acknowledged={self.messages_acknowledged}",
        ]
        for name in _SUMMED:
            value = getattr(self, name)
            if isinstance(value, HistogramSnapshot):
                parts += [f"{name}={_summary(value)}"] if value.count else []
            elif isinstance(value, Mapping):
                used = {key: n for key, n in value.items() if _used(n)}
                parts += [f"{name}={_mapping_summary(used)}"] if used else []
            elif value:
                parts.append(f"{name}={value}")
        return f"ConnectionStatistics({', '.join(parts)})"


_SUMMED: Final = (
    "sends_failed",
    "client_id_refusals",
    "failovers_returned",
    "failovers_failed",
    "failover_durations",
    "calls_blocked",
    "blocked_durations",
    "acknowledgements",
    "ack_latency",
    "transactions",
    "messages_resent",
    "messages_redelivered",
    "temporaries_restored",
    "resources_not_restored",
    "duplicates_suppressed",
    "messages_dead_lettered",
)


def _used(value: object) -> bool:
    return value.count > 0 if isinstance(value, HistogramSnapshot) else bool(value)


def _summary(histogram: HistogramSnapshot) -> str:
    return f"{histogram.count} x {histogram.sum / histogram.count * 1000:.1f} ms mean"


def _mapping_summary(values: Mapping[str, object]) -> str:
    shown = (
        f"{key}: {_summary(v) if isinstance(v, HistogramSnapshot) else v}"
        for key, v in values.items()
    )
    return "{" + ", ".join(shown) + "}"


class Connection:
    """A logical connection to a list of brokers (JMS ``Connection``). Open it with ``connect()``.

    Use it as an async context manager, or call ``close()``. Messages are delivered to
    consumers only after ``start()``. When the broker in use is lost the connection fails over
    as the URL's policy says (``failover.manager``): calls that need the network wait until it
    is back (F2, F3) or raise ``ConnectionFailedError`` once failover gave up (F4).
    """

    def __init__(
        self,
        url: FailoverURL,
        options: ConnectionOptions,
        *,
        reconnect_wait: Wait | None = None,
        reconnect_stop: Stop | None = None,
    ) -> None:
        self._url = url
        self._options = options
        self._container_id = options.client_id or generated_client_id(options.client_id_prefix)
        self._name, self._release_name = PROCESS_NAMES.claim(self, self._container_id)
        self._host: TaskHost = None  # type: ignore[assignment]  # set by _open
        self._manager: ConnectionManager[PhysicalConnection] = ConnectionManager.from_url(
            StandIn(self._connect, self._count_failed_attempt),  # F5: a wait stands in for one
            url,
            reconnect_wait=reconnect_wait,
            reconnect_stop=reconnect_stop,
            standby_connector=self._open_standby,
            adopt=self._adopt,
            may_return=lambda: self._context.counters.commits_in_flight == 0,
            # a broker starting up is tried again for as long as one attempt may take (F1)
            startup_patience=options.connect_timeout,
        )
        self._closing: anyio.Event | None = None  # set once the first close() has finished
        self._sessions: set[Session] = set()
        # This connection's part of every message id it makes: the client id (if any) first,
        # so that no-local by client id (S2) can be emulated too.
        unique = uuid.uuid4().hex
        self._connection_id = f"{options.connection_id_prefix}{unique}"
        self._context = ConnectionContext(
            options=options,
            manager=self._manager,
            container_id=self._container_id,
            id_base=f"{options.client_id}:{unique}" if options.client_id else unique,
            start_soon=self._start_owned,
            forget_session=self._forget_session,
            client_id=options.client_id,
        )
        self._manager.add_listener(self._context.counters.failover)  # metrics first
        tracing = _tracing_for(options, self._context)
        if tracing is not None:
            self._context.tracing = self._context.gate.tracing = tracing
            self._manager.add_listener(tracing.failover)

    @property
    def _closed(self) -> bool:
        return self._context.closed

    @property
    def _current(self) -> PhysicalConnection | None:
        return self._context.current

    async def _open(self, owner: TaskGroup | None = None) -> None:
        self._host = await TaskHost.open(owner)
        failure: BaseException | None = None
        try:
            # The manager's task runs among the connection's own: no task to hold it.
            await self._manager.start_in(self._host.task_group)
        except BaseException as exc:
            self._context.closed = True
            self._release_name()
            with anyio.CancelScope(shield=True):
                await self._manager.close()
            await self._host.close()
            inner = _only_exception(exc)
            # a refused login or client id: say so, not "gave up"; and ours, not anyio's group
            failure = _refusal(inner) or inner
            if failure is exc and not isinstance(exc, HAClientError):
                raise
        if failure is not None:
            # Raised outside the handler, so that Python does not chain the group it came in
            # (or the error that wrapped it) as its context: a cycle that loops chain walkers.
            # One of the tree says what failed: raised without the failover manager's frames.
            if isinstance(failure, HAClientError):
                raise failure.with_traceback(None)
            raise failure
        self._manager.register(self._context.temporaries)

    async def _connect(self, broker: BrokerURL) -> PhysicalConnection:
        """The connector the failover manager calls: one physical connection to ``broker``,
        counted as an attempt."""
        try:
            physical = await self._open_standby(broker)
        except ClientIdInUseError:
            self._context.counters.attempt(broker, succeeded=False)
            self._client_id_refused(broker)
            raise
        except Exception:
            self._context.counters.attempt(broker, succeeded=False)
            raise
        self._context.counters.attempt(broker, succeeded=True)
        return physical

    def _count_failed_attempt(self, broker: BrokerURL) -> None:
        self._context.counters.attempt(broker, succeeded=False)

    def _client_id_refused(self, broker: BrokerURL) -> None:
        """Count a refusal of the client id as in use; the first of each failover is a warning
        (F4: it is tried again, the holder mostly being our own dead connection)."""
        counters = self._context.counters
        counters.client_id_refusals += 1
        epoch = self._manager.epoch
        if counters.client_id_warned_epoch == epoch:
            return
        counters.client_id_warned_epoch = epoch
        log.warning(
            "%s refused client id %r as in use (mostly our own previous connection, which the "
            "broker has not yet noticed is dead): trying again within the failover budget",
            broker,
            self._container_id,
        )

    async def _open_standby(self, broker: BrokerURL) -> PhysicalConnection:
        """One physical connection to ``broker``, counted nowhere: the manager's connector of
        ready connections (the warm spare, the probe of a preferred broker; F16, F17), which
        may never be used. Sessions, the client's temporaries and the broker list it announces
        wait until it is in use (``_adopt``)."""
        return await open_physical(self._host.task_group, broker, self._options, self._container_id)

    def _adopt(self, physical: PhysicalConnection) -> list[BrokerURL]:
        """``physical`` becomes the connection in use (the manager's ``Adopter``, before the
        restore): the one the sessions see, and the one whose broker lists count (F12).
        Returns the brokers its Open announced, which the manager follows itself: this tells
        the manager nothing."""
        self._context.current = physical
        if self._manager.policy.method is FailoverMethod.EXCHANGE:
            self._host.start_soon(self._follow_membership, physical)
        return advertised_brokers(physical.advertised_brokers)

    def _learn(
        self, physical: PhysicalConnection, brokers: Iterable[BrokerURL], *, complete: bool
    ) -> None:
        """Take a broker list ``physical``'s broker gave (F12): the next failover walks it.
        An empty list replaces the learned one only when ``complete`` (a membership message
        saying "no peers"); an Open frame without usable entries leaves it. A connection
        already replaced teaches nothing."""
        brokers = list(brokers)
        if physical is self._current and (brokers or complete):
            self._manager.learn_brokers(brokers, source=physical.broker)

    async def _follow_membership(self, physical: PhysicalConnection) -> None:
        await follow_membership(
            physical,
            self._manager.policy.exchange_address,
            lambda brokers: self._learn(physical, brokers, complete=True),
            link_name=f"{self._container_id}:membership",
            timeout=self._options.attach_timeout,
        )

    def _check_open(self) -> None:
        self._context.check_open()

    def _forget_session(self, session: Session) -> None:
        self._sessions.discard(session)
        self._manager.unregister(session)

    # Public API --------------------------------------------------------------------------------

    @property
    def client_id(self) -> str | None:
        """The client id (the AMQP container id), or None when the application set none."""
        return self._context.client_id

    @property
    def connection_id(self) -> str:
        """This connection's id, ``<prefix><uuid>`` (``jms.connectionIDPrefix``, ``ID:``),
        as its repr and statistics show it; its message ids carry the same uuid."""
        return self._connection_id

    @property
    def url(self) -> FailoverURL:
        """The parsed URL (passwords masked when printed)."""
        return self._url

    @property
    def brokers(self) -> tuple[BrokerURL, ...]:
        """The brokers the next failover walks: the URL's list, or for ``exchange`` the newest
        list the brokers gave, followed by the URL's (F12)."""
        return self._manager.brokers

    @property
    def broker(self) -> BrokerURL | None:
        """The broker in use, None when not connected."""
        return self._manager.broker

    @property
    def state(self) -> ConnectionState:
        """The connection's state (CONNECTED, FAILING_OVER, RESTORING, FAILED, CLOSED ...)."""
        return ConnectionState.CLOSED if self._closed else self._manager.state

    @property
    def is_closed(self) -> bool:
        """True once ``close()`` was called."""
        return self._closed

    @property
    def is_started(self) -> bool:
        """True between ``start()`` and ``stop()``."""
        return self._context.switch.started

    def add_listener(self, listener: AnyListener) -> None:
        """Be told of failover (F14): any of ``failover_started(cause)``,
        ``failover_completed(broker, downtime)``, ``failover_failed(cause)`` and
        ``resource_not_restored(resource, error)``, and of Qpid JMS's names
        ``on_connection_interrupted(broker)``, ``on_connection_restored(broker)`` and
        ``on_connection_failure(error)``, called on the event loop; keep them short.
        ``on_connection_established`` is heard only by a listener given to ``connect()``.
        Also of messages a consumer dead-lettered (E6): ``message_dead_lettered(destination,
        message_id, delivery_count, outcome)``, and of a blocking send's failure that no call
        could raise any more (C9): ``send_failed(destination, message_id, error)``."""
        self._manager.add_listener(listener)
        self._context.listeners.add(listener)

    def remove_listener(self, listener: AnyListener) -> None:
        """Stop telling ``listener``."""
        self._manager.remove_listener(listener)
        self._context.listeners.remove(listener)

    async def start(self) -> None:
        """Start (or restart) delivery of messages to consumers and listeners.

        Raises:
            ClosedError: the connection is closed.
        """
        await ensure_open(self._check_open)
        self._context.switch.set(True)

    async def stop(self) -> None:
        """Pause delivery: ``receive()`` waits and listeners are not called until ``start()``.
        Sending is not affected."""
        await ensure_open(self._check_open)
        self._context.switch.set(False)

    async def create_session(
        self, ack_mode: AckMode = AckMode.AUTO, *, timeout: float | None = None
    ) -> Session:
        """A new session with acknowledge mode ``ack_mode`` (AUTO by default).

        Waits while the connection fails over.

        Raises:
            ClosedError: the connection is closed.
            ConfigurationError: ``ack_mode`` is no ``AckMode`` (a name such as ``"client"``:
                the message names the ``AckMode`` meant).
            NotImplementedByBrokerError: TRANSACTED on a broker without transactions.
        """
        await ensure_open(self._check_open)
        ack_mode = ack_mode_of(ack_mode)

        async def create(at: Connected) -> Session:
            session = Session(self._context, ack_mode)
            await session._open(at)
            return session

        session = await self._context.gate.run(create, deadline=deadline_after(timeout))
        self._sessions.add(session)
        self._manager.register(session)
        return session

    async def delete_temporary(self, destination: TemporaryQueue | TemporaryTopic) -> None:
        """Delete a temporary destination this connection created (JMS ``delete()``).

        Raises:
            InvalidDestinationError: this connection did not create it.
        """
        self._context.temporaries.delete(destination)

    def statistics(self) -> ConnectionStatistics:
        """A snapshot of the connection's state and counters (touches no network)."""
        manager = self._manager.statistics()
        counters, blocked = self._context.counters, self._context.gate.blocked
        return ConnectionStatistics(
            state=self.state,
            broker=str(self.broker) if self.broker is not None else None,
            client_id=self.client_id,
            container_id=self._container_id,
            epoch=manager.epoch,
            failovers=manager.failovers,
            last_downtime=manager.last_downtime,
            sessions=len(self._sessions),
            producers=sum(len(s._producers) for s in self._sessions),
            consumers=sum(len(s._consumers) for s in self._sessions),
            messages_sent=self._context.counters.sent,
            messages_received=self._context.counters.received,
            messages_acknowledged=self._context.counters.acknowledged,
            method=self._manager.policy.method.value,
            broker_address=broker_address(self.broker),
            connection_attempts=MappingProxyType(dict(counters.attempts)),
            failovers_failed=counters.failover.failed,
            failover_durations=counters.failover.durations.snapshot(),
            calls_blocked=blocked.now,
            blocked_durations=blocked.durations.snapshot(),
            acknowledgements=counters.acknowledgements(),
            ack_latency=counters.ack_latency(),
            transactions=counters.transactions(),
            messages_resent=counters.resent,
            messages_redelivered=counters.redelivered,
            temporaries_restored=counters.temporaries_restored,
            resources_not_restored=counters.failover.resources_not_restored,
            duplicates_suppressed=counters.duplicates_suppressed,
            connection_attempts_failed=MappingProxyType(dict(counters.attempts_failed)),
            name=self._name,
            last_failover_at=counters.failover.last_started,
            state_since=counters.failover.state_since,
            messages_dead_lettered=counters.dead_lettered,
            failovers_returned=manager.returns,
            standby_broker=None if manager.standby is None else str(manager.standby),
            sends_failed=counters.sends_failed,
            client_id_refusals=counters.client_id_refusals,
            connection_id=self._connection_id,
        )

    async def close(self) -> None:
        """Close the connection and everything it made. Idempotent; callable from any task.

        Sessions close as ``Session.close()`` says (open transactions roll back, unacknowledged
        CLIENT messages go back to the broker); temporary destinations are deleted by the broker
        with the connection; then Close frames are exchanged. An ongoing failover is stopped
        and the calls waiting for it raise ``ClosedError``. A close while another one runs waits
        for that one to finish.
        """
        if self._closing is not None:
            await self._closing.wait()
            return
        if self._closed:
            return
        self._closing = anyio.Event()
        try:
            await self._close()
        finally:
            self._closing.set()

    async def _close(self) -> None:
        try:
            if self._manager.state is ConnectionState.CONNECTED:
                for session in list(self._sessions):
                    try:
                        await session.close()
                    except Exception:
                        log.debug("closing a session failed", exc_info=True)
        finally:
            # Also when the closing task is cancelled (its task group is tearing down): the
            # sessions' orderly close is skipped then, but a connection left half-closed would
            # go on failing over by itself. Bounded: the manager's close by close_timeout.
            with anyio.CancelScope(shield=True):
                await self._tear_down()

    async def _tear_down(self) -> None:
        self._context.closed = True
        self._release_name()  # a new connection with this client id may have its name
        for session in list(self._sessions):
            session._connection_closed()
        self._context.switch.set(False)
        try:
            with anyio.move_on_after(self._options.close_timeout + 1):
                await self._manager.close()
        finally:
            # Closed from one of its own tasks (a listener): that task cannot wait for itself.
            await self._host.close(wait=_running_in.get() is not self)

    def _start_owned(
        self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str | None = None
    ) -> None:
        """Run ``fn(*args)`` in the connection's task group, knowing whose task it is."""

        async def owned() -> None:
            _running_in.set(self)
            await fn(*args)

        self._host.start_soon(owned, name=name)

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return (
            f"<Connection {self._connection_id!r} ({self._container_id!r}) to {self.broker} "
            f"({self.state.value})>"
        )


class Connecting:
    """A connection being opened: what ``connect()`` and ``create_connection()`` return.

    Two ways to use it (and ``open_in(task_group)`` for a host that keeps connections in a
    task group of its own, as the blocking API's loop thread does):

    * ``async with aio.connect(url) as connection:`` (preferred, structured): the calling
      task opens a task group in ``__aenter__`` that owns the connection's background tasks,
      and ``__aexit__`` closes the connection and leaves the group, so no task outlives the
      block. An exception from the block passes through unchanged.
    * ``connection = await aio.connect(url)`` (kept for compatibility): the background tasks
      run in a task nobody owns (an asyncio task or a trio system task) until ``close()``;
      ``async with await aio.connect(url) as connection:`` closes it at the end of the block.

    Either way ``close()`` may be called from any task of the event loop. Use it once.
    """

    def __init__(self, open_in: Callable[[TaskGroup | None], Awaitable[Connection]]) -> None:
        self._open_in = open_in
        self._task_group: TaskGroup | None = None
        self._connection: Connection | None = None

    def __await__(self) -> Generator[Any, None, Connection]:
        return self._open_in(None).__await__()

    async def open_in(self, task_group: TaskGroup) -> Connection:
        """Open the connection with its background tasks in ``task_group``, which must outlive
        it; ``close()`` ends them. For hosts that keep connections in a task group of their
        own (the blocking API's event-loop thread does)."""
        return await self._open_in(task_group)

    async def __aenter__(self) -> Connection:
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        try:
            connection = await self._open_in(task_group)
        except BaseException:
            await task_group.__aexit__(None, None, None)  # empty: a failed open ended its host
            raise
        self._task_group, self._connection = task_group, connection
        return connection

    async def __aexit__(self, *exc_info: object) -> None:
        task_group, connection = self._task_group, self._connection
        assert task_group is not None and connection is not None, "not entered"
        try:
            with anyio.CancelScope(shield=True):
                await connection.close()
        finally:
            # Told nothing of the block's exception, the group does not wrap it in a group of
            # its own; it has no task left to cancel (close() ended the host).
            await task_group.__aexit__(None, None, None)


def connect(
    url: str,
    *,
    client_id: str | None = None,
    username: str | None = None,
    password: str | None = None,
    reconnect_wait: Wait | None = None,
    reconnect_stop: Stop | None = None,
    listener: AnyListener | None = None,
    **options: Any,
) -> Connecting:
    """Open a connection to the brokers of ``url`` (a failover URL or a plain ``amqp://`` URL):
    ``async with connect(url) as connection:`` or ``connection = await connect(url)`` (see
    ``Connecting`` for how the two differ).

    Keyword options override the URL's (see ``ConnectionOptions``: ``prefetch``,
    ``idle_timeout``, ``attach_timeout`` ...). The connection is not started: call ``start()``
    before expecting messages.

    ``reconnect_wait`` and ``reconnect_stop`` take any tenacity wait and stop (e.g.
    ``wait_random_exponential(max=5)`` and ``stop_after_delay(60)``): they replace the URL
    policy's delays and its pass count and time budget, for the first connect and every
    failover; the broker order stays the policy's, and one attempt is one broker
    (``failover.schedule``).

    ``listener`` is added (as ``Connection.add_listener`` does) before the first connect, so it
    also hears ``on_connection_established(broker)`` when that succeeds and
    ``on_connection_failure(error)`` when it gives up: Qpid JMS's
    ``addConnectionListener`` before ``start()`` (F14).

    Raises:
        ConfigurationError: the URL or an option is invalid (named in the message).
        ConnectionFailedError: no broker could be reached (``.cause`` says why).
        AuthenticationError: the broker refused the login.
        ClientIdInUseError: another connection uses ``client_id``.
    """

    async def open_in(owner: TaskGroup | None) -> Connection:
        factory = ConnectionFactory(
            url, reconnect_wait=reconnect_wait, reconnect_stop=reconnect_stop, **options
        )
        return await factory._open(owner, client_id, username, password, listener)

    return Connecting(open_in)


class ConnectionFactory:
    """Makes connections to one URL with one set of options (JMS ``ConnectionFactory``).

    ``reconnect_wait`` and ``reconnect_stop``: any tenacity wait and stop, for every
    connection it makes (see ``connect()``).

    Raises:
        ConfigurationError: from the constructor, for an invalid URL or option (a ``url`` that
            is not a str names the argument).
    """

    def __init__(
        self,
        url: str,
        *,
        reconnect_wait: Wait | None = None,
        reconnect_stop: Stop | None = None,
        **options: Any,
    ) -> None:
        self._reconnect = checked_strategies(reconnect_wait, reconnect_stop)
        self._url: FailoverURL
        if isinstance(url, FailoverURL):
            self._url = url
        elif isinstance(url, str):
            self._url = parse_url(url, options=CLIENT_OPTIONS)
        else:
            raise ConfigurationError(
                f"url must be a str such as 'amqp://host:5672', not {type(url).__name__}",
                option="url",
            )
        self._options = ConnectionOptions.build(self._url, options)

    @property
    def url(self) -> FailoverURL:
        """The parsed URL."""
        return self._url

    @property
    def options(self) -> ConnectionOptions:
        """The options its connections get (the URL's, overridden by keywords)."""
        return self._options

    def create_connection(
        self,
        *,
        client_id: str | None = None,
        username: str | None = None,
        password: str | None = None,
        listener: AnyListener | None = None,
    ) -> Connecting:
        """Open a connection (see ``connect()``, also for ``listener``): ``async with`` it, or
        ``await`` it."""
        return Connecting(lambda owner: self._open(owner, client_id, username, password, listener))

    async def _open(
        self,
        owner: TaskGroup | None,
        client_id: str | None,
        username: str | None,
        password: str | None,
        listener: AnyListener | None = None,
    ) -> Connection:
        options = replace(
            self._options,
            # an empty client id is refused (by the options' check), not taken for "none given"
            client_id=self._options.client_id if client_id is None else client_id,
            username=username or self._options.username,
            password=password or self._options.password,
        )
        wait, stop = self._reconnect
        connection = Connection(self._url, options, reconnect_wait=wait, reconnect_stop=stop)
        if listener is not None:
            connection.add_listener(listener)
        await connection._open(owner)
        return connection


def _tracing_for(options: ConnectionOptions, context: ConnectionContext) -> Tracing | None:
    """The connection's tracing (``haclient.aio.tracing``), or None when it is off
    (``jms.tracing`` unset or ``noop``, and no ``tracer_provider``; ``noop`` wins).

    Raises:
        ConfigurationError: tracing is asked for and ``opentelemetry-api`` is not installed
            (the message names the ``tracing`` extra).
    """
    if options.tracing == "noop" or (options.tracer_provider is None and options.tracing is None):
        return None
    try:
        from haclient.aio.tracing import Tracing
    except ImportError as exc:
        raise ConfigurationError(
            "tracing needs opentelemetry-api, which the 'tracing' extra installs: "
            f"pip install 'haclient[tracing]' ({exc.__cause__ or exc})",
            option="tracer_provider" if options.tracer_provider is not None else "tracing",
        ) from exc
    return Tracing(options.tracer_provider, context)


def _refusal(exc: BaseException) -> HAClientError | None:
    """The broker's refusal behind a first connect that gave up, when it is one that no retry
    can fix and ``connect()`` promises by name (a wrong password, a client id in use).

    A refused login or TLS handshake (F15) is raised as it is when every broker refused; when
    one refused and the others failed otherwise (the standby of an HA pair does not answer),
    as an ``AuthenticationError`` whose message names each broker's last failure, raised from
    the ``ConnectionFailedError``."""
    if not isinstance(exc, ConnectionFailedError):
        return None
    if isinstance(exc.cause, ClientIdInUseError):
        return exc.cause
    refusals = [e for e in exc.failures.values() if isinstance(e, AuthenticationError)]
    if isinstance(exc.cause, AuthenticationError) and len(refusals) == len(exc.failures):
        return exc.cause
    if not refusals:
        return None
    last = refusals[-1]
    refused = AuthenticationError(
        str(exc), condition=last.condition, description=last.description, info=last.info
    )
    refused.__cause__ = exc
    return refused


def _only_exception(exc: BaseException) -> BaseException:
    """The exception inside a task group's group of one (the manager's task group wraps what
    its body raised), else ``exc``."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
