"""Rules O1-O4: OpenTelemetry tracing, through both APIs, on the reference broker.

Spans are recorded by the SDK's in-memory exporter of a ``TracerProvider`` given to
``connect(tracer_provider=...)``; a producer and a consumer on two connections must share one
trace, also when the broker in use is killed between the send and the receive (an HA pair).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from apikit import Api, Signal, eventually
from failoverkit import TIMEOUT, HaPair, Recorder, connected, failover_url
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import haclient.aio as aio
from chaos.broker import BrokerThread
from chaos.peer import ScriptedPeer
from haclient import AckMode, DeliveryMode, Queue, TextMessage
from haclient.aio.tracing import context_of
from haclient.amqp.codec import AmqpMessage, encode_message
from haclient.amqp.config import ClientAuth, EngineConfig
from haclient.amqp.connection import open_connection
from haclient.amqp.types import Byte as AmqpByte
from haclient.errors import ConfigurationError, TransactionRolledBackError

pytestmark = pytest.mark.anyio


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def _named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


def _one(exporter: InMemorySpanExporter, prefix: str) -> ReadableSpan:
    spans = _named(exporter, prefix)
    assert len(spans) == 1, [s.name for s in exporter.get_finished_spans()]
    return spans[0]


def _queue(name: str) -> Queue:
    return Queue(f"tracing.{name}")


async def test_O1_O2_a_send_and_a_receive_share_one_trace_across_two_connections(
    api: Api, reference_broker: BrokerThread, provider: TracerProvider, exporter: Any
) -> None:
    queue = _queue(f"shared.{api.name}")
    tracer = provider.get_tracer("test")
    async with (
        await api.connect(reference_broker.url, tracer_provider=provider) as sending,
        await api.connect(reference_broker.url, tracer_provider=provider) as receiving,
    ):
        producer = await (await sending.create_session()).create_producer(queue)
        message = TextMessage("order 1", correlation_id="conversation-7")
        with tracer.start_as_current_span("place order") as business:
            await producer.send(message)
        await receiving.start()
        consumer = await (await receiving.create_session()).create_consumer(queue)
        received = await consumer.receive(TIMEOUT)
    assert received is not None and received.text == "order 1"

    send = _one(exporter, "send ")
    assert send.kind is SpanKind.PRODUCER
    assert send.name == f"send {queue.name}"
    assert send.context.trace_id == business.get_span_context().trace_id  # the caller's trace
    assert send.parent is not None and send.parent.span_id == business.get_span_context().span_id
    assert send.attributes is not None
    assert send.attributes["messaging.system"] == "amqp"
    assert send.attributes["messaging.operation.type"] == "send"
    assert send.attributes["messaging.destination.name"] == queue.name
    assert send.attributes["messaging.message.id"] == message.message_id
    assert send.attributes["messaging.message.conversation_id"] == "conversation-7"
    assert send.attributes["messaging.message.body.size"] == len("order 1")
    assert send.attributes["server.port"] == reference_broker.port
    # O2: the W3C context travels in the application properties, as any consumer reads it
    trace_id = f"{send.context.trace_id:032x}"
    assert received.properties["traceparent"].split("-")[1] == trace_id
    producer_span = trace.get_current_span(context_of(received)).get_span_context()
    assert producer_span.span_id == send.context.span_id  # to parent the application's spans

    receive = _one(exporter, "receive ")
    assert receive.kind is SpanKind.CONSUMER
    assert receive.attributes is not None
    assert receive.attributes["messaging.operation.type"] == "receive"
    assert receive.attributes["messaging.message.id"] == message.message_id
    assert [link.context.span_id for link in receive.links] == [send.context.span_id]
    # one trace per message: the receive is the send's child, on another connection
    assert receive.context.trace_id == send.context.trace_id
    assert receive.parent is not None and receive.parent.span_id == send.context.span_id


async def test_O1_a_listener_runs_in_a_process_span_its_own_spans_nest_in(
    api: Api, reference_broker: BrokerThread, provider: TracerProvider, exporter: Any
) -> None:
    queue = _queue(f"listener.{api.name}")
    done = Signal()

    async def on_message(message: Any) -> None:
        with trace.get_tracer("app", tracer_provider=provider).start_as_current_span("handle"):
            pass
        done.set()

    async with await api.connect(reference_broker.url, tracer_provider=provider) as connection:
        session = await connection.create_session()
        await (await session.create_producer(queue)).send(TextMessage("work"))
        consumer = await session.create_consumer(queue)
        await consumer.set_message_listener(api.listener(on_message))
        await connection.start()
        assert await done.wait()
        await eventually(lambda: _named(exporter, "process "))

    process = _one(exporter, "process ")
    handle = _one(exporter, "handle")
    send = _one(exporter, "send ")
    assert process.kind is SpanKind.CONSUMER
    assert handle.parent is not None and handle.parent.span_id == process.context.span_id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert handle.context.trace_id == send.context.trace_id


async def test_O1_acknowledge_commit_and_rollback_are_settle_spans(
    api: Api, reference_broker: BrokerThread, provider: TracerProvider, exporter: Any
) -> None:
    queue = _queue(f"settle.{api.name}")
    async with await api.connect(reference_broker.url, tracer_provider=provider) as connection:
        await connection.start()
        transacted = await connection.create_session(AckMode.TRANSACTED)
        producer = await transacted.create_producer(queue)
        await producer.send(TextMessage("kept"))
        await transacted.commit()
        await producer.send(TextMessage("dropped"))
        await transacted.rollback()
        client = await connection.create_session(AckMode.CLIENT)
        received = await (await client.create_consumer(queue)).receive(TIMEOUT)
        assert received is not None and received.text == "kept"
        await api.acknowledge(received)

    sends = _named(exporter, "send ")
    commit, rollback, ack = (
        _one(exporter, "commit"),
        _one(exporter, "rollback"),
        _one(exporter, "ack"),
    )
    for span, name in ((commit, "commit"), (rollback, "rollback"), (ack, "ack")):
        assert span.attributes is not None
        assert span.attributes["messaging.operation.type"] == "settle"
        assert span.attributes["messaging.operation.name"] == name
        assert span.status.status_code is not StatusCode.ERROR
    # a commit or rollback links to the spans of the transaction it ends
    assert [link.context.span_id for link in commit.links] == [sends[0].context.span_id]
    assert [link.context.span_id for link in rollback.links] == [sends[1].context.span_id]


async def test_O3_a_kill_between_send_and_receive_is_in_the_trace(
    api: Api, pair: HaPair, provider: TracerProvider, exporter: Any
) -> None:
    queue = _queue(f"failover.{api.name}")
    url = failover_url(*pair.members)
    async with (
        await api.connect(url, tracer_provider=provider) as sending,
        await api.connect(url, tracer_provider=provider) as receiving,
    ):
        producer = await (await sending.create_session()).create_producer(queue)
        await producer.send(TextMessage("survives"))
        lost = pair.master
        pair.kill_master()  # the standby takes over the store: the message is there
        await producer.send(TextMessage("after"))  # waits at the gate for the failover
        await receiving.start()
        consumer = await (await receiving.create_session()).create_consumer(queue)
        first = await consumer.receive(TIMEOUT)
        second = await consumer.receive(TIMEOUT)
    assert first is not None and first.text == "survives"
    assert second is not None and second.text == "after"

    first_send, second_send = _named(exporter, "send ")
    receive = _named(exporter, "receive ")[0]
    assert [link.context.span_id for link in receive.links] == [first_send.context.span_id]
    assert receive.context.trace_id == first_send.context.trace_id  # one trace, across the kill
    failovers = _named(exporter, "failover")
    assert len(failovers) == 2, [s.name for s in exporter.get_finished_spans()]  # one each
    for failover in failovers:
        assert failover.attributes is not None
        assert failover.attributes["haclient.failover.lost_broker"] == f"127.0.0.1:{lost.port}"
        assert failover.attributes["haclient.failover.broker"] != f"127.0.0.1:{lost.port}"
        assert failover.attributes["haclient.failover.downtime"] >= 0
    # the send that waited at the gate says so, names the lost broker, links to the failover
    waited = [e for e in second_send.events if e.name == "haclient.failover"]
    assert waited, second_send.events
    assert waited[0].attributes is not None
    assert waited[0].attributes["haclient.failover.lost_broker"] == f"127.0.0.1:{lost.port}"
    assert waited[0].attributes["haclient.failover.waited"] > 0
    linked = {link.context.span_id for link in second_send.links}
    assert linked & {failover.context.span_id for failover in failovers}
    assert second_send.attributes is not None
    assert second_send.attributes["server.port"] != lost.port


async def test_O4_with_tracing_off_no_span_is_made_and_no_property_added(
    api: Api, reference_broker: BrokerThread, exporter: Any
) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    queue = _queue(f"off.{api.name}")
    previous = trace.get_tracer_provider()
    async with await api.connect(reference_broker.url, tracing="noop") as connection:
        await connection.start()
        session = await connection.create_session()
        message = TextMessage("untraced")
        await (await session.create_producer(queue)).send(message)
        received = await (await session.create_consumer(queue)).receive(TIMEOUT)
    assert received is not None
    assert "traceparent" not in message.properties and received.properties == {}
    assert exporter.get_finished_spans() == ()
    assert trace.get_tracer_provider() is previous
    provider.shutdown()


async def test_O4_noop_wins_over_a_tracer_provider(
    reference_broker: BrokerThread, provider: TracerProvider, exporter: Any
) -> None:
    queue = _queue("noop")
    url = reference_broker.url
    async with aio.connect(url, tracing="noop", tracer_provider=provider) as connection:
        session = await connection.create_session()
        message = TextMessage("untraced")
        await (await session.create_producer(queue)).send(message)
    assert exporter.get_finished_spans() == ()
    assert "traceparent" not in message.properties


async def test_O4_asking_for_tracing_without_opentelemetry_names_the_extra(
    reference_broker: BrokerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.delitem(sys.modules, "haclient.aio.tracing")
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if not installed
    with pytest.raises(ConfigurationError, match=r"haclient\[tracing\]"):
        async with aio.connect(f"{reference_broker.url}?jms.tracing=opentelemetry"):
            pass


async def test_O2_a_message_traced_by_qpid_jms_continues_its_trace(
    api: Api, reference_broker: BrokerThread, provider: TracerProvider, exporter: Any
) -> None:
    """Qpid JMS's tracing carried the context in the ``x-opt-qpid-tracestate`` annotation."""
    queue = _queue(f"qpid.{api.name}")
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    amqp = AmqpMessage(
        body="from java",
        to=queue.name,
        message_annotations={
            "x-opt-jms-msg-type": AmqpByte(5),
            "x-opt-qpid-tracestate": {"traceparent": parent},
        },
    )
    config = EngineConfig(container_id="qpid-jms", auth=ClientAuth(allow_insecure=True))
    async with open_connection(
        "127.0.0.1", reference_broker.port, config, connect_timeout=TIMEOUT
    ) as bare:
        link = await bare.open_sender(
            queue.name, session=await bare.open_session(), timeout=TIMEOUT
        )
        await bare.send(link, encode_message(amqp))
    async with await api.connect(reference_broker.url, tracer_provider=provider) as connection:
        await connection.start()
        consumer = await (await connection.create_session()).create_consumer(queue)
        received = await consumer.receive(TIMEOUT)
    assert received is not None and received.text == "from java"
    assert received.properties["traceparent"] == parent  # read, and shown as a property
    receive = _one(exporter, "receive ")
    assert [f"{link.context.trace_id:032x}" for link in receive.links] == [parent.split("-")[1]]


async def test_O3_a_transaction_rolled_back_by_failover_says_so_in_its_commit_span(
    api: Api, pair: HaPair, provider: TracerProvider, exporter: Any
) -> None:
    queue = _queue(f"txn.{api.name}")
    recorder = Recorder()
    url = failover_url(*pair.members)
    async with await connected(api, url, recorder, tracer_provider=provider) as conn:
        session = await conn.create_session(AckMode.TRANSACTED)
        producer = await session.create_producer(queue)
        await producer.send(TextMessage("lost with the transaction"))
        pair.kill_master()
        await recorder.wait_for("completed")  # the commit is not cut off in flight: F7
        with pytest.raises(TransactionRolledBackError):
            await session.commit()

    commit = _one(exporter, "commit")
    send = _one(exporter, "send ")
    assert commit.status.status_code is StatusCode.ERROR
    assert commit.status.description is not None and "failed over" in commit.status.description
    assert commit.attributes is not None
    assert commit.attributes["haclient.rolled_back_by_failover"] is True
    assert commit.attributes["error.type"] == "TransactionRolledBackError"
    assert [link.context.span_id for link in commit.links] == [send.context.span_id]


async def test_O1_what_a_listener_raises_is_recorded_on_its_process_span(
    api: Api, reference_broker: BrokerThread, provider: TracerProvider, exporter: Any
) -> None:
    queue = _queue(f"raises.{api.name}")
    called = Signal()

    async def on_message(message: Any) -> None:
        called.set()
        raise LookupError("no such order")

    async with await api.connect(reference_broker.url, tracer_provider=provider) as connection:
        session = await connection.create_session(AckMode.CLIENT)
        await (await session.create_producer(queue)).send(TextMessage("bad"))
        consumer = await session.create_consumer(queue)
        await consumer.set_message_listener(api.listener(on_message))
        await connection.start()
        assert await called.wait()
        await eventually(lambda: _named(exporter, "process "))

    process = _named(exporter, "process ")[0]
    assert process.status.status_code is StatusCode.ERROR
    assert process.attributes is not None and process.attributes["error.type"] == "LookupError"
    assert [e.name for e in process.events] == ["exception"]


async def test_O3_a_receive_that_waited_out_a_failover_says_so_on_its_span(
    api: Api, pair: HaPair, provider: TracerProvider, exporter: Any
) -> None:
    queue = _queue(f"waiting.{api.name}")
    recorder = Recorder()
    url = failover_url(*pair.members)
    received: list[Any] = []
    async with await connected(api, url, recorder, tracer_provider=provider) as connection:
        session = await connection.create_session()
        consumer = await session.create_consumer(queue)
        producer = await session.create_producer(queue)

        async def take() -> None:
            received.append(await consumer.receive(TIMEOUT))

        async with anyio.create_task_group() as group:
            group.start_soon(take)
            # the receive waits on the link: nothing outside tells when it began (its span starts
            # when it returns), and a blocking one first crosses a thread, so a wide margin
            await anyio.sleep(1.0)
            lost = pair.master
            pair.kill_master()
            await recorder.wait_for("completed")
            await producer.send(TextMessage("after the failover"))
    assert received[0] is not None and received[0].text == "after the failover"
    receive = _one(exporter, "receive ")
    waited = [e for e in receive.events if e.name == "haclient.failover"]
    assert waited, receive.events
    assert waited[0].attributes is not None
    assert waited[0].attributes["haclient.failover.lost_broker"] == f"127.0.0.1:{lost.port}"
    failover = _named(exporter, "failover")[0]
    assert failover.context.span_id in [link.context.span_id for link in receive.links]


async def test_O1_send_async_is_a_send_span_too(
    api: Api, reference_broker: BrokerThread, provider: TracerProvider, exporter: Any
) -> None:
    queue = _queue(f"async.{api.name}")
    completed = Signal()
    async with await api.connect(reference_broker.url, tracer_provider=provider) as connection:
        producer = await (await connection.create_session()).create_producer(queue)
        message = TextMessage("later")
        await producer.send_async(message, on_completion=lambda sent, error: completed.set())
        assert await completed.wait()
    send = _one(exporter, "send ")
    assert send.kind is SpanKind.PRODUCER and send.attributes is not None
    assert send.attributes["messaging.message.id"] == message.message_id
    assert message.properties["traceparent"].split("-")[2] == f"{send.context.span_id:016x}"


async def test_O1_a_non_persistent_send_is_a_child_of_the_callers_span(
    api: Api, reference_broker: BrokerThread, provider: TracerProvider, exporter: Any
) -> None:
    """Through the blocking API this send is queued from the caller's thread (its span made
    there, ended once queued); through both, it is the caller's child and the trace goes on."""
    queue = _queue(f"queued.{api.name}")
    tracer = provider.get_tracer("test")
    messages = [TextMessage(f"quick {n}") for n in range(3)]
    async with (
        await api.connect(reference_broker.url, tracer_provider=provider) as sending,
        await api.connect(reference_broker.url, tracer_provider=provider) as receiving,
    ):
        producer = await (await sending.create_session()).create_producer(queue)
        with tracer.start_as_current_span("burst") as business:
            for message in messages:
                await producer.send(message, delivery_mode=DeliveryMode.NON_PERSISTENT)
        await receiving.start()
        consumer = await (await receiving.create_session()).create_consumer(queue)
        received = [await consumer.receive(TIMEOUT) for _ in messages]
    assert [m.text for m in received if m is not None] == [m.text for m in messages]
    sends = _named(exporter, "send ")
    assert [s.attributes and s.attributes["messaging.message.id"] for s in sends] == [
        m.message_id for m in messages
    ]
    for send, message in zip(sends, messages, strict=True):
        assert send.parent is not None
        assert send.parent.span_id == business.get_span_context().span_id
        assert message.properties["traceparent"].split("-")[2] == f"{send.context.span_id:016x}"
        assert send.attributes is not None
        assert send.attributes["server.port"] == reference_broker.port
    receives = _named(exporter, "receive ")
    assert [r.parent and r.parent.span_id for r in receives] == [s.context.span_id for s in sends]


def _scripted_url(port: int) -> str:
    return (
        f"failover:(amqp://127.0.0.1:{port})"
        "?failover.method=singlebroker&failover.retries=20&failover.connectdelay=0"
    )


async def test_O3_a_send_async_span_lasts_until_its_outcome_and_shows_its_resend(
    api: Api, provider: TracerProvider, exporter: Any
) -> None:
    """The broker drops the connection after the first transfer: F11 sends it again on the
    next, and the ``send`` span, open until the completion listener is told, records it."""
    peer = ScriptedPeer()
    for accepted in (False, True):
        if accepted:
            peer.expect_connection()
        peer.expect_open().respond()
        peer.expect_begin().respond()
        peer.expect_attach(sender=True, address="orders").respond(credit=10)
        transfer = peer.expect_transfer(address="orders")
        if accepted:
            transfer.respond()
        else:
            transfer.drop_connection()
    peer.expect_detach().respond()
    peer.expect_end().respond()
    peer.expect_close().respond()
    completed = Signal()
    outcomes: list[BaseException | None] = []

    def on_completion(sent: Any, error: BaseException | None) -> None:
        outcomes.append(error)
        completed.set()

    with anyio.fail_after(TIMEOUT):
        async with peer.serving() as port:
            connection = await api.connect(_scripted_url(port), tracer_provider=provider)
            producer = await (await connection.create_session()).create_producer(Queue("orders"))
            message = TextMessage("exactly this one")
            await producer.send_async(message, on_completion=on_completion)
            assert await completed.wait()
            await connection.close()
            await peer.wait_script_done()
    assert outcomes == [None] and peer.failures == []
    send = _one(exporter, "send ")
    resent = [e for e in send.events if e.name == "haclient.resent"]
    assert len(resent) == 1 and resent[0].attributes is not None
    assert resent[0].attributes["messaging.message.id"] == message.message_id
    assert send.status.status_code is not StatusCode.ERROR


# --- O5: telemetry never breaks messaging ----------------------------------------------------


class _Broken(RuntimeError):
    """What the broken telemetry below raises."""


class _BrokenSpan(trace.NonRecordingSpan):
    """A span whose every method raises (an exporter or processor that fails)."""

    def __init__(self) -> None:
        super().__init__(trace.INVALID_SPAN_CONTEXT)

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise _Broken("span broken")

    end = set_attributes = set_attribute = add_event = add_link = _fail
    update_name = set_status = record_exception = is_recording = _fail


class _BrokenTracer(trace.NoOpTracer):
    def __init__(self, where: str) -> None:
        self.where = where

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        if self.where == "start_span":
            raise _Broken("start_span broken")
        return _BrokenSpan()

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        if self.where == "start_span":
            raise _Broken("start_as_current_span broken")
        return trace.use_span(_BrokenSpan(), end_on_exit=True)


class _BrokenProvider(trace.NoOpTracerProvider):
    def __init__(self, where: str) -> None:
        self.where = where

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        if self.where == "get_tracer":
            raise _Broken("get_tracer broken")
        return _BrokenTracer(self.where)


@pytest.mark.parametrize("where", ["get_tracer", "start_span", "span"])
async def test_O5_tracing_that_raises_never_breaks_a_call_and_is_logged_once(
    api: Api, reference_broker: BrokerThread, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    queue = _queue(f"broken.{where}.{api.name}")
    done = Signal()
    heard: list[str] = []

    async def on_message(message: Any) -> None:
        heard.append(message.text)
        done.set()

    provider = _BrokenProvider(where)
    with caplog.at_level("WARNING"):
        async with await api.connect(reference_broker.url, tracer_provider=provider) as connection:
            await connection.start()
            transacted = await connection.create_session(AckMode.TRANSACTED)
            await (await transacted.create_producer(queue)).send(TextMessage("one"))
            await transacted.commit()
            session = await connection.create_session(AckMode.CLIENT)
            producer = await session.create_producer(queue)
            await producer.send(TextMessage("two"))
            consumer = await session.create_consumer(queue)
            received = [await consumer.receive(TIMEOUT), await consumer.receive(TIMEOUT)]
            assert [m.text for m in received if m is not None] == ["one", "two"]
            await api.acknowledge(received[1])
            await consumer.close()
            listened = await (await connection.create_session()).create_consumer(queue)
            await listened.set_message_listener(api.listener(on_message))
            await producer.send(TextMessage("three"))
            assert await done.wait()
    assert heard == ["three"]
    warnings = [r for r in caplog.records if "tracing" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert warnings[0].levelname == "WARNING" and "broken" in warnings[0].getMessage()


async def test_O5_a_metrics_registry_that_raises_fails_its_scrape_never_a_call(
    reference_broker: BrokerThread,
) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    from haclient.metrics import HAClientCollector

    class Raising:
        def collect(self) -> Any:
            raise _Broken("registry broken")

    queue = _queue("broken.metrics")
    async with await aio.connect(reference_broker.url) as connection:
        collector = HAClientCollector([connection])
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        registry.register(Raising())  # type: ignore[arg-type]
        session = await connection.create_session()
        producer = await session.create_producer(queue)
        with pytest.raises(_Broken):
            generate_latest(registry)
        await producer.send(TextMessage("still sent"))
        await connection.start()
        received = await (await session.create_consumer(queue)).receive(TIMEOUT)
        assert received is not None and received.text == "still sent"
        assert b"haclient_messages_sent_total" in generate_latest(_only(collector))


def _only(collector: Any) -> Any:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry
