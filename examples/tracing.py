"""One business message traced with OpenTelemetry, from the producer through the broker to a
listener, printed by the SDK's console exporter (blocking API; needs the `tracing` extra and
`opentelemetry-sdk`).

The producer sends inside an application span ("place order"); haclient's `send` span is its
child and puts the W3C trace context into the message's `traceparent` property; the consumer,
on another connection, handles the message in a `process` span linked to the send, and the
application's own span ("ship order") nests in it. Every span of the order shares one trace id,
which the example prints last. With a failover on the way, the spans say which broker was lost,
which took over and how long the calls waited (docs/guide/tracing.md).

    python examples/tracing.py amqp://127.0.0.1:5672
"""

from __future__ import annotations

import argparse
import sys
import threading

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

import haclient
from haclient import AckMode, Message, Queue, TextMessage


def run(url: str, queue: Queue) -> int:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    tracer = provider.get_tracer("orders-example")
    shipped = threading.Event()
    trace_ids: set[str] = set()

    def ship(message: Message) -> None:  # runs inside haclient's "process" span
        with tracer.start_as_current_span("ship order") as span:
            trace_ids.add(f"{span.get_span_context().trace_id:032x}")
        shipped.set()

    with (
        haclient.connect(url, tracer_provider=provider) as shop,
        haclient.connect(url, tracer_provider=provider) as warehouse,
    ):
        consumer = warehouse.create_session(AckMode.AUTO).create_consumer(queue)
        consumer.set_message_listener(ship)
        warehouse.start()
        producer = shop.create_session().create_producer(queue)
        with tracer.start_as_current_span("place order") as span:
            trace_ids.add(f"{span.get_span_context().trace_id:032x}")
            producer.send(TextMessage("order 42"))
        if not shipped.wait(10):
            print("the order was not shipped", file=sys.stderr)
            return 1
    provider.shutdown()
    if len(trace_ids) != 1:
        print(f"the order's spans are in {len(trace_ids)} traces", file=sys.stderr)
        return 1
    print(f"one trace from the shop to the warehouse: {trace_ids.pop()}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="broker or failover URL")
    parser.add_argument("--queue", default="traced-orders")
    args = parser.parse_args(argv)
    return run(args.url, Queue(args.queue))


if __name__ == "__main__":
    sys.exit(main())
