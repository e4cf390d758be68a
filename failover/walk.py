"""The attempts of a walk: wait an attempt's delay, connect, and say what came of it.

How this works: the failover machine (``failover.machine``) decides each attempt of a walk
(which broker, after how long, whether it follows a redirect, whether its wait watches a port)
and hands it out as a ``Connect`` action. The supervisor gives it to a ``Walker``, which carries
it out: it sleeps the delay (F5: a wait that watches a port ends as soon as the port accepts,
``failover.ports``), calls the connector, and returns the outcome as the machine's next event,
``Opened`` or ``AttemptFailed``, with the connection opened, if any. It decides nothing, keeps
no count and calls nobody back: the record of the attempts is the machine's.

A watched wait stands in for its attempt (F5): when the port refused for the whole wait (the
port watcher's thread saw it refuse a probe within an interval of the wait's end, and never
accept), the attempt is not made: it fails with the error of the broker's last attempt that
was made and refused at the TCP level, kept for that (the same error, so the same outcome,
log, give-up and cause as the connect would have had; the machine counts it as any attempt).
A connector that counts its attempts (the application's metrics) is told, through its
``stood_in(broker)`` when it has one (``StandIn`` adds it to a plain connector). A refused
connect costs the client ~0.3 ms of CPU, a probe ~0.05 ms: while the ports refuse, the probes
the wait made anyway prove what the connect would have found. Without such an error (the
first watched wait of a walk follows a real refusal, so there is one), it connects. The
brokers a pass tries at once after a watched wait (no wait of their own) stand in the same way
when their last attempt made was refused: the watch probes their ports at its last tick
(``also``), and an attempt that follows finds that probe within the interval.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Awaitable, Callable
from typing import Generic

from failover.events import AttemptFailed, Connect, Opened
from failover.ports import PortProbe, TcpProbe, Watched, tcp_refused, watch_port
from failover.protocols import Connector, P
from failover.url import BrokerURL

__all__ = ["StandIn", "Walker"]

_log = logging.getLogger("haclient.failover")


class StandIn(Generic[P]):
    """``connect``, told of the attempts a watched wait stood in for (F5, see the module
    docstring): ``stood_in(broker)`` is called for each, so that the attempts it counts are
    the machine's."""

    def __init__(self, connect: Connector[P], stood_in: Callable[[BrokerURL], object]) -> None:
        self._connect = connect
        self.stood_in = stood_in

    def __call__(self, broker: BrokerURL) -> Awaitable[P]:
        return self._connect(broker)


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
        # broker -> the error of its last attempt made, when that was a refused TCP connection
        self._refused: dict[BrokerURL, Exception] = {}
        self._interval: float | None = None  # of this walk's last watched wait
        self.stood_in = False  # whether the last attempt was stood in for (no connect made)

    async def attempt(self, action: Connect) -> tuple[Opened | AttemptFailed, P | None]:
        """Wait ``action``'s delay, then connect: ``Opened`` and the connection, or
        ``AttemptFailed`` (the connector's error is the cause F4 reports) and None. A watched
        wait through which the port refused stands in for the connect (module docstring)."""
        attempt = action.attempt
        broker = attempt.broker
        watched = await self._wait(action) if attempt.delay > 0 else Watched.RAN_OUT
        refused = self._refused.get(broker)
        self.stood_in = refused is not None and await self._refuses(broker, watched)
        if self.stood_in:
            assert refused is not None
            _log.debug(
                "the port of %s refused through the wait: attempt %d stands as refused",
                broker,
                attempt.number,
            )
            stood_in = getattr(self._connector, "stood_in", None)
            if stood_in is not None:
                stood_in(broker)
            return AttemptFailed(self._clock(), broker, refused), None
        _log.debug("connecting to %s (attempt %d)", broker, attempt.number)
        try:
            connection = await self._connector(broker)
        except Exception as exc:
            # where it came from, for whoever debugs it (the cause F4 reports keeps its words)
            _log.debug("attempt %d to %s raised", attempt.number, broker, exc_info=exc)
            _drop_locals(exc)
            if tcp_refused(exc):
                self._refused[broker] = exc
            else:
                self._refused.pop(broker, None)
            return AttemptFailed(self._clock(), broker, exc), None
        self._refused.pop(broker, None)
        return Opened(self._clock(), broker), connection

    def end_walk(self) -> None:
        """The walk is over (a connection in use, or given up): close its port probe, forget
        its refusals."""
        self._refused.clear()
        self._interval = None
        probe, self._probe = self._probe, None
        close = getattr(probe, "close", None)
        if close is not None:
            close()

    async def _refuses(self, broker: BrokerURL, watched: Watched) -> bool:
        """Whether the port of ``broker`` is known to refuse now: its wait said so, or (an
        attempt that follows another at once, in a pass) the port watcher probed it during
        the last watched wait and its latest probe, within the interval, saw it refuse."""
        if watched is not Watched.RAN_OUT:
            return watched is Watched.REFUSED
        probe, interval = self._probe, self._interval
        if not isinstance(probe, TcpProbe) or interval is None:
            return False
        return await probe.refused_lately(broker, interval)

    async def _wait(self, action: Connect) -> Watched:
        """Wait the attempt's delay; a wait that watches the port ends once it accepts."""
        attempt = action.attempt
        if action.watch is None or self._port_probe is None:
            await self._sleep(attempt.delay)
            return Watched.RAN_OUT
        if self._probe is None:
            self._probe = self._port_probe()
        self._interval = action.watch.interval
        watched = await watch_port(
            self._probe,
            attempt.broker,
            attempt.delay,
            interval=action.watch.interval,
            clock=self._clock,
            sleep=self._sleep,
            # the pass's other refused brokers, tried at once after this one: probed too
            also=[other for other in self._refused if other != attempt.broker],
        )
        if watched is Watched.ACCEPTED:
            _log.debug(
                "the port of %s accepts: attempt %d goes now", attempt.broker, attempt.number
            )
        return watched


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
