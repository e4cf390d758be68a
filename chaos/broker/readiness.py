"""Readiness: how long after its port opens a starting broker answers the AMQP protocol header,
and how much slower its first answers are (a cold start).

How this works: a real broker does not always serve the moment its port accepts TCP
connections. Measured on ActiveMQ 5.17's shared-store pair (bench.failover's phase timeline,
kill -9 of the master), the new master answers the AMQP protocol header 94-134 ms (median 101)
after its port opens (an earlier measure: 60-80 ms); a connection that arrives in that window is
accepted by the kernel and then either waits (its header is answered once the broker is ready)
or fails. ``Readiness`` models that window for one run of the reference broker:
``Broker.start()`` draws the delay when the port opens (and returns once it has passed), and
each connection accepted before the broker is ready is held (``NotReady.WAIT``: nothing is read
or written until the broker is ready, so the client's header is answered then), dropped
(``NotReady.DROP``: the socket is closed without a byte), or either of the two, evenly at random
(``NotReady.EITHER``, as ActiveMQ was seen to do). Connections accepted afterwards are served at
once.

``BrokerMode.ACTIVEMQ`` waits ``ACTIVEMQ_READINESS`` (a delay drawn at every start from 94-134
ms, half of the draws under the median 101 ms) and meets an early connection with
``NotReady.EITHER``; the reference mode is ready as soon as it listens.

A cold start (``ColdStart``): that master, a JVM just started, also answered its first Open
~45 ms after the login, restored the first session and link in ~16 ms and accepted the first
persistent message in ~19 ms, where later ones take a millisecond or two. ``ColdStart`` adds
such delays to one start's first answers (``ColdStartRun``: the first Open, the first attach and
the first durable message of the run, whichever connection they come on; later ones are
answered at once). Nothing sees them unless asked: ``Broker(cold_start=...)``, or ``--cold-start``
on the command line; the failover bench's ActiveMQ-mode pair asks for ``ACTIVEMQ_COLD_START``,
the measured figures, so that its floor is ActiveMQ's. Tests that check behaviour, not timing,
keep warm answers.
"""

from __future__ import annotations

import enum
import logging
import random
from dataclasses import dataclass

import anyio

__all__ = [
    "ACTIVEMQ_COLD_START",
    "ACTIVEMQ_READINESS",
    "NO_DELAY",
    "WARM",
    "ColdStart",
    "ColdStartRun",
    "NotReady",
    "Readiness",
    "ReadinessDelay",
]

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
    """Seconds from the port opening to the broker answering, drawn at every start: uniformly
    from ``[low, high]`` (``low == high``: always that); with a ``median``, half of the draws
    uniformly from ``[low, median]`` and half from ``[median, high]``, so that a measure's
    least, median and most are the model's."""

    low: float
    high: float
    median: float | None = None

    def __post_init__(self) -> None:
        middle = self.low if self.median is None else self.median
        if not 0 <= self.low <= middle <= self.high:
            raise ValueError(f"a readiness delay needs 0 <= low <= median <= high, not {self}")

    @classmethod
    def parse(cls, text: str) -> ReadinessDelay:
        """``"0.07"`` (always 70 ms), ``"0.06-0.08"`` (drawn from 60-80 ms) or
        ``"0.094-0.101-0.134"`` (low, median, high), in seconds.

        Raises:
            ValueError: not one to three numbers of seconds, 0 or more, in order.
        """
        parts = text.split("-")
        try:
            numbers = [float(part) for part in parts]
        except ValueError:
            numbers = []
        if not 1 <= len(numbers) <= 3:
            raise ValueError(f"expected SECONDS, LOW-HIGH or LOW-MEDIAN-HIGH, got {text!r}")
        if len(numbers) == 3:
            return cls(numbers[0], numbers[2], numbers[1])
        return cls(numbers[0], numbers[-1])

    def draw(self, rng: random.Random) -> float:
        """One start's delay."""
        if self.low == self.high:
            return self.low
        if self.median is None:
            return rng.uniform(self.low, self.high)
        if rng.random() < 0.5:
            return rng.uniform(self.low, self.median)
        return rng.uniform(self.median, self.high)

    def __str__(self) -> str:
        if self.low == self.high:
            return f"{self.low * 1000:g} ms"
        if self.median is not None:
            return f"{self.low * 1000:g}-{self.high * 1000:g} ms (median {self.median * 1000:g})"
        return f"{self.low * 1000:g}-{self.high * 1000:g} ms"


NO_DELAY = ReadinessDelay(0.0, 0.0)
ACTIVEMQ_READINESS = ReadinessDelay(0.094, 0.134, median=0.101)
"""ActiveMQ 5.17's, measured on a shared-store pair: the new master answers the protocol header
94-134 ms (median 101) after its port opens."""


@dataclass(frozen=True, slots=True)
class ColdStart:
    """Extra seconds a broker takes, once per start, to answer its first Open, its first attach
    and its first durable message (each the first of the run on any connection)."""

    open: float = 0.0
    attach: float = 0.0
    send: float = 0.0

    def __post_init__(self) -> None:
        if min(self.open, self.attach, self.send) < 0:
            raise ValueError(f"cold-start delays are 0 or more, not {self}")

    @classmethod
    def parse(cls, text: str) -> ColdStart:
        """``"activemq"`` (``ACTIVEMQ_COLD_START``) or ``"OPEN,ATTACH,SEND"`` in seconds.

        Raises:
            ValueError: neither.
        """
        if text.strip().lower() == "activemq":
            return ACTIVEMQ_COLD_START
        try:
            return cls(*(float(part) for part in text.split(",", 2)))
        except (TypeError, ValueError):
            raise ValueError(
                f"expected activemq or OPEN,ATTACH,SEND seconds, got {text!r}"
            ) from None

    @property
    def total(self) -> float:
        """What the three add to a failover that meets all of them."""
        return self.open + self.attach + self.send

    def __str__(self) -> str:
        return (
            f"first Open +{self.open * 1000:g} ms, first attach +{self.attach * 1000:g} ms, "
            f"first durable message +{self.send * 1000:g} ms"
        )


WARM = ColdStart()
ACTIVEMQ_COLD_START = ColdStart(open=0.044, attach=0.015, send=0.018)
"""ActiveMQ 5.17's new master, measured with bench.failover's phase timeline: its Open came ~45
ms after the login, the restore of a session and a producer took ~16 ms and the first
persistent send ~19 ms; the reference broker takes about 1 ms for each, hence 44, 15 and 18 ms
more."""


class ColdStartRun:
    """One start's cold-start delays, each handed out once (``take``)."""

    def __init__(self, cold: ColdStart) -> None:
        self._left = {"open": cold.open, "attach": cold.attach, "send": cold.send}

    def take(self, what: str) -> float:
        """The delay of the first ``what`` (``"open"``, ``"attach"``, ``"send"``) of the run;
        0 afterwards."""
        return self._left.pop(what, 0.0)


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
