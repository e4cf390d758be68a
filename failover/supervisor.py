"""The supervisor: the executor of the failover machine, one task per logical connection.

How this works: every decision is the failover machine's (``failover.machine``): it takes
events and returns actions. ``Supervisor.run`` is its driver, a loop: it reads the next event
from one stream, hands it to the machine (``_feed``) and carries out each action it returns
(``_carry_out``). The actions that take no time are done then and there: adopt a connection
and watch it, open or close the gate (``failover.gate``), tell the resources of a loss, tell the
listeners (F14), log. Those that take time go to their part, which does the work and reports
what came of it as the machine's next event on the same stream, calling nobody back:

- the walk's steps, one after the other, by one worker task: an attempt (``failover.walk``:
  wait, connect), the ready connection a failover takes first, a tier of the restore
  (``failover.restore``), the close of a lost connection;
- the ready connections (``failover.standby``): the spare, the probe of the preferred brokers;
- one watcher per connection in use: its end is ``ConnectionLost``.

One shortcut: an attempt a watched wait stood in for (F5, ``failover.walk``: no connect made)
is fed to the machine on the walk's own step, when its failure would be the next event anyway
(nothing queued before it, the loop waiting), and the step it calls for is taken at once: the
same actions in the same order, without two task switches per attempt, so that a pass of
stood-in attempts runs without going back to the event loop (bench/README.md, issue 39 item 14).

What the application reports (``report_lost``, a learned broker list) and ``stop`` feed the
machine at once, on the caller's step: the gate closes in the very step a loss is noticed. The
supervisor holds only what carrying out needs: the connection in use (a ``Link``), a connection
opened and not yet adopted, the resources and their tiers. Every count and record (epoch,
attempts, failures, failovers) is the machine's. ``failover.manager.ConnectionManager`` holds
a supervisor and a gate and is the public API; the rules they keep together are listed there.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import socket
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Generic, TypeAlias

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from failover import machine as m
from failover.gate import ConnectionGate
from failover.listeners import Listeners, call_quietly
from failover.policy import FailoverPolicy
from failover.ports import PortProbe, TcpProbe
from failover.protocols import Adopter, Connector, P, Resource, restore_tiers
from failover.restore import Link, Restore
from failover.schedule import Stop, Wait
from failover.standby import Standby, close_all, close_quietly
from failover.states import ConnectionState, ManagerEvent, reports_events
from failover.url import BrokerURL
from failover.walk import Walker

__all__ = ["Supervisor", "close_quietly", "port_probe"]

_log = logging.getLogger("haclient.failover")

_ENDED = frozenset({ConnectionState.FAILED, ConnectionState.CLOSED})


async def _getaddrinfo(host: str, port: int) -> list[tuple[Any, Any, Any, Any, Any]]:
    return list(await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM))


async def wait_readable(fd: int, timeout: float) -> None:
    """Wait until the socket ``fd`` has bytes to read, ``timeout`` seconds at most (a port
    probe's bell off asyncio: ``failover.bell``)."""
    with anyio.move_on_after(timeout):
        await anyio.wait_readable(fd)


def port_probe() -> PortProbe:
    """A failover's probe of refused ports (``failover.ports.TcpProbe``), host names resolved
    with anyio's ``getaddrinfo``; made on the event loop (at a walk's first watched wait): on
    asyncio, the loop reads its bell in a reader callback (``failover.bell``)."""
    try:
        loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio): each wait waits with wait_readable, above
        loop = None
    return TcpProbe(_getaddrinfo, wait_readable, reader_loop=loop)


class _Close:
    """The worker's step that closes a lost connection."""

    __slots__ = ("connection",)

    def __init__(self, connection: Any) -> None:
        self.connection = connection


#: A step of the walk, carried out in order by the worker task.
_Step: TypeAlias = m.Connect | m.UseReady | m.RestoreTier | _Close


class Supervisor(Generic[P]):
    """The executor of one logical connection's failover machine (see ``ConnectionManager``
    for the arguments; ``brokers`` and ``policy`` are validated there).

    Args:
        gate: Where it reports the state and the current connection.
        listeners: Who hears of failover events (F14).
        reconnect_wait: A tenacity wait replacing the policy's delays (``failover.schedule``).
        reconnect_stop: A tenacity stop replacing the policy's pass count and time budget.
        standby_connector: Opens the ready connections (F16, F17): like ``connector``, but
            for a connection that may never be used (default: ``connector``).
        adopt: The client's part when a connection becomes the one in use
            (``failover.protocols.Adopter``): called with it, before anything is restored on
            it; the brokers it returns go to the machine as ``BrokersAnnounced``.
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
        adopt: Adopter[P] | None = None,
        may_return: Callable[[], bool] | None = None,
        startup_patience: float = 0.0,
        port_probe: Callable[[], PortProbe] | None = port_probe,
    ) -> None:
        self._gate = gate
        self._listeners = listeners
        self._clock = clock
        self._machine = m.FailoverMachine(
            policy,
            brokers,
            rng=rng,
            retriable=retriable,
            reconnect_wait=reconnect_wait,
            reconnect_stop=reconnect_stop,
            startup_patience=startup_patience,
        )
        self._walker: Walker[P] = Walker(connector, clock=clock, sleep=sleep, port_probe=port_probe)
        self._standby: Standby[P] = Standby(
            standby_connector or connector,
            sleep=sleep,
            clock=clock,
            may_return=may_return,
            patience=policy.priority_backup_interval,
        )
        self._adopt = adopt
        self._link: Link[P] | None = None  # the current physical connection
        self._lost: Link[P] | None = None  # the last one lost, until its close is queued
        self._opened: P | None = None  # opened by the last attempt, not yet adopted
        self._closing: list[P] = []  # lost connections whose close is queued
        self._resources: dict[int, Resource[P]] = {}  # id -> resource, in registration order
        self._tiers: tuple[tuple[Resource[P], ...], ...] = ()  # the restore's, at its first tier
        self._feeding = False  # actions are being carried out: an event waits in _deferred
        self._deferred: deque[m.Event] = deque()
        self._stopped = False
        self._run_scope: anyio.CancelScope | None = None
        self._tasks: TaskGroup | None = None
        self._events: MemoryObjectSendStream[m.Event] | None = None
        self._steps: MemoryObjectSendStream[_Step] | None = None

    # --- What the manager reads ------------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The current epoch: 0 for the first physical connection, plus one per loss."""
        return self._machine.epoch

    @property
    def broker(self) -> BrokerURL | None:
        """The broker of the current physical connection (also while RESTORING), or None."""
        return self._machine.broker

    @property
    def brokers(self) -> tuple[BrokerURL, ...]:
        """The list the next failover walks."""
        return self._machine.brokers

    @property
    def policy(self) -> FailoverPolicy:
        """The failover policy."""
        return self._machine.policy

    @property
    def failure(self) -> BaseException | None:
        """The last failure."""
        return self._machine.failure

    @property
    def failures(self) -> Mapping[str, BaseException]:
        """The last failure of each broker the last walk tried (a live view)."""
        return self._machine.failures

    @property
    def counters(self) -> tuple[int, float | None, int]:
        """Failovers completed, the downtime of the last one, connection attempts made."""
        machine = self._machine
        return machine.failovers, machine.last_downtime, machine.attempts

    @property
    def returns(self) -> int:
        """Completed failovers that were returns to a preferred broker (F16)."""
        return self._machine.returns

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
        actions = self._feed(m.ConnectionLost(self._clock(), epoch, cause))
        return any(isinstance(action, m.CloseGate) for action in actions)

    def learn_brokers(
        self, brokers: Iterable[BrokerURL], source: BrokerURL | None
    ) -> tuple[BrokerURL, ...]:
        """Replace the list the next failover walks (F12, ``exchange`` only): newest first,
        then the seeds; an ``amqps`` source refuses ``amqp`` entries. Returns the new list."""
        self._feed(m.BrokersLearned(self._clock(), tuple(brokers), source))
        return self._machine.brokers

    def announce_brokers(
        self, brokers: Iterable[BrokerURL], source: BrokerURL | None
    ) -> tuple[BrokerURL, ...]:
        """A broker's Open (from ``source``) announced ``brokers``: change the list the next
        failover walks as ``failover.amqpOpenServerListAction`` says (``announced_list``).
        Returns the list."""
        self._feed(m.BrokersAnnounced(self._clock(), tuple(brokers), source))
        return self._machine.brokers

    async def stop(self) -> None:
        """End the task (or keep it from starting) and close the physical connection; the
        gate is CLOSED already. Shielded and bounded."""
        self._stopped = True
        self._feed(m.CloseRequested(self._clock()))
        if self._run_scope is not None:
            self._run_scope.cancel()
        link, self._link = self._link, None
        if link is not None:
            link.scope.cancel()
            link.restoring.cancel()
        opened, self._opened = self._opened, None
        closing, self._closing = self._closing, []
        # together: the ready connections close within the same bound as the one in use
        in_use = [c for c in (None if link is None else link.connection, opened) if c is not None]
        await close_all([*in_use, *closing, *self._standby.release()])

    # --- The loop -------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, then fail over whenever the connection ends, until failover gives up or
        ``stop`` is called: feed the machine the events, carry out its actions."""
        self._run_scope = scope = anyio.CancelScope()
        if self._stopped:
            return
        events_in, events = anyio.create_memory_object_stream[m.Event](math.inf)
        steps_in, steps = anyio.create_memory_object_stream[_Step](math.inf)
        try:
            with scope, events_in, events, steps_in, steps:
                async with anyio.create_task_group() as tasks:
                    self._tasks, self._events, self._steps = tasks, events_in, steps_in
                    self._standby.bind(tasks, events_in)
                    tasks.start_soon(self._work, steps, name="haclient failover walk")
                    self._feed(m.Start(self._clock()))
                    while self._machine.state not in _ENDED:
                        self._feed(self._checked(await events.receive()))
                    # given up: the lost connection's close still goes; nothing else waits
                    self._standby.cancel()
                    steps_in.close()
        finally:
            # stopped mid-walk too: its port probe's sockets close once no task waits on them
            self._walker.end_walk()
        self._tasks = self._events = self._steps = None

    def _checked(self, event: m.Event) -> m.Event:
        """``event``, but a probe's success when a commit started since it was reported is
        its failure: a return starts only in the step ``may_return`` says yes (F16)."""
        if isinstance(event, m.ProbeSucceeded) and not self._standby.may_return():
            self._standby.refuse(event.broker)
            return m.ProbeFailed(event.now)
        return event

    def _feed(self, event: m.Event) -> list[m.Action]:
        """Hand ``event`` to the machine and carry out what it says, in order. An event that
        comes while actions are carried out (the list a connection just adopted announced, a
        listener reporting a loss) waits for them: the actions of one event are carried out
        together, in the order the machine gave them, never interleaved with another's."""
        if self._feeding:
            self._deferred.append(event)
            return []
        self._feeding = True
        try:
            actions = self._machine.handle(event)
            for action in actions:
                self._carry_out(action)
            while self._deferred:
                for action in self._machine.handle(self._deferred.popleft()):
                    self._carry_out(action)
        finally:
            self._feeding = False
        return actions

    def _carry_out(self, action: m.Action) -> None:
        """Do ``action`` now, or hand it to the part that does it."""
        if isinstance(action, m.Log):
            _log.log(action.level, action.message, *action.args, exc_info=action.error)
        elif isinstance(action, m.Emit):
            if reports_events(self._gate.state):
                self._listeners.tell(action.event, **dict(action.facts))
        elif isinstance(action, (m.Connect, m.UseReady, m.RestoreTier)):
            self._step(action)
        elif isinstance(action, m.Adopt):
            self._adopt_opened(action)
        elif isinstance(action, m.OpenGate):
            self._open_gate()
        elif isinstance(action, m.CloseGate):
            self._close_gate(action)
        elif isinstance(action, m.TellResources):
            for resource in self._ordered_resources():
                call_quietly(resource.connection_lost, action.epoch, action.cause)
        elif isinstance(action, m.CloseConnection):
            lost, self._lost = self._lost, None
            if lost is not None:
                self._closing.append(lost.connection)
                self._step(_Close(lost.connection))
        elif isinstance(action, m.GiveUp):
            self._gate.fail(action.cause, dict(action.failures))
            self._end_walk()
        else:
            self._carry_out_ready(action)

    def _carry_out_ready(self, action: m.Action) -> None:
        """The actions on the ready connections (``failover.standby``)."""
        standby = self._standby
        if isinstance(action, m.StartSpare):
            standby.start_spare(action.broker, action.delay)
        elif isinstance(action, m.DropSpare):
            standby.drop_spare()
        elif isinstance(action, m.ScheduleProbe):
            standby.schedule_probe(action.delay)
        elif isinstance(action, m.ProbePreferred):
            standby.probe(action.brokers)
        elif isinstance(action, m.ReturnTo):
            standby.return_to(action.broker)
        elif isinstance(action, m.RefuseReturn):
            standby.refuse(action.broker)
        # Shutdown: stop() closes what is left

    # --- The actions done at once ----------------------------------------------------------

    def _adopt_opened(self, action: m.Adopt) -> None:
        """The connection just opened is the one in use: the client takes it (``adopt``), the
        gate knows it, a task watches it; the brokers its broker announced are the machine's
        next event (F12), once this event's actions are carried out."""
        connection, self._opened = self._opened, None
        assert connection is not None and self._tasks is not None
        link = Link(connection, action.broker, action.epoch)
        self._link = link
        announced = self._adopted(connection)
        self._gate.open(connection, link.epoch)
        self._tasks.start_soon(self._watch, link)
        assert self._feeding  # an action: the event waits for the others (``_feed``)
        self._deferred.append(m.BrokersAnnounced(self._clock(), announced, action.broker))

    def _adopted(self, connection: P) -> tuple[BrokerURL, ...]:
        """The client's part of an adoption (``failover.protocols.Adopter``): the brokers
        ``connection``'s broker announced. An exception is logged: nothing announced."""
        if self._adopt is None:
            return ()
        try:
            announced = self._adopt(connection)
        except Exception:
            _log.exception("adopting a connection raised (ignored): %r", self._adopt)
            return ()
        return () if announced is None else tuple(announced)

    def _open_gate(self) -> None:
        if self._gate.state is ConnectionState.RESTORING:
            self._gate.apply(ManagerEvent.RESTORED)
        self._end_walk()

    def _close_gate(self, action: m.CloseGate) -> None:
        """The loss, noticed: forget the connection, stop its watcher and restore, close the
        gate (rule 2 of ``failover.manager``: in the same step as the epoch advances)."""
        link, self._link = self._link, None
        assert link is not None and link.epoch == action.epoch
        link.lost = True
        link.scope.cancel()
        link.restoring.cancel()
        self._lost = link
        self._gate.drop()
        if action.failing_over:
            self._gate.apply(ManagerEvent.LOST)

    def _end_walk(self) -> None:
        self._gate.attempting(None)
        self._walker.end_walk()

    # --- The tasks ------------------------------------------------------------------------

    def _step(self, step: _Step) -> None:
        if isinstance(step, m.Connect):
            self._gate.attempting(step.attempt)
        if self._steps is not None:
            self._steps.send_nowait(step)

    def _report(self, event: m.Event) -> None:
        if self._events is not None:
            self._events.send_nowait(event)

    async def _watch(self, link: Link[P]) -> None:
        with link.scope:
            try:
                cause = await link.connection.wait_closed()
            except Exception as exc:
                cause = exc
            self._report(m.ConnectionLost(self._clock(), link.epoch, cause))

    async def _work(self, steps: MemoryObjectReceiveStream[_Step]) -> None:
        """The walk's steps, one after the other: each reports its outcome as an event. The
        step a stood-in attempt's failure called for (fed at once) is taken at once too: a
        pass of stood-in attempts runs without going back to the event loop."""
        async with steps:
            async for first in steps:
                step: _Step | None = first
                while step is not None:
                    step = await self._carry_out_step(step, steps)
                if self._stopped:  # stop() closes what is left
                    return

    async def _carry_out_step(
        self, step: _Step, steps: MemoryObjectReceiveStream[_Step]
    ) -> _Step | None:
        """Carry out ``step``; the next step when a stood-in failure was fed at once and the
        machine queued one (else None: the next comes from the stream)."""
        if isinstance(step, _Close):
            await close_quietly(step.connection)
            if step.connection in self._closing:
                self._closing.remove(step.connection)
        elif isinstance(step, m.Connect):
            event, self._opened = await self._walker.attempt(step)
            if self._stopped and self._opened is not None:  # closed while it ran
                await close_quietly(self._opened)
                return None
            if self._walker.stood_in and self._next_in_line():
                self._feed_at_once(event)
                try:
                    return steps.receive_nowait()
                except (anyio.WouldBlock, anyio.EndOfStream):
                    return None
            self._report(event)
        elif isinstance(step, m.UseReady):
            self._opened = self._standby.take_ready(step.broker)
            now = self._clock()
            ready = self._opened is not None
            self._report(m.Opened(now, step.broker) if ready else m.ReadyGone(now))
        else:
            await self._restore(step)
        return None

    def _next_in_line(self) -> bool:
        """Whether an event reported now would be the next the loop of ``run`` feeds: no
        event is queued or on its way to it, and it waits for one."""
        if self._events is None:
            return False
        queue = self._events.statistics()
        return queue.current_buffer_used == 0 and queue.tasks_waiting_receive > 0

    def _feed_at_once(self, event: m.Event) -> None:
        """Feed ``event`` (a stood-in attempt's failure, F5) on the walk's own step, as the
        loop of ``run`` would have as its next event (``_next_in_line``): the same actions in
        the same order, without two task switches per attempt (the most of what a stood-in
        attempt cost the event loop). Should the machine have ended, the loop of ``run`` is
        woken with the same event, which the machine answers with nothing (its rule 2)."""
        self._feed(event)
        if self._machine.state in _ENDED:
            self._report(event)

    async def _restore(self, step: m.RestoreTier) -> None:
        """One tier of the restore on the connection in use: ``TierRestored`` unless it was
        lost meanwhile (the machine heard of that)."""
        link = self._link
        if link is None or link.epoch != step.epoch:
            return
        if step.tier == 0:
            self._tiers = restore_tiers(self._resources.values())
        tiers = self._tiers
        link.restoring = anyio.CancelScope()
        if step.tier < len(tiers):
            assert self._events is not None
            restore = Restore(
                link,
                self._resources,
                events=self._events,
                clock=self._clock,
                retriable=self._machine.retriable,
            )
            if not await restore.run(tiers[step.tier]):
                return
        if self._link is link:
            last = step.tier >= len(tiers) - 1
            self._report(m.TierRestored(self._clock(), step.epoch, step.tier, last))

    # --- Helpers --------------------------------------------------------------------------

    def _ordered_resources(self) -> list[Resource[P]]:
        return [r for tier in restore_tiers(self._resources.values()) for r in tier]
