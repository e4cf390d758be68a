"""The supervisor: the background task that connects, watches, fails over and restores.

How this works: ``Supervisor.run`` is one task. It connects, watches the physical connection,
and when it ends fails over, until failover gives up or ``stop`` is called. Its parts:

- the walk (``failover.walk.Walker``): attempt after attempt following a ``ReconnectPlan``
  (``failover.schedule``), a ready connection first; it keeps the attempts' record (the last
  failure, each broker's, the count);
- the restore (``failover.restore.Restore``): the registered resources, tier by tier, on the
  connection the walk opened;
- the ready connections (``failover.standby.Standby``): the warm spare and the probe of the
  preferred brokers, whose connection the failover of a return takes (F16, F17).

This module joins them: it makes a connection the one in use (``_use``: adopt it, open the
gate on it, watch it, restore on it), notices its loss (``_on_lost``: close the gate, advance
the epoch, tell the resources and listeners, in one step), starts a return when a probe
succeeds (``_return_to``: a loss whose cause is ``PreferredBrokerAvailable``), and counts the
failovers. It reports every step to the ``ConnectionGate`` it is given (``failover.gate``),
which holds the state and the waiting callers, and the failover events to the ``Listeners``
(F14). Every decision on the state is a pure function of ``failover.states`` (which event a
loss is, whether an event is still reported, whether a return is due); the parts apply them.
It holds what the logical connection knows: the epoch, the current physical connection, the
broker lists, the resources and the counters. ``failover.manager.ConnectionManager`` holds a
supervisor and a gate and is the public API; the rules they keep together are listed there.
"""

from __future__ import annotations

import logging
import random
import socket
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Generic

import anyio
from anyio.abc import TaskGroup

from failover.errors import ConnectionLostError, PreferredBrokerAvailable
from failover.gate import ConnectionGate
from failover.listeners import FailoverEvent, Listeners, call_quietly
from failover.policy import FailoverMethod, FailoverPolicy
from failover.ports import PortProbe, TcpProbe
from failover.protocols import Connector, P, Resource, restore_tiers
from failover.restore import Link, Restore
from failover.schedule import ReconnectPlan, Stop, Wait
from failover.standby import Standby, close_all, close_quietly
from failover.states import (
    LIVE,
    ConnectionState,
    ManagerEvent,
    announced_list,
    loss_event,
    preferred_brokers,
    reports_events,
    return_due,
)
from failover.url import BrokerURL, merge_broker_lists
from failover.walk import Walker

__all__ = ["Supervisor", "close_quietly", "port_probe"]

_log = logging.getLogger("haclient.failover")


async def _getaddrinfo(host: str, port: int) -> list[tuple[Any, Any, Any, Any, Any]]:
    return list(await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM))


def port_probe() -> PortProbe:
    """A failover's probe of refused ports (``failover.ports.TcpProbe``), host names resolved
    with anyio's ``getaddrinfo``."""
    return TcpProbe(_getaddrinfo, anyio.wait_readable)


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
        may_return: Whether a return (F16) may start now (``failover.standby``).
        startup_patience: How long the first connect keeps trying a broker starting up
            (``failover.schedule``; 0: not at all).
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
        may_return: Callable[[], bool] | None = None,
        startup_patience: float = 0.0,
        port_probe: Callable[[], PortProbe] | None = port_probe,
    ) -> None:
        self._gate = gate
        self._listeners = listeners
        self._seed = self._brokers = brokers
        self._policy = policy
        self._rng = rng
        self._retriable = retriable
        self._clock = clock
        self._wait_strategy = reconnect_wait
        self._stop_strategy = reconnect_stop
        self._startup_patience = startup_patience
        self._walker: Walker[P] = Walker(
            gate,
            connector,
            retriable=retriable,
            clock=clock,
            sleep=sleep,
            warn_after_attempts=policy.warn_after_attempts,
            port_probe=port_probe,
        )
        self._epoch = 0
        self._link: Link[P] | None = None  # the current physical connection
        self._resources: dict[int, Resource[P]] = {}  # id -> resource, in registration order
        self._lost_at = 0.0
        self._failovers = 0
        self._last_downtime: float | None = None
        self._stopped = False
        self._run_scope: anyio.CancelScope | None = None
        self._adopt = adopt
        self._preferred = preferred_brokers(policy, brokers)
        self._returns = 0
        self._returning = False  # the failover under way is a return (F16)
        self._standby: Standby[P] = Standby(
            standby_connector or connector,
            policy,
            lambda: (self._gate.state, self.broker, self._brokers, self._preferred),
            self._return_to,
            sleep=sleep,
            rng=rng,
            may_return=may_return,
            retriable=retriable,
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
        return self._walker.failure

    @property
    def failures(self) -> Mapping[str, BaseException]:
        """The last failure of each broker the last walk tried (a live view)."""
        return self._walker.failures

    @property
    def counters(self) -> tuple[int, float | None, int]:
        """Failovers completed, the downtime of the last one, connection attempts made."""
        return self._failovers, self._last_downtime, self._walker.attempts

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
        # together: the ready connections close within the same bound as the one in use
        in_use = [] if link is None else [link.connection]
        await close_all([*in_use, *self._standby.release()])

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
                    self._gate.fail(self._walker.failure, self._walker.failures)
                    # start() raises it to the caller: an ERROR log would tell it twice.
                    _log.info("could not connect: %s", self._walker.failure)
                    self._notify(FailoverEvent.CONNECT_FAILED, cause=self._walker.cause())
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
        self._gate.fail(self._walker.failure, self._walker.failures)
        await self._standby.close()
        _log.error("failover gave up: %s", self._walker.failure)
        self._notify(FailoverEvent.FAILED, cause=self._walker.cause())
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
            startup_patience=self._startup_patience if startup else 0.0,
        )

    async def _walk(self, plan: ReconnectPlan, watchers: TaskGroup) -> bool:
        """Connect (and, on failover, restore) following ``plan``, a ready connection first
        (``failover.walk``); False when the walk ended without a connection in use."""
        ready = self._standby.take_ready()
        return await self._walker.walk(plan, ready, lambda c, b: self._use(c, b, watchers))

    async def _use(self, connection: P, broker: BrokerURL, watchers: TaskGroup) -> bool:
        """Make ``connection`` the one in use and, on a failover, restore on it; False when it
        was lost meanwhile (closed, its cause recorded: the walk's next attempt)."""
        first = self._gate.state is ConnectionState.CONNECTING  # nothing to restore
        link = self._open(connection, broker, watchers)
        if first:
            return True
        restore = Restore(
            link,
            self._resources,
            retriable=self._retriable,
            lose=self._on_lost,
            not_restored=self._not_restored,
        )
        if await restore.run():
            self._gate.apply(ManagerEvent.RESTORED)
            return True
        await close_quietly(link.connection)
        return False

    def _return_to(self, connection: P, broker: BrokerURL) -> bool:
        """A preferred broker accepted ``connection``: start the return (F16) as a loss of the
        connection in use whose cause is ``PreferredBrokerAvailable``; the failover takes
        ``connection`` first. False (the caller closes it) when no return is due any more."""
        link = self._link
        state = self._gate.state
        if link is None or not return_due(self._policy, state, link.broker, self._preferred):
            return False
        _log.info("returning from %s to the preferred broker %s", link.broker, broker)
        return self._on_lost(link, PreferredBrokerAvailable(broker=str(broker)))

    def _open(self, connection: P, broker: BrokerURL, watchers: TaskGroup) -> Link[P]:
        link = Link(connection, broker, self._epoch)
        self._link = link
        if self._adopt is not None:
            call_quietly(self._adopt, connection)
        self._gate.open(connection, link.epoch)
        watchers.start_soon(self._watch, link)
        _log.info("connected to %s (epoch %d)", broker, link.epoch)
        return link

    async def _watch(self, link: Link[P]) -> None:
        with link.scope:
            try:
                cause = await link.connection.wait_closed()
            except Exception as exc:
                cause = exc
            self._on_lost(link, cause)

    def _on_lost(self, link: Link[P], cause: BaseException | None) -> bool:
        """The loss, noticed: close the gate, advance the epoch, tell resources and listeners
        (all in one step, rule 2). The task does the rest."""
        state = self._gate.state
        if link is not self._link or link.cause is not None or state not in LIVE:
            return False
        if cause is None:
            cause = ConnectionLostError("the broker closed the connection")
        link.cause = self._walker.failure = cause
        link.scope.cancel()
        self._link = None
        event = loss_event(state, self._policy.method, self._retriable(cause))
        self._epoch += 1
        self._gate.drop()
        if event is ManagerEvent.GAVE_UP:
            self._gate.fail(cause, self._walker.failures)
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
        link.restoring.cancel()
        link.ended.set()
        return True

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
