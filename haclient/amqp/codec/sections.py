"""The sections of an AMQP 1.0 message (part 3, section 3.2): building them, and finding them.

How this works: a bare message is a run of described values, one per section, each named by a
descriptor (numeric, ``0x00 0x53 0x70``, or symbolic, ``amqp:header:list``). The builders here
return one section's bytes from already encoded fields, so a caller that knows its field types
(the JMS mapping) skips all type dispatch. ``split_sections`` finds where each section's value
starts and ends without decoding anything: the lazy decoder reads a section only when asked.

Invariant: ``split_sections`` accepts exactly a sequence of known message sections, at most one
of each kind except the body's data and amqp-sequence sections, which may repeat.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from haclient.amqp import _convert
from haclient.amqp.codec import formats as f
from haclient.amqp.codec.decode import decode_value, skip_value
from haclient.amqp.codec.encode import (
    NULL_BYTES,
    encode_binary,
    encode_list_of_encoded,
    encode_map,
    encode_string,
    encode_symbol_keyed_map,
    encode_uint,
    encode_value,
)
from haclient.jms_errors import MessageFormatError

__all__ = [
    "EMPTY_HEADER",
    "EMPTY_PROPERTIES",
    "Spans",
    "annotations_section",
    "application_properties_section",
    "body_section",
    "header_section",
    "properties_section",
    "section_head",
    "split_sections",
    "undecodable",
]


def section_head(code: int) -> bytes:
    """The bytes that open the section of numeric descriptor ``code``."""
    return bytes((f.DESCRIBED, f.SMALLULONG, code))


_HEADER_HEAD: Final = section_head(f.HEADER)
_PROPERTIES_HEAD: Final = section_head(f.PROPERTIES)
_APP_PROPERTIES_HEAD: Final = section_head(f.APPLICATION_PROPERTIES)
_DATA_HEAD: Final = section_head(f.DATA)
_SEQUENCE_HEAD: Final = section_head(f.AMQP_SEQUENCE)
_VALUE_HEAD: Final = section_head(f.AMQP_VALUE)

EMPTY_HEADER: Final = _HEADER_HEAD + b"\x45"
"""A header with every field at its default (proton always sends one; so do we)."""
EMPTY_PROPERTIES: Final = _PROPERTIES_HEAD + b"\x45"
"""A properties section with no field set."""


def _trimmed_list(fields: list[bytes]) -> bytes:
    """A list of encoded fields without its trailing nulls (the specification lets a composite
    omit trailing fields that are null)."""
    end = len(fields)
    while end and fields[end - 1] == NULL_BYTES:
        end -= 1
    return encode_list_of_encoded(fields[:end])


def header_section(
    *, durable: bool, priority: int, ttl_ms: int | None, first_acquirer: bool, delivery_count: int
) -> bytes:
    """The header section; fields at their default go as null (omitted when trailing)."""
    if not (durable or priority != 4 or ttl_ms is not None or first_acquirer or delivery_count):
        return EMPTY_HEADER
    fields = [
        b"\x41" if durable else NULL_BYTES,
        bytes((f.UBYTE, priority)) if priority != 4 else NULL_BYTES,
        encode_uint(ttl_ms) if ttl_ms is not None else NULL_BYTES,
        b"\x41" if first_acquirer else NULL_BYTES,
        encode_uint(delivery_count) if delivery_count else NULL_BYTES,
    ]
    return _HEADER_HEAD + _trimmed_list(fields)


def annotations_section(code: int, annotations: Mapping[Any, Any]) -> bytes:
    """A delivery- or message-annotations section (``str`` keys go as symbols)."""
    return section_head(code) + encode_symbol_keyed_map(annotations)


def properties_section(fields: list[bytes]) -> bytes:
    """The properties section from its thirteen encoded fields (null where unset)."""
    return _PROPERTIES_HEAD + _trimmed_list(fields)


def application_properties_section(properties: Mapping[str, Any]) -> bytes:
    """The application-properties section (string keys).

    Raises:
        MessageFormatError: a key is not a ``str``, or a value has no AMQP encoding.
    """
    for key in properties:
        if not isinstance(key, str):
            raise MessageFormatError(f"application property names are str, not {key!r:.40}")
    return _APP_PROPERTIES_HEAD + encode_map(properties)


def body_section(body: Any, *, data: bool = False, sequence: bool = False) -> bytes:
    """The body: a data section (``data``), an amqp-sequence (``sequence``) or an amqp-value."""
    if data:
        return _DATA_HEAD + encode_binary(body)
    if sequence:
        return _SEQUENCE_HEAD + encode_list_of_encoded([encode_value(v) for v in body])
    if type(body) is str:  # a text message: no type dispatch
        return _VALUE_HEAD + encode_string(body)
    return _VALUE_HEAD + encode_value(body)


# Finding the sections of a received message ----------------------------------------------------

Spans = dict[int, list[tuple[int, int]]]
"""Section code -> the (start, end) of each of its values in the payload."""

_REPEATABLE: Final = frozenset({f.DATA, f.AMQP_SEQUENCE})


def split_sections(payload: bytes) -> Spans:
    """Where each section's value lies in ``payload``; nothing is decoded but the descriptors.

    Raises:
        MessageFormatError: the payload is not a sequence of message sections (the message
            names what is wrong).
    """
    try:
        return _split(payload)
    except MessageFormatError as exc:
        raise undecodable(exc) from exc


def undecodable(exc: MessageFormatError) -> MessageFormatError:
    """``exc`` as an error about a whole message (its text says so once)."""
    text = str(exc)
    if text.startswith(_UNDECODABLE):
        return exc
    return MessageFormatError(f"{_UNDECODABLE}: {text}")


_UNDECODABLE: Final = "undecodable AMQP message"


def _split(payload: bytes) -> Spans:
    spans: Spans = {}
    pos, size = 0, len(payload)
    while pos < size:
        if payload[pos] != f.DESCRIBED:
            raise MessageFormatError(
                f"undecodable AMQP message: byte {pos} starts no section (0x{payload[pos]:02x})"
            )
        code, start = _section_code(payload, pos + 1)
        end = skip_value(payload, start)
        if code in spans and code not in _REPEATABLE:
            raise MessageFormatError(f"undecodable AMQP message: two sections 0x{code:02x}")
        spans.setdefault(code, []).append((start, end))
        pos = end
    return spans


def _section_code(payload: bytes, pos: int) -> tuple[int, int]:
    """The section code of the descriptor at ``pos`` and where the section's value starts."""
    if payload[pos : pos + 1] == b"\x53" and pos + 1 < len(payload):
        code, start = payload[pos + 1], pos + 2  # the common case: smallulong
    else:
        descriptor, start = decode_value(payload, pos)
        code = _convert.descriptor_code(descriptor)  # type: ignore[assignment]
        if code is None:
            raise MessageFormatError(
                f"undecodable AMQP message: unknown section descriptor {descriptor!r:.60}"
            )
    if not f.HEADER <= code <= f.FOOTER:
        raise MessageFormatError(f"undecodable AMQP message: unknown section 0x{code:02x}")
    return code, start
