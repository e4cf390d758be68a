"""End to end with a real Prometheus server (Debian's ``prometheus``): it scrapes
``haclient.metrics.serve()`` every second while a failover happens, and its query API shows the
failover counter rise and the failover's duration recorded.

The server runs on a free loopback port with a temporary storage directory and is stopped by its
pid. Its first sample is queryable about 6 s after it starts (ENVIRONMENT.md), hence the bounds.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import haclient
import haclient.metrics
from chaos.broker import BrokerThread
from chaos.net import free_port
from haclient.destination import Queue
from haclient.message import TextMessage

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-haclient.json"

# Generous bounds that catch hangs, not timings.
READY_TIMEOUT = 30.0
SAMPLE_TIMEOUT = 40.0


@contextmanager
def prometheus(binary: str, target: str, directory: Path) -> Iterator[str]:
    """A Prometheus server scraping ``target`` (``host:port``) every second; yields its URL."""
    config = directory / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: haclient\n    scrape_timeout: 900ms\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
    )
    port = free_port()
    log = (directory / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _until(lambda: _get(f"{url}/-/ready") is not None, READY_TIMEOUT, "Prometheus ready")
        yield url
    finally:
        process.terminate()  # by its pid
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _get(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read()  # type: ignore[no-any-return]
    except OSError:
        return None


def query(base: str, promql: str) -> float | None:
    """The value of an instant query's single series, None when it has none (yet)."""
    body = _get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    if body is None:
        return None
    answer = json.loads(body)
    assert answer["status"] == "success", answer
    result = answer["data"]["result"]
    assert len(result) <= 1, result
    return float(result[0]["value"][1]) if result else None


def _until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


class _Completed:
    def __init__(self) -> None:
        self.done = threading.Event()

    def failover_completed(self, broker: object, downtime: float) -> None:
        self.done.set()


def test_F14_prometheus_sees_a_failover_counted_and_timed(
    prometheus_binary: str, tmp_path: Path
) -> None:
    completed = 'haclient_failovers_total{connection="prom-1",outcome="completed"}'
    with BrokerThread() as first, BrokerThread() as second:
        url = f"failover:({first.url},{second.url})?failover.method=roundrobin"
        with haclient.connect(url, client_id="prom-1") as connection:
            listener = _Completed()
            connection.add_listener(listener)
            session = connection.create_session()
            producer = session.create_producer(Queue("prom"))
            with (
                haclient.metrics.serve(0, connections=[connection]) as server,
                prometheus(prometheus_binary, f"127.0.0.1:{server.port}", tmp_path) as base,
            ):
                _until(lambda: query(base, completed) == 0, SAMPLE_TIMEOUT, "the first sample")
                first.kill()
                assert listener.done.wait(SAMPLE_TIMEOUT)
                producer.send(TextMessage("after the failover"))
                _until(lambda: query(base, completed) == 1, SAMPLE_TIMEOUT, "the counter to rise")
                duration = 'haclient_failover_duration_seconds_count{connection="prom-1"}'
                assert query(base, duration) == 1
                total = 'haclient_failover_duration_seconds_sum{connection="prom-1"}'
                recorded = query(base, total)
                assert recorded is not None and recorded > 0
                sent = 'haclient_messages_sent_total{connection="prom-1"}'
                _until(lambda: query(base, sent) == 1, SAMPLE_TIMEOUT, "the send")
        assert second.queue_depth("prom") == 1


def _dashboard_queries() -> list[str]:
    """The dashboard's PromQL with Grafana's variables filled in (every connection)."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    filled = {"$connection": ".*", "$__rate_interval": "15s", "$__range": "1m"}
    for variable, value in filled.items():
        exprs = [e.replace(variable, value) for e in exprs]
    return exprs


def _values(base: str, promql: str) -> list[str]:
    body = _get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    assert body is not None, promql
    answer = json.loads(body)
    assert answer["status"] == "success", (promql, answer)
    return [series["value"][1] for series in answer["data"]["result"]]


def test_item17_the_dashboard_draws_no_nan_for_what_a_connection_never_did(
    prometheus_binary: str, tmp_path: Path
) -> None:
    """A connection that only sends and receives in AUTO mode: no failover, no blocked call,
    no transaction, no other acknowledge mode. Every dashboard query answers numbers or
    nothing (a gap), never NaN (a line Grafana draws as NaN)."""
    with BrokerThread() as broker, haclient.connect(broker.url, client_id="prom-2") as connection:
        connection.start()
        session = connection.create_session()
        producer = session.create_producer(Queue("prom-nan"))
        consumer = session.create_consumer(Queue("prom-nan"))
        with (
            haclient.metrics.serve(0, connections=[connection]) as server,
            prometheus(prometheus_binary, f"127.0.0.1:{server.port}", tmp_path) as base,
        ):
            samples = 'count_over_time(haclient_messages_sent_total{connection="prom-2"}[1m])'
            deadline = time.monotonic() + SAMPLE_TIMEOUT
            while (query(base, samples) or 0) < 4:  # rate() needs a few samples
                producer.send(TextMessage("tick"))
                assert consumer.receive(timeout=10) is not None
                time.sleep(0.5)
                assert time.monotonic() < deadline, "Prometheus scraped too few samples"
            answers = {promql: _values(base, promql) for promql in _dashboard_queries()}
    assert not {promql: v for promql, v in answers.items() if "NaN" in v}
    rates = [v for promql, v in answers.items() if "haclient_messages_sent_total" in promql]
    assert rates and all(float(x) > 0 for v in rates for x in v)
