"""The Prometheus exposition (``haclient.metrics``) after a scripted failover, through both APIs.

Two independent reference brokers: the connection starts on the first; the test sends, receives,
acknowledges and commits, kills the first broker (``failover.initialdelay`` keeps the gate closed
long enough for a call to block there), and scrapes the collector's text exposition with
prometheus-client's own parser: names, types, labels and values.
"""

from __future__ import annotations

from typing import Any

import pytest
from apikit import Api
from failoverkit import TIMEOUT, Recorder, brokers, connected, failover_url
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from haclient.destination import Queue
from haclient.errors import TransactionRolledBackError
from haclient.message import TextMessage
from haclient.metrics import METRICS, HAClientCollector
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(connection: Any) -> tuple[dict[str, str], Samples]:
    """Scrape a fresh registry holding a collector over ``connection``: family types, samples."""
    registry = CollectorRegistry()
    registry.register(HAClientCollector([connection]))
    text = generate_latest(registry).decode()
    types: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
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
    assert value(samples, "haclient_connection_info", method="roundrobin") == 1
    second_address = f"127.0.0.1:{second.port}"
    assert value(samples, "haclient_connection_broker", broker=second_address) == 1
    assert value(samples, "haclient_connection_attempts_total", broker=second_address) == 1
    first_address = f"127.0.0.1:{first.port}"
    assert value(samples, "haclient_connection_attempts_total", broker=first_address) == 1
    assert value(samples, "haclient_calls_blocked") == 0
    assert value(samples, "haclient_call_blocked_duration_seconds_count") >= 1
    assert value(samples, "haclient_call_blocked_duration_seconds_sum") > 0
    assert value(samples, "haclient_messages_sent_total") == 4
    assert value(samples, "haclient_messages_received_total") == 2
    assert value(samples, "haclient_acknowledgements_total", mode="auto") == 2
    assert value(samples, "haclient_ack_confirmation_duration_seconds_count", mode="auto") == 2
    assert value(samples, "haclient_acknowledgements_total", mode="client") == 0
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
    assert labels <= {"connection", "broker", "method", "mode", "outcome", "state", "le"}
    assert not any("ID:" in v or "@" in v or "//" in v for (_, p) in samples for _, v in p)
