"""Rows to messages and messages to rows: the data source's schema and body formats.

Writing: ``text`` sends the ``body`` column (or the only column) as a TextMessage, ``bytes`` as
a BytesMessage, ``json`` the whole row as a JSON TextMessage. With ``text`` and ``bytes`` a
``properties`` map column becomes the message's properties and a ``correlation_id`` column its
correlation id.

Reading: every message becomes one row of ``read_schema(format)``: the body (a string, or
binary with ``format=bytes``), the properties as a string map, and the JMS headers.

Trace context (``traceContext=true``): a read adds the columns ``traceparent`` and
``tracestate``, the W3C trace context the message carries (rule O2: the application properties
a traced producer sets); a write gives a message those columns of its row as these properties,
so that a pipeline that reads, transforms and writes keeps each message's trace going.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from haclient.errors import MessageFormatError
from haclient.message import BytesMessage, Message, TextMessage

__all__ = ["TRACE_COLUMNS", "message_from_row", "read_schema", "row_from_message"]

_HEADERS = (
    "properties map<string,string>, message_id string, correlation_id string, "
    "destination string, timestamp timestamp, delivery_count int, redelivered boolean"
)
#: The trace context's columns (``traceContext=true``), named as the properties they carry.
TRACE_COLUMNS: Final = ("traceparent", "tracestate")


def read_schema(body_format: str, trace_context: bool = False) -> str:
    """The DDL schema of a read with ``body_format`` (``text``, ``bytes`` or ``json``), with
    the trace context's columns when ``trace_context``."""
    body = "binary" if body_format == "bytes" else "string"
    traced = "".join(f", {column} string" for column in TRACE_COLUMNS) if trace_context else ""
    return f"body {body}, {_HEADERS}{traced}"


def message_from_row(
    row: Mapping[str, Any], body_format: str, trace_context: bool = False
) -> Message:
    """The message a row (``Row.asDict()``) becomes in ``body_format``; with
    ``trace_context``, its ``traceparent`` and ``tracestate`` columns become those properties.

    Raises:
        MessageFormatError: the row has no body for ``text``/``bytes`` (no ``body`` column and
            more than one column), or a property value cannot be sent.
    """
    message = _message_from_row(row, body_format)
    if trace_context:
        for column in TRACE_COLUMNS:
            if isinstance(value := row.get(column), str):
                message.properties[column] = value
    return message


def _message_from_row(row: Mapping[str, Any], body_format: str) -> Message:
    if body_format == "json":
        return TextMessage(json.dumps(dict(row), default=str, separators=(",", ":")))
    body = _body_of(row)
    properties = row.get("properties") or {}
    correlation = row.get("correlation_id")
    headers: dict[str, Any] = {"properties": {str(k): v for k, v in properties.items()}}
    if correlation is not None:
        headers["correlation_id"] = str(correlation)
    if body_format == "bytes":
        data = body.encode() if isinstance(body, str) else bytes(body or b"")
        return BytesMessage(data, **headers)
    return TextMessage(None if body is None else str(body), **headers)


def _body_of(row: Mapping[str, Any]) -> Any:
    if "body" in row:
        return row["body"]
    if len(row) == 1:
        return next(iter(row.values()))
    raise MessageFormatError(
        f"format text/bytes needs a 'body' column or a single column, not {sorted(row)}"
    )


def row_from_message(
    message: Message, body_format: str, trace_context: bool = False
) -> tuple[Any, ...]:
    """The row of ``read_schema(body_format, trace_context)`` that ``message`` becomes."""
    row = (
        _body_value(message.body, body_format),
        {str(k): None if v is None else str(v) for k, v in message.properties.items()},
        message.message_id,
        None if message.correlation_id is None else _text(message.correlation_id),
        None if message.destination is None else str(message.destination),
        None if message.timestamp is None else datetime.fromtimestamp(message.timestamp, UTC),
        message.delivery_count,
        message.redelivered,
    )
    if not trace_context:
        return row
    traced = tuple(_text_or_none(message.properties.get(column)) for column in TRACE_COLUMNS)
    return row + traced


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _body_value(body: Any, body_format: str) -> str | bytes | None:
    if body is None:
        return None
    if body_format == "bytes":
        if isinstance(body, bytes | bytearray):
            return bytes(body)
        return (body if isinstance(body, str) else json.dumps(body, default=str)).encode()
    if isinstance(body, str):
        return body
    if isinstance(body, bytes | bytearray):
        return _text(bytes(body))
    return json.dumps(body, default=str)


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "replace")
