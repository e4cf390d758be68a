"""Readiness: how long after its port opens a starting broker answers the AMQP protocol header.

How this works: a real broker does not always serve the moment its port accepts TCP
connections. Measured on ActiveMQ 5.17's shared-store pair, the new master answers the AMQP
protocol header ~60-80 ms after its port opens; a connection that arrives in that window is
accepted by the kernel and then either waits (its header is answered once the broker is ready)
or fails. ``Readiness`` models that window for one run of the reference broker:
``Broker.start()`` draws the delay when the port opens (and returns once it has passed), and
each connection accepted before the broker is ready is held (``NotReady.WAIT``: nothing is read
or written until the broker is ready, so the client's header is answered then), dropped
(``NotReady.DROP``: the socket is closed without a byte), or either of the two, evenly at random
(``NotReady.EITHER``, as ActiveMQ was seen to do). Connections accepted afterwards are served at
once.

``BrokerMode.ACTIVEMQ`` waits ``ACTIVEMQ_READINESS`` (a delay drawn uniformly from 60-80 ms at
every start) and meets an early connection with ``NotReady.EITHER``; the reference mode is
ready as soon as it listens.
"""

from __future__ import annotations

import enum
import logging
import random
from dataclasses import dataclass

import anyio

__all__ = ["ACTIVEMQ_READINESS", "NO_DELAY", "NotReady", "Readiness", "ReadinessDelay"]

log = logging.getLogger("chaos.broker")


class NotReady(enum.Enum):
    """What happens to a connection accepted before the broker is ready."""

    WAIT = "wait"
    """Held: its protocol header is answered once the broker is ready."""
    DROP = "drop"
    """Closed at once, without a byte (the client sees the connection end before the header)."""
    EITHER = "either"
    """Held or dropped, evenly at random, connection by connection."""


@dataclass(frozen=True, slots=True)
class ReadinessDelay:
    """Seconds from the port opening to the broker answering: drawn uniformly from
    ``[low, high]`` at every start (``low == high``: always that)."""

    low: float
    high: float

    def __post_init__(self) -> None:
        if not 0 <= self.low <= self.high:
            raise ValueError(f"a readiness delay needs 0 <= low <= high, not {self}")

    @classmethod
    def parse(cls, text: str) -> ReadinessDelay:
        """``"0.07"`` (always 70 ms) or ``"0.06-0.08"`` (drawn from 60-80 ms), in seconds.

        Raises:
            ValueError: not one or two numbers of seconds, 0 or more, the lower first.
        """
        low, sep, high = text.partition("-")
        try:
            bounds = (float(low), float(high if sep else low))
        except ValueError:
            raise ValueError(f"expected SECONDS or LOW-HIGH seconds, got {text!r}") from None
        return cls(*bounds)

    def draw(self, rng: random.Random) -> float:
        """One start's delay."""
        return self.low if self.low == self.high else rng.uniform(self.low, self.high)

    def __str__(self) -> str:
        if self.low == self.high:
            return f"{self.low * 1000:g} ms"
        return f"{self.low * 1000:g}-{self.high * 1000:g} ms"


NO_DELAY = ReadinessDelay(0.0, 0.0)
ACTIVEMQ_READINESS = ReadinessDelay(0.060, 0.080)
"""ActiveMQ 5.17's, measured on a shared-store pair: the new master answers the protocol header
60-80 ms after its port opens."""


class Readiness:
    """One run's readiness: not ready from its creation (when the port opened) until
    ``delay`` has passed. Made on the broker's event loop.

    Args:
        delay: The delay drawn at this start (seconds; 0: ready at once).
        not_ready: What happens to a connection accepted before then.
        rng: Draws, for ``NotReady.EITHER``, which one.
    """

    def __init__(self, delay: float, not_ready: NotReady, rng: random.Random) -> None:
        self.delay = delay
        self.not_ready = not_ready
        self._rng = rng
        self._ready_at = anyio.current_time() + delay
        self._ready = anyio.Event()
        self._settled = anyio.Event()  # ready, or the run ended first
        if delay <= 0:
            self._ready.set()
            self._settled.set()

    @property
    def ready(self) -> bool:
        """True once the broker answers the protocol header."""
        return self._ready.is_set()

    async def run(self) -> None:
        """Sleep the delay, then become ready (a task of the broker's run)."""
        if not self.ready:
            await anyio.sleep_until(self._ready_at)
            self._ready.set()
            self._settled.set()
            log.info("ready: answering protocol headers %.0f ms after listening", self.delay * 1e3)

    def end(self) -> None:
        """The run ended (a kill or stop, ready or not): ``wait()`` returns."""
        self._settled.set()

    async def wait(self) -> None:
        """Return once ready, or once the run ended before."""
        await self._settled.wait()

    async def admit(self) -> bool:
        """For a connection just accepted: True once it may be served (at once when ready,
        else when ready if it is held); False when it is to be dropped."""
        if self.ready:
            return True
        policy = self.not_ready
        if policy is NotReady.EITHER:
            policy = self._rng.choice((NotReady.WAIT, NotReady.DROP))
        if policy is NotReady.DROP:
            return False
        await self._ready.wait()
        return True
