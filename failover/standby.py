"""Ready connections: the warm spare (F17) and the probe of the preferred brokers (F16).

How this works: a ``Standby`` runs two loops in the supervisor's task group, beside the
connection in use, and opens connections only through the connector it is given (no session,
nothing restored on them):

- the *spare* loop keeps one connection open to ``failover.states.spare_target`` (the next
  broker of the plan) while the logical connection is CONNECTED. A spare that dies, or whose
  broker is no longer the target (the connection moved), is closed and opened again, with a
  back-off (the policy's ``connect_delay`` doubling up to ``max_delay``) while it fails. A
  failover takes it (``take_spare``) as its first attempt; its loss never starts one.
- the *probe* loop, while ``failover.states.return_due`` (CONNECTED to a broker that is not
  preferred), tries each preferred broker every ``priority_backup_interval`` (plus jitter);
  the first connection one accepts is handed to ``switch``, which starts the planned failover
  (or refuses, and the connection is closed). The connection is kept as the *handover* that
  this failover takes. Before that the probe waits until ``may_return`` says yes (no commit on
  its way, whose outcome the return would put in doubt), checked and switched in one step; if
  it still says no after one interval, the connection is closed and the next probe tries again.

``take_ready`` gives a failover its first attempt: the handover, else the spare when still
open. Whatever a failover has not taken is closed by ``close`` (the connection closed, or
failover gave up).

Both are quiet: a failure is logged at DEBUG, counts no attempt and tells no listener; on a
shared-store pair the standby does not listen, so they wait. Only a refusal of trust (F15: the
login or the TLS handshake refused), which will not go away by itself, is a warning, the
first time each broker refuses. What they decide comes from
``failover.states``; ``poke`` wakes them when the supervisor's state, connection or list
changed. Everything runs on the supervisor's event loop.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Final, Generic

import anyio

from failover.policy import FailoverPolicy
from failover.protocols import Connector, ManagedConnection, P
from failover.states import (
    ConnectionState,
    is_refusal,
    is_retriable_failure,
    return_due,
    same_broker,
    spare_target,
)
from failover.url import BrokerURL

__all__ = ["Standby", "StandbyView", "close_all", "close_quietly"]

_log = logging.getLogger("haclient.failover")

# How long closing a physical connection may take before it is abandoned.
_CLOSE_GRACE: Final = 5.0
# How often a probe that may not return yet (a commit on its way) asks again.
_QUIET_POLL: Final = 0.002

#: What the loops read of the supervisor: its state, the broker in use, the list the next
#: failover walks, and the preferred brokers.
StandbyView = Callable[
    [], tuple[ConnectionState, BrokerURL | None, Sequence[BrokerURL], Sequence[BrokerURL]]
]


class _Spare(Generic[P]):
    __slots__ = ("broker", "connection", "scope")

    def __init__(self, connection: P, broker: BrokerURL) -> None:
        self.connection = connection
        self.broker = broker
        self.scope = anyio.CancelScope()  # the task watching its end


class Standby(Generic[P]):
    """The ready connections of one logical connection (see the module docstring).

    Args:
        connector: Opens one connection, counting nothing (the manager's ``standby_connector``).
        policy: ``backup``, ``priority_backup``, the interval and the back-off.
        view: What the loops read of the supervisor, when they decide.
        switch: Called with a connection a preferred broker accepted and that broker; True
            when it starts the return (it owns the connection then), False to refuse.
        may_return: Whether a return may start now (default: always); the probe waits, at
            most one ``priority_backup_interval``, until it says yes.
        retriable: Whether a failure is one a reconnect can fix (tells a refusal of trust).
        sleep: Sleeps that many seconds (the manager's injected ``sleep``).
        rng: Draws the jitter.
    """

    def __init__(
        self,
        connector: Connector[P],
        policy: FailoverPolicy,
        view: StandbyView,
        switch: Callable[[P, BrokerURL], bool],
        *,
        sleep: Callable[[float], Awaitable[None]],
        rng: random.Random,
        may_return: Callable[[], bool] | None = None,
        retriable: Callable[[BaseException], bool] = is_retriable_failure,
    ) -> None:
        self._connector = connector
        self._policy = policy
        self._view = view
        self._switch = switch
        self._may_return = may_return or (lambda: True)
        self._retriable = retriable
        self._refused: set[str] = set()  # brokers whose last answer was a refusal of trust
        self._sleep = sleep
        self._rng = rng
        self._spare: _Spare[P] | None = None
        self._handover: tuple[P, BrokerURL] | None = None  # a probe's, for the return it starts
        self._changed: anyio.Event | None = None  # made in run: anyio needs the event loop

    @property
    def enabled(self) -> bool:
        """Whether the policy asks for either loop."""
        return self._policy.backup or self._policy.priority_backup

    @property
    def spare_broker(self) -> BrokerURL | None:
        """The broker of the spare held now, if any."""
        return None if self._spare is None else self._spare.broker

    def poke(self) -> None:
        """The supervisor's state, connection or broker list changed: decide again."""
        if self._changed is not None:
            self._changed.set()
            self._changed = anyio.Event()

    def take_ready(self) -> tuple[P, BrokerURL] | None:
        """A connection already open for the failover under way, and its broker: the
        preferred broker's that started a return (F16), else the spare when still open (F17).
        The caller owns it from now on."""
        handover, self._handover = self._handover, None
        if handover is not None and handover[0].is_open:
            return handover
        return self.take_spare()

    def take_spare(self) -> tuple[P, BrokerURL] | None:
        """The spare and its broker, when it is still open: a failover's first attempt. The
        caller owns it from now on; the loop opens a new one once CONNECTED again."""
        spare, self._spare = self._spare, None
        if spare is None:
            return None
        spare.scope.cancel()
        if not spare.connection.is_open:
            return None
        return spare.connection, spare.broker

    def release(self) -> list[P]:
        """The spare and a handover not taken, for the caller to close: the standby holds
        neither any more."""
        handover, self._handover = self._handover, None
        spare, self._spare = self._spare, None
        released = [] if handover is None else [handover[0]]
        if spare is not None:
            spare.scope.cancel()
            released.append(spare.connection)
        return released

    async def close(self) -> None:
        """Close the spare and a handover not taken, if any, together (shielded, bounded)."""
        await close_all(self.release())

    async def run(self) -> None:
        """Both loops, until cancelled; the spare is closed on the way out."""
        self._changed = anyio.Event()
        try:
            async with anyio.create_task_group() as loops:
                if self._policy.backup:
                    loops.start_soon(self._keep_spare, loops)
                if self._policy.priority_backup:
                    loops.start_soon(self._probe)
        finally:
            await self.close()

    # --- The spare (F17) ------------------------------------------------------------------

    def _spare_target(self) -> BrokerURL | None:
        state, current, brokers, preferred = self._view()
        if state is not ConnectionState.CONNECTED:
            return None
        due = return_due(self._policy, state, current, preferred)
        return spare_target(self._policy, brokers, current, exclude=preferred if due else ())

    async def _keep_spare(self, loops: anyio.abc.TaskGroup) -> None:
        failures = 0
        while True:
            changed = self._changes()
            target = self._spare_target()
            spare = self._spare
            if spare is not None and (
                not spare.connection.is_open
                or target is None
                or not same_broker(spare.broker, target)
            ):
                if self._view()[0] is not ConnectionState.CONNECTED:
                    await changed.wait()  # a failover may still take it
                    continue
                await self.close()
                continue
            if spare is not None or target is None:
                await changed.wait()
                continue
            if failures:
                await self._wait_or_change(self._back_off(failures), changed)
                if self._spare_target() != target:
                    continue
            connection = await self._open_quietly(target, "spare")
            if connection is None:
                failures += 1
                continue
            if self._spare_target() != target or self._spare is not None:
                await close_quietly(connection)
                continue
            failures = 0
            self._spare = spare = _Spare(connection, target)
            loops.start_soon(self._watch_spare, spare)
            _log.debug("a spare connection to %s is ready", target)

    async def _watch_spare(self, spare: _Spare[P]) -> None:
        with spare.scope:
            with contextlib.suppress(Exception):
                await spare.connection.wait_closed()
            _log.debug("the spare connection to %s ended", spare.broker)
            self.poke()

    def _back_off(self, failures: int) -> float:
        policy = self._policy
        base = max(policy.connect_delay, 0.01)
        delay = min(base * 2.0 ** (failures - 1), max(policy.max_delay, base))
        return delay + policy.jitter * self._rng.random()

    # --- The probe (F16) ------------------------------------------------------------------

    async def _probe(self) -> None:
        while True:
            changed = self._changes()
            if not self._return_due():
                await changed.wait()
                continue
            interval = self._policy.priority_backup_interval
            await self._sleep(interval + self._policy.jitter * self._rng.random())
            for broker in self._view()[3]:
                if not self._return_due():
                    break
                connection = await self._open_quietly(broker, "preferred broker")
                if connection is None:
                    continue
                handed = False
                try:
                    handed = await self._hand_over(connection, broker)
                finally:  # also when cancelled while it waited: closed, never left open
                    if not handed:
                        await close_quietly(connection)
                break

    def _return_due(self) -> bool:
        state, current, _, preferred = self._view()
        return return_due(self._policy, state, current, preferred)

    async def _hand_over(self, connection: P, broker: BrokerURL) -> bool:
        """Start the return with ``connection`` once ``may_return`` says yes, waiting at most
        one probe interval; False when it was not started (the caller closes it)."""
        waited, limit = 0.0, max(self._policy.priority_backup_interval, _QUIET_POLL)
        while not self._may_return():
            if waited >= limit or not connection.is_open:
                _log.debug("a return to %s waits: a commit is on its way", broker)
                return False
            await self._sleep(_QUIET_POLL)
            waited += _QUIET_POLL
        if not self._return_due():
            return False
        self._handover = (connection, broker)  # taken by the failover it starts
        if self._switch(connection, broker):  # no checkpoint since may_return said yes
            return True
        self._handover = None
        return False

    # --- Helpers --------------------------------------------------------------------------

    def _changes(self) -> anyio.Event:
        """The event the next ``poke`` sets."""
        assert self._changed is not None  # run() made it
        return self._changed

    async def _open_quietly(self, broker: BrokerURL, what: str) -> P | None:
        """A connection to ``broker``, or None. A failure is a DEBUG line, but a refusal of
        trust (``failover.states.is_refusal``) is a warning the first time that broker refuses
        (again after it accepted once): it will not go away by itself."""
        key = str(broker)
        try:
            connection = await self._connector(broker)
        except Exception as exc:
            if is_refusal(exc, retriable=self._retriable(exc)) and key not in self._refused:
                self._refused.add(key)
                _log.warning("%s %s refused the connection: %s", what, broker, exc)
            else:
                _log.debug("%s %s not reached: %s", what, broker, exc)
            return None
        self._refused.discard(key)
        return connection

    async def _wait_or_change(self, delay: float, changed: anyio.Event) -> None:
        """Sleep ``delay`` (the injected ``sleep``), or less when ``changed`` is set."""
        async with anyio.create_task_group() as race:

            async def sleep() -> None:
                await self._sleep(delay)
                race.cancel_scope.cancel()

            race.start_soon(sleep)
            await changed.wait()
            race.cancel_scope.cancel()


async def close_quietly(connection: ManagedConnection) -> None:
    """Close a physical connection, shielded and bounded; an error is logged, not raised."""
    with anyio.move_on_after(_CLOSE_GRACE, shield=True):
        try:
            await connection.close()
        except Exception:
            _log.debug("closing a physical connection failed", exc_info=True)


async def close_all(connections: Iterable[ManagedConnection]) -> None:
    """Close physical connections together, each as ``close_quietly`` does: the slowest one
    bounds the whole, not the sum of them. None given: returns without a checkpoint."""
    connections = list(connections)
    if len(connections) == 1:
        await close_quietly(connections[0])
    if len(connections) < 2:
        return
    with anyio.CancelScope(shield=True):
        async with anyio.create_task_group() as closing:
            for connection in connections:
                closing.start_soon(close_quietly, connection)
