"""The failover connection manager: one logical connection over a series of physical ones.

How this works: a ``ConnectionManager`` is given a *connector* (an async callable that opens one
physical connection to one ``BrokerURL``) and knows nothing else of the protocol. It is a thin
facade over three parts, each in its own module, which talk through small public interfaces:

- the gate (``failover.gate.ConnectionGate``): the state, and the callers waiting for CONNECTED;
- the supervisor (``failover.supervisor.Supervisor``): inside ``async with``, one background
  task, the executor of the failover machine (``failover.machine``): it connects
  (``start()``), watches the physical connection, and when it ends fails over, each step as
  the machine decides: the attempts of the reconnect schedule (``failover.walk``,
  ``failover.schedule``: which broker, how long to wait, when to give up, as tenacity wait and
  stop strategies), the restore of the registered resources tier by tier on the new connection
  (``failover.restore``), then the gate, which opens again;
- the listeners (``failover.listeners.Listeners``, F14).

Every decision is the failover machine's (``failover.machine``), made of the pure functions
and the table of ``failover.states`` (give up or fail over, what a failed restore means, what
happens once CLOSED); what the manager is given (connection, connector, resources, listeners)
is in ``failover.protocols``.

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
   before any reconnect), and restored after a reconnect with the new physical connection,
   while the gate is still closed to everyone else: tier by tier (``restore_tiers``: one tier
   per ``restore_order``, lowest first), the resources of one tier concurrently, the next tier
   once the whole tier has finished. Concurrently means a task per resource, except for a
   ``StagedResource``: those of a tier are all begun before any is waited for, and then
   finished in turn by one task (one round trip for all, and no task each); a tier that is
   one job (its staged resources, or one other resource) runs in the restore's own task. A
   resource whose ``restore`` raises is reported to the listeners (F14) and the others still
   restore; a loss during restore cancels the restore and starts the next attempt of the
   plan. A restore
   that raises a retriable ``TimeoutError`` (the broker stopped answering, e.g. a Begin left
   unanswered) is such a loss, not a resource that cannot be restored.
4. A failure that no reconnect can fix (an ``HAClientError`` whose ``retriable`` is False, e.g.
   ``InvalidDestinationError``), or any loss under ``nofailover``, goes to FAILED at once. A
   broker's refusal of trust at a connection attempt (``AuthenticationError``: credentials or
   TLS) moves on to the next broker at once instead; when every broker of a pass refused, it
   goes to FAILED at once with an ``AuthenticationError`` naming each (F15,
   ``failover.states`` invariant 10).
5. Callbacks (``adopt``, ``connection_lost``, listeners) run synchronously on the manager's
   event loop; one that raises is logged and changes nothing else. ``restore`` must use the
   connection it is given, never ``wait_connected()`` (the gate is closed while it runs: it
   would wait forever).
6. Time is the injected ``clock`` and ``sleep`` (anyio's by default): the plan's delays are
   slept with ``sleep``, and downtime, the gate's timeouts and the time budget
   (``policy.give_up_after``, from the loss or from the start of the first connect; see
   ``failover.states.budget_delay``) are measured on ``clock``, so a test drives them with a
   virtual clock. (Only the grace given to closing a dead connection
   is anyio's own, a bound against a hung ``close``.)

Every method must be called on the event loop that entered the manager (it is not thread-safe;
the blocking facade goes through its portal).

The API, for ``P`` the physical connection type (anything with ``wait_closed`` and ``close``)::

    manager = ConnectionManager(connector, brokers, policy, rng=..., retriable=...,
                                clock=..., sleep=..., reconnect_wait=..., reconnect_stop=...)
    manager = ConnectionManager.from_url(connector, failover_url, rng=..., ...)
    async with manager:
        await manager.start()                                  # first connect (startup budget)
        connection, epoch = await manager.wait_connected(timeout=None)   # the gate
        manager.report_lost(epoch, cause)                     # "this connection is dead"
        manager.register(resource) / manager.unregister(resource)
        manager.add_listener(listener) / manager.remove_listener(listener)
        manager.learn_brokers(brokers, source=None)           # exchange (F12)
        manager.announce_brokers(brokers, source=None)        # an Open's list (F12)
        manager.state, manager.epoch, manager.broker, manager.brokers, manager.statistics()
        await manager.close()                                 # idempotent; also on exit
    # or, for an owner that has a task group already (no async with):
    await manager.start_in(task_group)                        # then the same calls, and close()
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from types import MappingProxyType, TracebackType
from typing import Generic

import anyio
from anyio.abc import TaskGroup

from failover.errors import ClosedError, IllegalStateError
from failover.gate import ConnectionGate
from failover.listeners import AnyListener, Listeners
from failover.policy import FailoverPolicy
from failover.ports import PortProbe
from failover.protocols import (
    Adopter,
    Connector,
    FailoverListener,
    ManagedConnection,
    P,
    Resource,
    RestoreOrder,
    StagedResource,
)
from failover.schedule import Stop, Wait, checked_strategies
from failover.states import (
    TRANSITIONS,
    ConnectionState,
    ManagerEvent,
    ManagerStatistics,
    is_retriable_failure,
    next_state,
)
from failover.supervisor import Supervisor
from failover.supervisor import port_probe as default_port_probe
from failover.url import BrokerURL, FailoverURL

__all__ = [
    "TRANSITIONS",
    "ConnectionManager",
    "ConnectionState",
    "Connector",
    "FailoverListener",
    "ManagedConnection",
    "ManagerEvent",
    "ManagerStatistics",
    "Resource",
    "RestoreOrder",
    "StagedResource",
    "is_retriable_failure",
    "next_state",
]

_log = logging.getLogger("haclient.failover")


class ConnectionManager(Generic[P]):
    """The logical connection: connects, fails over, restores, and gates callers meanwhile.

    Args:
        connector: Opens one physical connection to one broker; raises on failure.
        brokers: The broker list (for ``exchange``, the seed list).
        policy: The failover policy (default: ``FailoverPolicy()``).
        rng: Draws jitter and ``randomize`` shuffles; seed it for an exact plan.
        retriable: Whether another attempt may help after a failure (default
            ``is_retriable_failure``); False gives up at once (rule 4).
        clock: Seconds, monotonic (default ``anyio.current_time``): downtime and timeouts.
        sleep: Sleeps that many seconds of ``clock`` (default ``anyio.sleep``).
        reconnect_wait: Any tenacity wait (e.g. ``wait_random_exponential(max=5)``): the sleep
            before each attempt of a connect or failover but the first, instead of the
            policy's delays (``failover.schedule``).
        reconnect_stop: Any tenacity stop (e.g. ``stop_after_delay(60)``): when a connect or
            failover gives up, instead of the policy's pass count and time budget. One attempt
            is one broker.
        standby_connector: Opens the ready connections of ``failover.priorityBackup`` (the
            probe of a preferred broker, F16) and ``failover.backup`` (the warm spare, F17):
            a connection that may never be used, so nothing of it should be counted or
            announced yet (default: ``connector``).
        adopt: The client's part (``failover.protocols.Adopter``) when a physical connection
            becomes the one in use: the first connect, each failover, whichever connector
            opened it, before anything is restored on it. Called synchronously (rule 5); it
            returns the brokers that connection's broker announced, which the manager follows
            as ``announce_brokers`` does (F12), and calls the manager for nothing.
        may_return: Whether a return to a preferred broker (F16) may start now, asked
            (synchronously) right before it starts: a client says no while a commit is on its
            way, whose outcome the return would put in doubt (default: always).
        startup_patience: Seconds the first connect keeps trying a broker that accepts the
            TCP connection and closes it before answering (one starting up), every 5-10 ms,
            once the startup budget's attempts are spent (``failover.schedule``; default 0:
            not at all). A protocol client passes its connect timeout.
        port_probe: Makes, for each connect or failover, what probes a refused port during
            the fast phase's waits (``failover.ports``; default a ``TcpProbe``, a TCP
            connect closed at once; None: the waits are only slept). Tests on a virtual clock pass
            their own.

    Raises:
        ConfigurationError: An empty list, ``singlebroker`` with several brokers, a
            ``failover.priorityURIs`` entry that names no broker of the list, or a
            ``reconnect_wait`` or ``reconnect_stop`` that is not callable.
    """

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
        reconnect_wait: Wait | None = None,
        reconnect_stop: Stop | None = None,
        standby_connector: Connector[P] | None = None,
        adopt: Adopter[P] | None = None,
        may_return: Callable[[], bool] | None = None,
        startup_patience: float = 0.0,
        port_probe: Callable[[], PortProbe] | None = default_port_probe,
    ) -> None:
        url = FailoverURL(tuple(brokers), policy or FailoverPolicy())  # validates both
        reconnect_wait, reconnect_stop = checked_strategies(reconnect_wait, reconnect_stop)
        self._listeners = Listeners()
        self._gate: ConnectionGate[P] = ConnectionGate(
            clock=clock, sleep=sleep, listeners=self._listeners
        )
        self._supervisor = Supervisor(
            self._gate,
            self._listeners,
            connector,
            url.brokers,
            url.policy,
            rng=rng or random.Random(),
            retriable=retriable,
            clock=clock,
            sleep=sleep,
            reconnect_wait=reconnect_wait,
            reconnect_stop=reconnect_stop,
            standby_connector=standby_connector,
            adopt=adopt,
            may_return=may_return,
            startup_patience=startup_patience,
            port_probe=port_probe,
        )
        self._started = False
        # Made in __aenter__: anyio objects need the running event loop.
        self._stack: AsyncExitStack | None = None
        self._tasks: TaskGroup | None = None

    @classmethod
    def from_url(
        cls,
        connector: Connector[P],
        url: FailoverURL,
        *,
        rng: random.Random | None = None,
        retriable: Callable[[BaseException], bool] = is_retriable_failure,
        clock: Callable[[], float] = anyio.current_time,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        reconnect_wait: Wait | None = None,
        reconnect_stop: Stop | None = None,
        standby_connector: Connector[P] | None = None,
        adopt: Adopter[P] | None = None,
        may_return: Callable[[], bool] | None = None,
        startup_patience: float = 0.0,
        port_probe: Callable[[], PortProbe] | None = default_port_probe,
    ) -> ConnectionManager[P]:
        """A manager for ``url``'s brokers and policy (its connection options are not used)."""
        return cls(
            connector,
            url.brokers,
            url.policy,
            rng=rng,
            retriable=retriable,
            clock=clock,
            sleep=sleep,
            reconnect_wait=reconnect_wait,
            reconnect_stop=reconnect_stop,
            standby_connector=standby_connector,
            adopt=adopt,
            may_return=may_return,
            startup_patience=startup_patience,
            port_probe=port_probe,
        )

    # --- Lifetime -------------------------------------------------------------------------

    async def __aenter__(self) -> ConnectionManager[P]:
        if self._stack is not None or self._tasks is not None:
            raise IllegalStateError("a ConnectionManager can be entered only once")
        stack = AsyncExitStack()
        self._tasks = await stack.enter_async_context(anyio.create_task_group())
        self._stack = stack
        self._gate.activate()
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
        if self._gate.state is not ConnectionState.CLOSED:
            tasks.start_soon(self._supervisor.run, name="haclient failover supervisor")
        await self._gate.wait(None)

    async def start_in(self, task_group: TaskGroup) -> None:
        """``start()`` without ``async with``: the supervisor's task runs in ``task_group``,
        which an owner that keeps a task group for its connection already has (one task and
        one task group fewer per connection). ``close()`` then ends the manager; the task
        group must outlive it.

        Raises:
            As ``start()``; IllegalStateError: the manager was entered or started already.
        """
        if self._stack is not None or self._tasks is not None:
            raise IllegalStateError("a ConnectionManager can be started only once")
        self._tasks = task_group
        self._gate.activate()
        await self.start()

    async def close(self) -> None:
        """Close the logical connection: state CLOSED, waiters and later calls raise
        ``ClosedError``, an ongoing failover is cancelled and the physical connection closed.

        Idempotent; the cleanup is shielded from cancellation.
        """
        if self._gate.state is ConnectionState.CLOSED:
            return
        self._gate.apply(ManagerEvent.CLOSE)
        _log.debug("closing the connection")
        await self._supervisor.stop()

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
            IllegalStateError: Called outside ``async with`` (before ``start_in``).
        """
        connected = self._gate.connected_nowait()
        if connected is not None:
            return connected
        limits = [t for t in (timeout, self.policy.timeout) if t is not None]
        return await self._gate.wait(min(limits) if limits else None)

    def connected_nowait(self) -> tuple[P, int] | None:
        """The current physical connection and its epoch when the state is CONNECTED now;
        None otherwise. Never waits (the fast path of ``wait_connected``)."""
        return self._gate.connected_nowait()

    def report_lost(self, epoch: int, cause: BaseException | None = None) -> bool:
        """Tell the manager that the physical connection of ``epoch`` is dead (a caller saw
        it fail before ``wait_closed`` returned). The gate closes at once and failover starts
        as if the connection had ended; the manager closes that connection.

        Returns:
            True if this started the failover; False for a stale epoch or a loss already
            known (idempotent).
        """
        return self._supervisor.report_lost(epoch, cause)

    # --- Resources and listeners -----------------------------------------------------------

    def register(self, resource: Resource[P]) -> None:
        """Restore ``resource`` after every failover from now on (until ``unregister``).

        Raises:
            ClosedError: The manager is closed.
        """
        if self._gate.state is ConnectionState.CLOSED:
            raise ClosedError("the connection is closed")
        self._supervisor.register(resource)

    def unregister(self, resource: Resource[P]) -> None:
        """Forget ``resource`` (no error if unknown); a restore in progress skips it."""
        self._supervisor.unregister(resource)

    def add_listener(self, listener: AnyListener) -> None:
        """Call ``listener`` on failover events (F14), after those added before it: by
        ``FailoverListener``'s names and by Qpid JMS's (``failover.listeners.CALLS``)."""
        self._listeners.add(listener)

    def remove_listener(self, listener: AnyListener) -> None:
        """Stop calling ``listener`` (no error if unknown)."""
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
        return self._supervisor.learn_brokers(brokers, source)

    def announce_brokers(
        self, brokers: Iterable[BrokerURL], *, source: BrokerURL | None = None
    ) -> tuple[BrokerURL, ...]:
        """A broker's Open announced ``brokers`` (its ``failover-server-list``): change the
        list the next failover walks as ``failover.amqpOpenServerListAction`` says (Qpid
        JMS's ``REPLACE``, ``ADD``, ``IGNORE``; unset: as ``learn_brokers`` for ``exchange``,
        ignored for the other methods; ``failover.states.announced_list``).

        Args:
            brokers: The list the broker announced.
            source: The broker that announced it (default: the current broker): kept first
                by ``REPLACE``; when it is ``amqps``, announced ``amqp`` entries are refused.

        Returns:
            The list the next failover will walk.
        """
        return self._supervisor.announce_brokers(brokers, source)

    # --- Views ----------------------------------------------------------------------------

    @property
    def state(self) -> ConnectionState:
        """The current state."""
        return self._gate.state

    @property
    def epoch(self) -> int:
        """The current epoch: 0 for the first physical connection, plus one per loss."""
        return self._supervisor.epoch

    @property
    def broker(self) -> BrokerURL | None:
        """The broker of the current physical connection (also while RESTORING), or None."""
        return self._supervisor.broker

    @property
    def brokers(self) -> tuple[BrokerURL, ...]:
        """The list the next failover walks (the seed list, or the one learned, F12)."""
        return self._supervisor.brokers

    @property
    def failure(self) -> BaseException | None:
        """The last failure (the cause ``ConnectionFailedError`` carries once FAILED)."""
        return self._supervisor.failure

    @property
    def failures(self) -> Mapping[str, BaseException]:
        """The last failure of each broker the last connect or failover tried, by broker (as
        text, password masked), in the order they failed first."""
        return MappingProxyType(dict(self._supervisor.failures))

    @property
    def policy(self) -> FailoverPolicy:
        """The failover policy."""
        return self._supervisor.policy

    def statistics(self) -> ManagerStatistics:
        """A frozen snapshot of the state and the counters."""
        failovers, last_downtime, attempts = self._supervisor.counters
        return ManagerStatistics(
            state=self.state,
            broker=self.broker,
            epoch=self.epoch,
            failovers=failovers,
            last_downtime=last_downtime,
            attempts=attempts,
            brokers=self.brokers,
            returns=self._supervisor.returns,
            standby=self._supervisor.standby,
        )

    def _entered(self) -> TaskGroup:
        if self._tasks is None:
            raise IllegalStateError("use the manager inside `async with` (or start_in) first")
        return self._tasks
