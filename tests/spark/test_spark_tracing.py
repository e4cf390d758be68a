"""Rule O2 through Spark: a message's trace goes on through a pipeline that reads and writes.

A traced producer (the blocking API, the SDK's in-memory exporter) sends a few hundred messages;
a Spark read with ``traceContext=true`` gives each one's context in the ``traceparent`` and
``tracestate`` columns; a Spark write with ``traceContext=true`` puts them back, through a URL
that turns tracing on in the Spark workers too (``jms.tracing=opentelemetry``), whose send must
continue the row's trace rather than replace it; and a traced consumer's spans join the
producer's traces.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from chaos.broker import BrokerThread

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.xdist_group("spark"),  # one worker: one SparkSession (a JVM) for every Spark test
]

ROWS = 300


@pytest.fixture
def exporter() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def test_O2_spark_carries_a_messages_trace_from_a_traced_producer_to_a_traced_consumer(
    spark: Any, exporter: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    import haclient
    from haclient import AckMode, Queue, TextMessage

    provider, spans = exporter
    with BrokerThread() as broker:
        with haclient.connect(broker.url, tracer_provider=provider) as connection:
            producer = connection.create_session().create_producer(Queue("traced-in"))
            for n in range(ROWS):
                producer.send(TextMessage(str(n)))
        sends = {
            s.attributes["messaging.message.id"]: s
            for s in spans.get_finished_spans()
            if s.name.startswith("send ") and s.attributes is not None
        }
        assert len(sends) == ROWS

        frame = (
            spark.read.format("haclient")
            .options(url=broker.url, consume="true", maxMessages=ROWS, receiveTimeout="1")
            .option("traceContext", "true")
            .load("traced-in")
        ).cache()
        rows = frame.collect()
        assert len(rows) == ROWS
        for row in rows:  # the read's columns are the producer's span contexts
            send = sends[row.message_id]
            _version, trace_id, span_id, _flags = row.traceparent.split("-")
            assert (trace_id, span_id) == (
                f"{send.context.trace_id:032x}",
                f"{send.context.span_id:016x}",
            )
            assert (row.tracestate or "") == send.context.trace_state.to_header()

        frame.select("body", "traceparent", "tracestate").write.format("haclient").options(
            url=f"{broker.url}?jms.tracing=opentelemetry", address="traced-out", query="trace"
        ).option("traceContext", "true").mode("append").save()
        frame.unpersist()

        spans.clear()
        with haclient.connect(broker.url, tracer_provider=provider) as connection:
            connection.start()
            consumer = connection.create_session(AckMode.AUTO).create_consumer(Queue("traced-out"))
            received = [consumer.receive(timeout=30) for _ in range(ROWS)]
    assert sorted(int(m.text) for m in received if m is not None) == list(range(ROWS))
    send_of = {s.context.span_id: s for s in sends.values()}
    receives = [s for s in spans.get_finished_spans() if s.name.startswith("receive ")]
    assert len(receives) == ROWS
    for receive in receives:  # the consumer's spans join the producer's traces
        assert receive.parent is not None
        send = send_of[receive.parent.span_id]
        assert receive.context.trace_id == send.context.trace_id
