"""Metrics for Prometheus: what each failover did and cost, how long calls waited, what was sent,
acknowledged, rolled back and suppressed.

How this works: ``HAClientCollector`` is a prometheus-client custom collector over the
``statistics()`` snapshots of the connections it is given (blocking ``haclient.Connection`` or
async ``haclient.aio.Connection``). The client keeps plain counters and fixed-bucket histograms
on its hot path (``haclient.aio.stats``); everything here runs at scrape time. Nothing registers
itself at import and there is no global state: register a collector on the registry of your
choice, or let ``serve()`` start an HTTP endpoint with a registry of its own::

    from prometheus_client import CollectorRegistry
    from haclient.metrics import HAClientCollector

    registry = CollectorRegistry()
    registry.register(HAClientCollector([connection]))

    # or, for the simple case:
    server = haclient.metrics.serve(9464, connections=[connection])
    print("metrics at", server.url)
    ...
    server.stop()

Names follow Prometheus practice: the ``haclient_`` prefix, seconds, ``_total`` counters
(prometheus-client appends the suffix), and bounded labels only: ``connection`` (the client id,
else the AMQP container id; a second live connection of the process with the same client id
is ``id#2``), ``broker`` (``host:port``, never credentials), ``method`` (the failover method),
``version`` (haclient's), ``mode`` (the acknowledge mode) and ``outcome``. Every metric and its
labels is listed in ``METRICS``.

Thread-safety: a scrape runs on the HTTP server's thread. The blocking API's ``statistics()``
is safe from any thread; an async connection's is read directly (plain attribute reads), and a
snapshot that raced a change is taken again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from haclient._extras import missing_extra

try:
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )
    from prometheus_client.registry import Collector
except ModuleNotFoundError as exc:  # installed without the metrics extra
    raise missing_extra(__name__, "metrics", exc) from exc

from failover.states import ConnectionState
from haclient import __version__
from haclient.aio.connection import ConnectionStatistics
from haclient.aio.stats import HistogramSnapshot
from haclient.errors import ConfigurationError

__all__ = ["METRICS", "HAClientCollector", "MetricSpec", "MetricsServer", "serve"]

log = logging.getLogger("haclient.metrics")


class HasStatistics(Protocol):
    """A connection: anything whose ``statistics()`` returns a ``ConnectionStatistics``."""

    def statistics(self) -> ConnectionStatistics: ...


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One exported metric: its family name (counters without ``_total``), type and labels."""

    name: str
    kind: str  # "counter", "gauge" or "histogram"
    labels: tuple[str, ...]
    help: str


def _m(name: str, kind: str, labels: str, help: str) -> MetricSpec:
    return MetricSpec(f"haclient_{name}", kind, ("connection", *labels.split()), help)


METRICS: Final[tuple[MetricSpec, ...]] = (
    _m("connection_info", "gauge", "method version",
       "Always 1: the connection's failover method and the haclient version"),
    _m("connection_state", "gauge", "state",
       "1 for the state the connection is in (connected, failing_over ...), 0 for the others"),
    _m("connection_broker", "gauge", "broker",
       "1 for the broker (host:port) the connection uses; absent while it has none"),
    _m("last_state_change_timestamp_seconds", "gauge", "",
       "Unix time of the connection's last state change (of its creation before any)"),
    _m("last_failover_timestamp_seconds", "gauge", "",
       "Unix time at which the last failover began (the connection was lost); "
       "absent before the first"),
    _m("failovers", "counter", "outcome",
       "Failovers that ended: completed (reconnected and restored), returned (moved back to a "
       "preferred broker, and restored) or failed (gave up)"),
    _m("failover_duration_seconds", "histogram", "",
       "Seconds from the loss of the connection to reconnected and restored, per failover"),
    _m("connection_attempts", "counter", "broker outcome",
       "Attempts to open a connection to a broker (host:port): succeeded or failed"),
    _m("client_id_refusals", "counter", "",
       "Connection attempts refused because the broker held the client id (mostly this "
       "connection's own previous one, not yet noticed dead); failover tries again"),
    _m("calls_blocked", "gauge", "",
       "Calls waiting now for a failover to end before they can use the network"),
    _m("call_blocked_duration_seconds", "histogram", "",
       "Seconds each call waited for a failover to end"),
    _m("messages_sent", "counter", "", "Messages sent"),
    _m("messages_received", "counter", "", "Messages received"),
    _m("messages_redelivered", "counter", "",
       "Messages received that the broker marked as delivered before"),
    _m("messages_resent", "counter", "",
       "Messages sent again on a new connection because the broker's answer was lost"),
    _m("duplicates_suppressed", "counter", "",
       "Messages received again and not handed to the application (already delivered)"),
    _m("messages_dead_lettered", "counter", "",
       "Messages redelivered more often than the redelivery policy allows: settled with its "
       "outcome (for the broker to dead-letter) and not handed to the application"),
    _m("acknowledgements", "counter", "mode",
       "Messages acknowledged to the broker, by acknowledge mode"),
    _m("ack_confirmation_duration_seconds", "histogram", "mode",
       "Seconds the broker took to confirm an acknowledgement, by mode (modes in use only)"),
    _m("transactions", "counter", "outcome",
       "Transactions by outcome: committed, rolled_back, rolled_back_by_failover, in_doubt "
       "(commit cut off: check before replaying)"),
    _m("temporary_destinations_restored", "counter", "",
       "Temporary queues and topics made again on a new connection after a failover"),
    _m("resources_not_restored", "counter", "",
       "Sessions, producers, consumers a failover could not restore (they are closed)"),
    _m("sessions", "gauge", "", "Open sessions"),
    _m("producers", "gauge", "", "Open producers"),
    _m("consumers", "gauge", "", "Open consumers"),
)  # fmt: skip
"""Every metric the collector exports (the Grafana dashboard queries only these)."""

_FAMILIES: Final = {
    "counter": CounterMetricFamily,
    "gauge": GaugeMetricFamily,
    "histogram": HistogramMetricFamily,
}


def _samples(stats: ConnectionStatistics) -> Iterator[tuple[str, tuple[str, ...], object]]:
    """``(metric name, extra label values, value)`` for one connection's snapshot; a value is
    a number, or a ``HistogramSnapshot`` for histograms. Every labelled counter has each of
    its known label values (outcomes, modes; the brokers attempted) from the start, at 0, so
    that a dashboard has series and ``increase()`` sees the first event; a histogram of a mode
    that never acknowledged is left out (no NaN lines on dashboards)."""
    yield "connection_info", (stats.method, __version__), 1
    for state in ConnectionState:
        yield "connection_state", (state.name.lower(),), int(state is stats.state)
    if stats.broker_address is not None and stats.state is ConnectionState.CONNECTED:
        yield "connection_broker", (stats.broker_address,), 1
    yield "last_state_change_timestamp_seconds", (), stats.state_since
    if stats.last_failover_at is not None:
        yield "last_failover_timestamp_seconds", (), stats.last_failover_at
    yield "failovers", ("completed",), stats.failovers - stats.failovers_returned
    yield "failovers", ("returned",), stats.failovers_returned
    yield "failovers", ("failed",), stats.failovers_failed
    yield "failover_duration_seconds", (), stats.failover_durations
    for broker, attempts in stats.connection_attempts.items():
        failed = stats.connection_attempts_failed.get(broker, 0)
        yield "connection_attempts", (broker, "succeeded"), attempts - failed
        yield "connection_attempts", (broker, "failed"), failed
    yield "client_id_refusals", (), stats.client_id_refusals
    yield "calls_blocked", (), stats.calls_blocked
    yield "call_blocked_duration_seconds", (), stats.blocked_durations
    yield "messages_sent", (), stats.messages_sent
    yield "messages_received", (), stats.messages_received
    yield "messages_redelivered", (), stats.messages_redelivered
    yield "messages_resent", (), stats.messages_resent
    yield "duplicates_suppressed", (), stats.duplicates_suppressed
    yield "messages_dead_lettered", (), stats.messages_dead_lettered
    yield from _modes(stats)
    for outcome, count in stats.transactions.items():
        yield "transactions", (outcome,), count
    yield "temporary_destinations_restored", (), stats.temporaries_restored
    yield "resources_not_restored", (), stats.resources_not_restored
    yield "sessions", (), stats.sessions
    yield "producers", (), stats.producers
    yield "consumers", (), stats.consumers


def _modes(stats: ConnectionStatistics) -> Iterator[tuple[str, tuple[str, ...], object]]:
    """Acknowledgements by mode, every mode at 0 from the start (a counter's known label
    values, as Prometheus advises); their confirmation times only for the modes that
    acknowledged (an empty histogram is a NaN line on a dashboard)."""
    for mode, count in stats.acknowledgements.items():
        yield "acknowledgements", (mode,), count
        latency = stats.ack_latency.get(mode)
        if count and latency is not None:
            yield "ack_confirmation_duration_seconds", (mode,), latency


def _families(snapshots: Iterable[ConnectionStatistics]) -> list[Metric]:
    """The metric families of ``METRICS`` filled with ``snapshots``' samples."""
    families: dict[str, Metric] = {
        spec.name: _FAMILIES[spec.kind](spec.name, spec.help, labels=spec.labels)
        for spec in METRICS
    }
    for name, stats in _labelled(snapshots):
        for metric, labels, value in _samples(stats):
            family = families[f"haclient_{metric}"]
            if isinstance(value, HistogramSnapshot):
                assert isinstance(family, HistogramMetricFamily)
                family.add_metric([name, *labels], value.cumulative(), value.sum)
            else:
                assert isinstance(family, CounterMetricFamily | GaugeMetricFamily)
                assert isinstance(value, int | float)
                family.add_metric([name, *labels], value)
    return list(families.values())


def _labelled(
    snapshots: Iterable[ConnectionStatistics],
) -> Iterator[tuple[str, ConnectionStatistics]]:
    """Each snapshot with its ``connection`` label, unique in the scrape. Open connections'
    names are unique in the process; a closed connection still reported, whose name a new
    connection took since, is ``name#closed`` (``#closed2`` ...)."""
    taken: set[str] = set()
    for stats in sorted(snapshots, key=lambda s: s.state is ConnectionState.CLOSED):
        name = base = connection_name(stats)
        number = 1
        while name in taken:
            name = f"{base}#closed{number if number > 1 else ''}"
            number += 1
        taken.add(name)
        yield name, stats


def connection_name(stats: ConnectionStatistics) -> str:
    """The ``connection`` label: the client id, else the AMQP container id; ``#2``, ``#3``
    ... appended for further live connections of this process with the same client id, so
    that every series is unique (``ConnectionStatistics.name``)."""
    return stats.name


class HAClientCollector(Collector):
    """A prometheus-client collector over the ``statistics()`` of some connections.

    Register it on a registry of your choice (``registry.register(collector)``); nothing is
    registered for you. Connections may be added and removed at any time, from any thread.
    A connection whose snapshot cannot be taken is left out of that scrape (logged at DEBUG).
    During failover the connection keeps being reported: its state, its blocked calls, and
    once the failover ends its outcome and duration.
    """

    def __init__(self, connections: Iterable[HasStatistics] = ()) -> None:
        self._lock = threading.Lock()
        self._connections: list[HasStatistics] = list(connections)

    def add(self, connection: HasStatistics) -> None:
        """Report ``connection`` too (a no-op if it is already reported)."""
        with self._lock:
            if all(c is not connection for c in self._connections):
                self._connections.append(connection)

    def remove(self, connection: HasStatistics) -> None:
        """Stop reporting ``connection`` (no error if unknown)."""
        with self._lock:
            self._connections = [c for c in self._connections if c is not connection]

    def describe(self) -> list[Metric]:
        """The families, without samples: registering takes no snapshot."""
        return _families(())

    def collect(self) -> Iterator[Metric]:
        """The families with one sample set per connection (prometheus-client calls this)."""
        with self._lock:
            connections = list(self._connections)
        yield from _families(s for s in map(_snapshot, connections) if s is not None)


def _snapshot(connection: HasStatistics) -> ConnectionStatistics | None:
    for _ in range(3):  # an async connection's sets may change under a scrape thread
        try:
            return connection.statistics()
        except RuntimeError:
            continue
        except Exception:
            log.debug("no statistics from %r", connection, exc_info=True)
            return None
    return None


class MetricsServer:
    """A running metrics endpoint (what ``serve()`` returns); ``stop()`` ends it.

    Attributes:
        url: ``http://host:port/metrics``, for a scrape configuration or to print.
        host / port: Where it listens (the port actually bound when 0 was asked).
        collector: The collector it exposes; ``add`` and ``remove`` connections on it.
        registry: Its own registry (the process-wide default one is not touched).
    """

    def __init__(
        self, collector: HAClientCollector, registry: CollectorRegistry, host: str, port: int
    ) -> None:
        self.collector = collector
        self.registry = registry
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:  # a bare "[Errno 98] Address already in use" names no port
            reason = exc.strerror or str(exc)
            raise OSError(exc.errno, f"cannot serve metrics on {host}:{port}: {reason}") from None
        self.host = host
        self.port: int = self._server.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving and close the socket. Idempotent."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def serve(
    port: int = 0, host: str = "127.0.0.1", *, connections: Sequence[HasStatistics] = ()
) -> MetricsServer:
    """Serve the metrics of ``connections`` over HTTP at ``http://host:port/metrics``.

    A registry and a collector of its own are made (``server.collector.add(connection)`` adds
    connections later); the HTTP server runs on a daemon thread until ``stop()`` (or the end
    of a ``with`` block). ``port=0`` picks a free port: read ``server.port`` or ``server.url``.
    Binds loopback by default; pass ``host="0.0.0.0"`` to be scraped from elsewhere.

    Raises:
        ConfigurationError: ``port`` is not a whole number from 0 to 65535.
        OSError: the address is in use or cannot be bound (the message names it).
    """
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ConfigurationError(
            f"port must be a whole number from 0 to 65535, not {port!r}", option="port"
        )
    collector = HAClientCollector(connections)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(collector)
    return MetricsServer(collector, registry, host, port)
