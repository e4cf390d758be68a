"""The machinery under ``ConnectionManager``: its state, the gate's waiting, and the supervisor.

How this works: ``Supervisor`` holds everything the manager knows (the state, the epoch, the
current physical connection, the resources, the listeners, the counters) and does everything
that happens in the background: the supervisor task connects, watches the connection, fails
over (walking the plan of ``failover.states``, sleeping with the injected ``sleep``), restores
the resources in tiers, and applies every transition. ``failover.manager.ConnectionManager``
subclasses it with the public API; nothing else uses it. The rules it keeps are listed in
``failover.manager``.
"""

from __future__ import annotations

import logging
import math
import random
import traceback
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack
from typing import Any, Final, Generic

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from failover.errors import (
    ClosedError,
    ConnectionFailedError,
    ConnectionLostError,
    FailoverTimeoutError,
    IllegalStateError,
)
from failover.policy import Attempt, FailoverPolicy
from failover.protocols import (
    Connector,
    FailoverListener,
    Finish,
    ManagedConnection,
    P,
    Resource,
    restore_tiers,
)
from failover.states import (
    IN_TRANSIT,
    LIVE,
    ConnectionState,
    ManagerEvent,
    budget_delay,
    is_retriable_failure,
    loss_event,
    next_state,
    plan,
)
from failover.url import BrokerURL, FailoverURL

__all__ = ["Supervisor", "close_quietly"]

_log = logging.getLogger("haclient.failover")

# How long closing a dead physical connection may take before it is abandoned.
_CLOSE_GRACE: Final = 5.0

# Staged restores begun between two checkpoints (so that the first requests go out early).
_STAGED_BETWEEN_CHECKPOINTS: Final = 256


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


class Supervisor(Generic[P]):
    """The state of one logical connection and the supervisor task that drives it (see
    ``ConnectionManager`` for the arguments, which it validates)."""

    def __init__(
        self,
        connector: Connector[P],
        brokers: Sequence[BrokerURL],
        policy: FailoverPolicy | None = None,
        *,
        rng: random.Random | None = None,
        retriable: Callable[[BaseException], bool] = is_retriable_failure,
        clock: Callable[[], float] = anyio.current_time,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        url = FailoverURL(tuple(brokers), policy or FailoverPolicy())  # validates both
        self._connector = connector
        self._seed = self._brokers = url.brokers
        self._policy = url.policy
        self._rng = rng or random.Random()
        self._retriable = retriable
        self._clock = clock
        self._sleep = sleep
        self._state = ConnectionState.CONNECTING
        self._epoch = 0
        self._link: _Link[P] | None = None  # the current physical connection
        self._failure: BaseException | None = None  # the last cause (F4)
        self._failures: dict[str, BaseException] = {}  # broker -> its last, in the last walk
        self._resources: dict[int, Resource[P]] = {}  # id -> resource, in registration order
        self._listeners: list[FailoverListener] = []
        self._lost_at = 0.0
        self._failovers = 0
        self._last_downtime: float | None = None
        self._attempts = 0
        self._trying: Attempt[BrokerURL] | None = None  # the attempt under way or next
        self._started = False
        # Made in __aenter__: anyio objects need the running event loop.
        self._stack: AsyncExitStack | None = None
        self._tasks: TaskGroup | None = None
        self._settled: anyio.Event | None = None  # set while not IN_TRANSIT
        self._run_scope: anyio.CancelScope | None = None
        self._restore_scope: anyio.CancelScope | None = None

    # --- The gate: waiting ------------------------------------------------------------------

    async def _wait(self, limit: float | None) -> tuple[P, int]:
        deadline = math.inf if limit is None else self._clock() + limit
        while True:
            state, link = self._state, self._link
            if state is ConnectionState.CONNECTED and link is not None:
                return link.connection, link.epoch
            if state is ConnectionState.FAILED:
                raise ConnectionFailedError(cause=self._failure, failures=self._failures)
            if state is ConnectionState.CLOSED:
                raise ClosedError("the connection is closed")
            settled = self._settled
            if settled is None:
                raise IllegalStateError("use the manager inside `async with` first")
            if not await self._settles(settled, deadline):
                trying = self._trying
                raise FailoverTimeoutError(
                    timeout=limit,
                    broker=None if trying is None else str(trying.broker),
                    attempts=None if trying is None else trying.number,
                )

    async def _settles(self, settled: anyio.Event, deadline: float) -> bool:
        """Wait for ``settled`` until ``deadline`` (of ``clock``); whether it was set."""
        if deadline == math.inf:
            await settled.wait()
            return True
        async with anyio.create_task_group() as timer:
            timer.start_soon(self._expire, max(0.0, deadline - self._clock()), timer.cancel_scope)
            await settled.wait()
            timer.cancel_scope.cancel()
        return settled.is_set()

    async def _expire(self, delay: float, scope: anyio.CancelScope) -> None:
        await self._sleep(delay)
        scope.cancel()

    # --- The supervisor: connect, watch, fail over -----------------------------------------

    async def _supervise(self) -> None:
        assert self._run_scope is not None
        with self._run_scope:
            async with anyio.create_task_group() as watchers:
                began = self._clock()
                if await self._walk(self._plan(None, startup=True), watchers, began):
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
        await close_quietly(link.connection)
        if self._state is not ConnectionState.FAILING_OVER:  # gave up at once (rule 4)
            return False
        if await self._walk(self._plan(link.broker, startup=False), watchers, self._lost_at):
            self._completed()
            return True
        self._transition(ManagerEvent.GAVE_UP)
        _log.error("failover gave up: %s", self._failure)
        self._notify("failover_failed", self._cause())
        return False

    def _plan(self, lost: BrokerURL | None, *, startup: bool) -> Iterator[Attempt[BrokerURL]]:
        return plan(self._policy, self._brokers, lost, startup=startup, rng=self._rng)

    async def _walk(
        self, attempts: Iterator[Attempt[BrokerURL]], watchers: TaskGroup, began: float
    ) -> bool:
        """Connect (and, on failover, restore) following the plan ``attempts``, within the
        time budget counted from ``began`` (of ``clock``). False when the plan ran out, the
        budget was spent, or a failure no reconnect can fix came up; ``self._failure`` says
        what failed last."""
        self._failures = {}
        try:
            return await self._walk_plan(attempts, watchers, began)
        finally:
            self._trying = None

    async def _walk_plan(
        self, attempts: Iterator[Attempt[BrokerURL]], watchers: TaskGroup, began: float
    ) -> bool:
        failures = 0
        for attempt in attempts:
            delay = budget_delay(self._policy, attempt.delay, self._clock() - began)
            if delay is None:
                _log.info("the time budget of %g s is spent", self._policy.give_up_after)
                return False
            self._trying = attempt
            if delay > 0:
                await self._sleep(delay)
            connection = await self._try(attempt)
            if connection is None:
                failures += 1
                self._log_failure(attempt, failures)
                if not self._retriable(self._cause()):
                    return False
                continue
            if self._state is ConnectionState.CLOSED:  # closed while the connector ran
                await close_quietly(connection)
                return False
            link = self._open(connection, attempt.broker, watchers)
            if self._state is ConnectionState.CONNECTED:  # the first connect
                return True
            if await self._restore(link):
                self._transition(ManagerEvent.RESTORED)
                return True
            await close_quietly(link.connection)  # lost during restore: the next attempt
            self._failures[str(attempt.broker)] = self._cause()
            if not self._retriable(self._cause()):
                return False
        return False

    async def _try(self, attempt: Attempt[BrokerURL]) -> P | None:
        self._attempts += 1
        _log.debug("connecting to %s (attempt %d)", attempt.broker, attempt.number)
        try:
            return await self._connector(attempt.broker)
        except Exception as exc:  # the connector's failure is the cause F4 reports
            _drop_locals(exc)
            self._failure = self._failures[str(attempt.broker)] = exc
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
        if link is not self._link or link.cause is not None or self._state not in LIVE:
            return False
        if cause is None:
            cause = ConnectionLostError("the broker closed the connection")
        link.cause = self._failure = cause
        link.scope.cancel()
        self._link = None
        was_connected = self._state is ConnectionState.CONNECTED
        event = loss_event(self._state, self._policy.method, self._retriable(cause))
        self._epoch += 1
        self._transition(event)
        _log.warning("lost the connection to %s (epoch %d): %s", link.broker, link.epoch, cause)
        for resource in self._ordered_resources():
            _call(resource.connection_lost, link.epoch, cause)
        if event is ManagerEvent.GAVE_UP:
            self._notify("failover_failed", cause)
        elif was_connected:
            self._lost_at = self._clock()
            self._notify("failover_started", cause)
        if self._restore_scope is not None:
            self._restore_scope.cancel()
        link.ended.set()
        return True

    async def _restore(self, link: _Link[P]) -> bool:
        """Restore the resources tier by tier, each tier concurrently (rule 3); False when the
        connection was lost meanwhile."""
        # _on_lost cancels this scope: a restore waiting on the dead connection stops there.
        self._restore_scope = scope = anyio.CancelScope()
        try:
            with scope:
                for tier in restore_tiers(self._resources.values()):
                    if link.cause is not None:
                        break
                    await self._restore_tier(link, tier)
        finally:
            self._restore_scope = None
        return link.cause is None

    async def _restore_tier(self, link: _Link[P], tier: Sequence[Resource[P]]) -> None:
        """A task per resource, except for staged ones (``StagedResource``): all of those are
        begun first, with a checkpoint now and then so that their requests go out while the
        rest are built, and then finished in turn by one task."""
        async with anyio.create_task_group() as restoring:
            staged: list[tuple[Resource[P], Finish]] = []
            for resource in tier:
                begin = getattr(resource, "begin_restore", None)
                if begin is None:
                    restoring.start_soon(self._restore_one, link, resource)
                    continue
                finish = self._begin_one(link, resource, begin)
                if finish is not None:
                    staged.append((resource, finish))
                    if len(staged) % _STAGED_BETWEEN_CHECKPOINTS == 0:
                        await anyio.lowlevel.checkpoint()
            if staged:
                restoring.start_soon(self._finish_staged, link, staged)

    async def _restore_one(self, link: _Link[P], resource: Resource[P]) -> None:
        if id(resource) not in self._resources:  # unregistered meanwhile
            return
        try:
            await resource.restore(link.connection, link.epoch)
        except Exception as exc:
            self._restore_failed(link, resource, exc)

    def _begin_one(
        self, link: _Link[P], resource: Resource[P], begin: Callable[[P, int], Finish | None]
    ) -> Finish | None:
        if id(resource) not in self._resources or link.cause is not None:
            return None
        try:
            return begin(link.connection, link.epoch)
        except Exception as exc:
            self._restore_failed(link, resource, exc)
            return None

    async def _finish_staged(
        self, link: _Link[P], staged: Sequence[tuple[Resource[P], Finish]]
    ) -> None:
        for resource, finish in staged:
            if link.cause is not None:  # lost: what is left waits on a dead connection
                return
            try:
                await finish()
            except Exception as exc:
                self._restore_failed(link, resource, exc)

    def _restore_failed(self, link: _Link[P], resource: Resource[P], exc: Exception) -> None:
        """A resource's restore raised ``exc``: a loss (the next attempt), or a resource that
        cannot be restored (rule 3)."""
        if isinstance(exc, ConnectionLostError):
            self._on_lost(link, exc)
        elif link.cause is not None:  # a symptom of the loss
            return
        elif not link.connection.is_open:
            # Also a symptom of the loss (the broker's reason for closing, an attach cut
            # off), raised before the task watching ``wait_closed`` reported it. The loss is
            # the cause, not what the restore met: that may be an error no reconnect fixes.
            lost = ConnectionLostError(f"the connection ended during the restore: {exc}")
            lost.__cause__ = exc
            self._on_lost(link, lost)
        elif self._unanswered(exc):
            self._on_lost(link, exc)  # the broker stopped answering: the next attempt
        else:
            self._not_restored(resource, exc)

    def _unanswered(self, error: Exception) -> bool:
        """Whether a restore failed because the broker stopped answering (a retriable
        timeout, such as a Begin left unanswered by a paused broker), which a new connection
        may fix, rather than because of the resource itself (rule 3)."""
        return isinstance(error, TimeoutError) and self._retriable(error)

    def _not_restored(self, resource: Resource[P], error: Exception) -> None:
        _log.error("could not restore %r: %s", resource, error, exc_info=error)
        self._notify("resource_not_restored", resource, error)

    def _completed(self) -> None:
        if self._state is not ConnectionState.CONNECTED:  # closed meanwhile
            return
        assert self._link is not None
        broker = self._link.broker
        downtime = self._clock() - self._lost_at
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
        previous, self._state = self._state, next_state(self._state, event)
        if self._state is not previous:
            self._notify("state_changed", self._state)
        settled = self._settled
        if settled is None:
            return
        if self._state not in IN_TRANSIT:
            settled.set()
        elif settled.is_set():
            self._settled = anyio.Event()

    def _ordered_resources(self) -> list[Resource[P]]:
        return [r for tier in restore_tiers(self._resources.values()) for r in tier]

    def _notify(self, name: str, *args: object) -> None:
        """Call ``name`` on every listener that has it (F14), in the order they were added;
        once CLOSED, only the change to CLOSED itself."""
        if self._state is ConnectionState.CLOSED and name != "state_changed":
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


def _drop_locals(error: BaseException) -> None:
    """Clear the local variables of the finished frames in the tracebacks of ``error`` and of
    the errors it was raised from, keeping the tracebacks themselves (file, line, function).

    A failed attempt is kept as the cause F4 reports, and its frames held what the attempt
    built (its socket, task groups, events): kept until the next failure replaces it, those were
    the most numerous objects a failover left behind, and the collector walked them again and
    again while a thousand connections failed over together.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        current = current.__cause__ or current.__context__


def _call(callback: Callable[..., object], *args: Any) -> None:
    """Run a callback of user or upper-layer code; an exception is logged, not raised."""
    try:
        callback(*args)
    except Exception:
        _log.exception("a failover callback raised (ignored): %r", callback)


async def close_quietly(connection: ManagedConnection) -> None:
    """Close a physical connection, shielded and bounded; an error is logged, not raised."""
    with anyio.move_on_after(_CLOSE_GRACE, shield=True):
        try:
            await connection.close()
        except Exception:
            _log.debug("closing a physical connection failed", exc_info=True)
