"""The attempts of a walk: wait an attempt's delay, connect, and say what came of it.

How this works: the failover machine (``failover.machine``) decides each attempt of a walk
(which broker, after how long, whether it follows a redirect, whether its wait watches a port)
and hands it out as a ``Connect`` action. The supervisor gives it to a ``Walker``, which carries
it out: it sleeps the delay (F5: a wait that watches a port ends as soon as the port accepts,
``failover.ports``), calls the connector, and returns the outcome as the machine's next event,
``Opened`` or ``AttemptFailed``, with the connection opened, if any. It decides nothing, keeps
no count and calls nobody back: the record of the attempts is the machine's.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Awaitable, Callable
from typing import Generic

from failover.events import AttemptFailed, Connect, Opened
from failover.ports import PortProbe, watch
from failover.protocols import Connector, P

__all__ = ["Walker"]

_log = logging.getLogger("haclient.failover")


class Walker(Generic[P]):
    """Carries out the attempts of one supervisor's walks (see the module docstring).

    Args:
        connector: Opens one physical connection.
        clock: The monotonic clock the outcomes are stamped with.
        sleep: Sleeps an attempt's delay.
        port_probe: Makes the probe of the ports a walk watches (one per walk; None: waits are
            only slept).
    """

    def __init__(
        self,
        connector: Connector[P],
        *,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
        port_probe: Callable[[], PortProbe] | None = None,
    ) -> None:
        self._connector = connector
        self._clock = clock
        self._sleep = sleep
        self._port_probe = port_probe
        self._probe: PortProbe | None = None  # this walk's, made at its first watched wait

    async def attempt(self, action: Connect) -> tuple[Opened | AttemptFailed, P | None]:
        """Wait ``action``'s delay, then connect: ``Opened`` and the connection, or
        ``AttemptFailed`` (the connector's error is the cause F4 reports) and None."""
        attempt = action.attempt
        if attempt.delay > 0:
            await self._wait(action)
        _log.debug("connecting to %s (attempt %d)", attempt.broker, attempt.number)
        try:
            connection = await self._connector(attempt.broker)
        except Exception as exc:
            # where it came from, for whoever debugs it (the cause F4 reports keeps its words)
            _log.debug("attempt %d to %s raised", attempt.number, attempt.broker, exc_info=exc)
            _drop_locals(exc)
            return AttemptFailed(self._clock(), attempt.broker, exc), None
        return Opened(self._clock(), attempt.broker), connection

    def end_walk(self) -> None:
        """The walk is over (a connection in use, or given up): close its port probe."""
        probe, self._probe = self._probe, None
        close = getattr(probe, "close", None)
        if close is not None:
            close()

    async def _wait(self, action: Connect) -> None:
        """Wait the attempt's delay; a wait that watches the port ends once it accepts."""
        attempt = action.attempt
        if action.watch is None or self._port_probe is None:
            await self._sleep(attempt.delay)
            return
        if self._probe is None:
            self._probe = self._port_probe()
        if await watch(
            self._probe,
            attempt.broker,
            attempt.delay,
            interval=action.watch.interval,
            clock=self._clock,
            sleep=self._sleep,
        ):
            _log.debug(
                "the port of %s accepts: attempt %d goes now", attempt.broker, attempt.number
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
