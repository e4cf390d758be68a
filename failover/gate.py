"""The gate of the logical connection: its state, and the callers waiting for CONNECTED.

How this works: ``ConnectionGate`` holds the state of ``failover.states`` and, from the moment a
physical connection opens until it is lost, that connection and its epoch. The supervisor
(``failover.supervisor``) reports what happens (``open``, ``apply``, ``drop``, ``fail``,
``attempting``); the gate applies each event with ``failover.states.state_after``, tells the
listeners of a change of state (``state_changed``), and wakes its waiters whenever the state leaves
``IN_TRANSIT``. Callers (``failover.manager``) ask it for the connection: at once when
CONNECTED, else they wait. It decides nothing about failover and starts no task.

Rules it keeps (rule 1 and rule 6 of ``failover.manager``):

1. The gate is open exactly while the state is CONNECTED: ``connected_nowait`` then returns the
   connection and its epoch, and ``wait`` returns them without a checkpoint.
2. In ``IN_TRANSIT`` states ``wait`` blocks; in FAILED it raises ``ConnectionFailedError`` with
   the cause and failures given to ``fail``; in CLOSED ``ClosedError``.
3. A wait longer than its limit raises ``FailoverTimeoutError`` naming the attempt under way
   (the last given to ``attempting``); the state is not changed by it.
4. Time is the injected ``clock`` and ``sleep``: a test drives the timeouts on a virtual clock.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Generic

import anyio
import anyio.lowlevel

from failover.errors import (
    ClosedError,
    ConnectionFailedError,
    FailoverTimeoutError,
    IllegalStateError,
    without_frames,
)
from failover.listeners import Listeners
from failover.policy import Attempt
from failover.protocols import P
from failover.states import IN_TRANSIT, ConnectionState, ManagerEvent, state_after
from failover.url import BrokerURL

_ENDED = frozenset({ConnectionState.FAILED, ConnectionState.CLOSED})

__all__ = ["ConnectionGate"]


class ConnectionGate(Generic[P]):
    """The state of one logical connection and the callers waiting for it to be CONNECTED.

    Args:
        clock: Seconds, monotonic: the waits' deadlines.
        sleep: Sleeps that many seconds of ``clock``.
        listeners: Told of every change of state (``state_changed(state)``, synchronously, on
            the event loop; what one raises is logged).
    """

    __slots__ = (
        "_cause",
        "_clock",
        "_connected",
        "_failures",
        "_first_connect",
        "_listeners",
        "_settled",
        "_sleep",
        "_state",
        "_trying",
    )

    def __init__(
        self,
        *,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
        listeners: Listeners,
    ) -> None:
        self._clock = clock
        self._sleep = sleep
        self._listeners = listeners
        self._state = ConnectionState.CONNECTING
        self._connected: tuple[P, int] | None = None  # from OPENED until the loss
        self._cause: BaseException | None = None  # what FAILED raises (F4)
        self._failures: Mapping[str, BaseException] = {}
        self._first_connect = False  # FAILED before any connection was made
        self._trying: Attempt[BrokerURL] | None = None
        self._settled: anyio.Event | None = None  # set while not IN_TRANSIT; see activate

    @property
    def state(self) -> ConnectionState:
        """The current state."""
        return self._state

    def activate(self) -> None:
        """Make the gate ready for waiters; called on the event loop that will run it (anyio's
        objects need it) before anyone waits."""
        self._settled = anyio.Event()
        if self._state not in IN_TRANSIT:
            self._settled.set()

    # --- What the supervisor reports ----------------------------------------------------------

    def apply(self, event: ManagerEvent) -> None:
        """Apply ``event`` (``failover.states.state_after``); report a change, wake waiters."""
        previous, self._state = self._state, state_after(self._state, event)
        if self._state is not previous:
            self._listeners.notify("state_changed", self._state)
        settled = self._settled
        if settled is None:
            return
        if self._state not in IN_TRANSIT:
            settled.set()
        elif settled.is_set():
            self._settled = anyio.Event()

    def open(self, connection: P, epoch: int) -> None:
        """A physical connection opened (OPENED): CONNECTED on the first connect, RESTORING on
        a reconnect, where the gate stays closed until ``apply(RESTORED)``."""
        self._connected = (connection, epoch)
        self.apply(ManagerEvent.OPENED)

    def drop(self) -> None:
        """The physical connection is lost: forget it (the caller applies LOST or fails)."""
        self._connected = None

    def fail(self, cause: BaseException | None, failures: Mapping[str, BaseException]) -> None:
        """Give up (GAVE_UP): waiters and later callers raise ``ConnectionFailedError`` with
        ``cause`` and ``failures`` (saying "could not connect" when the first connect is
        what failed). The cause is shown as its words, without its frames (``without_frames``):
        it is what every caller's error was raised from."""
        without_frames(cause)
        self._cause, self._failures = cause, dict(failures)
        self._first_connect = self._state is ConnectionState.CONNECTING
        self.apply(ManagerEvent.GAVE_UP)

    def attempting(self, attempt: Attempt[BrokerURL] | None) -> None:
        """The attempt under way or next (None: none), which a timeout names."""
        self._trying = attempt

    # --- What callers ask --------------------------------------------------------------------

    def connected_nowait(self) -> tuple[P, int] | None:
        """The connection and its epoch when CONNECTED now; None otherwise. Never waits."""
        if self._state is ConnectionState.CONNECTED:
            return self._connected
        return None

    async def wait(self, limit: float | None) -> tuple[P, int]:
        """The connection and its epoch once CONNECTED (rules 1-3).

        Args:
            limit: Seconds of ``clock`` to wait at most (None: no limit).

        Raises:
            FailoverTimeoutError: Still not connected after ``limit``.
            ConnectionFailedError: The state is (or becomes) FAILED.
            ClosedError: The state is (or becomes) CLOSED.
            IllegalStateError: Before ``activate``.
        """
        deadline = math.inf if limit is None else self._clock() + limit
        while True:
            connected = self.connected_nowait()
            if connected is not None:
                return connected
            if self._state in _ENDED:
                # A checkpoint first, as every async call makes one: an application that calls
                # again and again on a connection that is gone must not starve the event loop
                # (the deadlines of every other task on it overran by seconds).
                await anyio.lowlevel.checkpoint()
                if self._state is ConnectionState.FAILED:
                    raise ConnectionFailedError(
                        cause=self._cause,
                        failures=self._failures,
                        first_connect=self._first_connect,
                    )
                raise ClosedError("the connection is closed")
            settled = self._settled
            if settled is None:
                raise IllegalStateError("use the manager inside `async with` (or start_in) first")
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
