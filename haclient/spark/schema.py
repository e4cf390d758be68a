"""Rows to messages and messages to rows: the data source's schema and body formats.

Writing: ``text`` sends the ``body`` column (or the only column) as a TextMessage, ``bytes`` as
a BytesMessage, ``json`` the whole row as a JSON TextMessage. With ``text`` and ``bytes`` a
``properties`` map column becomes the message's properties and a ``correlation_id`` column its
correlation id.

Reading: every message becomes one row of ``read_schema(format)``: the body (a string, or
binary with ``format=bytes``), the properties as a string map, and the JMS headers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from haclient.errors import MessageFormatError
from haclient.message import BytesMessage, Message, TextMessage

__all__ = ["message_from_row", "read_schema", "row_from_message"]

_HEADERS = (
    "properties map<string,string>, message_id string, correlation_id string, "
    "destination string, timestamp timestamp, delivery_count int, redelivered boolean"
)


def read_schema(body_format: str) -> str:
    """The DDL schema of a read with ``body_format`` (``text``, ``bytes`` or ``json``)."""
    body = "binary" if body_format == "bytes" else "string"
    return f"body {body}, {_HEADERS}"


def message_from_row(row: Mapping[str, Any], body_format: str) -> Message:
    """The message a row (``Row.asDict()``) becomes in ``body_format``.

    Raises:
        MessageFormatError: the row has no body for ``text``/``bytes`` (no ``body`` column and
            more than one column), or a property value cannot be sent.
    """
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


def row_from_message(message: Message, body_format: str) -> tuple[Any, ...]:
    """The row of ``read_schema(body_format)`` that ``message`` becomes."""
    return (
        _body_value(message.body, body_format),
        {str(k): None if v is None else str(v) for k, v in message.properties.items()},
        message.message_id,
        None if message.correlation_id is None else _text(message.correlation_id),
        None if message.destination is None else str(message.destination),
        None if message.timestamp is None else datetime.fromtimestamp(message.timestamp, UTC),
        message.delivery_count,
        message.redelivered,
    )


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
