"""Tracing that never breaks messaging (rule O5).

How this works: OpenTelemetry's own rule is that instrumentation never breaks the instrumented
call. The tracer a connection traces with comes from the application (``tracer_provider=``, or
the global provider), and with it its span processors and exporters: code haclient does not
control, which may raise. So ``Tracing`` never uses it directly: ``guarded_tracer`` gets the
tracer (a ``get_tracer`` that raises gives a no-op one), and wraps it in a ``GuardedTracer``
whose spans are ``GuardedSpan``s. Whatever the tracer or a span raises is caught; the call goes
on, untraced where tracing failed (a span that could not start is a non-recording one), and the
connection's ``TelemetryGuard`` logs it as a WARNING once, the first time (later failures at
DEBUG): a broken exporter would otherwise log on every message.

Thread-safety: a ``TelemetryGuard`` is shared by the connection's loop and the threads of the
blocking API (a blocking send makes its span in the caller's thread); a lost race logs twice at
worst.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util import types

__all__ = ["GuardedSpan", "GuardedTracer", "TelemetryGuard", "guarded_tracer"]

log = logging.getLogger("haclient.tracing")

T = TypeVar("T")


class TelemetryGuard:
    """Where one connection's tracing failures are told: a WARNING the first time, naming the
    connection and the failure, then DEBUG."""

    __slots__ = ("_name", "failures")

    def __init__(self, name: Callable[[], str]) -> None:
        self._name = name
        #: How many tracing calls raised.
        self.failures = 0

    def failed(self, what: str, exc: BaseException) -> None:
        """``what`` (``start_span``, ``span.end`` ...) raised ``exc``: tell it, once loudly."""
        self.failures += 1
        first = self.failures == 1
        log.log(
            logging.WARNING if first else logging.DEBUG,
            "tracing failed on connection %s: %s raised %s: %s; messaging goes on, untraced "
            "where tracing fails%s",
            self._name(),
            what,
            type(exc).__name__,
            exc,
            " (logged once per connection; later failures at DEBUG)" if first else "",
        )

    def run(self, what: str, call: Callable[[], T], otherwise: T) -> T:
        """``call()``, or ``otherwise`` when it raises (told)."""
        try:
            return call()
        except Exception as exc:
            self.failed(what, exc)
            return otherwise


def guarded_tracer(provider: Any, version: str | None, guard: TelemetryGuard) -> GuardedTracer:
    """haclient's tracer of ``provider`` (None: the global one), guarded; a ``get_tracer`` that
    raises gives a tracer that makes no spans."""
    untraced: trace.Tracer = trace.NoOpTracer()
    tracer = guard.run(
        "get_tracer",
        lambda: trace.get_tracer("haclient", version, tracer_provider=provider),
        untraced,
    )
    return GuardedTracer(tracer, guard)


class GuardedTracer(trace.Tracer):
    """A tracer whose spans, and their starting, never raise (see the module doc)."""

    def __init__(self, tracer: trace.Tracer, guard: TelemetryGuard) -> None:
        self._tracer = tracer
        self._guard = guard

    def start_span(
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        """The tracer's span, guarded; a non-recording span when starting it raised."""
        try:
            span = self._tracer.start_span(
                name,
                context=context,
                kind=kind,
                attributes=attributes,
                links=links,
                start_time=start_time,
                record_exception=record_exception,
                set_status_on_exception=set_status_on_exception,
            )
        except Exception as exc:
            self._guard.failed("start_span", exc)
            return trace.INVALID_SPAN
        return GuardedSpan(span, self._guard)

    # OpenTelemetry's own decorator for this (an "agnostic" context manager) is private.
    @contextlib.contextmanager
    def start_as_current_span(  # type: ignore[override]
        self,
        name: str,
        context: otel_context.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: types.Attributes = None,
        links: Sequence[Link] | None = None,
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> Iterator[trace.Span]:
        """``start_span``, current while the block runs; what the block raises is raised as
        it is (and recorded as asked)."""
        span = self.start_span(name, context, kind, attributes, links, start_time)
        with trace.use_span(
            span,
            end_on_exit=end_on_exit,
            record_exception=record_exception,
            set_status_on_exception=set_status_on_exception,
        ):
            yield span


class GuardedSpan(trace.Span):
    """A span whose every method is the wrapped span's, and never raises."""

    __slots__ = ("_guard", "_span")

    def __init__(self, span: trace.Span, guard: TelemetryGuard) -> None:
        self._span = span
        self._guard = guard

    def _do(self, what: str, call: Callable[[], Any]) -> None:
        try:
            call()
        except Exception as exc:
            self._guard.failed(f"span.{what}", exc)

    def end(self, end_time: int | None = None) -> None:
        self._do("end", lambda: self._span.end(end_time))

    def get_span_context(self) -> trace.SpanContext:
        return self._guard.run(
            "span.get_span_context", self._span.get_span_context, trace.INVALID_SPAN_CONTEXT
        )

    def set_attributes(self, attributes: Mapping[str, types.AttributeValue]) -> None:
        self._do("set_attributes", lambda: self._span.set_attributes(attributes))

    def set_attribute(self, key: str, value: types.AttributeValue) -> None:
        self._do("set_attribute", lambda: self._span.set_attribute(key, value))

    def add_event(
        self, name: str, attributes: types.Attributes = None, timestamp: int | None = None
    ) -> None:
        self._do("add_event", lambda: self._span.add_event(name, attributes, timestamp))

    def add_link(self, context: trace.SpanContext, attributes: types.Attributes = None) -> None:
        self._do("add_link", lambda: self._span.add_link(context, attributes))

    def update_name(self, name: str) -> None:
        self._do("update_name", lambda: self._span.update_name(name))

    def is_recording(self) -> bool:
        return self._guard.run("span.is_recording", self._span.is_recording, False)

    def set_status(self, status: Any, description: str | None = None) -> None:
        self._do("set_status", lambda: self._span.set_status(status, description))

    def record_exception(
        self,
        exception: BaseException,
        attributes: types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        self._do(
            "record_exception",
            lambda: self._span.record_exception(exception, attributes, timestamp, escaped),
        )

    def __repr__(self) -> str:
        return f"GuardedSpan({self._span!r})"
