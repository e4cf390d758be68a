"""Whole AMQP 1.0 messages: ``AmqpMessage`` to bytes, and bytes to a lazily decoded view.

``AmqpMessage`` is the message as AMQP 1.0 defines it (header, annotations, properties,
application properties, one body section), with no JMS meaning attached: the JMS mapping lives in
``haclient.mapping``. ``MessageView`` reads a received payload section by section, each on first
access of one of its fields (the body only when asked); ``decode_message`` reads all of it.

Times (``creation_time``, ``absolute_expiry_time``) are seconds since the epoch and ``ttl`` is
seconds; on the wire they are milliseconds, rounded to the nearest.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Final, TypeVar

import proton

from haclient.amqp.codec import formats as f
from haclient.amqp.codec.decode import decode_value
from haclient.amqp.codec.encode import (
    NULL_BYTES,
    encode_binary,
    encode_string,
    encode_symbol,
    encode_timestamp,
    encode_uint,
    encode_ulong,
    encode_value,
)
from haclient.amqp.codec.sections import (
    annotations_section,
    application_properties_section,
    body_section,
    header_section,
    properties_section,
    split_sections,
    undecodable,
)
from haclient.jms_errors import MessageFormatError
from haclient.typed_property import TypedProperty

__all__ = ["AmqpMessage", "BodyKind", "MessageView", "decode_message", "encode_message"]

T = TypeVar("T")


class BodyKind(enum.Enum):
    """Which body section a message carries."""

    VALUE = "amqp-value"
    DATA = "data"
    SEQUENCE = "amqp-sequence"


@dataclass(slots=True)
class AmqpMessage:
    """An AMQP 1.0 message (all sections optional).

    ``body`` is a Python value for VALUE, ``bytes`` for DATA and a list for SEQUENCE; None is no
    body section at all.
    """

    body: Any = None
    body_kind: BodyKind = BodyKind.VALUE
    durable: bool = False
    priority: int = 4
    ttl: float | None = None
    first_acquirer: bool = False
    delivery_count: int = 0
    message_id: Any = None
    user_id: bytes | None = None
    to: str | None = None
    subject: str | None = None
    reply_to: str | None = None
    correlation_id: Any = None
    content_type: str | None = None
    content_encoding: str | None = None
    absolute_expiry_time: float | None = None
    creation_time: float | None = None
    group_id: str | None = None
    group_sequence: int | None = None
    reply_to_group_id: str | None = None
    message_annotations: dict[str, Any] = field(default_factory=dict)
    delivery_annotations: dict[str, Any] = field(default_factory=dict)
    application_properties: dict[str, Any] = field(default_factory=dict)


def millis(seconds: float) -> int:
    """``seconds`` as whole milliseconds, rounded to the nearest (the wire unit of times)."""
    return round(seconds * 1000)


# Encoding --------------------------------------------------------------------------------------


def encode_id(value: Any) -> bytes:
    """A message-id or correlation-id field (an ``int`` goes as a ulong, as proton sends it)."""
    if type(value) is str:  # the ids producers assign: no type dispatch
        return encode_string(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return encode_ulong(value)
    return encode_value(value)


def encode_time(seconds: float | None) -> bytes:
    """A time field (``creation-time``, ``absolute-expiry-time``): epoch seconds as a timestamp
    in milliseconds, rounded as ``millis`` rounds, or null for None."""
    return NULL_BYTES if seconds is None else encode_timestamp(round(seconds * 1000))


def _optional(encode: Any, value: Any) -> bytes:
    return NULL_BYTES if value is None else bytes(encode(value))


def _properties_fields(m: AmqpMessage) -> list[bytes]:
    return [
        NULL_BYTES if m.message_id is None else encode_id(m.message_id),
        _optional(encode_binary, m.user_id),
        _optional(encode_string, m.to),
        _optional(encode_string, m.subject),
        _optional(encode_string, m.reply_to),
        NULL_BYTES if m.correlation_id is None else encode_id(m.correlation_id),
        _optional(encode_symbol, m.content_type),
        _optional(encode_symbol, m.content_encoding),
        encode_time(m.absolute_expiry_time),
        encode_time(m.creation_time),
        _optional(encode_string, m.group_id),
        _optional(encode_uint, m.group_sequence),
        _optional(encode_string, m.reply_to_group_id),
    ]


def _check_body(message: AmqpMessage) -> None:
    if message.body_kind is BodyKind.DATA and not isinstance(message.body, bytes | bytearray):
        raise MessageFormatError(f"a data section needs bytes, not {type(message.body).__name__}")
    if message.body_kind is BodyKind.SEQUENCE and not isinstance(message.body, list):
        raise MessageFormatError(
            f"an amqp-sequence section needs a list, not {type(message.body).__name__}"
        )


def encode_message(message: AmqpMessage) -> bytes:
    """The wire form of ``message``: its sections in the specification's order.

    Raises:
        MessageFormatError: a value has no AMQP encoding (the message names it).
    """
    _check_body(message)
    try:
        parts = [
            header_section(
                durable=message.durable,
                priority=message.priority,
                ttl_ms=None if message.ttl is None else millis(message.ttl),
                first_acquirer=message.first_acquirer,
                delivery_count=message.delivery_count,
            )
        ]
        if message.delivery_annotations:
            parts.append(annotations_section(f.DELIVERY_ANNOTATIONS, message.delivery_annotations))
        if message.message_annotations:
            parts.append(annotations_section(f.MESSAGE_ANNOTATIONS, message.message_annotations))
        parts.append(properties_section(_properties_fields(message)))
        if message.application_properties:
            parts.append(application_properties_section(message.application_properties))
        if message.body is not None:
            parts.append(
                body_section(
                    message.body,
                    data=message.body_kind is BodyKind.DATA,
                    sequence=message.body_kind is BodyKind.SEQUENCE,
                )
            )
    except MessageFormatError:
        raise
    except (ValueError, TypeError, OverflowError, AttributeError) as exc:
        raise MessageFormatError(f"message cannot be encoded as AMQP: {exc}") from exc
    return b"".join(parts)


# Decoding --------------------------------------------------------------------------------------

_HEADER_DEFAULTS: Final = (False, 4, None, False, 0)
_PROPERTY_COUNT: Final = 13


def _field(
    section: Callable[[MessageView], Sequence[Any]],
    index: int,
    convert: Callable[[Any], T],
    doc: str,
) -> TypedProperty[T]:
    """A read-only field of a view: ``convert`` of the value at ``index`` of ``section``."""

    def read(view: MessageView) -> T:
        return convert(section(view)[index])

    return TypedProperty[T](read, doc=doc)


def _as_is(value: Any) -> Any:
    return value


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _bytes_or_none(value: Any) -> bytes | None:
    return bytes(value) if value else None


def _int_or_none(value: Any) -> int | None:
    return int(value) if value else None


def _seconds_or_none(millis: Any) -> float | None:
    return millis / 1000 if millis else None


class SectionMemo:
    """The header and message annotations of recent messages, decoded, by their bytes: a
    producer sends the same bytes there message after message (its JMS type and destination
    annotations, durable and priority), and decoding is a function of the bytes alone, so
    views that share a memo decode them once. Only values that cannot be changed
    in place are kept (the annotations are handed out as a copy of the map). Bounded: it forgets
    everything once it holds ``limit`` of a kind (a sender whose bytes there always differ).

    Thread-safety: none; one user at a time (a consumer's decoder, on its event loop).
    """

    __slots__ = ("annotations", "headers", "limit")

    def __init__(self, limit: int = 64) -> None:
        self.limit = limit
        self.headers: dict[bytes, tuple[Any, ...]] = {}
        self.annotations: dict[bytes, dict[str, Any]] = {}

    def keep_header(self, key: bytes, header: tuple[Any, ...]) -> None:
        if len(self.headers) >= self.limit:
            self.headers.clear()
        self.headers[key] = header

    def keep_annotations(self, key: bytes, annotations: dict[str, Any]) -> None:
        if all(type(v) in _UNCHANGING or v is None for v in annotations.values()):
            if len(self.annotations) >= self.limit:
                self.annotations.clear()
            self.annotations[key] = dict(annotations)


class MessageView:
    """A received message, decoded section by section on first access.

    It has the attributes of ``AmqpMessage`` (read-only). Construction only finds the sections;
    reading ``durable`` decodes the header, ``to`` the properties, ``body`` the body, and so on.
    Equal to an ``AmqpMessage`` with the same content. With a ``SectionMemo``, a header or
    message annotations already decoded from the same bytes are not decoded again.

    Raises:
        MessageFormatError: from the constructor when the payload is not a sequence of message
            sections; from an attribute when its section is malformed.
    """

    __slots__ = (
        "_annotations",
        "_app",
        "_body",
        "_header",
        "_memo",
        "_payload",
        "_props",
        "_spans",
    )

    def __init__(self, payload: bytes, memo: SectionMemo | None = None) -> None:
        self._payload = bytes(payload)
        self._spans = split_sections(self._payload)
        self._memo = memo
        self._header: tuple[Any, ...] | None = None
        self._props: list[Any] | None = None
        self._annotations: dict[int, dict[str, Any]] = {}
        self._app: dict[str, Any] | None = None
        self._body: tuple[Any, BodyKind] | None = None

    def _section(self, code: int) -> Any:
        spans = self._spans.get(code)
        if not spans:
            return None
        start, end = spans[0]
        try:
            value, stop = decode_value(self._payload, start)
        except MessageFormatError as exc:
            raise undecodable(exc) from exc
        if stop != end:  # pragma: no cover - split_sections found the same end
            raise MessageFormatError(f"undecodable AMQP message: section 0x{code:02x}")
        return value

    def _list_section(self, code: int, what: str) -> list[Any]:
        value = self._section(code)
        if value is None:
            return []
        if not isinstance(value, list):
            raise MessageFormatError(f"undecodable AMQP message: the {what} is not a list")
        return value

    def _header_fields(self) -> tuple[Any, ...]:
        if self._header is None:
            key = self._memo_key(f.HEADER)
            if key is not None:
                header = self._memo.headers.get(key)  # type: ignore[union-attr]
                if header is not None:
                    self._header = header
                    return header
            values = self._list_section(f.HEADER, "header")[:5]
            padded = [*values, *_HEADER_DEFAULTS[len(values) :]]
            self._header = tuple(
                _HEADER_DEFAULTS[i] if v is None else v for i, v in enumerate(padded)
            )
            _check_types(self._header, _HEADER_TYPES, "header")
            if key is not None:
                self._memo.keep_header(key, self._header)  # type: ignore[union-attr]
        return self._header

    def _memo_key(self, code: int) -> bytes | None:
        """The bytes of section ``code`` (its key in the memo); None without a memo or section."""
        if self._memo is None:
            return None
        spans = self._spans.get(code)
        if not spans:
            return None
        start, end = spans[0]
        return self._payload[start:end]

    def _map_section(self, code: int) -> dict[str, Any]:
        cached = self._annotations.get(code)
        if cached is None:
            key = self._memo_key(code) if code == f.MESSAGE_ANNOTATIONS else None
            if key is not None:
                kept = self._memo.annotations.get(key)  # type: ignore[union-attr]
                if kept is not None:
                    cached = self._annotations[code] = dict(kept)
                    return cached
            value = self._section(code)
            if value is not None and not isinstance(value, dict):
                raise MessageFormatError(
                    f"undecodable AMQP message: section 0x{code:02x} not a map"
                )
            cached = self._annotations[code] = {str(k): v for k, v in (value or {}).items()}
            if key is not None:
                self._memo.keep_annotations(key, cached)  # type: ignore[union-attr]
        return cached

    def _properties_fields(self) -> list[Any]:
        if self._props is None:
            values = self._list_section(f.PROPERTIES, "properties section")[:_PROPERTY_COUNT]
            props = [*values, *[None] * (_PROPERTY_COUNT - len(values))]
            _check_types(props, _PROPERTY_TYPES, "properties section")
            self._props = props
        return self._props

    # The fields of the header and the properties section, in the order AMQP lists them.
    durable = _field(_header_fields, 0, bool, "The header's durable field.")
    priority = _field(_header_fields, 1, int, "The header's priority (4 when absent).")
    ttl = _field(
        _header_fields, 2, _seconds_or_none, "The header's ttl in seconds (None when absent or 0)."
    )
    first_acquirer = _field(_header_fields, 3, bool, "The header's first-acquirer field.")
    delivery_count = _field(_header_fields, 4, int, "The header's delivery-count (0 when absent).")
    message_id = _field(
        _properties_fields, 0, _as_is, "The message-id (ulong, uuid, binary or string), or None."
    )
    user_id = _field(
        _properties_fields, 1, _bytes_or_none, "The user-id, or None (also when empty)."
    )
    to = _field(_properties_fields, 2, _text_or_none, "The to address, or None.")
    subject = _field(_properties_fields, 3, _text_or_none, "The subject, or None.")
    reply_to = _field(_properties_fields, 4, _text_or_none, "The reply-to address, or None.")
    correlation_id = _field(_properties_fields, 5, _as_is, "The correlation-id, or None.")
    content_type = _field(_properties_fields, 6, _text_or_none, "The content-type, or None.")
    content_encoding = _field(
        _properties_fields, 7, _text_or_none, "The content-encoding, or None."
    )
    absolute_expiry_time = _field(
        _properties_fields,
        8,
        _seconds_or_none,
        "The absolute-expiry-time in epoch seconds (None when absent or 0).",
    )
    creation_time = _field(
        _properties_fields,
        9,
        _seconds_or_none,
        "The creation-time in epoch seconds (None when absent or 0).",
    )
    group_id = _field(_properties_fields, 10, _text_or_none, "The group-id, or None.")
    group_sequence = _field(
        _properties_fields, 11, _int_or_none, "The group-sequence (None when absent or 0)."
    )
    reply_to_group_id = _field(
        _properties_fields, 12, _text_or_none, "The reply-to-group-id, or None."
    )

    @property
    def message_annotations(self) -> dict[str, Any]:
        """The message annotations, keys as ``str``."""
        return self._map_section(f.MESSAGE_ANNOTATIONS)

    @property
    def delivery_annotations(self) -> dict[str, Any]:
        """The delivery annotations, keys as ``str``."""
        return self._map_section(f.DELIVERY_ANNOTATIONS)

    @property
    def application_properties(self) -> dict[str, Any]:
        """The application properties."""
        if self._app is None:
            self._app = dict(self._map_section(f.APPLICATION_PROPERTIES))
        return self._app

    @property
    def body(self) -> Any:
        """The body (decoded on first access): a value, ``bytes`` or a list; None if absent."""
        return self._body_and_kind()[0]

    @property
    def body_kind(self) -> BodyKind:
        """Which body section the message has (VALUE when it has none)."""
        return self._body_and_kind()[1]

    def _body_and_kind(self) -> tuple[Any, BodyKind]:
        if self._body is None:
            try:
                self._body = _read_body(self._payload, self._spans)
            except MessageFormatError as exc:
                raise undecodable(exc) from exc
        return self._body

    def to_message(self) -> AmqpMessage:
        """Every section decoded, as an ``AmqpMessage``."""
        return AmqpMessage(**{name: getattr(self, name) for name in _FIELD_NAMES})

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MessageView | AmqpMessage):
            return all(getattr(self, n) == getattr(other, n) for n in _FIELD_NAMES)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MessageView({len(self._payload)} bytes, sections {sorted(self._spans)})"


_FIELD_NAMES: Final = tuple(fl.name for fl in fields(AmqpMessage))
_UNCHANGING: Final = frozenset(
    {
        str,
        bytes,
        int,
        float,
        bool,
        proton.symbol,
        proton.ubyte,
        proton.ushort,
        proton.uint,
        proton.ulong,
        proton.byte,
        proton.short,
        proton.int32,
        proton.timestamp,
        proton.char,
    }
)
_HEADER_TYPES: Final = (bool, int, int, bool, int)
_ANY: Final = object
_PROPERTY_TYPES: Final = (_ANY, bytes, str, str, str, _ANY, str, str, int, int, str, int, str)


def _check_types(values: Any, types: tuple[type, ...], what: str) -> None:
    for index, (value, expected) in enumerate(zip(values, types, strict=False)):
        if value is not None and not isinstance(value, expected):
            raise MessageFormatError(
                f"undecodable AMQP message: field {index} of the {what} is a "
                f"{type(value).__name__}, not a {expected.__name__}"
            )


def _read_body(payload: bytes, spans: Any) -> tuple[Any, BodyKind]:
    """The body of a message: data sections joined, amqp-sequences concatenated, or the value."""
    if f.DATA in spans:
        parts = [decode_value(payload, start)[0] for start, _ in spans[f.DATA]]
        if not all(isinstance(p, bytes) for p in parts):
            raise MessageFormatError("undecodable AMQP message: a data section is not binary")
        return b"".join(parts), BodyKind.DATA
    if f.AMQP_SEQUENCE in spans:
        items: list[Any] = []
        for start, _ in spans[f.AMQP_SEQUENCE]:
            value = decode_value(payload, start)[0]
            if not isinstance(value, list):
                raise MessageFormatError("undecodable AMQP message: an amqp-sequence is no list")
            items.extend(value)
        return items, BodyKind.SEQUENCE
    if f.AMQP_VALUE in spans:
        return decode_value(payload, spans[f.AMQP_VALUE][0][0])[0], BodyKind.VALUE
    return None, BodyKind.VALUE


def decode_message(payload: bytes) -> AmqpMessage:
    """The message in ``payload``, every section decoded.

    Raises:
        MessageFormatError: the bytes are not an AMQP message (the message says why).
    """
    return MessageView(payload).to_message()
