"""OpenTelemetry tracing of sends, receives and settlements, failover included (O1-O4).

How this works: a connection asked to trace (``jms.tracing=opentelemetry`` or
``connect(tracer_provider=...)``) gets one ``Tracing``, shared by its gate, sessions, producers
and consumers (``ConnectionContext.tracing``); without it every hook is one ``is None`` check.
Its producers and consumers are instrumented as they are made (``instrument_producer`` wraps
their ``send`` and ``send_async``, ``instrument_consumer`` their ``receive``), so that
those of a connection that does not trace carry no tracing code on their path at all.
This is the only module of the client that imports ``opentelemetry`` (the ``tracing`` extra);
the failover layer knows nothing of it: what a trace says about failover comes from a failover
listener (``FailoverRecord``) and from what the gate, the producer and the consumer know. What
the spans say (the conventions' attributes, the failover span) is ``haclient.aio.tracing_spans``.

Spans follow OpenTelemetry's messaging semantic conventions:

- ``send <destination>`` (PRODUCER) per send; it injects the W3C trace context (``traceparent``,
  ``tracestate``) into the message's application properties, so that any AMQP consumer that
  reads them (another language's, a Java one's) continues the trace. A ``send`` span ends when
  the send returns; a ``send_async`` one when its outcome is known; a blocking send's is made in
  the caller's thread before the message is encoded there (``posted``) and ends once the send
  returns (queued, or done);
- ``receive <destination>`` (CONSUMER) per message ``receive()`` returns, ``process
  <destination>`` (CONSUMER) around a message listener (current while it runs), each a child of
  the producer's span and linked to it (one message, one trace): its context comes from the
  properties, or from Qpid JMS's ``x-opt-qpid-tracestate`` message annotation (``adopt``);
- ``ack``, ``commit`` and ``rollback`` (CLIENT, operation type ``settle``); a commit or
  rollback links to the spans of the transaction's sends and receives.

Failover in the trace: a ``failover`` span per failover (lost broker, new broker, downtime); a
call that waited at the gate gets a ``haclient.failover`` event (how long it waited, which
broker was lost, which took over) and a link to that span; a send sent again on the new
connection (F11) a ``haclient.resent`` event; a message whose acknowledgement a failover cut
off ``haclient.ack_in_doubt``; a commit rolled back by failover an error status that says so.

Thread-safety: the tracer is OpenTelemetry's (thread-safe); ``carried``, ``bound``,
``continuing`` and ``posted`` are called in the application's threads (``posted`` only reads
the connection), everything else on the event loop.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib.metadata
import inspect
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Link, SpanKind
except ModuleNotFoundError as missing:  # as haclient._extras says it, from a lower layer
    raise ImportError(
        f"haclient.aio.tracing needs {missing.name}, which the 'tracing' extra installs: "
        "pip install 'haclient[tracing]'",
        name="haclient.aio.tracing",
    ) from missing

from haclient.aio.checks import ensure_open
from haclient.aio.tracing_guard import TelemetryGuard, guarded_tracer
from haclient.aio.tracing_spans import (
    QPID_JMS_ANNOTATION,
    SYSTEM,
    TRACE_PROPERTIES,
    FailoverRecord,
    context_of,
    destination_attributes,
    failed,
    message_attributes,
    server_attributes,
    span_name,
    trace_properties,
)
from haclient.destination import Destination
from haclient.errors import TransactionRolledBackError
from haclient.message import Message
from haclient.outgoing import Encoded

if TYPE_CHECKING:
    from haclient.aio.physical import PhysicalConnection
    from haclient.aio.stats import Counters
    from haclient.amqp.connection import ReceivedMessage

__all__ = [
    "QPID_JMS_ANNOTATION",
    "TRACE_PROPERTIES",
    "FailoverRecord",
    "Tracing",
    "context_of",
    "continuing",
    "trace_properties",
]

T = TypeVar("T")
_Completion = Callable[[Message, BaseException | None], Any]
"""A ``send_async`` completion listener: the message, and None or what failed it."""


class TracedConnection(Protocol):
    """What tracing reads of its connection (``haclient.aio.context.ConnectionContext``)."""

    client_id: str | None
    container_id: str
    current: PhysicalConnection | None
    counters: Counters


_MAX_LINKS: Final = 128  # links a commit keeps to its transaction's spans

_Wait = tuple[dict[str, Any], int, "trace.SpanContext | None"]
"""A wait at the gate: the event's attributes, when (ns), the failover's span to link to."""
_waits: contextvars.ContextVar[list[_Wait] | None] = contextvars.ContextVar(
    "haclient_tracing_waits", default=None
)
"""The waits of a receive in progress, whose span is made only once a message came."""


@contextlib.contextmanager
def continuing(message: Message) -> Iterator[None]:
    """Run the block in the trace context ``message`` carries (``context_of``): a traced send
    of it there is a child of that context, so that its trace goes on (a pipeline that reads,
    transforms and sends again) instead of the new send starting a trace of its own."""
    token = otel_context.attach(context_of(message))
    try:
        yield
    finally:
        otel_context.detach(token)


def _version() -> str | None:
    """The installed haclient's version, for the tracer's instrumentation scope."""
    try:
        return importlib.metadata.version("haclient")
    except importlib.metadata.PackageNotFoundError:
        return None


class Tracing:
    """The spans of one connection's sends, receives and settlements (see the module doc)."""

    def __init__(self, tracer_provider: Any, connection: TracedConnection) -> None:
        # The application's tracer, and its exporters, may raise: never into a call (O5).
        self.guard = TelemetryGuard(lambda: connection.container_id)
        self._tracer = guarded_tracer(tracer_provider, _version(), self.guard)
        self._connection = connection
        self.failover = FailoverRecord(self._tracer)
        # The span contexts of each transacted session's open transaction: its commit's links.
        self._transactions: weakref.WeakKeyDictionary[Any, list[trace.SpanContext]] = (
            weakref.WeakKeyDictionary()
        )

    # What every span has ------------------------------------------------------------------------

    def _common(self, operation: str, kind: str) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.name": operation,
            "messaging.operation.type": kind,
        }
        if self._connection.client_id is not None:
            attributes["messaging.client.id"] = self._connection.client_id
        return attributes

    def _finish(self, span: trace.Span, broker_now: Callable[[], Any] | None = None) -> None:
        """Name the broker actually used: the one in use now (after a failover, the new one),
        read on the loop; in another thread, what ``broker_now()`` says (the blocking API's
        value that the loop keeps up to date: it never reads the connection from its
        threads)."""
        if broker_now is None:
            current = self._connection.current
            broker = None if current is None else current.broker
        else:
            broker = broker_now()
        if broker is not None:
            span.set_attributes(server_attributes(broker))

    def _note_transaction(self, session: Any, span: trace.Span) -> None:
        if session is not None and getattr(session, "transaction", None) is not None:
            spans = self._transactions.setdefault(session, [])
            if len(spans) < _MAX_LINKS:
                spans.append(span.get_span_context())

    def enlisted(self, session: Any) -> None:
        """On the loop: the current span (a blocking send's, carried from its caller's thread)
        is a send of ``session``'s transaction, linked from its commit or rollback."""
        self._note_transaction(session, trace.get_current_span())

    # Producers and consumers -------------------------------------------------------------------

    def instrument_producer(self, producer: Any) -> None:
        """Trace ``producer``'s sends, so that a producer of a connection without tracing is
        not touched at all: ``send`` runs in a ``send`` span, ``send_async``'s span lasts
        until its outcome. (A blocking send makes its span in the caller's thread: ``posted``.)"""
        send = producer.send
        send_async: Callable[..., Awaitable[None]] = producer.send_async
        context = producer._context

        async def traced_send(first: Any, message: Message | None = None, **options: Any) -> None:
            await ensure_open(producer._check_open)  # first, as an untraced send does
            destination, resolved = producer._resolve(first, message)
            await self.send(destination, resolved, context, send(first, message, **options))

        async def traced_send_async(
            first: Any, message: Message | None = None, *, on_completion: Any, **options: Any
        ) -> None:
            await ensure_open(producer._check_open)
            destination, resolved = producer._resolve(first, message)

            def sending(completed: _Completion) -> Awaitable[None]:
                return send_async(first, message, on_completion=completed, **options)

            await self.send_async(destination, resolved, context, on_completion, sending)

        producer.send = traced_send
        producer.send_async = traced_send_async

    def instrument_consumer(self, consumer: Any) -> None:
        """Trace ``consumer``'s ``receive``: a ``receive`` span per message it returns."""
        receive = consumer.receive
        context = consumer._context

        async def traced_receive(timeout: float | None = None) -> Message | None:
            return await self.receive(
                consumer.destination, consumer.subscription_name, receive(timeout), context
            )

        consumer.receive = traced_receive

    # Sending ------------------------------------------------------------------------------------

    def _start_send(self, destination: Destination, message: Message, session: Any) -> trace.Span:
        """A ``send`` span, a child of the current context, whose trace context ``message``
        now carries in its properties (before the send encodes it)."""
        span = self._tracer.start_span(
            span_name("send", destination),
            kind=SpanKind.PRODUCER,
            attributes={**self._common("send", "send"), **destination_attributes(destination)},
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
            else:
                message.properties.pop(key, None)
        self._note_transaction(session, span)
        return span

    def _end_send(
        self, span: trace.Span, message: Message, broker_now: Callable[[], Any] | None = None
    ) -> None:
        """End a ``send`` span: the message's id (stamped by now) and the broker in use."""
        span.set_attributes(message_attributes(message))
        self._finish(span, broker_now)
        span.end()

    async def send(
        self, destination: Destination, message: Message, session: Any, sending: Awaitable[T]
    ) -> T:
        """Run ``sending`` (the send of ``message``) in a ``send`` span.

        ``sending`` must not have started: the trace context goes into the message's
        properties before the send encodes it."""
        span = self._start_send(destination, message, session)
        with trace.use_span(span, end_on_exit=False, record_exception=False):
            try:
                return await sending
            except BaseException as exc:
                failed(span, exc)
                raise
            finally:
                self._end_send(span, message)

    async def send_async(
        self,
        destination: Destination,
        message: Message,
        session: Any,
        on_completion: _Completion,
        sending: Callable[[_Completion], Awaitable[None]],
    ) -> None:
        """Run ``sending(completed)`` (a ``send_async`` of ``message`` that calls ``completed``
        with its outcome) in a ``send`` span that stays open until that outcome: a re-send
        after a failover (F11), made after this returned, is recorded on it, and an error the
        outcome brings is its error. ``on_completion`` is then called as the caller asked."""
        span = self._start_send(destination, message, session)

        def ending() -> None:  # once: after the outcome, or the error raised, whichever first
            if span.is_recording():  # an SDK span records until it ends
                self._end_send(span, message)

        def completed(sent: Message, error: BaseException | None) -> Any:
            if error is not None:
                failed(span, error)
            ending()
            return on_completion(sent, error)

        with trace.use_span(span, end_on_exit=False, record_exception=False):
            try:  # the task that waits for the outcome inherits the span (``resent``)
                await sending(completed)
            except BaseException as exc:
                failed(span, exc)
                ending()
                raise

    def posted(
        self,
        destination: Destination,
        message: Message,
        session: Any,
        post: Callable[[], T],
        broker_now: Callable[[], Any] | None = None,
    ) -> T:
        """Run ``post()`` (a blocking send, in the caller's thread, which encodes the message
        after this put the trace context in its properties) in a ``send`` span, a child of
        the caller's current span, ended once ``post()`` returned (the message queued, or
        its outcome known): what ``post()`` returns. ``session`` is None for a blocking send:
        its transaction is noted on the loop (``enlisted``), not from the caller's thread."""
        span = self._start_send(destination, message, session)
        try:
            with trace.use_span(span, end_on_exit=False, record_exception=False):
                return post()  # current: the loop's part of the send carries it (resent, waited)
        except BaseException as exc:
            failed(span, exc)
            raise
        finally:
            self._end_send(span, message, broker_now)

    def posted_async(
        self,
        destination: Destination,
        message: Message,
        post: Callable[[Callable[[BaseException | None], None]], T],
        broker_now: Callable[[], Any] | None = None,
    ) -> T:
        """Run ``post(ended)`` (a blocking ``send_async``, in the caller's thread) in a ``send``
        span, a child of the caller's current span, that lasts until ``ended(error)`` is
        called with the send's outcome (on the loop: a re-send after a failover is recorded on
        it meanwhile), or until ``post`` raises."""
        span = self._start_send(destination, message, None)
        attributes = message_attributes(message)  # stamped: read here, not on the loop

        def ended(error: BaseException | None) -> None:
            if error is not None:
                failed(span, error)
            if span.is_recording():  # once
                span.set_attributes(attributes)
                self._finish(span, broker_now)
                span.end()

        try:
            with trace.use_span(span, end_on_exit=False, record_exception=False):
                return post(ended)
        except BaseException as exc:
            ended(exc)
            raise

    def resent(self, message: Message | Encoded) -> None:
        """A send cut off by a failover goes again on the new connection (F11)."""
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event("haclient.resent", {"messaging.message.id": message.message_id or ""})

    # Receiving ----------------------------------------------------------------------------------

    def adopt(self, message: Message, raw: ReceivedMessage) -> None:
        """A message just received: when it carries its trace context only in Qpid JMS's
        ``x-opt-qpid-tracestate`` annotation, copy it into its properties (read both ways)."""
        if trace_properties(message) or QPID_JMS_ANNOTATION.encode() not in raw.payload:
            return
        from haclient.amqp.codec import MessageView

        with contextlib.suppress(Exception):
            qpid = MessageView(raw.payload).message_annotations.get(QPID_JMS_ANNOTATION)
            if isinstance(qpid, Mapping):
                for key in TRACE_PROPERTIES:
                    if isinstance(qpid.get(key), str):
                        message.properties[key] = qpid[key]

    def _producer(self, message: Message) -> tuple[otel_context.Context | None, list[Link]]:
        """The parent of a consumer span of ``message`` and its links: the producer's span,
        so that the message's spans make one trace; and, for a receive made inside a span of
        the application, a link to that span. Without a producer context: the ambient one."""
        ambient = trace.get_current_span().get_span_context()
        caller = [Link(ambient, {"haclient.link": "caller"})] if ambient.is_valid else []
        parent = self.guard.run("propagate.extract", lambda: context_of(message), None)
        if parent is None:
            return None, []
        producer = trace.get_current_span(parent).get_span_context()
        if not producer.is_valid:
            return None, []
        return parent, [Link(producer, {"haclient.link": "producer"}), *caller]

    def _consumer_attributes(
        self, operation: str, destination: Destination, message: Message, subscription: str | None
    ) -> dict[str, Any]:
        attributes = {
            **self._common(operation, operation),
            **destination_attributes(destination),
            **message_attributes(message),
            "messaging.message.delivery_count": message.delivery_count,
        }
        if subscription is not None:
            attributes["messaging.destination.subscription.name"] = subscription
        if message.ack_in_doubt:
            attributes["haclient.ack_in_doubt"] = True
        return attributes

    async def receive(
        self,
        destination: Destination,
        subscription: str | None,
        receiving: Awaitable[Message | None],
        session: Any,
    ) -> Message | None:
        """Run ``receiving``; for the message it gives, a ``receive`` span from the call to
        now, linked to the producer's context. A receive that gets nothing makes no span."""
        started = time.time_ns()
        waits: list[_Wait] = []
        token = _waits.set(waits)
        try:
            message = await receiving
        finally:
            _waits.reset(token)
        if message is None:
            return None
        parent, links = self._producer(message)
        span = self._tracer.start_span(
            span_name("receive", destination),
            context=parent,
            kind=SpanKind.CONSUMER,
            links=links,
            start_time=started,
            attributes=self._consumer_attributes("receive", destination, message, subscription),
        )
        for attributes, at, failover in waits:
            span.add_event("haclient.failover", attributes, timestamp=at)
            if failover is not None:
                span.add_link(failover, {"haclient.link": "failover"})
        self._note_transaction(session, span)
        self._finish(span)
        span.end()
        return message

    def processing(self, consumer: Any, listener: Callable[[Message], Any]) -> Any:
        """``listener``, run in a ``process`` span (current while it runs, linked to the
        producer's context); what it raises is recorded, and raised."""
        context = consumer._context

        async def process(message: Message) -> None:
            parent, links = self._producer(message)
            with self._tracer.start_as_current_span(
                span_name("process", consumer.destination),
                context=parent,
                kind=SpanKind.CONSUMER,
                links=links,
                attributes=self._consumer_attributes(
                    "process", consumer.destination, message, consumer.subscription_name
                ),
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                self._note_transaction(context, span)
                try:
                    result = listener(message)
                    if inspect.isawaitable(result):
                        await result
                except BaseException as exc:
                    failed(span, exc)
                    raise
                finally:
                    self._finish(span)

        return process

    # Settling -----------------------------------------------------------------------------------

    async def settle(self, operation: str, session: Any, settling: Awaitable[T]) -> T:
        """Run ``settling`` (``ack``, ``commit`` or ``rollback``) in a ``settle`` span; a
        commit or rollback links to the spans of the transaction it ends."""
        links = [Link(c) for c in self._transactions.pop(session, [])]
        counters = self._connection.counters
        by_failover = counters.rolled_back_by_failover
        with self._tracer.start_as_current_span(
            operation,
            kind=SpanKind.CLIENT,
            links=links,
            attributes=self._common(operation, "settle"),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                return await settling
            except BaseException as exc:
                if isinstance(exc, TransactionRolledBackError):
                    rolled = counters.rolled_back_by_failover > by_failover
                    span.set_attribute("haclient.rolled_back_by_failover", rolled)
                failed(span, exc)
                raise
            finally:
                self._finish(span)

    # Failover -----------------------------------------------------------------------------------

    def waited(self, seconds: float) -> None:
        """A call waited ``seconds`` at the gate for a failover to end: a
        ``haclient.failover`` event on its span, and a link to the failover's."""
        attributes = self.failover.attributes(seconds)
        waits = _waits.get()
        if waits is not None:  # a receive: its span is made once its message came
            waits.append((attributes, time.time_ns(), self.failover.span_context))
            return
        span = trace.get_current_span()
        if span.is_recording():
            span.add_event("haclient.failover", attributes)
            if self.failover.span_context is not None:
                span.add_link(self.failover.span_context, {"haclient.link": "failover"})

    # Crossing threads (the blocking API) --------------------------------------------------------

    @staticmethod
    def carried(coro: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
        """``coro``, to run on the event loop in the OpenTelemetry context of the calling
        thread (a blocking call's spans are children of the caller's span)."""
        caller = otel_context.get_current()

        async def in_callers_context() -> T:
            token = otel_context.attach(caller)
            try:
                return await coro
            finally:
                otel_context.detach(token)

        return in_callers_context()

    @staticmethod
    def context_now() -> object:
        """The calling thread's OpenTelemetry context: a value for ``carried_from`` (a blocking
        send hands it to the loop with its snapshot)."""
        return otel_context.get_current()

    @staticmethod
    async def carried_from(context: object, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on the event loop in ``context`` (from ``context_now``)."""
        token = otel_context.attach(context)  # type: ignore[arg-type]
        try:
            return await coro
        finally:
            otel_context.detach(token)

    @staticmethod
    def bound(fn: Callable[..., T]) -> Callable[..., T]:
        """``fn``, to run in another thread in the OpenTelemetry context of now (a blocking
        listener runs inside its ``process`` span)."""
        return Tracing.bound_to(otel_context.get_current(), fn)

    @staticmethod
    def bound_to(context: object, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn``, to run in the OpenTelemetry context ``context`` (from ``context_now``)."""
        now: Any = context

        def in_context(*args: Any) -> T:
            token = otel_context.attach(now)
            try:
                return fn(*args)
            finally:
                otel_context.detach(token)

        return in_context
