"""The counters a connection keeps for ``statistics()`` and the Prometheus collector.

How this works: one ``Counters`` per logical connection, shared by its sessions, producers and
consumers through ``ConnectionContext``. The hot path only increments plain attributes or calls
``Histogram.observe`` (a binary search over fixed bucket bounds and three additions, nothing
allocated); everything else (copies, cumulative buckets, labels) happens when a snapshot is
taken, i.e. at scrape time. ``FailoverStats`` is a failover listener (F14) the connection adds
to its own manager, so the failover layer needs no change to be measured.

Thread-safety: none; everything is written on the connection's event loop. A snapshot taken
from another thread (a scrape) may be a few increments behind; each field is read once. The one
process-wide piece, ``PROCESS_NAMES``, has a lock of its own.
"""

from __future__ import annotations

import threading
import time
import weakref
from bisect import bisect_left
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

from failover.states import ConnectionState
from haclient.modes import AckMode

if TYPE_CHECKING:
    from failover.url import BrokerURL

__all__ = [
    "DURATION_BUCKETS",
    "PROCESS_NAMES",
    "TRANSACTION_OUTCOMES",
    "AckStats",
    "BlockedCalls",
    "Counters",
    "FailoverStats",
    "Histogram",
    "HistogramSnapshot",
    "ProcessNames",
    "broker_address",
]

DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
"""Upper bounds (seconds) of the duration histograms: 1 ms to 10 minutes, then +Inf."""

TRANSACTION_OUTCOMES: Final = ("committed", "rolled_back", "rolled_back_by_failover", "in_doubt")
"""The ``outcome`` label of ``haclient_transactions_total``."""


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """A histogram at one moment.

    Attributes:
        bounds: The buckets' upper bounds, ascending (seconds); +Inf is implied after them.
        counts: Observations per bucket, not cumulative; one more entry than ``bounds`` (+Inf).
        sum: The sum of all observations.
        count: The number of observations.
    """

    bounds: tuple[float, ...]
    counts: tuple[int, ...]
    sum: float
    count: int

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, count of observations <= le)`` pairs, ``+Inf`` last (Prometheus buckets)."""
        pairs: list[tuple[str, int]] = []
        total = 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += n
            pairs.append(("+Inf" if bound == float("inf") else repr(bound), total))
        return pairs


class Histogram:
    """A fixed-bucket histogram accumulator: ``observe`` is O(log buckets) and allocates nothing."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = DURATION_BUCKETS) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError("histogram bounds must be distinct and ascending")
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, seconds: float) -> None:
        """Record one duration (a bucket's bound is inclusive, as Prometheus' ``le``)."""
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds
        self.count += 1

    def snapshot(self) -> HistogramSnapshot:
        return HistogramSnapshot(self.bounds, tuple(self.counts), self.sum, self.count)


class _Blocked:
    """One call waiting at the gate: counted while it waits, its wait observed when it ends."""

    __slots__ = ("_calls", "_started", "seconds")

    def __init__(self, calls: BlockedCalls) -> None:
        self._calls = calls
        self._started = 0.0
        self.seconds: float | None = None  # how long it waited, once it ended

    def __enter__(self) -> None:
        self._calls.now += 1
        self._started = time.perf_counter()

    def __exit__(self, *exc_info: object) -> None:
        self._calls.now -= 1
        self.seconds = time.perf_counter() - self._started
        self._calls.durations.observe(self.seconds)


class _NotBlocked:
    """The gate is open: nothing to measure (shared, so the fast path allocates nothing)."""

    __slots__ = ()
    seconds: Final = None

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NOT_BLOCKED: Final = _NotBlocked()


class BlockedCalls:
    """Calls waiting at the stop-the-world gate (F2): how many now, and how long each waited."""

    __slots__ = ("durations", "now")

    def __init__(self) -> None:
        self.now = 0
        self.durations = Histogram()

    def measure(self, state: ConnectionState) -> _Blocked | _NotBlocked:
        """``with gate.blocked.measure(manager.state):`` around the wait at the gate; a call
        that finds the connection CONNECTED is not blocked and is not observed."""
        return _NOT_BLOCKED if state is ConnectionState.CONNECTED else _Blocked(self)


class FailoverStats:
    """What each failover did and cost; a failover listener (F14) of the connection's manager.

    Attributes:
        completed / failed: Failovers that restored the connection / that gave up (F4).
        durations: Downtime of each completed failover (loss to restored), seconds.
        resources_not_restored: Resources failover could not restore (F14).
        last_started: Unix time at which the last failover began (the loss); None before one.
        state_since: Unix time of the last state change (of the creation before any): a
            failover shorter than a scrape interval still moves it.
    """

    __slots__ = (
        "completed",
        "durations",
        "failed",
        "last_started",
        "resources_not_restored",
        "state_since",
    )

    def __init__(self) -> None:
        self.completed = 0
        self.failed = 0
        self.durations = Histogram()
        self.resources_not_restored = 0
        self.last_started: float | None = None
        self.state_since = time.time()

    def state_changed(self, state: ConnectionState) -> None:
        self.state_since = time.time()

    def failover_started(self, cause: BaseException) -> None:
        self.last_started = time.time()  # counted when it ends, by outcome

    def failover_completed(self, broker: BrokerURL, downtime: float) -> None:
        self.completed += 1
        self.durations.observe(downtime)

    def failover_failed(self, cause: BaseException) -> None:
        self.failed += 1

    def resource_not_restored(self, resource: object, error: BaseException) -> None:
        self.resources_not_restored += 1


class AckStats:
    """Acknowledgements settled with the broker in one acknowledge mode, and how long the
    broker took to confirm them (A6; only confirmed exchanges are timed)."""

    __slots__ = ("count", "latency")

    def __init__(self) -> None:
        self.count = 0
        self.latency = Histogram()


def broker_address(broker: BrokerURL | None) -> str | None:
    """``host:port`` of a broker: a bounded label with no credentials in it."""
    return None if broker is None else f"{broker.host}:{broker.port}"


class ProcessNames:
    """Connection names unique among the open connections of a process (the metrics'
    ``connection`` label): two series of one name would make the exposition invalid, and two
    connections may well share a client id (on different brokers, say).

    A name is held until its owner releases it (a connection does when it closes) or is
    garbage-collected. Thread-safe: every connection's event-loop thread claims here.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: set[str] = set()

    def claim(self, owner: object, name: str) -> tuple[str, Callable[[], object]]:
        """``name`` if nobody holds it, else ``name#2``, ``name#3`` ... the first free; and
        the call that releases it (idempotent; also made when ``owner`` is collected)."""
        with self._lock:
            unique, number = name, 1
            while unique in self._held:
                number += 1
                unique = f"{name}#{number}"
            self._held.add(unique)
        return unique, weakref.finalize(owner, self._release, unique)

    def _release(self, name: str) -> None:
        with self._lock:
            self._held.discard(name)


PROCESS_NAMES: Final = ProcessNames()
"""The names of this process's connections."""


def _ack_stats() -> dict[AckMode, AckStats]:
    return {mode: AckStats() for mode in AckMode}


@dataclass(slots=True)
class Counters:
    """What a connection counted since it was opened (``statistics()``).

    The hot path touches only these attributes (``+= 1``) and ``Histogram.observe``.
    ``duplicates_suppressed`` is counted by the duplicate window of the sessions.
    """

    sent: int = 0
    received: int = 0
    acknowledged: int = 0
    redelivered: int = 0
    resent: int = 0  # F11: sends repeated on a new connection
    temporaries_restored: int = 0  # F6
    duplicates_suppressed: int = 0
    dead_lettered: int = 0  # E6: past max_redeliveries, settled and never handed out
    sends_failed: int = 0  # C9: failures of sends that no call of the application raised
    committed: int = 0
    rolled_back: int = 0
    rolled_back_by_failover: int = 0  # F7
    in_doubt: int = 0  # F7: the commit was cut off in flight
    commits_in_flight: int = 0  # not a statistic: no return to a preferred broker now (F16)
    failover: FailoverStats = field(default_factory=FailoverStats)
    acks: dict[AckMode, AckStats] = field(default_factory=_ack_stats)
    attempts: dict[str, int] = field(default_factory=dict)  # host:port -> connection attempts
    attempts_failed: dict[str, int] = field(default_factory=dict)  # host:port -> failed ones
    client_id_refusals: int = 0  # F4: attempts refused as the client id in use
    client_id_warned_epoch: int = -1  # not a statistic: the failover whose refusal was logged

    def attempt(self, broker: BrokerURL, *, succeeded: bool) -> None:
        """A connection attempt to ``broker`` ended (the first connect's included)."""
        address = f"{broker.host}:{broker.port}"
        self.attempts[address] = self.attempts.get(address, 0) + 1
        self.attempts_failed.setdefault(address, 0)
        if not succeeded:
            self.attempts_failed[address] += 1

    def transactions(self) -> Mapping[str, int]:
        """Transactions by outcome (``TRANSACTION_OUTCOMES``)."""
        return MappingProxyType(
            {
                "committed": self.committed,
                "rolled_back": self.rolled_back,
                "rolled_back_by_failover": self.rolled_back_by_failover,
                "in_doubt": self.in_doubt,
            }
        )

    def acknowledgements(self) -> Mapping[str, int]:
        """Acknowledgements settled with the broker, by mode (``auto``, ``client`` ...)."""
        counts = {mode.name.lower(): stats.count for mode, stats in self.acks.items()}
        return MappingProxyType(counts)

    def ack_latency(self) -> Mapping[str, HistogramSnapshot]:
        """Confirmation latency by mode (``auto``, ``client`` ...)."""
        return MappingProxyType(
            {mode.name.lower(): stats.latency.snapshot() for mode, stats in self.acks.items()}
        )
