"""Encoding Python values as AMQP 1.0 bytes (part 1 of the specification).

How this works: ``encode_value`` looks the value's exact type up in a table of small functions,
each returning the bytes of one encoding, always the smallest the specification allows for the
value (``smallulong``/``ulong0``, ``str8``/``str32``, ``list0``/``list8``/``list32`` ...). The
Python types are proton's: ``symbol``, ``ulong``, ``ubyte``, ``int32``, ``float32``, ``timestamp``
... as re-exported by ``haclient.amqp.types``; a plain ``int`` is a long, a ``float`` a double,
``str`` a string, ``bytes`` a binary, ``dict`` a map, ``list`` a list, as proton maps them, so the
two codecs agree on every value.

Invariant: every function here returns complete, self-delimiting encodings; none keeps state.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import proton

from haclient.amqp.codec import formats as f
from haclient.jms_errors import MessageFormatError

__all__ = [
    "NULL_BYTES",
    "encode_binary",
    "encode_list_of_encoded",
    "encode_map",
    "encode_string",
    "encode_symbol",
    "encode_symbol_keyed_map",
    "encode_timestamp",
    "encode_uint",
    "encode_ulong",
    "encode_value",
]

NULL_BYTES: Final = b"\x40"
_TRUE: Final = b"\x41"
_FALSE: Final = b"\x42"

_B = struct.Struct(">b").pack
_BB = struct.Struct(">BB").pack
_H = struct.Struct(">H").pack
_h = struct.Struct(">h").pack
_I = struct.Struct(">I").pack
_i = struct.Struct(">i").pack
_Q = struct.Struct(">Q").pack
_q = struct.Struct(">q").pack
_f = struct.Struct(">f").pack
_d = struct.Struct(">d").pack
_BI = struct.Struct(">BI").pack
_BII = struct.Struct(">BII").pack


def encode_value(value: Any) -> bytes:
    """The AMQP encoding of ``value``.

    Raises:
        MessageFormatError: the value (or one inside it) has no AMQP encoding or is out of
            the range of its type.
    """
    return _guarded(_encode, value)


def _guarded(encode: Callable[[Any], bytes], value: Any) -> bytes:
    """``encode(value)``, any failure of a value to fit its type as ``MessageFormatError``."""
    try:
        return encode(value)
    except MessageFormatError:
        raise
    except (struct.error, OverflowError, ValueError, TypeError, AttributeError) as exc:
        raise MessageFormatError(f"{value!r:.60} cannot be encoded as AMQP: {exc}") from exc
    except RecursionError as exc:
        raise MessageFormatError("a value nested too deeply to encode as AMQP") from exc


def _encode(value: Any) -> bytes:
    encoder = _ENCODERS.get(type(value))
    if encoder is None:
        encoder = _encoder_by_subclass(value)
    return encoder(value)


def _encoder_by_subclass(value: Any) -> Callable[[Any], bytes]:
    """The encoder of the nearest class of ``value`` that has one (an ``IntEnum`` is a long,
    a subclass of ``symbol`` a symbol)."""
    for cls in type(value).__mro__[1:]:
        encoder = _ENCODERS.get(cls)
        if encoder is not None:
            return encoder
    raise MessageFormatError(f"no AMQP encoding for a {type(value).__name__}: {value!r:.60}")


# Scalars ---------------------------------------------------------------------------------------


def _bool(value: bool) -> bytes:
    return _TRUE if value else _FALSE


def _unsigned(
    zero: int, small: int, full: int, pack: Callable[[int], bytes], doc: str
) -> Callable[[int], bytes]:
    """The encoder of ``uint`` or ``ulong``: the ``zero`` code alone for 0, the one-byte
    ``small`` form below 256, else the ``full`` code then ``pack(value)``."""
    zero_bytes = bytes((zero,))
    full_prefix = bytes((full,))

    def encode(value: int) -> bytes:
        if value == 0:
            return zero_bytes
        if 0 < value < 256:
            return _BB(small, value)
        return full_prefix + pack(value)

    encode.__doc__ = doc
    return encode


encode_ulong: Final = _unsigned(
    f.ULONG0, f.SMALLULONG, f.ULONG, _Q, "A ulong: ``ulong0``, ``smallulong`` or the full 8 bytes."
)
encode_uint: Final = _unsigned(
    f.UINT0, f.SMALLUINT, f.UINT, _I, "A uint: ``uint0``, ``smalluint`` or the full 4 bytes."
)


def _long(value: int) -> bytes:
    if -128 <= value <= 127:
        return b"\x55" + _B(value)
    return b"\x81" + _q(value)


def _int(value: int) -> bytes:
    if -128 <= value <= 127:
        return b"\x54" + _B(value)
    return b"\x71" + _i(value)


def _ubyte(value: int) -> bytes:
    return _BB(f.UBYTE, value)


def _fixed(code: int, pack: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    """The encoder of a fixed-width type that has one encoding: its format code, then
    ``pack(value)``."""
    prefix = bytes((code,))

    def encode(value: Any) -> bytes:
        return prefix + pack(value)

    return encode


_byte = _fixed(f.BYTE, _B)
_ushort = _fixed(f.USHORT, _H)
_short = _fixed(f.SHORT, _h)
_float = _fixed(f.FLOAT, _f)
_double = _fixed(f.DOUBLE, _d)
_decimal32 = _fixed(f.DECIMAL32, _I)
_decimal64 = _fixed(f.DECIMAL64, _Q)


def encode_timestamp(millis: int) -> bytes:
    """A timestamp: milliseconds since the epoch."""
    return b"\x83" + _q(millis)


def _char(value: str) -> bytes:
    if len(value) != 1:
        raise MessageFormatError(f"a char is one character, not {value!r:.20}")
    return b"\x73" + _I(ord(value))


def _decimal128(value: bytes) -> bytes:
    if len(value) != 16:
        raise MessageFormatError("a decimal128 is 16 bytes")
    return b"\x94" + bytes(value)


def _uuid(value: uuid.UUID) -> bytes:
    return b"\x98" + value.bytes


# Variable width --------------------------------------------------------------------------------


def _variable(small: int, large: int, data: bytes) -> bytes:
    size = len(data)
    if size < 256:
        return _BB(small, size) + data
    return _BI(large, size) + data


def encode_binary(value: bytes | bytearray | memoryview) -> bytes:
    """A binary: ``vbin8`` or ``vbin32``."""
    return _variable(f.VBIN8, f.VBIN32, bytes(value))


def encode_string(value: str) -> bytes:
    """A string (UTF-8): ``str8`` or ``str32``.

    Raises:
        MessageFormatError: the text has no UTF-8 form (a lone surrogate).
    """
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MessageFormatError(f"a string must be valid Unicode, not {value!r:.60}") from exc
    return _variable(f.STR8, f.STR32, data)


def encode_symbol(value: str) -> bytes:
    """A symbol: ``sym8`` or ``sym32`` (ASCII, as the specification requires).

    Raises:
        MessageFormatError: the name is not ASCII.
    """
    try:
        data = value.encode("ascii")
    except UnicodeEncodeError as exc:
        raise MessageFormatError(f"a symbol is ASCII, not {value!r:.60}") from exc
    return _variable(f.SYM8, f.SYM32, data)


# Compound --------------------------------------------------------------------------------------


def _compound(small: int, large: int, count: int, body: bytes) -> bytes:
    """A list or map of ``count`` encoded elements: the 8-bit form when size and count fit."""
    size = len(body) + 1  # the size counts the count byte(s) too
    if size < 256 and count < 256:
        return _BB(small, size) + bytes((count,)) + body
    return _BII(large, size + 3, count) + body


def encode_list_of_encoded(items: list[bytes]) -> bytes:
    """A list of already encoded elements: ``list0``, ``list8`` or ``list32``."""
    if not items:
        return b"\x45"
    return _compound(f.LIST8, f.LIST32, len(items), b"".join(items))


def _list(value: Iterable[Any]) -> bytes:
    return encode_list_of_encoded([_encode(v) for v in value])


def encode_map(value: Mapping[Any, Any]) -> bytes:
    """A map, each key and value encoded by its own type: ``map8`` or ``map32``.

    Raises:
        MessageFormatError: a key or value has no AMQP encoding.
    """
    return _guarded(_map, value)


def _map(value: Mapping[Any, Any]) -> bytes:
    parts = []
    for key, item in value.items():
        parts.append(_encode(key))
        parts.append(_encode(item))
    return _compound(f.MAP8, f.MAP32, len(parts), b"".join(parts))


def encode_symbol_keyed_map(value: Mapping[Any, Any]) -> bytes:
    """A map whose ``str`` keys go as symbols (annotations; a ``ulong`` key stays a ulong).

    Raises:
        MessageFormatError: a key is not ASCII, or a value has no AMQP encoding.
    """
    return _guarded(_symbol_keyed_map, value)


def _symbol_keyed_map(value: Mapping[Any, Any]) -> bytes:
    parts = []
    for key, item in value.items():
        parts.append(encode_ulong(key) if isinstance(key, proton.ulong) else encode_symbol(key))
        parts.append(_encode(item))
    return _compound(f.MAP8, f.MAP32, len(parts), b"".join(parts))


def _described(value: proton.Described) -> bytes:
    return b"\x00" + _encode(value.descriptor) + _encode(value.value)


# Arrays: one constructor for all elements, so every element takes the same (wide) encoding.


def _variable_element(small: int, large: int, convert: Callable[[Any], bytes]) -> Any:
    def element_encoder(elements: list[Any]) -> tuple[int, list[bytes]]:
        datas = [convert(e) for e in elements]
        if all(len(d) < 256 for d in datas):
            return small, [bytes((len(d),)) + d for d in datas]
        return large, [_I(len(d)) + d for d in datas]

    return element_encoder


def _fixed_element(code: int, pack: Callable[[Any], bytes]) -> Any:
    def element_encoder(elements: list[Any]) -> tuple[int, list[bytes]]:
        return code, [pack(e) for e in elements]

    return element_encoder


def _widened(encoded: bytes) -> bytes:
    """A list, map or array encoding in its 32-bit form, without its constructor byte."""
    code = encoded[0]
    if code == f.LIST0:
        return _I(4) + _I(0)
    if code in (f.LIST8, f.MAP8, f.ARRAY8):
        return _I(encoded[1] + 3) + _I(encoded[2]) + encoded[3:]
    return encoded[1:]


def _compound_element(code: int, encode: Callable[[Any], bytes]) -> Any:
    """Lists, maps and arrays inside an array: the 32-bit form of each."""

    def element_encoder(elements: list[Any]) -> tuple[int, list[bytes]]:
        return code, [_widened(encode(e)) for e in elements]

    return element_encoder


_ARRAY_ELEMENTS: Final[dict[int, Any]] = {
    proton.Data.NULL: _fixed_element(f.NULL, lambda _: b""),
    proton.Data.BOOL: _fixed_element(f.BOOLEAN, lambda v: b"\x01" if v else b"\x00"),
    proton.Data.UBYTE: _fixed_element(f.UBYTE, lambda v: bytes((v,))),
    proton.Data.BYTE: _fixed_element(f.BYTE, _B),
    proton.Data.USHORT: _fixed_element(f.USHORT, _H),
    proton.Data.SHORT: _fixed_element(f.SHORT, _h),
    proton.Data.UINT: _fixed_element(f.UINT, _I),
    proton.Data.INT: _fixed_element(f.INT, _i),
    proton.Data.CHAR: _fixed_element(f.CHAR, lambda v: _I(ord(v))),
    proton.Data.ULONG: _fixed_element(f.ULONG, _Q),
    proton.Data.LONG: _fixed_element(f.LONG, _q),
    proton.Data.TIMESTAMP: _fixed_element(f.TIMESTAMP, _q),
    proton.Data.FLOAT: _fixed_element(f.FLOAT, _f),
    proton.Data.DOUBLE: _fixed_element(f.DOUBLE, _d),
    proton.Data.DECIMAL32: _fixed_element(f.DECIMAL32, _I),
    proton.Data.DECIMAL64: _fixed_element(f.DECIMAL64, _Q),
    proton.Data.DECIMAL128: _fixed_element(f.DECIMAL128, bytes),
    proton.Data.UUID: _fixed_element(f.UUID, lambda v: v.bytes),
    proton.Data.BINARY: _variable_element(f.VBIN8, f.VBIN32, bytes),
    proton.Data.STRING: _variable_element(f.STR8, f.STR32, lambda v: v.encode("utf-8")),
    proton.Data.SYMBOL: _variable_element(f.SYM8, f.SYM32, lambda v: v.encode("ascii")),
    proton.Data.LIST: _compound_element(f.LIST32, lambda v: _list(v)),
    proton.Data.MAP: _compound_element(f.MAP32, lambda v: _map(v)),
    proton.Data.ARRAY: _compound_element(f.ARRAY32, lambda v: _array(v)),
}


def _array(value: proton.Array) -> bytes:
    element_encoder = _ARRAY_ELEMENTS.get(value.type)
    if element_encoder is None:
        raise MessageFormatError(f"no AMQP array of type {value.type!r}")
    elements = list(value.elements)
    code, bodies = element_encoder(elements)
    constructor = bytes((code,))
    if value.descriptor is not proton.UNDESCRIBED and value.descriptor is not None:
        constructor = b"\x00" + _encode(value.descriptor) + constructor
    body = constructor + b"".join(bodies)
    size = len(body) + 1
    if size < 256 and len(elements) < 256:
        return _BB(f.ARRAY8, size) + bytes((len(elements),)) + body
    return _BII(f.ARRAY32, size + 3, len(elements)) + body


_ENCODERS: Final[dict[type, Callable[[Any], bytes]]] = {
    type(None): lambda _: NULL_BYTES,
    bool: _bool,
    str: encode_string,
    int: _long,
    float: _double,
    bytes: encode_binary,
    bytearray: encode_binary,
    memoryview: encode_binary,
    dict: _map,
    list: _list,
    proton.symbol: encode_symbol,
    proton.ulong: encode_ulong,
    proton.uint: encode_uint,
    proton.ushort: _ushort,
    proton.ubyte: _ubyte,
    proton.byte: _byte,
    proton.short: _short,
    proton.int32: _int,
    proton.float32: _float,
    proton.timestamp: encode_timestamp,
    proton.char: _char,
    proton.decimal32: _decimal32,
    proton.decimal64: _decimal64,
    proton.decimal128: _decimal128,
    uuid.UUID: _uuid,
    proton.Described: _described,
    proton.Array: _array,
}
