"""The supervisor: the background task that connects, watches, fails over and restores.

How this works: ``Supervisor.run`` is one task. It connects following a ``ReconnectPlan``
(``failover.schedule``: which broker next, how long to wait, when to give up), watches the
physical connection, and when it ends fails over: it walks the next plan, restores the
registered resources tier by tier on the new connection, and tells the gate. It reports every
step to the ``ConnectionGate`` it is given (``failover.gate``), which holds the state and the
waiting callers, and the failover events to the ``Listeners`` (F14). Every decision on the state
is a pure function of ``failover.states`` (which event a loss is, what a failed restore means,
whether an event is still reported, whether a failed attempt is a broker's refusal of trust and
every broker of the pass refused); this module applies them. It holds the rest of what the
logical connection knows: the epoch, the current physical connection, the broker lists, the
resources, the last failures and the counters. ``failover.manager.ConnectionManager`` holds a
supervisor and a gate and is the public API; the rules they keep together are listed there.
"""

from __future__ import annotations

import logging
import random
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Final, Generic

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup

from failover.errors import ConnectionLostError, PreferredBrokerAvailable
from failover.gate import ConnectionGate
from failover.listeners import FailoverEvent, Listeners, call_quietly
from failover.policy import Attempt, FailoverMethod, FailoverPolicy
from failover.protocols import (
    Connector,
    Finish,
    P,
    Resource,
    restore_tiers,
)
from failover.schedule import ReconnectPlan, Stop, Wait
from failover.standby import Standby, close_quietly
from failover.states import (
    LIVE,
    ConnectionState,
    ManagerEvent,
    RestoreFailure,
    announced_list,
    is_refusal,
    loss_event,
    preferred_brokers,
    refusal_error,
    refused_everywhere,
    reports_events,
    restore_failure,
    return_due,
)
from failover.url import BrokerURL, merge_broker_lists

__all__ = ["Supervisor", "close_quietly"]

_log = logging.getLogger("haclient.failover")

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
    """The task behind one logical connection, and what it knows (see ``ConnectionManager``
    for the arguments; ``brokers`` and ``policy`` are validated there).

    Args:
        gate: Where it reports the state and the current connection.
        listeners: Who hears of failover events (F14).
        reconnect_wait: A tenacity wait replacing the policy's delays (``failover.schedule``).
        reconnect_stop: A tenacity stop replacing the policy's pass count and time budget.
        standby_connector: Opens the ready connections (F16, F17): like ``connector``, but
            for a connection that may never be used (default: ``connector``).
        adopt: Called with each physical connection when it becomes the one in use (the
            first connect, each failover), before anything is restored on it.
    """

    def __init__(
        self,
        gate: ConnectionGate[P],
        listeners: Listeners,
        connector: Connector[P],
        brokers: tuple[BrokerURL, ...],
        policy: FailoverPolicy,
        *,
        rng: random.Random,
        retriable: Callable[[BaseException], bool],
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
        reconnect_wait: Wait | None = None,
        reconnect_stop: Stop | None = None,
        standby_connector: Connector[P] | None = None,
        adopt: Callable[[P], object] | None = None,
    ) -> None:
        self._gate = gate
        self._listeners = listeners
        self._connector = connector
        self._seed = self._brokers = brokers
        self._policy = policy
        self._rng = rng
        self._retriable = retriable
        self._clock = clock
        self._sleep = sleep
        self._wait_strategy = reconnect_wait
        self._stop_strategy = reconnect_stop
        self._epoch = 0
        self._link: _Link[P] | None = None  # the current physical connection
        self._failure: BaseException | None = None  # the last cause (F4)
        self._failures: dict[str, BaseException] = {}  # broker -> its last, in the last walk
        self._resources: dict[int, Resource[P]] = {}  # id -> resource, in registration order
        self._lost_at = 0.0
        self._failovers = 0
        self._last_downtime: float | None = None
        self._attempts = 0
        self._stopped = False
        self._run_scope: anyio.CancelScope | None = None
        self._restore_scope: anyio.CancelScope | None = None
        self._adopt = adopt
        self._preferred = preferred_brokers(policy, brokers)
        self._returns = 0
        self._returning = False  # the failover under way is a return (F16)
        self._handover: tuple[P, BrokerURL] | None = None  # a preferred broker's, to move to
        self._standby: Standby[P] = Standby(
            standby_connector or connector,
            policy,
            lambda: (self._gate.state, self.broker, self._brokers, self._preferred),
            self._return_to,
            sleep=sleep,
            rng=rng,
        )

    # --- What the manager reads ------------------------------------------------------------

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
        """The list the next failover walks."""
        return self._brokers

    @property
    def policy(self) -> FailoverPolicy:
        """The failover policy."""
        return self._policy

    @property
    def failure(self) -> BaseException | None:
        """The last failure."""
        return self._failure

    @property
    def failures(self) -> Mapping[str, BaseException]:
        """The last failure of each broker the last walk tried (a live view)."""
        return self._failures

    @property
    def counters(self) -> tuple[int, float | None, int]:
        """Failovers completed, the downtime of the last one, connection attempts made."""
        return self._failovers, self._last_downtime, self._attempts

    @property
    def returns(self) -> int:
        """Completed failovers that were returns to a preferred broker (F16)."""
        return self._returns

    @property
    def standby(self) -> BrokerURL | None:
        """The broker of the warm spare held now (F17), if any."""
        return self._standby.spare_broker

    # --- What the manager tells it ---------------------------------------------------------

    def register(self, resource: Resource[P]) -> None:
        """Restore ``resource`` after every failover from now on."""
        self._resources.setdefault(id(resource), resource)

    def unregister(self, resource: Resource[P]) -> None:
        """Forget ``resource`` (no error if unknown); a restore in progress skips it."""
        self._resources.pop(id(resource), None)

    def report_lost(self, epoch: int, cause: BaseException | None) -> bool:
        """The physical connection of ``epoch`` is dead: True if this started the failover."""
        link = self._link
        if link is None or link.epoch != epoch:
            return False
        return self._on_lost(link, cause)

    def learn_brokers(
        self, brokers: Iterable[BrokerURL], source: BrokerURL | None
    ) -> tuple[BrokerURL, ...]:
        """Replace the list the next failover walks (F12, ``exchange`` only): newest first,
        then the seeds; an ``amqps`` source refuses ``amqp`` entries. Returns the new list."""
        brokers = tuple(brokers)
        if self._policy.method is not FailoverMethod.EXCHANGE:
            _log.debug("ignoring an advertised broker list: failover.method is not exchange")
            return self._brokers
        source = source or self.broker
        secure = source.secure if source is not None else any(b.secure for b in self._seed)
        self._brokers = merge_broker_lists(self._seed, brokers, secure=secure)
        _log.info("brokers for the next failover: %s", ", ".join(map(str, self._brokers)))
        self._standby.poke()
        return self._brokers

    def announce_brokers(
        self, brokers: Iterable[BrokerURL], source: BrokerURL | None
    ) -> tuple[BrokerURL, ...]:
        """A broker's Open (from ``source``) announced ``brokers``: change the list the next
        failover walks as ``failover.amqpOpenServerListAction`` says (``announced_list``).
        Returns the list."""
        learned = announced_list(
            self._policy,
            brokers=self._brokers,
            seed=self._seed,
            announced=tuple(brokers),
            source=source or self.broker,
        )
        if learned is not None and learned != self._brokers:
            self._brokers = learned
            _log.info("brokers for the next failover: %s", ", ".join(map(str, learned)))
            self._standby.poke()
        return self._brokers

    async def stop(self) -> None:
        """End the task (or keep it from starting) and close the physical connection; the
        gate is CLOSED already. Shielded and bounded."""
        self._stopped = True
        if self._run_scope is not None:
            self._run_scope.cancel()
        link, self._link = self._link, None
        if link is not None:
            link.scope.cancel()
            await close_quietly(link.connection)
        handover, self._handover = self._handover, None
        if handover is not None:
            await close_quietly(handover[0])
        await self._standby.close()

    # --- The task: connect, watch, fail over -----------------------------------------------

    async def run(self) -> None:
        """Connect, then fail over whenever the connection ends, until failover gives up or
        ``stop`` is called."""
        self._run_scope = scope = anyio.CancelScope()
        if self._stopped:
            return
        with scope:
            async with anyio.create_task_group() as watchers:
                if await self._walk(self._plan(None, startup=True), watchers):
                    self._established()
                    if self._standby.enabled:
                        watchers.start_soon(self._standby.run, name="haclient failover standby")
                    while await self._fail_over(watchers):
                        pass
                elif self._gate.state is ConnectionState.CONNECTING:
                    self._gate.fail(self._failure, self._failures)
                    # start() raises it to the caller: an ERROR log would tell it twice.
                    _log.info("could not connect: %s", self._failure)
                    self._notify(FailoverEvent.CONNECT_FAILED, cause=self._cause())
                watchers.cancel_scope.cancel()

    async def _fail_over(self, watchers: TaskGroup) -> bool:
        """Wait for the current connection to end, then fail over; False when it is over."""
        link = self._link
        assert link is not None
        await link.ended.wait()
        await close_quietly(link.connection)
        if self._gate.state is not ConnectionState.FAILING_OVER:  # gave up at once (rule 4)
            await self._standby.close()
            return False
        if await self._walk(self._plan(link.broker, startup=False), watchers):
            self._completed()
            return True
        self._gate.fail(self._failure, self._failures)
        await self._standby.close()
        _log.error("failover gave up: %s", self._failure)
        self._notify(FailoverEvent.FAILED, cause=self._cause())
        return False

    def _plan(self, lost: BrokerURL | None, *, startup: bool) -> ReconnectPlan:
        return ReconnectPlan(
            self._policy,
            self._brokers,
            lost,
            startup=startup,
            began=self._clock() if startup else self._lost_at,
            rng=self._rng,
            wait=self._wait_strategy,
            stop=self._stop_strategy,
        )

    async def _walk(self, plan: ReconnectPlan, watchers: TaskGroup) -> bool:
        """Connect (and, on failover, restore) following ``plan``. False when it ended (it ran
        out, the budget was spent) or a failure no reconnect can fix came up;
        ``self._failure`` says what failed last."""
        self._failures = {}
        try:
            return await self._walk_plan(plan, watchers)
        finally:
            self._gate.attempting(None)

    async def _walk_plan(self, plan: ReconnectPlan, watchers: TaskGroup) -> bool:
        failed: BaseException | None = None
        refused = False  # the last attempt was a refusal of trust
        failures = 0
        # broker -> its refusal, for each broker whose last attempt was one (invariant 10)
        refusals: dict[str, BaseException] = {}
        ready = self._take_ready()
        if ready is not None:  # the handover of a return, or the warm spare: restore at once
            if await self._restore_on(*ready, watchers):
                return True
            failed = self._cause()
            if not self._retriable(failed):
                return False
        while (attempt := plan.next(self._clock(), failed, refused=refused)) is not None:
            self._gate.attempting(attempt)
            if attempt.delay > 0:
                await self._sleep(attempt.delay)
            connection = await self._try(attempt)
            if connection is None:
                failed = self._cause()
                failures += 1
                refused = self._note_refusal(attempt, failed, refusals, failures)
                if refused and refused_everywhere(refusals, plan.brokers_of_a_pass):
                    self._failure = refusal_error(refusals, plan.brokers_of_a_pass, failed)
                    return False
                if not refused and not self._retriable(failed):
                    return False
                continue
            if self._gate.state is ConnectionState.CLOSED:  # closed while the connector ran
                await close_quietly(connection)
                return False
            if self._gate.state is ConnectionState.CONNECTING:  # the first connect
                self._open(connection, attempt.broker, watchers)
                return True
            if await self._restore_on(connection, attempt.broker, watchers):
                return True
            failed = self._cause()
            refused = False  # it accepted the connection
            refusals.pop(str(attempt.broker), None)
            if not self._retriable(failed):
                return False
        _log.info("the reconnect schedule ends after %d attempts", plan.made)
        return False

    def _take_ready(self) -> tuple[P, BrokerURL] | None:
        """A connection already open for this failover: the preferred broker's that started
        a return, else the warm spare when still open (F16, F17)."""
        handover, self._handover = self._handover, None
        if handover is not None and handover[0].is_open:
            return handover
        return self._standby.take_spare()

    async def _restore_on(self, connection: P, broker: BrokerURL, watchers: TaskGroup) -> bool:
        """Make ``connection`` the one in use and restore on it; False when it was lost
        meanwhile (closed, its failure recorded: the next attempt)."""
        link = self._open(connection, broker, watchers)
        if await self._restore(link):
            self._gate.apply(ManagerEvent.RESTORED)
            return True
        await close_quietly(link.connection)
        self._failures[str(broker)] = self._cause()
        return False

    def _return_to(self, connection: P, broker: BrokerURL) -> bool:
        """A preferred broker accepted ``connection``: start the return (F16) as a loss of the
        connection in use whose cause is ``PreferredBrokerAvailable``; the failover takes
        ``connection`` first. False (the caller closes it) when no return is due any more."""
        link = self._link
        state = self._gate.state
        if link is None or not return_due(self._policy, state, link.broker, self._preferred):
            return False
        self._handover = (connection, broker)
        _log.info("returning from %s to the preferred broker %s", link.broker, broker)
        cause = PreferredBrokerAvailable(broker=str(broker))
        if not self._on_lost(link, cause):
            self._handover = None
            return False
        return True

    def _note_refusal(
        self,
        attempt: Attempt[BrokerURL],
        failed: BaseException,
        refusals: dict[str, BaseException],
        failures: int,
    ) -> bool:
        """Log the failed ``attempt`` and keep ``refusals`` (broker -> its refusal, for each
        broker whose last attempt was one) up to date; True when ``failed`` is a refusal of
        trust (invariant 10 of ``failover.states``). A broker's first refusal is a warning
        that says which broker and why."""
        key = str(attempt.broker)
        refused = is_refusal(failed, retriable=self._retriable(failed))
        self._log_failure(attempt, failures, warn=refused and key not in refusals)
        if refused:
            refusals[key] = failed
        else:
            refusals.pop(key, None)
        return refused

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
        if self._adopt is not None:
            call_quietly(self._adopt, connection)
        self._gate.open(connection, link.epoch)
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
        (all in one step, rule 2). The task does the rest."""
        state = self._gate.state
        if link is not self._link or link.cause is not None or state not in LIVE:
            return False
        if cause is None:
            cause = ConnectionLostError("the broker closed the connection")
        link.cause = self._failure = cause
        link.scope.cancel()
        self._link = None
        event = loss_event(state, self._policy.method, self._retriable(cause))
        self._epoch += 1
        self._gate.drop()
        if event is ManagerEvent.GAVE_UP:
            self._gate.fail(cause, self._failures)
        else:
            self._gate.apply(event)
        self._standby.poke()
        if isinstance(cause, PreferredBrokerAvailable):
            self._returning = True
            _log.info("leaving %s (epoch %d): %s", link.broker, link.epoch, cause)
        else:
            _log.warning("lost the connection to %s (epoch %d): %s", link.broker, link.epoch, cause)
        for resource in self._ordered_resources():
            call_quietly(resource.connection_lost, link.epoch, cause)
        if event is ManagerEvent.GAVE_UP:
            self._notify(FailoverEvent.FAILED, cause=cause)
        elif state is ConnectionState.CONNECTED:
            self._lost_at = self._clock()
            self._notify(FailoverEvent.INTERRUPTED, broker=link.broker, cause=cause)
        if self._restore_scope is not None:
            self._restore_scope.cancel()
        link.ended.set()
        return True

    # --- Restoring ------------------------------------------------------------------------

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
        """Act on what ``failover.states.restore_failure`` says ``exc`` means (rule 3)."""
        meaning = restore_failure(
            exc,
            lost=link.cause is not None,
            connection_open=link.connection.is_open,
            retriable=self._retriable(exc),
        )
        if meaning is RestoreFailure.LOSS:
            self._on_lost(link, exc)
        elif meaning is RestoreFailure.ENDED:
            lost = ConnectionLostError(f"the connection ended during the restore: {exc}")
            lost.__cause__ = exc
            self._on_lost(link, lost)
        elif meaning is RestoreFailure.NOT_RESTORED:
            self._not_restored(resource, exc)

    def _not_restored(self, resource: Resource[P], error: Exception) -> None:
        _log.error("could not restore %r: %s", resource, error, exc_info=error)
        self._notify(FailoverEvent.NOT_RESTORED, resource=resource, error=error)

    def _completed(self) -> None:
        if self._gate.state is not ConnectionState.CONNECTED:  # closed meanwhile
            return
        assert self._link is not None
        broker = self._link.broker
        downtime = self._clock() - self._lost_at
        self._failovers += 1
        self._returns += self._returning
        self._returning = False
        self._last_downtime = downtime
        self._standby.poke()
        _log.info("failover to %s completed after %.3f s", broker, downtime)
        self._notify(FailoverEvent.RESTORED, broker=broker, downtime=downtime)

    def _established(self) -> None:
        """The first connect succeeded (it returned with no checkpoint since: still linked)."""
        assert self._link is not None
        self._notify(FailoverEvent.ESTABLISHED, broker=self._link.broker)

    # --- Helpers --------------------------------------------------------------------------

    def _ordered_resources(self) -> list[Resource[P]]:
        return [r for tier in restore_tiers(self._resources.values()) for r in tier]

    def _notify(self, event: FailoverEvent, **facts: object) -> None:
        """Tell the listeners of a failover event (F14), unless it no longer matters."""
        if reports_events(self._gate.state):
            self._listeners.tell(event, **facts)

    def _cause(self) -> BaseException:
        return self._failure or ConnectionLostError("no connection attempt was made")

    def _log_failure(self, attempt: Attempt[BrokerURL], failures: int, *, warn: bool) -> None:
        """Log a failed attempt: a warning when ``warn`` (a broker's first refusal of trust in
        a walk: which broker, and why) and every ``warn_after_attempts`` failures."""
        every = self._policy.warn_after_attempts
        warn = warn or (every > 0 and failures % every == 0)
        _log.log(
            logging.WARNING if warn else logging.INFO,
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
