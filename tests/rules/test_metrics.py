"""The Prometheus exposition (``haclient.metrics``) after a scripted failover, through both APIs.

Two independent reference brokers: the connection starts on the first; the test sends, receives,
acknowledges and commits, kills the first broker (``failover.initialdelay`` keeps the gate closed
long enough for a call to block there), and scrapes the collector's text exposition with
prometheus-client's own parser: names, types, labels and values.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from apikit import Api
from failoverkit import TIMEOUT, Recorder, brokers, connected, failover_url
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import haclient
from chaos.net import free_port
from haclient.destination import Queue
from haclient.errors import TransactionRolledBackError
from haclient.message import TextMessage
from haclient.metrics import METRICS, HAClientCollector
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(*connections: Any) -> tuple[dict[str, str], Samples]:
    """Scrape a fresh registry holding a collector over ``connections``: family types and
    samples (a series exposed twice, which Prometheus refuses, fails the test)."""
    registry = CollectorRegistry()
    registry.register(HAClientCollector(connections))
    text = generate_latest(registry).decode()
    types: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"{sample.name}{sample.labels} is exposed twice"
            samples[key] = sample.value
    return types, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset({"connection": "metrics-1", **labels}.items()))]


async def test_F14_metrics_tell_what_a_failover_did_and_cost(api: Api) -> None:
    with brokers(2) as (first, second):
        recorder = Recorder()
        url = failover_url(first, second, initialdelay=400)
        async with await connected(api, url, recorder, client_id="metrics-1") as connection:
            auto = await connection.create_session(AckMode.AUTO)
            inbox = await auto.create_temporary_queue()
            producer = await auto.create_producer(inbox)
            consumer = await auto.create_consumer(inbox)
            await producer.send(TextMessage("before"))
            assert await consumer.receive(TIMEOUT) is not None
            transacted = await connection.create_session(AckMode.TRANSACTED)
            txn_producer = await transacted.create_producer(Queue("metrics-txn"))
            await txn_producer.send(TextMessage("dirty when the broker dies"))

            first.kill()
            await recorder.wait_for("started")
            await producer.send(TextMessage("after"))  # blocks until restored (F2, F3)
            await recorder.wait_for("completed")
            assert await consumer.receive(TIMEOUT) is not None
            with pytest.raises(TransactionRolledBackError):
                await transacted.commit()  # F7
            await txn_producer.send(TextMessage("replayed"))
            await transacted.commit()
            await transacted.rollback()

            types, samples = scrape(connection.target)

    # Names and types: every declared family is exported with its type.
    for spec in METRICS:
        assert types[spec.name.removesuffix("_total")] == spec.kind, spec.name
    assert value(samples, "haclient_failovers_total", outcome="completed") == 1
    assert value(samples, "haclient_failovers_total", outcome="failed") == 0
    assert value(samples, "haclient_failover_duration_seconds_count") == 1
    assert value(samples, "haclient_failover_duration_seconds_sum") >= 0.4  # initialdelay
    assert value(samples, "haclient_failover_duration_seconds_bucket", le="0.25") == 0
    assert value(samples, "haclient_failover_duration_seconds_bucket", le="+Inf") == 1
    assert value(samples, "haclient_connection_state", state="connected") == 1
    assert value(samples, "haclient_connection_state", state="failing_over") == 0
    info = {"method": "roundrobin", "version": haclient.__version__}
    assert value(samples, "haclient_connection_info", **info) == 1
    second_address = f"127.0.0.1:{second.port}"
    assert value(samples, "haclient_connection_broker", broker=second_address) == 1
    for address in (f"127.0.0.1:{first.port}", second_address):
        attempts = {"broker": address, "outcome": "succeeded"}
        assert value(samples, "haclient_connection_attempts_total", **attempts) == 1
    assert value(samples, "haclient_calls_blocked") == 0
    assert value(samples, "haclient_call_blocked_duration_seconds_count") >= 1
    assert value(samples, "haclient_call_blocked_duration_seconds_sum") > 0
    assert value(samples, "haclient_messages_sent_total") == 4
    assert value(samples, "haclient_messages_received_total") == 2
    assert value(samples, "haclient_acknowledgements_total", mode="auto") == 2
    assert value(samples, "haclient_ack_confirmation_duration_seconds_count", mode="auto") == 2
    assert value(samples, "haclient_transactions_total", outcome="committed") == 1
    assert value(samples, "haclient_transactions_total", outcome="rolled_back") == 1
    assert value(samples, "haclient_transactions_total", outcome="rolled_back_by_failover") == 1
    assert value(samples, "haclient_transactions_total", outcome="in_doubt") == 0
    assert value(samples, "haclient_temporary_destinations_restored_total") == 1
    assert value(samples, "haclient_resources_not_restored_total") == 0
    assert value(samples, "haclient_messages_resent_total") == 0  # nothing was cut off
    assert value(samples, "haclient_messages_redelivered_total") == 0
    assert value(samples, "haclient_duplicates_suppressed_total") == 0
    assert value(samples, "haclient_sessions") == 2
    # Bounded labels only: no message ids, no credentials, no URLs.
    labels = {name for (_, pairs) in samples for name, _ in pairs}
    assert labels <= {"connection", "broker", "method", "mode", "outcome", "state", "le", "version"}
    assert not any("ID:" in v or "@" in v or "//" in v for (_, p) in samples for _, v in p)


def _connections(samples: Samples) -> set[str]:
    return {dict(labels)["connection"] for name, labels in samples if name.endswith("_info")}


async def test_item17_connections_sharing_a_client_id_are_told_apart(api: Api) -> None:
    """Two open connections with one client id (one per broker) get a series each; a closed
    one gives its name back, and is told apart while it is still reported."""
    with brokers(2) as (first, second):
        one = await connected(api, first.url, Recorder(), client_id="twin")
        two = await connected(api, second.url, Recorder(), client_id="twin")
        assert _connections(scrape(one.target, two.target)[1]) == {"twin", "twin#2"}
        await one.close()
        three = await connected(api, first.url, Recorder(), client_id="twin")
        _, samples = scrape(one.target, two.target, three.target)
        assert _connections(samples) == {"twin", "twin#2", "twin#closed"}
        closed = {"connection": "twin#closed", "state": "closed"}
        assert samples[("haclient_connection_state", frozenset(closed.items()))] == 1
        await two.close()
        await three.close()


class _Dead:
    url = f"amqp://127.0.0.1:{free_port()}"  # nothing listens there


async def test_item17_attempts_by_outcome_and_when_the_last_failover_and_change_were(
    api: Api,
) -> None:
    with brokers(2) as (first, second):
        recorder = Recorder()
        opened = time.time()
        url = failover_url(_Dead(), first, second)
        async with await connected(api, url, recorder, client_id="metrics-1") as connection:
            _, before = scrape(connection.target)
            killed = time.time()
            first.kill()
            await recorder.wait_for("completed")
            _, after = scrape(connection.target)

    dead = _Dead.url.removeprefix("amqp://")
    assert value(before, "haclient_connection_attempts_total", broker=dead, outcome="failed") == 1
    assert (
        value(before, "haclient_connection_attempts_total", broker=dead, outcome="succeeded") == 0
    )
    attempts = {"broker": f"127.0.0.1:{second.port}", "outcome": "succeeded"}
    assert value(after, "haclient_connection_attempts_total", **attempts) == 1
    assert not any(name == "haclient_last_failover_timestamp_seconds" for name, _ in before)
    assert opened <= value(before, "haclient_last_state_change_timestamp_seconds") <= killed
    began = value(after, "haclient_last_failover_timestamp_seconds")
    assert killed <= began <= value(after, "haclient_last_state_change_timestamp_seconds")
    assert value(after, "haclient_last_state_change_timestamp_seconds") <= time.time()
    # Nothing was acknowledged and no transaction made: their counters are there at 0 (issue
    # 39, item 13), their confirmation-time histogram absent (no NaN lines).
    assert value(after, "haclient_transactions_total", outcome="committed") == 0
    assert value(after, "haclient_acknowledgements_total", mode="client") == 0
    assert not any(name.startswith("haclient_ack_confirmation_duration") for name, _ in after)
    assert value(
        after, "haclient_connection_info", method="roundrobin", version=haclient.__version__
    )


async def test_item13_every_labelled_counter_the_dashboard_uses_starts_at_0(
    api: Api, tmp_path: Any
) -> None:
    """Prometheus advises to export a counter's known label values at 0 from the start: a
    dashboard panel then has series before the first event, and ``increase()`` sees it."""
    from pathlib import Path

    dashboard = (Path(__file__).parents[2] / "docs" / "grafana-haclient.json").read_text()
    queried = set(dashboard.split("haclient_"))
    counters = [
        spec
        for spec in METRICS
        if spec.kind == "counter"
        and len(spec.labels) > 1
        and any(q.startswith(spec.name.removeprefix("haclient_") + "_total") for q in queried)
    ]
    assert {c.name for c in counters} >= {"haclient_transactions", "haclient_acknowledgements"}
    known = {
        "outcome": {
            "haclient_transactions": {
                "committed",
                "rolled_back",
                "rolled_back_by_failover",
                "in_doubt",
            },
            "haclient_failovers": {"completed", "returned", "failed"},
        },
        "mode": {m.name.lower() for m in AckMode},
    }
    with brokers(1) as (only,):
        async with await api.connect(only.url, client_id="metrics-1") as connection:
            _, samples = scrape(connection.target)
    for spec in counters:
        series = [dict(labels) for name, labels in samples if name == f"{spec.name}_total"]
        assert series, f"{spec.name}_total has no series before its first event"
        assert all(
            samples[(f"{spec.name}_total", frozenset(s.items()))] == 0
            for s in series
            if spec.name != "haclient_connection_attempts"
        )
        if "mode" in spec.labels:
            assert {s["mode"] for s in series} == known["mode"]
        elif spec.name in known["outcome"]:
            assert {s["outcome"] for s in series} == known["outcome"][spec.name]
