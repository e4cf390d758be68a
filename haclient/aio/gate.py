"""``Gate``: run a call while connected, and tell a lost connection from any other failure.

How this works: every call that needs the network goes through ``Gate.run``. It waits at the
failover manager's gate until the logical connection is CONNECTED (F2: while the connection
fails over the call blocks), then runs the operation on that physical connection. When the
operation fails, ``run`` asks one question: did it fail *because that connection ended*? If not,
the error is the caller's (a refused destination, a rejected message). If so, the manager is told
at once (failover starts without waiting for the socket to report it), and the call goes on as
its caller chose:

- by default it waits for the failover and runs the operation again on the new connection (F3);
- with ``on_lost`` it does what that callback says instead: return a value (a send inside a
  transaction is not repeated, F7; a message whose acknowledgement was cut off is not handed
  out, F9) or raise (an acknowledgement that cannot be confirmed, F8).

The manager is told why the connection ended (its own end error), never what the caller made of
it: an in-doubt commit's ``TransactionRolledBackError`` is no reason to give failover up.

Everything a call does on the network comes from the ``Connected`` it was admitted on, links
included. A call that finds the session or link it needs on another connection than its own
(failover replaced its connection meanwhile) raises ``ReplacedError``; a delivery that came on a
replaced connection cannot be settled on the new one either (``StaleDeliveryError``). Both count
as a loss that the manager already knows: the gate runs the call again on the new connection.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import anyio

from haclient.aio.stats import BlockedCalls
from haclient.errors import ClosedError, ConfigurationError, ConnectionLostError, HAClientError

if TYPE_CHECKING:
    from failover.manager import ConnectionManager
    from haclient.aio.physical import PhysicalConnection
    from haclient.aio.tracing import Tracing
    from haclient.amqp.connection import AmqpConnection

__all__ = ["Connected", "Gate", "ReplacedError", "StaleDeliveryError", "deadline_after"]

T = TypeVar("T")


def deadline_after(
    timeout: float | None, *, now: Callable[[], float] = anyio.current_time
) -> float:
    """The time on ``now``'s clock (the event loop's, ``anyio.current_time()``) at which a call
    given ``timeout`` seconds stops waiting at the gate (``math.inf`` for None). Outside the loop,
    ``now=time.monotonic`` is the same clock on asyncio.

    Raises:
        ConfigurationError: ``timeout`` is not a number >= 0 (or None).
    """
    if timeout is None:
        return math.inf
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ConfigurationError(
            f"timeout must be a number of seconds >= 0 or None, not {timeout!r}", option="timeout"
        )
    return now() + timeout


class ReplacedError(ConnectionLostError):
    """Failover replaced the connection a call was admitted on: what the call needs (a
    session, a link) is on the new one, which the call never uses (F3: it runs again)."""


class StaleDeliveryError(ReplacedError):
    """A delivery to settle came on a connection that is gone (failover replaced it)."""


@dataclass(frozen=True, slots=True)
class Connected:
    """The physical connection a call runs on, and its epoch (0 first, +1 per failover)."""

    physical: PhysicalConnection
    epoch: int

    @property
    def amqp(self) -> AmqpConnection:
        """The AMQP connection of ``physical``."""
        return self.physical.amqp


class Gate:
    """The stop-the-world gate of one logical connection, as its calls use it (F2, F3)."""

    def __init__(
        self, manager: ConnectionManager[PhysicalConnection], is_closed: Callable[[], bool]
    ) -> None:
        self._manager = manager
        self._is_closed = is_closed
        self.blocked = BlockedCalls()
        self.tracing: Tracing | None = None  # haclient.aio.tracing, when the connection traces
        # connected_nowait's last answer, and the manager's pair it was made of: the same pair
        # (one per epoch) gives the same frozen value, not a new one per call (per send)
        self._pair: object = None
        self._connected: Connected | None = None

    async def wait(self, deadline: float = math.inf) -> Connected:
        """The connection to use: at once when connected, else once failover restored it.

        Args:
            deadline: ``anyio.current_time()`` after which to stop waiting; the connection's
                ``failover.timeout`` applies too, whichever ends first.

        Raises:
            ClosedError: the connection is (or gets) closed.
            ConnectionFailedError: failover gave up (F4).
            FailoverTimeoutError: still failing over at the deadline (F4); failover goes on.
        """
        if self._is_closed():
            raise ClosedError("the connection is closed")
        timeout = None if math.isinf(deadline) else max(deadline - anyio.current_time(), 0.0)
        blocked = self.blocked.measure(self._manager.state)
        with blocked:
            physical, epoch = await self._manager.wait_connected(timeout=timeout)
        if self.tracing is not None and blocked.seconds is not None:
            self.tracing.waited(blocked.seconds)  # the failover, in the caller's trace
        return Connected(physical, epoch)

    def connected_nowait(self) -> Connected | None:
        """The connection to use when it is connected now (no wait, no checkpoint); None
        while connecting, failing over or closed: then ``wait`` is the way."""
        if self._is_closed():
            return None
        pair = self._manager.connected_nowait()
        if pair is None:
            self._pair = self._connected = None  # nothing of a lost connection is kept here
            return None
        if pair is not self._pair:
            self._connected = Connected(*pair)
            self._pair = pair
        return self._connected

    def lost(self, at: Connected, error: BaseException) -> bool:
        """True if ``error`` came from the loss of ``at``'s connection (failover then runs)."""
        if isinstance(error, ReplacedError):
            return True  # that connection is already replaced
        if at.physical.is_open:
            return False
        self._manager.report_lost(at.epoch, at.amqp.end_error)  # None: "connection lost"
        return True

    async def run(
        self,
        operation: Callable[[Connected], Awaitable[T]],
        *,
        on_lost: Callable[[HAClientError], T] | None = None,
        deadline: float = math.inf,
        on: Connected | None = None,
    ) -> T:
        """Run ``operation`` on the connection in use, waiting out failover (F2).

        Args:
            operation: The call's network part; it gets the connection to run on.
            on_lost: What to do when the connection was lost during ``operation``: return its
                result (or raise). None: wait for the failover and run ``operation`` again (F3).
            deadline: As for ``wait``; it bounds each wait at the gate, not ``operation``.
            on: Run the first attempt on this connection, without waiting at the gate (for
                work that belongs to the connection a message came on).

        Raises:
            Exception: what ``operation`` raised for any reason but the loss of its
                connection, what ``on_lost`` raised, and what ``wait`` raises.
        """
        while True:
            at, on = on or self.connected_nowait() or await self.wait(deadline), None
            try:
                return await operation(at)
            except HAClientError as exc:
                if not self.lost(at, exc):
                    raise
                if on_lost is not None:
                    return on_lost(exc)
