"""Encoding and decoding whole AMQP messages, and the transaction coordinator's control bodies.

``AmqpMessage`` is the message as AMQP 1.0 defines it (header, annotations, properties,
application properties, one body section), with no JMS meaning attached: the JMS mapping lives in
``haclient.message``. Encoding goes through proton's codec.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field
from typing import Any

from proton import Data, Described, Message, symbol, ulong

from haclient.amqp import _convert
from haclient.errors import MessageFormatError

__all__ = [
    "AmqpMessage",
    "BodyKind",
    "CoordinatorRequest",
    "Declare",
    "Discharge",
    "decode_coordinator_request",
    "decode_message",
    "encode_declare",
    "encode_discharge",
    "encode_message",
]


class BodyKind(enum.Enum):
    """Which body section a message carries."""

    VALUE = "amqp-value"
    DATA = "data"
    SEQUENCE = "amqp-sequence"


@dataclass(slots=True)
class AmqpMessage:
    """An AMQP 1.0 message (all sections optional).

    Times (``creation_time``, ``absolute_expiry_time``) are seconds since the epoch;
    ``ttl`` is seconds. ``body`` is a Python value for VALUE, ``bytes`` for DATA and a list for
    SEQUENCE.
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


def _wire_seconds(seconds: float) -> float:
    """``seconds`` such that proton's ``int(seconds * 1000)`` is the nearest millisecond.

    proton truncates when it converts to milliseconds, so 1.001 s would go out as 1000 ms;
    half a millisecond of headroom makes the truncation land on the rounded value.
    """
    millis = round(seconds * 1000)
    return (millis + (0.5 if millis >= 0 else -0.5)) / 1000


def encode_message(message: AmqpMessage) -> bytes:
    """The wire form of ``message``.

    Raises:
        MessageFormatError: a value has no AMQP encoding (the message names the field).
    """
    if message.body_kind is BodyKind.DATA and not isinstance(message.body, bytes | bytearray):
        raise MessageFormatError(f"a data section needs bytes, not {type(message.body).__name__}")
    if message.body_kind is BodyKind.SEQUENCE and not isinstance(message.body, list):
        raise MessageFormatError(
            f"an amqp-sequence section needs a list, not {type(message.body).__name__}"
        )
    pm = _scratch_message()
    try:
        _fill(pm, message)
        return bytes(pm.encode())
    except MessageFormatError:
        raise
    except Exception as exc:  # proton raises DataException, TypeError, KeyError ...
        raise MessageFormatError(f"message cannot be encoded as AMQP: {exc}") from exc


_scratch = threading.local()


def _scratch_message() -> Any:
    """A cleared proton ``Message`` of this thread (allocating one per message costs more than
    clearing one; encoding and decoding never await, so one per thread is enough)."""
    pm = getattr(_scratch, "message", None)
    if pm is None:
        pm = _scratch.message = Message()
    else:
        pm.clear()
    return pm


def _fill(pm: Any, message: AmqpMessage) -> None:
    """Copy ``message`` into the cleared proton message ``pm``, leaving defaults untouched
    (each proton setter is a C call, and most fields are unset on most messages)."""
    pm.inferred = message.body_kind is not BodyKind.VALUE
    pm.body = message.body
    if message.durable:
        pm.durable = True
    if message.priority != 4:
        pm.priority = message.priority
    if message.ttl is not None:
        pm.ttl = _wire_seconds(message.ttl)
    if message.first_acquirer:
        pm.first_acquirer = True
    if message.delivery_count:
        pm.delivery_count = message.delivery_count
    if message.message_id is not None:
        pm.id = message.message_id
    if message.user_id is not None:
        pm.user_id = message.user_id
    if message.to is not None:
        pm.address = message.to
    if message.subject is not None:
        pm.subject = message.subject
    if message.reply_to is not None:
        pm.reply_to = message.reply_to
    if message.correlation_id is not None:
        pm.correlation_id = message.correlation_id
    if message.content_type is not None:
        pm.content_type = symbol(message.content_type)
    if message.content_encoding is not None:
        pm.content_encoding = symbol(message.content_encoding)
    if message.absolute_expiry_time is not None:
        pm.expiry_time = _wire_seconds(message.absolute_expiry_time)
    if message.creation_time is not None:
        pm.creation_time = _wire_seconds(message.creation_time)
    if message.group_id is not None:
        pm.group_id = message.group_id
    if message.group_sequence is not None:
        pm.group_sequence = message.group_sequence
    if message.reply_to_group_id is not None:
        pm.reply_to_group_id = message.reply_to_group_id
    if message.message_annotations:
        pm.annotations = _convert.symbol_keys(message.message_annotations)
    if message.delivery_annotations:
        pm.instructions = _convert.symbol_keys(message.delivery_annotations)
    if message.application_properties:
        pm.properties = dict(message.application_properties)


_SECTION_DESCRIPTORS = frozenset(range(0x70, 0x79))  # header ... footer (AMQP 1.0 part 3.2)
_SMALL_ULONG = 0x53  # the encoding of a numeric descriptor below 256
_SYM8, _SYM32 = 0xA3, 0xB3  # the encodings of a symbolic one


def _split_sections(payload: bytes) -> list[tuple[bytes, Any]]:
    """Each top-level value of ``payload`` (its bytes) with its descriptor (None: none)."""
    data: Any = Data()
    chunks = []
    offset = 0
    while offset < len(payload):
        used = data.decode(payload[offset:] if offset else payload)
        if used <= 0:
            raise MessageFormatError(f"undecodable AMQP message at byte {offset}")
        chunks.append(payload[offset : offset + used])
        offset += used
    data.rewind()
    sections = []
    for chunk in chunks:
        data.next()
        descriptor = None
        if data.is_described():
            data.enter()
            data.next()
            descriptor = data.get_object()
            data.exit()
        sections.append((chunk, descriptor))
    return sections


def _numeric(section: bytes, code: int) -> bytes:
    """``section`` (a described value with a symbolic descriptor) with descriptor ``code``."""
    if section[1] == _SYM8:
        end = 3 + section[2]
    elif section[1] == _SYM32:
        end = 6 + int.from_bytes(section[2:6], "big")
    else:  # pragma: no cover - a symbol is encoded as sym8 or sym32
        raise MessageFormatError("undecodable AMQP message: a malformed section descriptor")
    return bytes((0x00, _SMALL_ULONG, code)) + section[end:]


def _check_sections(payload: bytes) -> bytes:
    """``payload``, checked to be a sequence of message sections and nothing else, with each
    symbolic section descriptor (``amqp:header:list`` ...) replaced by its numeric code.

    proton's ``Message.decode`` accepts garbage and returns an empty message, and misreads
    sections named by symbol (both forms are legal AMQP): so the structure is checked here and
    the symbols are rewritten, byte for byte otherwise.
    """
    parts = []
    for section, descriptor in _split_sections(payload):
        if descriptor is None:
            raise MessageFormatError("undecodable AMQP message: a section is not described")
        code = _convert.descriptor_code(descriptor)
        if code not in _SECTION_DESCRIPTORS:
            raise MessageFormatError(
                f"undecodable AMQP message: unknown section {descriptor!r:.60}"
            )
        parts.append(section if isinstance(descriptor, int) else _numeric(section, code))
    return b"".join(parts)


def _symbol_or_none(value: Any) -> str | None:
    # proton 0.40 reads an absent content-type/-encoding back as the symbol 'None'.
    return None if value is None or value == "None" else str(value)


def decode_message(payload: bytes) -> AmqpMessage:
    """The message in ``payload``.

    Raises:
        MessageFormatError: the bytes are not an AMQP message.
    """
    pm = _scratch_message()
    try:
        pm.decode(_check_sections(payload))
        # proton decodes a field's text only when it is read: invalid UTF-8 surfaces here.
        return _from_proton(pm)
    except MessageFormatError:
        raise
    except Exception as exc:
        raise MessageFormatError(f"undecodable AMQP message ({len(payload)} bytes): {exc}") from exc


def _from_proton(pm: Any) -> AmqpMessage:
    owned = _convert.owned
    body = owned(pm.body)
    if pm.inferred:
        kind = BodyKind.DATA if isinstance(body, bytes) else BodyKind.SEQUENCE
    else:
        kind = BodyKind.VALUE
    return AmqpMessage(
        body=body,
        body_kind=kind,
        durable=bool(pm.durable),
        priority=int(pm.priority),
        ttl=float(pm.ttl) if pm.ttl else None,
        first_acquirer=bool(pm.first_acquirer),
        delivery_count=int(pm.delivery_count),
        message_id=owned(pm.id),
        user_id=bytes(pm.user_id) if pm.user_id else None,
        to=pm.address,
        subject=pm.subject,
        reply_to=pm.reply_to,
        correlation_id=owned(pm.correlation_id),
        content_type=_symbol_or_none(pm.content_type),
        content_encoding=_symbol_or_none(pm.content_encoding),
        absolute_expiry_time=float(pm.expiry_time) if pm.expiry_time else None,
        creation_time=float(pm.creation_time) if pm.creation_time else None,
        group_id=pm.group_id,
        group_sequence=int(pm.group_sequence) if pm.group_sequence else None,
        reply_to_group_id=pm.reply_to_group_id,
        message_annotations=_convert.plain_keys(owned(pm.annotations)),
        delivery_annotations=_convert.plain_keys(owned(pm.instructions)),
        application_properties=owned(dict(pm.properties or {})),
    )


# Transaction coordinator bodies (AMQP 1.0 part 4) -----------------------------------------------

_DECLARE = 0x31
_DISCHARGE = 0x32


@dataclass(frozen=True, slots=True)
class Declare:
    """A request to begin a transaction."""


@dataclass(frozen=True, slots=True)
class Discharge:
    """A request to end transaction ``txn_id``: commit, or roll back when ``fail``."""

    txn_id: bytes
    fail: bool


CoordinatorRequest = Declare | Discharge


def _encode_control(descriptor: int, fields: list[Any]) -> bytes:
    pm: Any = Message()
    pm.body = Described(ulong(descriptor), fields)
    return bytes(pm.encode())


def encode_declare() -> bytes:
    """The message a client sends to the coordinator to declare a transaction."""
    return _encode_control(_DECLARE, [None])


def encode_discharge(txn_id: bytes, *, fail: bool) -> bytes:
    """The message that commits (``fail=False``) or rolls back (``fail=True``) ``txn_id``."""
    return _encode_control(_DISCHARGE, [txn_id, fail])


def decode_coordinator_request(payload: bytes) -> CoordinatorRequest:
    """What a client asked the coordinator (server role).

    Raises:
        MessageFormatError: the message is neither a declare nor a discharge.
    """
    body: Any = decode_message(payload).body
    if isinstance(body, Described):
        code = _convert.descriptor_code(body.descriptor)
        fields = list(body.value or [])
        if code == _DECLARE:
            return Declare()
        if code == _DISCHARGE and fields:
            return Discharge(bytes(fields[0]), bool(fields[1]) if len(fields) > 1 else False)
    raise MessageFormatError(f"not a coordinator request: {body!r}")
