"""Where a message's trace starts when it goes through an outbox: the write, not the relay.

How this works: an ``Outbox`` given a tracer provider makes an ``outbox write <destination>``
span (PRODUCER) for each message written, a child of the context current where ``send`` is
called (the application's request, say), and puts its W3C trace context into the message's
``traceparent``/``tracestate`` properties before the row's payload is encoded: the context is
stored in the row. The relay, on a connection that traces, sends each row with
``send_async`` inside that context (``haclient.aio.tracing.continuing``), so its ``send``
span is the write span's child, and the consumer's ``receive``/``process`` spans (children of
the send) join the same trace. On a connection that does not trace, the stored bytes go as
they are and the consumer's spans are children of the write span itself.
A tracer that raises never fails a write (O5).

Only imported when an ``Outbox`` is given a tracer provider, or by a relay on a traced
connection: it needs opentelemetry (the ``tracing`` extra).
"""

from __future__ import annotations

from typing import Any

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind
except ModuleNotFoundError as missing:
    from haclient._extras import missing_extra

    raise missing_extra("haclient.exactly_once.tracing", "tracing", missing) from missing

from haclient.aio.tracing_guard import TelemetryGuard, guarded_tracer
from haclient.aio.tracing_spans import (
    SYSTEM,
    TRACE_PROPERTIES,
    destination_attributes,
    message_attributes,
    span_name,
)
from haclient.destination import Destination
from haclient.message import Message

__all__ = ["OutboxTracer"]

OPERATION = "outbox write"


class OutboxTracer:
    """Makes the write spans of one ``Outbox``."""

    def __init__(self, tracer_provider: Any) -> None:
        self.guard = TelemetryGuard(lambda: "outbox")
        self._tracer = guarded_tracer(tracer_provider, None, self.guard)

    def written(self, destination: Destination, message: Message) -> None:
        """A span for the write of ``message`` (its id and headers already set), ended now; its
        context goes into the message's properties (and so into the row)."""
        span = self._tracer.start_span(
            span_name(OPERATION, destination),
            kind=SpanKind.PRODUCER,
            attributes={
                "messaging.system": SYSTEM,
                "messaging.operation.name": OPERATION,
                "messaging.operation.type": "create",
                **destination_attributes(destination),
                **message_attributes(message),
            },
        )
        carrier: dict[str, str] = {}
        self.guard.run(
            "propagate.inject",
            lambda: propagate.inject(carrier, context=trace.set_span_in_context(span)),
            None,
        )
        for key in TRACE_PROPERTIES:
            if key in carrier:
                message.properties[key] = carrier[key]
        span.end()
