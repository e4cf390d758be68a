"""The Grafana dashboard (docs/grafana-haclient.json) is importable and queries only metrics that
``haclient.metrics`` exports: every ``haclient_*`` name in its PromQL appears in a real scrape
of a connection to the reference broker."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import haclient
from chaos.broker import BrokerThread
from haclient import AckMode, Queue, TextMessage
from haclient.metrics import HAClientCollector

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-haclient.json"


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())  # type: ignore[no-any-return]


def _queries(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            exprs.append(variable["definition"])
    return exprs


class _Completed:
    def __init__(self) -> None:
        self.done = threading.Event()

    def failover_completed(self, broker: object, downtime: float) -> None:
        self.done.set()


def _exported() -> set[str]:
    """The sample names of a real scrape (``_total``, ``_bucket`` ... included) of a connection
    that used what has series only once used: acknowledgements, transactions, a failover."""
    with (
        BrokerThread() as first,
        BrokerThread() as second,
        haclient.connect(f"failover:({first.url},{second.url})") as connection,
    ):
        completed = _Completed()
        connection.add_listener(completed)
        connection.start()
        session = connection.create_session(AckMode.AUTO)
        session.create_producer(Queue("dash")).send(TextMessage("x"))
        assert session.create_consumer(Queue("dash")).receive(timeout=10) is not None
        transacted = connection.create_session(AckMode.TRANSACTED)
        transacted.create_producer(Queue("dash")).send(TextMessage("y"))
        transacted.commit()
        first.kill()
        assert completed.done.wait(30)
        registry = CollectorRegistry()
        registry.register(HAClientCollector([connection]))
        text = generate_latest(registry).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    dashboard = _dashboard()
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 30
    assert dashboard["uid"] and dashboard["title"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        assert panel["type"] and panel["title"] and panel["targets"]
        assert all(t["refId"] and t["expr"] for t in panel["targets"])


def test_the_dashboard_queries_only_exported_metrics() -> None:
    names = {n for q in _queries(_dashboard()) for n in re.findall(r"\bhaclient_\w+", q)}
    assert len(names) >= 20  # it shows every family, not a few
    exported = _exported()
    assert names <= exported, names - exported
