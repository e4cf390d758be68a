"""Rule X6: a message sent through an outbox has one trace from its write to its consumer.

The outbox's write span (``outbox write <queue>``) is made in the application's transaction,
inside the application's own span, and its context is stored with the row; the relay's
``send`` span is its child, the consumer's ``receive`` span the send's child: one trace id
from the request that wrote the row to the consumer, recorded with the SDK's in-memory
exporter. Without a traced relay, the consumer's span is the write span's child.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import haclient.aio as aio
from chaos.broker import BrokerThread
from haclient import AckMode, Queue, TextMessage
from haclient.exactly_once import Outbox, install
from haclient.exactly_once import aio as xaio

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

TIMEOUT = 10.0


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def _one(exporter: InMemorySpanExporter, prefix: str) -> ReadableSpan:
    spans = [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]
    assert len(spans) == 1, [s.name for s in exporter.get_finished_spans()]
    return spans[0]


def _write(path: Path, provider: TracerProvider, queue: Queue) -> str:
    """The application's request: a span of its own, in which the row is written."""
    db = sqlite3.connect(path)
    install(db)
    with (
        trace.get_tracer("app", tracer_provider=provider).start_as_current_span("place order"),
        Outbox(tracer_provider=provider).transaction(db) as tx,
    ):
        message_id = tx.send(queue, TextMessage("order 1"))
    db.close()
    return message_id


@pytest.mark.parametrize("relay_traced", [True, False], ids=["traced-relay", "untraced-relay"])
async def test_X6_a_message_through_the_outbox_has_one_trace_from_its_write_to_its_consumer(
    reference_broker: BrokerThread,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
    tmp_path: Path,
    relay_traced: bool,
) -> None:
    queue = Queue(f"o6-{relay_traced}-{time.monotonic_ns()}")
    message_id = _write(tmp_path / "app.db", provider, queue)
    write = _one(exporter, "outbox write ")
    request = _one(exporter, "place order")
    assert write.kind is SpanKind.PRODUCER
    assert write.parent is not None and write.parent.span_id == request.context.span_id
    assert write.attributes is not None
    assert write.attributes["messaging.message.id"] == message_id
    assert write.attributes["messaging.destination.name"] == queue.name

    relay_provider = provider if relay_traced else None
    async with (
        await aio.connect(reference_broker.url, tracer_provider=relay_provider) as conn,
        xaio.Relay(conn, tmp_path / "app.db") as relay,
    ):
        await relay.wait_empty(TIMEOUT)
    async with await aio.connect(reference_broker.url, tracer_provider=provider) as conn:
        await conn.start()
        session = await conn.create_session(AckMode.AUTO)
        message = await (await session.create_consumer(queue)).receive(TIMEOUT)
        assert message is not None and message.message_id == message_id

    receive = _one(exporter, "receive ")
    trace_id = request.context.trace_id
    assert write.context.trace_id == receive.context.trace_id == trace_id  # one trace
    if relay_traced:
        send = _one(exporter, "send ")
        assert send.context.trace_id == trace_id
        assert send.parent is not None and send.parent.span_id == write.context.span_id
        assert receive.parent is not None and receive.parent.span_id == send.context.span_id
    else:
        assert receive.parent is not None and receive.parent.span_id == write.context.span_id
