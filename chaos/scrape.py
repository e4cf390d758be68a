"""Read haclient's metrics the way Prometheus does: scrape the endpoint, parse the exposition.

The chaos run and the demo serve ``haclient.metrics`` for every connection their workloads open
and read it back over HTTP at the end, so the report's failover figures come from the same
series an operator's Prometheus would store (``haclient_failover_duration_seconds``,
``haclient_failovers_total``), summed over the connections.
"""

from __future__ import annotations

import math
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

__all__ = ["DurationHistogram", "Scrape", "scrape"]

_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class DurationHistogram:
    """One histogram family summed over its label sets: cumulative counts per upper bound."""

    bounds: tuple[float, ...]  # ascending, +Inf last
    cumulative: tuple[float, ...]
    total_seconds: float

    @property
    def count(self) -> int:
        """How many observations (the +Inf bucket)."""
        return int(self.cumulative[-1]) if self.cumulative else 0

    def per_bucket(self) -> list[int]:
        """Observations per bucket (not cumulative), in the order of ``bounds``."""
        previous = 0.0
        counts = []
        for value in self.cumulative:
            counts.append(int(value - previous))
            previous = value
        return counts

    def quantile_bound(self, q: float) -> float:
        """The upper bound of the bucket holding quantile ``q`` (0..1); NaN with no data."""
        if not self.count:
            return math.nan
        wanted = q * self.count
        for bound, value in zip(self.bounds, self.cumulative, strict=True):
            if value >= wanted:
                return bound
        return math.inf


@dataclass(frozen=True, slots=True)
class Scrape:
    """The samples of one scrape of a ``haclient.metrics`` endpoint."""

    samples: tuple[Sample, ...]
    text: str

    def total(self, name: str, **labels: str) -> float:
        """The sum of every sample called ``name`` whose labels include ``labels``."""
        return sum(s.value for s in self._matching(name, labels))

    def histogram(self, family: str) -> DurationHistogram:
        """The histogram ``family`` (e.g. ``haclient_failover_duration_seconds``) summed over
        every connection."""
        buckets: dict[float, float] = {}
        for sample in self._matching(f"{family}_bucket", {}):
            bound = float(sample.labels["le"])
            buckets[bound] = buckets.get(bound, 0.0) + sample.value
        bounds = tuple(sorted(buckets))
        return DurationHistogram(
            bounds, tuple(buckets[b] for b in bounds), self.total(f"{family}_sum")
        )

    def _matching(self, name: str, labels: dict[str, str]) -> Iterable[Sample]:
        for sample in self.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                yield sample


def scrape(url: str) -> Scrape:
    """GET ``url`` (a Prometheus text endpoint) and parse it.

    Raises:
        OSError: the endpoint did not answer within 10 s.
        ValueError: the answer is not the Prometheus text format.
    """
    with urllib.request.urlopen(url, timeout=_TIMEOUT) as answer:
        text = answer.read().decode()
    samples = tuple(s for f in text_string_to_metric_families(text) for s in f.samples)
    return Scrape(samples, text)
