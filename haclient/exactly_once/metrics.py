"""Metrics of outbox relays and inboxes for Prometheus (the ``metrics`` extra).

How this works: ``ExactlyOnceCollector`` is a prometheus-client custom collector over the
``statistics()`` snapshots of the relays and inboxes it is given, read at scrape time; nothing
registers itself. Register it beside ``haclient.metrics.HAClientCollector``::

    registry.register(ExactlyOnceCollector(relays=[relay], inboxes=[inbox]))

Families (labels: ``outbox``, the relay's database file name; ``inbox``, the inbox's name):
``haclient_outbox_depth`` (rows waiting, counted at most once a second),
``haclient_outbox_oldest_age_seconds`` (how long the oldest waiting row has waited),
``haclient_outbox_relayed_total`` (messages a broker accepted: its rate is the relay rate),
``haclient_outbox_refused_total``, ``haclient_inbox_applied_total`` and
``haclient_inbox_duplicates_total`` (messages the inbox skipped as applied before).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Protocol

from haclient._extras import missing_extra

try:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ModuleNotFoundError as exc:  # installed without the metrics extra
    raise missing_extra(__name__, "metrics", exc) from exc

from haclient.exactly_once.inbox import InboxStatistics
from haclient.exactly_once.relay import RelayStatistics

__all__ = ["ExactlyOnceCollector"]


class _Relay(Protocol):
    def statistics(self) -> RelayStatistics: ...


class _Inbox(Protocol):
    def statistics(self) -> InboxStatistics: ...


class ExactlyOnceCollector(Collector):
    """A collector over relays (blocking or async) and inboxes (blocking or async)."""

    def __init__(self, relays: Iterable[_Relay] = (), inboxes: Iterable[_Inbox] = ()) -> None:
        self._lock = threading.Lock()
        self._relays = list(relays)
        self._inboxes = list(inboxes)

    def add_relay(self, relay: _Relay) -> None:
        """Report ``relay`` too."""
        with self._lock:
            self._relays.append(relay)

    def add_inbox(self, inbox: _Inbox) -> None:
        """Report ``inbox`` too."""
        with self._lock:
            self._inboxes.append(inbox)

    def describe(self) -> list[Metric]:
        """The families without samples."""
        return list(self._families([], []))

    def collect(self) -> Iterator[Metric]:
        """The families with one sample per relay and inbox."""
        with self._lock:
            relays = [(_name(relay), relay.statistics()) for relay in self._relays]
            inboxes = [inbox.statistics() for inbox in self._inboxes]
        yield from self._families(relays, inboxes)

    @staticmethod
    def _families(
        relays: list[tuple[str, RelayStatistics]], inboxes: list[InboxStatistics]
    ) -> Iterator[Metric]:
        now = time.time()
        depth = GaugeMetricFamily(
            "haclient_outbox_depth", "Outbox rows waiting for the relay", labels=["outbox"]
        )
        age = GaugeMetricFamily(
            "haclient_outbox_oldest_age_seconds",
            "How long the oldest waiting outbox row has waited",
            labels=["outbox"],
        )
        relayed = CounterMetricFamily(
            "haclient_outbox_relayed", "Outbox messages a broker accepted", labels=["outbox"]
        )
        refused = CounterMetricFamily(
            "haclient_outbox_refused", "Outbox sends a broker refused", labels=["outbox"]
        )
        for name, stats in relays:
            depth.add_metric([name], stats.depth)
            age.add_metric([name], stats.oldest_age(now))
            relayed.add_metric([name], stats.relayed)
            refused.add_metric([name], stats.refused)
        applied = CounterMetricFamily(
            "haclient_inbox_applied", "Messages whose effect an inbox applied", labels=["inbox"]
        )
        duplicates = CounterMetricFamily(
            "haclient_inbox_duplicates",
            "Messages an inbox skipped because it had applied them before",
            labels=["inbox"],
        )
        for stats_in in inboxes:
            applied.add_metric([stats_in.name], stats_in.applied)
            duplicates.add_metric([stats_in.name], stats_in.duplicates)
        yield from (depth, age, relayed, refused, applied, duplicates)


def _name(relay: object) -> str:
    database = getattr(relay, "database", None)
    return os.path.basename(database) if isinstance(database, str) else type(relay).__name__
