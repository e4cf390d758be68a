"""The failover connection manager: one logical connection over a series of physical ones.

How this works: a ``ConnectionManager`` is given a *connector* (an async callable that opens one
physical connection to one ``BrokerURL``) and knows nothing else of the protocol. Inside
``async with`` it owns one background task, the supervisor, which connects (``start()``), waits
for the physical connection to end, and then fails over: it walks the policy's plan (sleep
``attempt.delay``, call the connector), restores the registered resources in order on the new
connection, and opens the gate again. Its state is a table-driven machine (``TRANSITIONS``)::

    CONNECTING --OPENED--> CONNECTED --LOST--> FAILING_OVER --OPENED--> RESTORING
                               ^                   ^      |                 |
                               |                   +------+---LOST----------+
                               +-------------------------RESTORED-----------+
    CONNECTING, CONNECTED, FAILING_OVER --GAVE_UP--> FAILED;  any --CLOSE--> CLOSED

Rules it keeps:

1. The gate is open exactly while the state is CONNECTED: ``wait_connected()`` then returns the
   current physical connection and its epoch at once, without a checkpoint. In CONNECTING,
   FAILING_OVER and RESTORING it blocks (F2); in FAILED it raises ``ConnectionFailedError``
   carrying the last cause (F4), in CLOSED ``ClosedError``. A call blocked longer than
   ``policy.timeout`` (or its own ``timeout``) raises ``FailoverTimeoutError``; failover goes on.
2. The epoch numbers physical connections: 0 is the first, and every loss adds one, at the very
   moment the loss is noticed (``wait_closed`` returned, or ``report_lost``), in the same step
   that closes the gate. What was built in an older epoch belongs to a dead connection.
3. Resources are told of a loss at once (``connection_lost(lost_epoch, cause)``, synchronous,
   before any reconnect), and restored after a reconnect in ``restore_order`` order (ties in
   registration order) with the new physical connection, while the gate is still closed to
   everyone else. A resource whose ``restore`` raises is reported to the listeners (F14) and
   the others still restore; a loss during restore starts the next attempt of the plan.
4. A failure that no reconnect can fix (an ``HAClientError`` whose ``retriable`` is False, e.g.
   ``AuthenticationError``), or any loss under ``nofailover``, goes to FAILED at once.
5. Callbacks (``connection_lost``, listeners) run synchronously on the manager's event loop; one
   that raises is logged and changes nothing else. ``restore`` must use the connection it is
   given, never ``wait_connected()`` (the gate is closed while it runs: it would wait forever).

Every method must be called on the event loop that entered the manager (it is not thread-safe;
the blocking facade goes through its portal).

The API, for ``P`` the physical connection type (anything with ``wait_closed`` and ``close``)::

    manager = ConnectionManager(connector, brokers, policy, rng=..., retriable=...)
    manager = ConnectionManager.from_url(connector, failover_url, rng=..., retriable=...)
    async with manager:
        await manager.start()                                  # first connect (startup budget)
        connection, epoch = await manager.wait_connected(timeout=None)   # the gate
        manager.report_lost(epoch, cause)                     # "this connection is dead"
        manager.register(resource) / manager.unregister(resource)
        manager.add_listener(listener) / manager.remove_listener(listener)
        manager.learn_brokers(brokers, source=None)           # exchange (F12)
        manager.state, manager.epoch, manager.broker, manager.brokers, manager.statistics()
        await manager.close()                                 # idempotent; also on exit
"""

from __future__ import annotations

import enum
import itertools
import logging
import math
import random
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import MappingProxyType, TracebackType
from typing import Any, Final, Generic, Protocol, TypeVar

import anyio
from anyio.abc import TaskGroup

from failover.policy import Attempt, FailoverMethod, FailoverPolicy
from failover.url import BrokerURL, FailoverURL, merge_broker_lists
from haclient.errors import (
    ClosedError,
    ConnectionFailedError,
    ConnectionLostError,
    FailoverTimeoutError,
    HAClientError,
    IllegalStateError,
)

__all__ = [
    "TRANSITIONS",
    "ConnectionManager",
    "ConnectionState",
    "Connector",
    "FailoverListener",
    "ManagerEvent",
    "ManagerStatistics",
    "PhysicalConnection",
    "Resource",
    "RestoreOrder",
    "is_retriable_failure",
    "next_state",
]

_log = logging.getLogger("haclient.failover")

# How long closing a dead physical connection may take before it is abandoned.
_CLOSE_GRACE: Final = 5.0


# --- The state machine -------------------------------------------------------------------------


class ConnectionState(enum.Enum):
    """The state of the logical connection."""

    CONNECTING = "connecting"  # before and during the first connect
    CONNECTED = "connected"  # the gate is open
    FAILING_OVER = "failing_over"  # the connection was lost; walking the plan
    RESTORING = "restoring"  # a new physical connection is open; resources are restored
    FAILED = "failed"  # failover gave up (F4); final but for CLOSE
    CLOSED = "closed"  # the application closed it; final


class ManagerEvent(enum.Enum):
    """What can happen to the logical connection."""

    OPENED = "opened"  # the connector opened a physical connection
    RESTORED = "restored"  # every registered resource had its turn to restore
    LOST = "lost"  # the physical connection ended, and failover may help
    GAVE_UP = "gave_up"  # the plan ran out, or the failure is one no reconnect can fix
    CLOSE = "close"  # the application closed the connection


_S, _E = ConnectionState, ManagerEvent

TRANSITIONS: Final[Mapping[tuple[ConnectionState, ManagerEvent], ConnectionState]] = (
    MappingProxyType(
        {
            (_S.CONNECTING, _E.OPENED): _S.CONNECTED,  # nothing to restore on the first connect
            (_S.CONNECTING, _E.GAVE_UP): _S.FAILED,
            (_S.CONNECTING, _E.CLOSE): _S.CLOSED,
            (_S.CONNECTED, _E.LOST): _S.FAILING_OVER,
            (_S.CONNECTED, _E.GAVE_UP): _S.FAILED,  # nofailover, or a loss nothing can fix
            (_S.CONNECTED, _E.CLOSE): _S.CLOSED,
            (_S.FAILING_OVER, _E.OPENED): _S.RESTORING,
            (_S.FAILING_OVER, _E.GAVE_UP): _S.FAILED,
            (_S.FAILING_OVER, _E.CLOSE): _S.CLOSED,
            (_S.RESTORING, _E.RESTORED): _S.CONNECTED,
            (_S.RESTORING, _E.LOST): _S.FAILING_OVER,  # the next attempt of the same plan
            (_S.RESTORING, _E.CLOSE): _S.CLOSED,
            (_S.FAILED, _E.CLOSE): _S.CLOSED,
            (_S.CLOSED, _E.CLOSE): _S.CLOSED,  # close() is idempotent
        }
    )
)

# States in which the gate is closed: a waiter waits for one of the others.
_IN_TRANSIT: Final = frozenset({_S.CONNECTING, _S.FAILING_OVER, _S.RESTORING})


def next_state(state: ConnectionState, event: ManagerEvent) -> ConnectionState:
    """The state ``event`` leads to from ``state``, per ``TRANSITIONS``.

    Raises:
        IllegalStateError: The pair is not in the table.
    """
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalStateError(f"{event.name} is not allowed in state {state.name}") from None


# --- What the manager is given -----------------------------------------------------------------


class PhysicalConnection(Protocol):
    """One physical connection to one broker, as far as the manager needs to know it."""

    async def wait_closed(self) -> BaseException | None:
        """Return when the connection has ended: the error that ended it, None if orderly."""
        ...

    async def close(self) -> None:
        """Close the connection (idempotent); ``wait_closed`` then returns."""
        ...


P = TypeVar("P", bound=PhysicalConnection)
P_contra = TypeVar("P_contra", contravariant=True)

#: Opens one physical connection to one broker; raises on failure (the cause F4 reports).
Connector = Callable[[BrokerURL], Awaitable[P]]


class RestoreOrder(enum.IntEnum):
    """Suggested ``restore_order`` values: what a resource depends on is restored first."""

    TEMPORARY_DESTINATION = 0
    SESSION = 1
    PRODUCER = 2
    CONSUMER = 3
    BROWSER = 4


class Resource(Protocol[P_contra]):
    """Something built on the physical connection that failover must build again.

    Subclass it to inherit the no-op ``connection_lost``.
    """

    #: Lower restores first (see ``RestoreOrder``); ties in registration order.
    restore_order: int

    async def restore(self, connection: P_contra, epoch: int) -> None:
        """Build this resource again on ``connection`` (of ``epoch``), which the gate does
        not hand out yet: use it directly, never ``wait_connected()``.

        Raises:
            ConnectionLostError: The connection died meanwhile; the manager tries the next
                broker. Any other exception is reported as ``resource_not_restored``.
        """
        ...

    def connection_lost(self, epoch: int, cause: BaseException) -> None:
        """The connection of ``epoch`` was lost; called at once, before any reconnect (F7-F9:
        mark a transaction dirty, drop prefetched messages). Must not block."""
        return None


class FailoverListener(Protocol):
    """Failover notifications (F14); subclass it and override what you need.

    Any object will do: a method it lacks is not called. Called synchronously on the manager's
    event loop, in the order listeners were added; must not block. An exception is logged.
    """

    def failover_started(self, cause: BaseException) -> None:
        """The connection was lost and failover began; calls block until it ends (F2)."""
        return None

    def failover_completed(self, broker: BrokerURL, downtime: float) -> None:
        """Connected to ``broker`` and resources restored after ``downtime`` seconds."""
        return None

    def failover_failed(self, cause: BaseException) -> None:
        """The connection is gone for good (F4): the plan ran out, or failover is off."""
        return None

    def resource_not_restored(self, resource: Resource[Any], error: BaseException) -> None:
        """``resource.restore`` raised ``error``; the resource is left unrestored."""
        return None


def is_retriable_failure(error: BaseException) -> bool:
    """The default ``retriable``: whether another connection attempt may succeed after
    ``error``. An ``HAClientError`` says so itself (``retriable``, from the condition table);
    anything else (a refused socket, a timeout) is worth another try."""
    return error.retriable if isinstance(error, HAClientError) else True


@dataclass(frozen=True, slots=True)
class ManagerStatistics:
    """A snapshot of the manager.

    Attributes:
        state: The state when the snapshot was taken.
        broker: The broker of the current physical connection; None when there is none.
        epoch: The current epoch (the number of losses so far).
        failovers: Failovers completed (resources restored, gate open again).
        last_downtime: Seconds from loss to reconnection of the last completed failover.
        attempts: Connection attempts made in all (the first connect's included).
        brokers: The list the next failover walks (learned for ``exchange``).
    """

    state: ConnectionState
    broker: BrokerURL | None
    epoch: int
    failovers: int
    last_downtime: float | None
    attempts: int
    brokers: tuple[BrokerURL, ...]


class _Link(Generic[P]):
    """One physical connection and what is known of its end."""

    __slots__ = ("broker", "cause", "connection", "ended", "epoch", "scope")

    def __init__(self, connection: P, broker: BrokerURL, epoch: int) -> None:
        self.connection = connection
        self.broker = broker
        self.epoch = epoch
        self.cause: BaseException | None = None  # set once, when the loss is noticed
        self.ended = anyio.Event()
        self.scope = anyio.CancelScope()  # the task watching ``wait_closed``


# --- The manager -------------------------------------------------------------------------------


class ConnectionManager(Generic[P]):
    """The logical connection: connects, fails over, restores, and gates callers meanwhile.

    Args:
        connector: Opens one physical connection to one broker; raises on failure.
        brokers: The broker list (for ``exchange``, the seed list).
        policy: The failover policy (default: ``FailoverPolicy()``).
        rng: Draws jitter and ``randomize`` shuffles; seed it for an exact plan.
        retriable: Whether another attempt may help after a failure (default
            ``is_retriable_failure``); False gives up at once (rule 4).

    Raises:
        ConfigurationError: An empty list, or ``singlebroker`` with several brokers.
    """

    def __init__(
        self,
        connector: Connector[P],
        brokers: Sequence[BrokerURL],
        policy: FailoverPolicy | None = None,
        *,
        rng: random.Random | None = None,
        retriable: Callable[[BaseException], bool] = is_retriable_failure,
    ) -> None:
        url = FailoverURL(tuple(brokers), policy or FailoverPolicy())  # validates both
        self._connector = connector
        self._seed = url.brokers
        self._brokers = url.brokers
        self._policy = url.policy
        self._rng = rng or random.Random()
        self._retriable = retriable
        self._state = ConnectionState.CONNECTING
        self._epoch = 0
        self._link: _Link[P] | None = None  # the current physical connection
        self._failure: BaseException | None = None  # the last cause (F4)
        self._resources: dict[int, tuple[int, Resource[P]]] = {}  # id -> (sequence, resource)
        self._sequence = itertools.count()
        self._listeners: list[FailoverListener] = []
        self._lost_at = 0.0
        self._failovers = 0
        self._last_downtime: float | None = None
        self._attempts = 0
        self._started = False
        # Made in __aenter__: anyio objects need the running event loop.
        self._stack: AsyncExitStack | None = None
        self._tasks: TaskGroup | None = None
        self._settled: anyio.Event | None = None  # set while not _IN_TRANSIT
        self._run_scope: anyio.CancelScope | None = None
        self._restore_scope: anyio.CancelScope | None = None

    @classmethod
    def from_url(
        cls,
        connector: Connector[P],
        url: FailoverURL,
        *,
        rng: random.Random | None = None,
        retriable: Callable[[BaseException], bool] = is_retriable_failure,
    ) -> ConnectionManager[P]:
        """A manager for ``url``'s brokers and policy (its connection options are not used)."""
        return cls(connector, url.brokers, url.policy, rng=rng, retriable=retriable)

    # --- Lifetime -------------------------------------------------------------------------

    async def __aenter__(self) -> ConnectionManager[P]:
        if self._stack is not None:
            raise IllegalStateError("a ConnectionManager can be entered only once")
        stack = AsyncExitStack()
        self._tasks = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        self._settled = anyio.Event()
        self._run_scope = anyio.CancelScope()
        if self._state is not ConnectionState.CONNECTING:  # closed before entering
            self._settled.set()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
        assert self._stack is not None
        await self._stack.__aexit__(exc_type, exc, tb)

    async def start(self) -> None:
        """Connect for the first time, following the startup budget
        (``policy.attempts(..., startup=True)``; at least one attempt on the first broker,
        even with ``nofailover``), then watch the connection and fail over when it ends.

        Raises:
            ConnectionFailedError: Every attempt failed (``.cause``: the last failure); the
                state is FAILED.
            ClosedError: The manager was closed meanwhile.
            IllegalStateError: Not inside ``async with``, or called twice.
        """
        tasks = self._entered()
        if self._started:
            raise IllegalStateError("start() was already called")
        self._started = True
        if self._state is not ConnectionState.CLOSED:
            tasks.start_soon(self._supervise, name="haclient failover supervisor")
        await self._wait(None)

    async def close(self) -> None:
        """Close the logical connection: state CLOSED, waiters and later calls raise
        ``ClosedError``, an ongoing failover is cancelled and the physical connection closed.

        Idempotent; the cleanup is shielded from cancellation.
        """
        if self._state is ConnectionState.CLOSED:
            return
        self._transition(ManagerEvent.CLOSE)
        _log.debug("closing the connection")
        if self._run_scope is not None:
            self._run_scope.cancel()
        link, self._link = self._link, None
        if link is not None:
            link.scope.cancel()
            await _close_quietly(link.connection)

    # --- The gate -------------------------------------------------------------------------

    async def wait_connected(self, *, timeout: float | None = None) -> tuple[P, int]:
        """The current physical connection and its epoch, once the state is CONNECTED.

        Returns at once, without a checkpoint, when connected. During connect and failover it
        blocks (F2) and then returns the *new* connection and epoch (F3).

        Args:
            timeout: Seconds to wait at most; the shorter of this and ``policy.timeout`` holds
                (None: only the policy's, or no limit).

        Raises:
            FailoverTimeoutError: Still not connected after the limit (failover goes on, F4).
            ConnectionFailedError: Failover gave up (F4); ``.cause`` is the last failure.
            ClosedError: The manager is closed (or is closed while waiting).
            IllegalStateError: Called outside ``async with``.
        """
        link = self._link
        if self._state is ConnectionState.CONNECTED and link is not None:
            return link.connection, link.epoch
        limits = [t for t in (timeout, self._policy.timeout) if t is not None]
        return await self._wait(min(limits) if limits else None)

    async def _wait(self, limit: float | None) -> tuple[P, int]:
        deadline = math.inf if limit is None else anyio.current_time() + limit
        while True:
            state, link = self._state, self._link
            if state is ConnectionState.CONNECTED and link is not None:
                return link.connection, link.epoch
            if state is ConnectionState.FAILED:
                raise ConnectionFailedError(cause=self._failure)
            if state is ConnectionState.CLOSED:
                raise ClosedError("the connection is closed")
            settled = self._settled
            if settled is None:
                raise IllegalStateError("use the manager inside `async with` first")
            with anyio.move_on_at(deadline):
                await settled.wait()
            if not settled.is_set():
                raise FailoverTimeoutError(timeout=limit)

    def report_lost(self, epoch: int, cause: BaseException | None = None) -> bool:
        """Tell the manager that the physical connection of ``epoch`` is dead (a caller saw
        it fail before ``wait_closed`` returned). The gate closes at once and failover starts
        as if the connection had ended; the manager closes that connection.

        Returns:
            True if this started the failover; False for a stale epoch or a loss already
            known (idempotent).
        """
        link = self._link
        if link is None or link.epoch != epoch:
            return False
        return self._on_lost(link, cause)

    # --- Resources and listeners -----------------------------------------------------------

    def register(self, resource: Resource[P]) -> None:
        """Restore ``resource`` after every failover from now on (until ``unregister``).

        Raises:
            ClosedError: The manager is closed.
        """
        if self._state is ConnectionState.CLOSED:
            raise ClosedError("the connection is closed")
        self._resources.setdefault(id(resource), (next(self._sequence), resource))

    def unregister(self, resource: Resource[P]) -> None:
        """Forget ``resource`` (no error if unknown); a restore in progress skips it."""
        self._resources.pop(id(resource), None)

    def add_listener(self, listener: FailoverListener) -> None:
        """Call ``listener`` on failover events (F14), after those added before it."""
        self._listeners.append(listener)

    def remove_listener(self, listener: FailoverListener) -> None:
        """Stop calling ``listener`` (no error if unknown)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    # --- Exchange (F12) --------------------------------------------------------------------

    def learn_brokers(
        self, brokers: Iterable[BrokerURL], *, source: BrokerURL | None = None
    ) -> tuple[BrokerURL, ...]:
        """Replace the list the next failover walks with ``brokers`` (newest wins), followed
        by the seed brokers (``url.merge_broker_lists``). Only for ``exchange``; ignored for
        the other methods.

        Args:
            brokers: The list a broker advertised.
            source: The broker that advertised it: when it is ``amqps``, advertised ``amqp``
                entries are refused (no downgrade). Default: the current broker, or, when
                there is none (e.g. inside the connector: pass it), amqps if any seed is.

        Returns:
            The list the next failover will walk.
        """
        brokers = tuple(brokers)
        if self._policy.method is not FailoverMethod.EXCHANGE:
            _log.debug("ignoring an advertised broker list: failover.method is not exchange")
            return self._brokers
        source = source or self.broker
        secure = source.secure if source is not None else any(b.secure for b in self._seed)
        self._brokers = merge_broker_lists(self._seed, brokers, secure=secure)
        _log.info("brokers for the next failover: %s", ", ".join(map(str, self._brokers)))
        return self._brokers

    # --- Views ----------------------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        """The current state."""
        return self._state

    @property
    def epoch(self) -> int:
        """The current epoch: 0 for the first physical connection, plus one per loss."""
        return self._epoch

    @property
    def broker(self) -> BrokerURL | None:
        """The broker of the current physical connection (also while RESTORING), or None."""
        return None if self._link is None else self._link.broker

    @property
    def brokers(self) -> tuple[BrokerURL, ...]:
        """The list the next failover walks (the seed list, or the one learned, F12)."""
        return self._brokers

    @property
    def failure(self) -> BaseException | None:
        """The last failure (the cause ``ConnectionFailedError`` carries once FAILED)."""
        return self._failure

    @property
    def policy(self) -> FailoverPolicy:
        """The failover policy."""
        return self._policy

    def statistics(self) -> ManagerStatistics:
        """A frozen snapshot of the state and the counters."""
        return ManagerStatistics(
            state=self._state,
            broker=self.broker,
            epoch=self._epoch,
            failovers=self._failovers,
            last_downtime=self._last_downtime,
            attempts=self._attempts,
            brokers=self._brokers,
        )

    # --- The supervisor: connect, watch, fail over -----------------------------------------

    async def _supervise(self) -> None:
        assert self._run_scope is not None
        with self._run_scope:
            async with anyio.create_task_group() as watchers:
                if await self._walk(self._plan(None, startup=True), watchers):
                    while await self._fail_over(watchers):
                        pass
                elif self._state is ConnectionState.CONNECTING:
                    self._transition(ManagerEvent.GAVE_UP)
                    # start() raises it to the caller: an ERROR log would tell it twice.
                    _log.info("could not connect: %s", self._failure)
                watchers.cancel_scope.cancel()

    async def _fail_over(self, watchers: TaskGroup) -> bool:
        """Wait for the current connection to end, then fail over; False when it is over."""
        link = self._link
        assert link is not None
        await link.ended.wait()
        await _close_quietly(link.connection)
        if self._state is not ConnectionState.FAILING_OVER:  # gave up at once (rule 4)
            return False
        if await self._walk(self._plan(link.broker, startup=False), watchers):
            self._completed()
            return True
        self._transition(ManagerEvent.GAVE_UP)
        _log.error("failover gave up: %s", self._failure)
        self._notify("failover_failed", self._cause())
        return False

    def _plan(self, lost: BrokerURL | None, *, startup: bool) -> Iterator[Attempt[BrokerURL]]:
        brokers = self._brokers
        start = None if lost is None else _index_of(brokers, lost)
        plan = self._policy.attempts(brokers, start_index=start, startup=startup, rng=self._rng)
        first = next(plan, None)
        if first is None:
            # nofailover, or cyclecount=0: no *re*connect, but the first connect is one try.
            return iter([Attempt(0, brokers[0], 0.0, 1)] if startup else [])
        return itertools.chain([first], plan)

    async def _walk(self, plan: Iterator[Attempt[BrokerURL]], watchers: TaskGroup) -> bool:
        """Connect (and, on failover, restore) following ``plan``. False when the plan ran
        out or a failure no reconnect can fix came up; ``self._failure`` says which."""
        failures = 0
        for attempt in plan:
            if attempt.delay > 0:
                await anyio.sleep(attempt.delay)
            connection = await self._try(attempt)
            if connection is None:
                failures += 1
                self._log_failure(attempt, failures)
                if not self._retriable(self._cause()):
                    return False
                continue
            if self._state is ConnectionState.CLOSED:  # closed while the connector ran
                await _close_quietly(connection)
                return False
            link = self._open(connection, attempt.broker, watchers)
            if self._state is ConnectionState.CONNECTED:  # the first connect
                return True
            if await self._restore(link):
                self._transition(ManagerEvent.RESTORED)
                return True
            await _close_quietly(link.connection)  # lost during restore: the next attempt
            if not self._retriable(self._cause()):
                return False
        return False

    async def _try(self, attempt: Attempt[BrokerURL]) -> P | None:
        self._attempts += 1
        _log.debug("connecting to %s (attempt %d)", attempt.broker, attempt.number)
        try:
            return await self._connector(attempt.broker)
        except Exception as exc:  # the connector's failure is the cause F4 reports
            self._failure = exc
            return None

    def _open(self, connection: P, broker: BrokerURL, watchers: TaskGroup) -> _Link[P]:
        link = _Link(connection, broker, self._epoch)
        self._link = link
        self._transition(ManagerEvent.OPENED)
        watchers.start_soon(self._watch, link)
        _log.info("connected to %s (epoch %d)", broker, link.epoch)
        return link

    async def _watch(self, link: _Link[P]) -> None:
        with link.scope:
            try:
                cause = await link.connection.wait_closed()
            except Exception as exc:
                cause = exc
            self._on_lost(link, cause)

    def _on_lost(self, link: _Link[P], cause: BaseException | None) -> bool:
        """The loss, noticed: close the gate, advance the epoch, tell resources and listeners
        (all in one step, rule 2). The supervisor does the rest."""
        if link is not self._link or link.cause is not None or self._state not in _LIVE:
            return False
        if cause is None:
            cause = ConnectionLostError("the broker closed the connection")
        link.cause = self._failure = cause
        link.scope.cancel()
        self._link = None
        was_connected = self._state is ConnectionState.CONNECTED
        give_up = was_connected and (
            self._policy.method is FailoverMethod.NOFAILOVER or not self._retriable(cause)
        )
        self._epoch += 1
        self._transition(ManagerEvent.GAVE_UP if give_up else ManagerEvent.LOST)
        _log.warning("lost the connection to %s (epoch %d): %s", link.broker, link.epoch, cause)
        for resource in self._ordered_resources():
            _call(resource.connection_lost, link.epoch, cause)
        if give_up:
            self._notify("failover_failed", cause)
        elif was_connected:
            self._lost_at = anyio.current_time()
            self._notify("failover_started", cause)
        if self._restore_scope is not None:
            self._restore_scope.cancel()
        link.ended.set()
        return True

    async def _restore(self, link: _Link[P]) -> bool:
        """Give every resource its turn; False when the connection was lost meanwhile."""
        # _on_lost cancels this scope: a restore waiting on the dead connection stops there.
        self._restore_scope = scope = anyio.CancelScope()
        try:
            with scope:
                for resource in self._ordered_resources():
                    if link.cause is not None:
                        break
                    if id(resource) not in self._resources:  # unregistered meanwhile
                        continue
                    try:
                        await resource.restore(link.connection, link.epoch)
                    except ConnectionLostError as exc:
                        self._on_lost(link, exc)
                    except Exception as exc:
                        if link.cause is None:  # not a symptom of the loss
                            self._not_restored(resource, exc)
        finally:
            self._restore_scope = None
        return link.cause is None

    def _not_restored(self, resource: Resource[P], error: Exception) -> None:
        _log.error("could not restore %r: %s", resource, error, exc_info=error)
        self._notify("resource_not_restored", resource, error)

    def _completed(self) -> None:
        if self._state is not ConnectionState.CONNECTED:  # closed meanwhile
            return
        broker = self.broker
        assert broker is not None
        downtime = anyio.current_time() - self._lost_at
        self._failovers += 1
        self._last_downtime = downtime
        _log.info("failover to %s completed after %.3f s", broker, downtime)
        self._notify("failover_completed", broker, downtime)

    # --- Helpers --------------------------------------------------------------------------

    def _transition(self, event: ManagerEvent) -> None:
        # Once CLOSED, the supervisor may run on until its next checkpoint, where the
        # cancellation lands: what it decides meanwhile no longer matters.
        if self._state is ConnectionState.CLOSED and event is not ManagerEvent.CLOSE:
            return
        self._state = next_state(self._state, event)
        settled = self._settled
        if settled is None:
            return
        if self._state not in _IN_TRANSIT:
            settled.set()
        elif settled.is_set():
            self._settled = anyio.Event()

    def _ordered_resources(self) -> list[Resource[P]]:
        entries = sorted(self._resources.values(), key=lambda e: (e[1].restore_order, e[0]))
        return [resource for _, resource in entries]

    def _notify(self, name: str, *args: object) -> None:
        """Call ``name`` on every listener that has it (F14), in the order they were added."""
        if self._state is ConnectionState.CLOSED:
            return
        for listener in list(self._listeners):
            method = getattr(listener, name, None)
            if method is not None:
                _call(method, *args)

    def _cause(self) -> BaseException:
        return self._failure or ConnectionLostError("no connection attempt was made")

    def _log_failure(self, attempt: Attempt[BrokerURL], failures: int) -> None:
        every = self._policy.warn_after_attempts
        level = logging.WARNING if every > 0 and failures % every == 0 else logging.INFO
        _log.log(
            level,
            "attempt %d to connect to %s failed (%d failed so far): %s",
            attempt.number,
            attempt.broker,
            failures,
            self._failure,
        )

    def _entered(self) -> TaskGroup:
        if self._tasks is None:
            raise IllegalStateError("use the manager inside `async with` first")
        return self._tasks


# States in which there is a physical connection that can be lost.
_LIVE: Final = frozenset({ConnectionState.CONNECTED, ConnectionState.RESTORING})


def _index_of(brokers: Sequence[BrokerURL], broker: BrokerURL) -> int | None:
    """Where ``broker`` is in ``brokers`` (same scheme, host and port), if it is."""
    key = (broker.scheme, broker.host.lower(), broker.port)
    for i, other in enumerate(brokers):
        if (other.scheme, other.host.lower(), other.port) == key:
            return i
    return None


def _call(callback: Callable[..., object], *args: Any) -> None:
    """Run a callback of user or upper-layer code; an exception is logged, not raised."""
    try:
        callback(*args)
    except Exception:
        _log.exception("a failover callback raised (ignored): %r", callback)


async def _close_quietly(connection: PhysicalConnection) -> None:
    """Close a physical connection, shielded and bounded; an error is logged, not raised."""
    with anyio.move_on_after(_CLOSE_GRACE, shield=True):
        try:
            await connection.close()
        except Exception:
            _log.debug("closing a physical connection failed", exc_info=True)
