"""Just enough of the AMQP 1.0 type encoding to read and rewrite a message's header.

How this works: the broker keeps every message as the bytes it arrived in and never decodes the
body. It reads the header section (durable, priority, ttl, first-acquirer, delivery-count) once,
remembers where the header ends, and on a redelivery writes a fresh header in front of the
untouched rest (``MessageHeader.encode() + payload[body_offset:]``). ``read_routing`` finds the
properties' ``to`` field and the ``x-opt-jms-dest`` annotation, which only the anonymous relay
needs. ``read_timing`` finds what decides *when* a message may be delivered: the
``x-opt-delivery-time`` / ``x-opt-delivery-delay`` message annotations and the properties'
``absolute-expiry-time``; ``add_delivery_time`` writes an absolute ``x-opt-delivery-time`` into
the message annotations and ``set_absolute_expiry`` the properties' ``absolute-expiry-time`` (so
that a relative delay or ttl of a stored message still counts from its arrival after a restart).

Only ``haclient.amqp`` may import proton, so this is a small hand-written reader of the
primitive encodings (AMQP 1.0 part 1, section 1.6), independent of proton.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "DELIVERY_DELAY_ANNOTATION",
    "DELIVERY_TIME_ANNOTATION",
    "JMS_DEST_ANNOTATION",
    "MessageHeader",
    "MessageTiming",
    "WireError",
    "add_delivery_time",
    "parse_header",
    "read_routing",
    "read_timing",
    "set_absolute_expiry",
]

JMS_DEST_ANNOTATION = "x-opt-jms-dest"
DELIVERY_TIME_ANNOTATION = "x-opt-delivery-time"
DELIVERY_DELAY_ANNOTATION = "x-opt-delivery-delay"
_HEADER = 0x70
_DELIVERY_ANNOTATIONS = 0x71
_MESSAGE_ANNOTATIONS = 0x72
_PROPERTIES = 0x73
_SYMBOL_CODES = {
    b"amqp:header:list": _HEADER,
    b"amqp:delivery-annotations:map": _DELIVERY_ANNOTATIONS,
    b"amqp:message-annotations:map": _MESSAGE_ANNOTATIONS,
    b"amqp:properties:list": _PROPERTIES,
}
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_U64 = struct.Struct(">Q")
_I32 = struct.Struct(">i")
_ABSOLUTE_EXPIRY_FIELD = 8  # index in the properties list
# Width of the fixed-size encodings by the constructor's high nibble (0x4_ .. 0x9_).
_FIXED_WIDTH = {0x4: 0, 0x5: 1, 0x6: 2, 0x7: 4, 0x8: 8, 0x9: 16}


class WireError(ValueError):
    """The bytes are not a well-formed AMQP encoding."""


@dataclass(slots=True)
class MessageHeader:
    """The fields of a message's header section (AMQP defaults when absent)."""

    durable: bool = False
    priority: int = 4
    ttl: int | None = None
    first_acquirer: bool = False
    delivery_count: int = 0

    def encode(self) -> bytes:
        """The header section with these values (descriptor included)."""
        out = bytearray(b"\x41" if self.durable else b"\x42")
        out += bytes((0x50, self.priority & 0xFF))
        out += b"\x40" if self.ttl is None else b"\x70" + _U32.pack(self.ttl & 0xFFFFFFFF)
        out += b"\x41" if self.first_acquirer else b"\x42"
        count = self.delivery_count & 0xFFFFFFFF
        out += bytes((0x52, count)) if count < 256 else b"\x70" + _U32.pack(count)
        return b"\x00\x53\x70\xc0" + bytes((len(out) + 1, 5)) + bytes(out)


def _skip(buf: bytes, pos: int) -> int:
    """The position after the encoded value that starts at ``pos``."""
    code = buf[pos]
    if code == 0x00:  # described: descriptor, then value
        return _skip(buf, _skip(buf, pos + 1))
    high = code >> 4
    width = _FIXED_WIDTH.get(high)
    if width is not None:
        return pos + 1 + width
    if high in (0xA, 0xC, 0xE):
        return pos + 2 + buf[pos + 1]
    if high in (0xB, 0xD, 0xF):
        size: int = _U32.unpack_from(buf, pos + 1)[0]
        return pos + 5 + size
    raise WireError(f"unknown constructor {code:#04x} at offset {pos}")


def _read_scalar(buf: bytes, pos: int) -> tuple[object, int]:
    """Read a null, boolean, unsigned integer, string, symbol or binary at ``pos``."""
    code = buf[pos]
    if code == 0x40:
        return None, pos + 1
    if code in (0x41, 0x42):
        return code == 0x41, pos + 1
    if code == 0x56:
        return buf[pos + 1] != 0, pos + 2
    if code in (0x43, 0x44):
        return 0, pos + 1
    if code in (0x50, 0x52, 0x53):
        return buf[pos + 1], pos + 2
    if code in (0x51, 0x54):  # byte, smallint (signed)
        return int.from_bytes(buf[pos + 1 : pos + 2], "big", signed=True), pos + 2
    if code == 0x70:
        return _U32.unpack_from(buf, pos + 1)[0], pos + 5
    if code in (0xA0, 0xA1, 0xA3):
        size = buf[pos + 1]
        raw = bytes(buf[pos + 2 : pos + 2 + size])
        return (raw if code == 0xA0 else raw.decode("utf-8", "replace")), pos + 2 + size
    if code in (0xB0, 0xB1, 0xB3):
        size = _U32.unpack_from(buf, pos + 1)[0]
        raw = bytes(buf[pos + 5 : pos + 5 + size])
        return (raw if code == 0xB0 else raw.decode("utf-8", "replace")), pos + 5 + size
    return None, _skip(buf, pos)


def _list_fields(buf: bytes, pos: int) -> tuple[int, int, int]:
    """``(first field position, field count, end position)`` of the list at ``pos``."""
    code = buf[pos]
    if code == 0x45:
        return pos + 1, 0, pos + 1
    if code == 0xC0:
        return pos + 3, buf[pos + 2], pos + 2 + buf[pos + 1]
    if code == 0xD0:
        size, count = struct.unpack_from(">II", buf, pos + 1)
        return pos + 9, count, pos + 5 + size
    raise WireError(f"expected a list at offset {pos}, found {code:#04x}")


def _section_code(buf: bytes, pos: int) -> tuple[int | None, int]:
    """The descriptor code of the section at ``pos`` and where its value starts."""
    if buf[pos] != 0x00:
        raise WireError(f"expected a described section at offset {pos}")
    descriptor, value_pos = _read_scalar(buf, pos + 1)
    if buf[pos + 1] == 0x80:  # ulong descriptor
        descriptor = struct.unpack_from(">Q", buf, pos + 2)[0]
        value_pos = pos + 10
    if isinstance(descriptor, str):
        return _SYMBOL_CODES.get(descriptor.encode()), value_pos
    return (descriptor if isinstance(descriptor, int) else None), value_pos


def parse_header(payload: bytes) -> tuple[MessageHeader, int]:
    """The header of an encoded message and the offset where the sections after it start.

    A message without a header section gets the defaults and offset 0.

    Raises:
        WireError: the bytes do not start with a well-formed section.
    """
    header = MessageHeader()
    if not payload:
        return header, 0
    try:
        code, pos = _section_code(payload, 0)
        if code != _HEADER:
            return header, 0
        pos, count, end = _list_fields(payload, pos)
        values: list[object] = []
        for _ in range(min(count, 5)):
            value, pos = _read_scalar(payload, pos)
            values.append(value)
    except (IndexError, struct.error) as exc:
        raise WireError(f"truncated message header: {exc}") from exc
    values += [None] * (5 - len(values))
    durable, priority, ttl, first, count_value = values
    header.durable = bool(durable)
    header.priority = priority if isinstance(priority, int) else 4
    header.ttl = ttl if isinstance(ttl, int) and ttl > 0 else None
    header.first_acquirer = bool(first)
    header.delivery_count = count_value if isinstance(count_value, int) else 0
    return header, end


def _jms_destination_type(buf: bytes, pos: int) -> int | None:
    """The ``x-opt-jms-dest`` message annotation in the map at ``pos``, if present."""
    code = buf[pos]
    if code == 0xC1:
        count, pos = buf[pos + 2], pos + 3
    elif code == 0xD1:
        count, pos = _U32.unpack_from(buf, pos + 5)[0], pos + 9
    else:
        return None
    for _ in range(count // 2):
        key, pos = _read_scalar(buf, pos)
        if key == JMS_DEST_ANNOTATION:
            value, _ = _read_scalar(buf, pos)
            return value if isinstance(value, int) else None
        pos = _skip(buf, pos)
    return None


def read_routing(payload: bytes, offset: int = 0) -> tuple[str | None, int | None]:
    """The properties' ``to`` address and the ``x-opt-jms-dest`` annotation (Qpid JMS: 0 queue,
    1 topic, 2 temporary queue, 3 temporary topic), searching from ``offset`` (a section start).

    Raises:
        WireError: the sections are not well formed.
    """
    pos = offset
    jms_dest: int | None = None
    try:
        while pos < len(payload):
            code, value_pos = _section_code(payload, pos)
            if code == _MESSAGE_ANNOTATIONS:
                jms_dest = _jms_destination_type(payload, value_pos)
            if code in (_HEADER, _DELIVERY_ANNOTATIONS, _MESSAGE_ANNOTATIONS):
                pos = _skip(payload, value_pos)
                continue
            if code != _PROPERTIES:
                return None, jms_dest
            field_pos, count, _end = _list_fields(payload, value_pos)
            if count < 3:
                return None, jms_dest
            field_pos = _skip(payload, _skip(payload, field_pos))  # message-id, user-id
            to, _ = _read_scalar(payload, field_pos)
            return (to if isinstance(to, str) else None), jms_dest
    except (IndexError, struct.error) as exc:
        raise WireError(f"truncated message sections: {exc}") from exc
    return None, jms_dest


def _read_int(buf: bytes, pos: int) -> int | None:
    """An integer of any AMQP integral or timestamp encoding at ``pos`` (None otherwise)."""
    code = buf[pos]
    if code in (0x81, 0x83):  # long, timestamp
        value: int = _I64.unpack_from(buf, pos + 1)[0]
        return value
    if code == 0x80:
        value = _U64.unpack_from(buf, pos + 1)[0]
        return value
    if code == 0x71:
        value = _I32.unpack_from(buf, pos + 1)[0]
        return value
    if code == 0x55:  # smalllong
        return int.from_bytes(buf[pos + 1 : pos + 2], "big", signed=True)
    value_or_other, _ = _read_scalar(buf, pos)  # ubyte, smalluint, smallulong, uint, int, ...
    if isinstance(value_or_other, int) and not isinstance(value_or_other, bool):
        return value_or_other
    return None


def _map_entries(buf: bytes, pos: int) -> tuple[int, int, int]:
    """``(first entry position, entry count (keys + values), end position)`` of a map."""
    code = buf[pos]
    if code == 0xC1:
        return pos + 3, buf[pos + 2], pos + 2 + buf[pos + 1]
    if code == 0xD1:
        size, count = struct.unpack_from(">II", buf, pos + 1)
        return pos + 9, count, pos + 5 + size
    raise WireError(f"expected a map at offset {pos}, found {code:#04x}")


@dataclass(slots=True)
class MessageTiming:
    """When a message may be delivered and until when (milliseconds since the epoch; None: not
    set). ``delivery_delay`` is relative (milliseconds after arrival at the broker)."""

    delivery_time: int | None = None
    delivery_delay: int | None = None
    absolute_expiry: int | None = None


def read_timing(payload: bytes, offset: int = 0) -> MessageTiming | None:
    """The delivery-time and delivery-delay annotations and the absolute-expiry-time property of
    a message, searching from ``offset`` (the section after the header); None when it has none.

    Raises:
        WireError: the sections are not well formed.
    """
    pos = offset
    timing: MessageTiming | None = None
    try:
        while pos < len(payload):
            code, value_pos = _section_code(payload, pos)
            if code == _MESSAGE_ANNOTATIONS:
                entry, count, end = _map_entries(payload, value_pos)
                for _ in range(count // 2):
                    key, entry = _read_scalar(payload, entry)
                    if key in (DELIVERY_TIME_ANNOTATION, DELIVERY_DELAY_ANNOTATION):
                        value = _read_int(payload, entry)
                        if value is not None:
                            if timing is None:
                                timing = MessageTiming()
                            if key == DELIVERY_TIME_ANNOTATION:
                                timing.delivery_time = value
                            else:
                                timing.delivery_delay = value
                    entry = _skip(payload, entry)
                pos = end
                continue
            if code in (_HEADER, _DELIVERY_ANNOTATIONS):
                pos = _skip(payload, value_pos)
                continue
            if code == _PROPERTIES:
                field_pos, count, _end = _list_fields(payload, value_pos)
                if count > _ABSOLUTE_EXPIRY_FIELD:
                    for _ in range(_ABSOLUTE_EXPIRY_FIELD):
                        field_pos = _skip(payload, field_pos)
                    expiry = _read_int(payload, field_pos)
                    if expiry is not None:
                        if timing is None:
                            timing = MessageTiming()
                        timing.absolute_expiry = expiry
            return timing
    except (IndexError, struct.error) as exc:
        raise WireError(f"truncated message sections: {exc}") from exc
    return timing


def _symbol(name: str) -> bytes:
    raw = name.encode()
    return bytes((0xA3, len(raw))) + raw


_DELIVERY_TIME_KEY = _symbol(DELIVERY_TIME_ANNOTATION)
_ANNOTATIONS_DESCRIPTOR = b"\x00\x53\x72"


def add_delivery_time(payload: bytes, offset: int, when: int) -> bytes:
    """``payload`` with an ``x-opt-delivery-time`` message annotation of ``when`` (ms since the
    epoch) added; the sections before ``offset`` (the header) are kept as they are.

    A message without message annotations gets a new section after its header (and delivery
    annotations). Other annotations and sections are copied byte for byte.

    Raises:
        WireError: the sections are not well formed.
    """
    entry = _DELIVERY_TIME_KEY + b"\x83" + _I64.pack(when)
    pos = offset
    try:
        while pos < len(payload):
            code, value_pos = _section_code(payload, pos)
            if code in (_HEADER, _DELIVERY_ANNOTATIONS):
                pos = _skip(payload, value_pos)
                continue
            if code == _MESSAGE_ANNOTATIONS:
                first, count, end = _map_entries(payload, value_pos)
                entries = payload[first:end] + entry
                new_map = b"\xd1" + struct.pack(">II", len(entries) + 4, count + 2) + entries
                return payload[:value_pos] + new_map + payload[end:]
            break
    except (IndexError, struct.error) as exc:
        raise WireError(f"truncated message sections: {exc}") from exc
    section = _ANNOTATIONS_DESCRIPTOR + b"\xc1" + bytes((len(entry) + 1, 2)) + entry
    return payload[:pos] + section + payload[pos:]


def _list_of(fields: list[bytes]) -> bytes:
    body = b"".join(fields)
    return b"\xd0" + struct.pack(">II", len(body) + 4, len(fields)) + body


def set_absolute_expiry(payload: bytes, offset: int, when: int) -> bytes:
    """``payload`` with its properties' ``absolute-expiry-time`` set to ``when`` (ms since the
    epoch); a message without properties gets a properties section. Every other field and
    section is copied byte for byte.

    Raises:
        WireError: the sections are not well formed.
    """
    expiry = b"\x83" + _I64.pack(when)
    pos = offset
    try:
        while pos < len(payload):
            code, value_pos = _section_code(payload, pos)
            if code in (_HEADER, _DELIVERY_ANNOTATIONS, _MESSAGE_ANNOTATIONS):
                pos = _skip(payload, value_pos)
                continue
            if code == _PROPERTIES:
                field_pos, count, end = _list_fields(payload, value_pos)
                fields = []
                for _ in range(count):
                    after = _skip(payload, field_pos)
                    fields.append(payload[field_pos:after])
                    field_pos = after
                fields += [b"\x40"] * (_ABSOLUTE_EXPIRY_FIELD + 1 - len(fields))
                fields[_ABSOLUTE_EXPIRY_FIELD] = expiry
                return payload[:value_pos] + _list_of(fields) + payload[end:]
            break
    except (IndexError, struct.error) as exc:
        raise WireError(f"truncated message sections: {exc}") from exc
    fields = [b"\x40"] * _ABSOLUTE_EXPIRY_FIELD + [expiry]
    return payload[:pos] + b"\x00\x53\x73" + _list_of(fields) + payload[pos:]
