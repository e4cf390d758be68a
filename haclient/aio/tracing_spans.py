"""What haclient's spans say: OpenTelemetry's messaging conventions, and the failover span.

The attribute names and values of ``haclient.aio.tracing``'s spans (``messaging.*``,
``server.*``, ``error.type``), the trace context a message carries (W3C Trace Context in its
application properties, rule O2) and ``FailoverRecord``, the failover listener that makes a
``failover`` span of each failover and tells the calls that waited for it (O3). Imported by
``haclient.aio.tracing`` only, after it checked that OpenTelemetry is installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from haclient.aio.stats import broker_address
from haclient.destination import Destination, TemporaryQueue, TemporaryTopic, address_of
from haclient.message import BytesMessage, Message, TextMessage

if TYPE_CHECKING:
    from failover.url import BrokerURL

__all__ = [
    "QPID_JMS_ANNOTATION",
    "SYSTEM",
    "TRACE_PROPERTIES",
    "FailoverRecord",
    "body_size",
    "cause_of",
    "context_of",
    "destination_attributes",
    "failed",
    "message_attributes",
    "server_attributes",
    "span_name",
    "trace_properties",
    "where",
]


TRACE_PROPERTIES: Final = ("traceparent", "tracestate")
"""The application properties a traced send sets (W3C Trace Context)."""
QPID_JMS_ANNOTATION: Final = "x-opt-qpid-tracestate"
"""The message annotation Qpid JMS's tracing puts its map of trace headers in (read too)."""
SYSTEM: Final = "amqp"


def trace_properties(message: Message) -> dict[str, str]:
    """The trace context a message carries: its ``traceparent``/``tracestate`` properties."""
    return {k: v for k in TRACE_PROPERTIES if isinstance(v := message.properties.get(k), str)}


def context_of(message: Message) -> otel_context.Context:
    """The OpenTelemetry context of the producer of ``message`` (from its ``traceparent`` and
    ``tracestate`` properties): pass it as ``context=`` to start the application's spans as
    children of the send."""
    return propagate.extract(trace_properties(message))


def body_size(message: Message) -> int | None:
    """The body's size in bytes (UTF-8 for text) of a text or bytes message; None otherwise."""
    if isinstance(message, TextMessage):
        return None if message.text is None else len(message.text.encode())
    if isinstance(message, BytesMessage):
        return len(message.body)
    return None


def destination_attributes(destination: Destination | None) -> dict[str, Any]:
    """``messaging.destination.name`` (the address) and, for a temporary one, ``.temporary``."""
    if destination is None:
        return {}
    attributes: dict[str, Any] = {"messaging.destination.name": address_of(destination)}
    if isinstance(destination, TemporaryQueue | TemporaryTopic):
        attributes["messaging.destination.temporary"] = True
    return attributes


def message_attributes(message: Message) -> dict[str, Any]:
    """The message's id, its correlation id when a str (the conversation id) and its body size,
    each only when it has one."""
    attributes: dict[str, Any] = {}
    if message.message_id is not None:
        attributes["messaging.message.id"] = message.message_id
    correlation = message.correlation_id
    if isinstance(correlation, str):
        attributes["messaging.message.conversation_id"] = correlation
    size = body_size(message)
    if size is not None:
        attributes["messaging.message.body.size"] = size
    return attributes


def span_name(operation: str, destination: Destination | None) -> str:
    """``<operation> <address>``, as the conventions name a span (the operation alone when
    there is no destination)."""
    return operation if destination is None else f"{operation} {address_of(destination)}"


def failed(span: trace.Span, exc: BaseException) -> None:
    """Record ``exc`` on ``span``: an event with its type, ``error.type`` and an error status."""
    span.record_exception(exc)
    span.set_attribute("error.type", type(exc).__qualname__)
    if getattr(exc, "in_doubt", False):
        span.set_attribute("haclient.in_doubt", True)
    span.set_status(Status(StatusCode.ERROR, str(exc)))


class FailoverRecord:
    """A failover listener (F14) that keeps what a trace says about the last failover, and
    makes a ``failover`` span of each (loss to restored, or to giving up)."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer
        self._span: trace.Span | None = None
        self._cause: BaseException | None = None
        self.lost: BrokerURL | None = None
        self.restored: BrokerURL | None = None
        self.downtime: float | None = None
        self.span_context: trace.SpanContext | None = None

    def failover_started(self, cause: BaseException | None) -> None:
        self._cause = cause

    def resource_not_restored(self, resource: object, error: BaseException) -> None:
        if self._span is not None:
            self._span.add_event(
                "haclient.resource_not_restored",
                {"haclient.resource": repr(resource), "error.type": type(error).__qualname__},
            )

    def on_connection_interrupted(self, broker: BrokerURL) -> None:
        """The connection to ``broker`` was lost: a failover span begins (a root of its own)."""
        self.lost, self.restored, self.downtime = broker, None, None
        self._span = self._tracer.start_span(
            "failover",
            context=otel_context.Context(),
            kind=SpanKind.INTERNAL,
            attributes={
                "messaging.system": SYSTEM,
                "haclient.failover.lost_broker": where(broker),
                "haclient.failover.cause": cause_of(self._cause),
                **server_attributes(broker),
            },
        )
        self.span_context = self._span.get_span_context()

    def failover_completed(self, broker: BrokerURL, downtime: float) -> None:
        self.restored, self.downtime = broker, downtime
        if self._span is not None:
            self._span.set_attribute("haclient.failover.broker", where(broker))
            self._span.set_attribute("haclient.failover.downtime", downtime)
            self._span.end()
            self._span = None

    def failover_failed(self, cause: BaseException) -> None:
        if self._span is not None:
            failed(self._span, cause)
            self._span.end()
            self._span = None

    def attributes(self, waited: float) -> dict[str, Any]:
        """The attributes of a ``haclient.failover`` event of a call that waited ``waited``
        seconds at the gate."""
        attributes: dict[str, Any] = {"haclient.failover.waited": waited}
        if self.lost is not None:
            attributes["haclient.failover.lost_broker"] = where(self.lost)
        if self.restored is not None:
            attributes["haclient.failover.broker"] = where(self.restored)
        if self.downtime is not None:
            attributes["haclient.failover.downtime"] = self.downtime
        return attributes


def cause_of(cause: BaseException | None) -> str:
    """Why a connection was lost, in a line (haclient's errors mask passwords)."""
    if cause is None:
        return "connection lost"
    return f"{type(cause).__qualname__}: {cause}"[:300]


def where(broker: BrokerURL) -> str:
    """``host:port``: a broker as a trace names it (no user name, password or options)."""
    return broker_address(broker) or ""


def server_attributes(broker: BrokerURL | None) -> dict[str, Any]:
    """``server.address`` and ``server.port`` of ``broker`` (none for None)."""
    if broker is None:
        return {}
    return {"server.address": broker.host, "server.port": broker.port or 0}
