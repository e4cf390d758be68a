"""``chaos.scrape``: a real prometheus-client endpoint read back over HTTP, histograms and
counters summed over label sets the way the report uses them."""

from __future__ import annotations

import math
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from chaos.scrape import Scrape, scrape


@pytest.fixture
def endpoint() -> Iterator[tuple[str, CollectorRegistry]]:
    registry = CollectorRegistry()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics", registry
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _filled(registry: CollectorRegistry) -> None:
    durations = Histogram(
        "haclient_failover_duration_seconds",
        "downtime",
        ["connection"],
        buckets=(0.01, 0.1, 1.0),
        registry=registry,
    )
    for connection, seconds in (("a", 0.005), ("a", 0.05), ("b", 0.5), ("b", 0.07), ("b", 3)):
        durations.labels(connection).observe(seconds)
    failovers = Counter("haclient_failovers", "by outcome", ["outcome"], registry=registry)
    failovers.labels("completed").inc(5)
    failovers.labels("failed").inc(2)


def test_a_histogram_is_summed_over_connections(endpoint: tuple[str, CollectorRegistry]) -> None:
    url, registry = endpoint
    _filled(registry)
    durations = scrape(url).histogram("haclient_failover_duration_seconds")
    assert durations.bounds == (0.01, 0.1, 1.0, math.inf)
    assert durations.per_bucket() == [1, 2, 1, 1]
    assert durations.count == 5
    assert durations.total_seconds == pytest.approx(3.625)
    assert durations.quantile_bound(0.5) == 0.1
    assert durations.quantile_bound(1.0) == math.inf


def test_totals_filter_by_label(endpoint: tuple[str, CollectorRegistry]) -> None:
    url, registry = endpoint
    _filled(registry)
    metrics = scrape(url)
    assert metrics.total("haclient_failovers_total") == 7
    assert metrics.total("haclient_failovers_total", outcome="failed") == 2
    assert metrics.total("haclient_no_such_metric") == 0


def test_an_empty_histogram_has_no_quantile() -> None:
    durations = Scrape((), "").histogram("haclient_failover_duration_seconds")
    assert durations.count == 0
    assert math.isnan(durations.quantile_bound(0.5))


def test_a_closed_port_raises_oserror() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(OSError):
        scrape(f"http://127.0.0.1:{port}/metrics")


class _NotMetrics(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html>not { metrics</html>\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_an_answer_that_is_not_prometheus_text_raises_valueerror() -> None:
    server = HTTPServer(("127.0.0.1", 0), _NotMetrics)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        with pytest.raises(ValueError):
            scrape(f"http://127.0.0.1:{server.server_address[1]}/metrics")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
