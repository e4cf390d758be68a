"""Ready connections: the warm spare (F17) and the probe of the preferred brokers (F16).

How this works: the failover machine (``failover.machine``) decides when a spare is kept and
to which broker, when it is dropped, when the preferred brokers are probed, and whether a probe
that succeeded starts a return; a ``Standby`` carries those actions out in the supervisor's
task group, beside the connection in use, and reports what came of them as the machine's
events on the stream it is given. It opens connections only through the connector it is given
(no session, nothing restored on them), decides nothing and calls nobody back:

- ``start_spare`` opens a connection to a broker after a delay (the machine's back-off while it
  fails): ``SpareReady`` or ``SpareFailed``; the spare held is watched, and its end is
  ``SpareLost``. ``drop_spare`` closes it, or stops its opening.
- ``schedule_probe`` reports ``TimerFired`` after a delay; ``probe`` tries each preferred
  broker in turn, and the first connection one accepts is held once ``may_return`` says yes (no
  commit on its way, whose outcome the return would put in doubt; at most one probe interval,
  else the connection is closed): ``ProbeSucceeded``, else ``ProbeFailed`` with each broker's
  failure. ``return_to`` keeps that connection as the *handover* the failover takes;
  ``refuse`` closes it.
- ``take_ready`` gives a failover its first attempt (``UseReady``): the handover, else the
  spare, when still open.

Whatever a failover has not taken is closed by ``close`` (the connection closed, or failover
gave up). Everything runs on the supervisor's event loop.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Final, Generic

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from failover.events import (
    Event,
    ProbeFailed,
    ProbeSucceeded,
    SpareFailed,
    SpareLost,
    SpareReady,
    TimerFired,
)
from failover.protocols import Connector, ManagedConnection, P
from failover.url import BrokerURL

__all__ = ["Standby", "close_all", "close_quietly"]

_log = logging.getLogger("haclient.failover")

# How long closing a physical connection may take before it is abandoned.
_CLOSE_GRACE: Final = 5.0
# How often a probe that may not return yet (a commit on its way) asks again.
_QUIET_POLL: Final = 0.002


class _Held(Generic[P]):
    """A ready connection held, and the scope of the task watching its end."""

    __slots__ = ("broker", "connection", "scope")

    def __init__(self, connection: P, broker: BrokerURL) -> None:
        self.connection = connection
        self.broker = broker
        self.scope = anyio.CancelScope()


class Standby(Generic[P]):
    """The ready connections of one logical connection (see the module docstring).

    Args:
        connector: Opens one connection, counting nothing (the manager's ``standby_connector``).
        sleep: Sleeps that many seconds (the manager's injected ``sleep``).
        clock: Stamps the events.
        may_return: Whether a return may start now (default: always).
        patience: How long a probe waits for ``may_return`` (the probe interval).
    """

    def __init__(
        self,
        connector: Connector[P],
        *,
        sleep: Callable[[float], Awaitable[None]],
        clock: Callable[[], float],
        may_return: Callable[[], bool] | None = None,
        patience: float = 5.0,
    ) -> None:
        self._connector = connector
        self._sleep = sleep
        self._clock = clock
        self.may_return = may_return or (lambda: True)
        self._patience = max(patience, _QUIET_POLL)
        self._tasks: TaskGroup | None = None
        self._events: MemoryObjectSendStream[Event] | None = None
        self._spare: _Held[P] | None = None
        # made once running (anyio's objects need the event loop)
        self._opening: anyio.CancelScope | None = None  # the spare being opened
        self._timer: anyio.CancelScope | None = None  # the probe's timer
        self._probing: anyio.CancelScope | None = None  # the probe under way
        self._probed: tuple[P, BrokerURL] | None = None  # a probe's, until return_to or refuse
        self._handover: tuple[P, BrokerURL] | None = None  # a return's, for its failover

    def bind(self, tasks: TaskGroup, events: MemoryObjectSendStream[Event]) -> None:
        """Run in ``tasks``, report on ``events`` (the supervisor's, while it runs)."""
        self._tasks, self._events = tasks, events

    @property
    def spare_broker(self) -> BrokerURL | None:
        """The broker of the spare held now, if any."""
        return None if self._spare is None else self._spare.broker

    # --- The spare (F17) ------------------------------------------------------------------

    def start_spare(self, broker: BrokerURL, delay: float) -> None:
        """Open a spare to ``broker`` after ``delay``, in place of any held or being opened."""
        self.drop_spare()
        if self._tasks is None:
            return
        self._opening = scope = anyio.CancelScope()
        self._tasks.start_soon(self._open_spare, broker, delay, scope)

    def drop_spare(self) -> None:
        """Close the spare held (in the background), or stop its opening."""
        _cancel(self._opening)
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.scope.cancel()
            self._close_soon(spare.connection)

    async def _open_spare(self, broker: BrokerURL, delay: float, scope: anyio.CancelScope) -> None:
        connection: P | None = None
        with scope:
            if delay > 0:
                await self._sleep(delay)
            try:
                connection = await self._connector(broker)
            except Exception as exc:
                self._report(SpareFailed(self._clock(), broker, exc))
                return
        if connection is None:
            return
        if scope.cancel_called:  # dropped while it opened
            await close_quietly(connection)
            return
        self._spare = spare = _Held(connection, broker)
        self._report(SpareReady(self._clock(), broker))
        with spare.scope:
            with contextlib.suppress(Exception):
                await connection.wait_closed()
            if self._spare is spare:
                self._spare = None
                self._close_soon(connection)
            self._report(SpareLost(self._clock(), broker))

    # --- The probe (F16) ------------------------------------------------------------------

    def schedule_probe(self, delay: float) -> None:
        """Report ``TimerFired`` after ``delay``."""
        if self._tasks is None:
            return
        self._timer = scope = anyio.CancelScope()
        self._tasks.start_soon(self._fire, delay, scope)

    async def _fire(self, delay: float, scope: anyio.CancelScope) -> None:
        with scope:
            await self._sleep(delay)
            self._report(TimerFired(self._clock()))

    def probe(self, brokers: tuple[BrokerURL, ...]) -> None:
        """Try ``brokers`` in turn (``ProbeSucceeded`` or ``ProbeFailed``)."""
        if self._tasks is None:
            return
        self._probing = scope = anyio.CancelScope()
        self._tasks.start_soon(self._probe, brokers, scope)

    async def _probe(self, brokers: tuple[BrokerURL, ...], scope: anyio.CancelScope) -> None:
        errors: list[tuple[BrokerURL, BaseException]] = []
        with scope:
            for broker in brokers:
                try:
                    connection = await self._connector(broker)
                except Exception as exc:
                    errors.append((broker, exc))
                    continue
                held = False
                try:
                    held = await self._quiet(connection, broker)
                finally:  # also when cancelled while it waited: closed, never left open
                    if not held:
                        await close_quietly(connection)
                if held:
                    self._probed = (connection, broker)
                    self._report(ProbeSucceeded(self._clock(), broker))
                    return
                break
            self._report(ProbeFailed(self._clock(), tuple(errors)))

    async def _quiet(self, connection: P, broker: BrokerURL) -> bool:
        """Wait, at most one probe interval, until ``may_return`` says yes."""
        waited = 0.0
        while not self.may_return():
            if waited >= self._patience or not connection.is_open:
                _log.debug("a return to %s waits: a commit is on its way", broker)
                return False
            await self._sleep(_QUIET_POLL)
            waited += _QUIET_POLL
        return True

    def return_to(self, broker: BrokerURL) -> None:
        """The return to ``broker`` starts: its probe's connection is the handover."""
        probed, self._probed = self._probed, None
        if probed is not None:
            self._handover = probed

    def refuse(self, broker: BrokerURL) -> None:
        """No return: close the probe's connection."""
        probed, self._probed = self._probed, None
        if probed is not None:
            self._close_soon(probed[0])

    # --- What a failover takes, and the end -----------------------------------------------

    def take_ready(self, broker: BrokerURL) -> P | None:
        """The ready connection to ``broker`` for the failover under way: the handover of a
        return (F16), else the spare (F17), when still open. The caller owns it from now on."""
        handover, self._handover = self._handover, None
        if handover is not None:
            if handover[1] == broker and handover[0].is_open:
                return handover[0]
            self._close_soon(handover[0])
        spare, self._spare = self._spare, None
        if spare is None:
            return None
        spare.scope.cancel()
        if spare.broker != broker or not spare.connection.is_open:
            self._close_soon(spare.connection)
            return None
        return spare.connection

    def cancel(self) -> None:
        """Stop every task: the spare's opening, the timer, the probe."""
        for scope in (self._opening, self._timer, self._probing):
            _cancel(scope)

    def release(self) -> list[P]:
        """Every connection held (spare, handover, a probe's), for the caller to close; the
        tasks stopped."""
        self.cancel()
        released = [held[0] for held in (self._handover, self._probed) if held is not None]
        self._handover = self._probed = None
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.scope.cancel()
            released.append(spare.connection)
        return released

    async def close(self) -> None:
        """Close what ``release`` gives, together (shielded, bounded)."""
        await close_all(self.release())

    # --- Helpers --------------------------------------------------------------------------

    def _report(self, event: Event) -> None:
        if self._events is not None:
            with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._events.send_nowait(event)

    def _close_soon(self, connection: P) -> None:
        if self._tasks is not None:
            self._tasks.start_soon(close_quietly, connection)


def _cancel(scope: anyio.CancelScope | None) -> None:
    if scope is not None:
        scope.cancel()


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
