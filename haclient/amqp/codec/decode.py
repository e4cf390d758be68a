"""Decoding AMQP 1.0 bytes into Python values (part 1 of the specification).

How this works: ``read_value(buf, pos)`` looks the constructor byte at ``pos`` up in a table of
256 readers; each reads one encoding and returns ``(value, position after it)``. Values come out
as proton's types (``symbol``, ``ulong``, ``int32``, ``Described``, ``Array`` ...), exactly as
proton's own decoder returns them, so either codec can stand in for the other. ``skip_value``
finds where a value ends without decoding it (for lazy sections).

Invariants: every reader checks what it reads against the bytes there are, and every loop is
bounded by the bytes left, so malformed input raises ``MessageFormatError``, never another
exception, and never loops for long. Binaries come out as ``bytes`` of their own, never views.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any, Final

import proton

from haclient.amqp.codec import formats as f
from haclient.jms_errors import MessageFormatError

__all__ = ["decode_value", "read_value", "skip_value"]

Reader = Callable[[bytes, int], tuple[Any, int]]

_b = struct.Struct(">b").unpack_from
_H = struct.Struct(">H").unpack_from
_h = struct.Struct(">h").unpack_from
_I = struct.Struct(">I").unpack_from
_i = struct.Struct(">i").unpack_from
_Q = struct.Struct(">Q").unpack_from
_q = struct.Struct(">q").unpack_from
_f = struct.Struct(">f").unpack_from
_d = struct.Struct(">d").unpack_from
_II = struct.Struct(">II").unpack_from

# An array of zero-width elements (nulls, uint0 ...) could claim billions of them in a few
# bytes; a cap per array keeps decoding linear in the payload's size (no real sender needs more).
_MAX_ZERO_WIDTH_ELEMENTS: Final = 256
_ZERO_WIDTH: Final = frozenset({f.NULL, f.TRUE, f.FALSE, f.UINT0, f.ULONG0, f.LIST0})


def decode_value(buf: bytes, pos: int = 0) -> tuple[Any, int]:
    """The value encoded at ``buf[pos:]`` and the position after it.

    Raises:
        MessageFormatError: the bytes there are not a complete AMQP value (the message says
            what is wrong and where).
    """
    try:
        return read_value(buf, pos)
    except MessageFormatError:
        raise
    except (IndexError, struct.error) as exc:
        raise MessageFormatError(f"truncated AMQP value ({len(buf)} bytes): {exc}") from exc
    except UnicodeDecodeError as exc:
        raise MessageFormatError(f"invalid text in an AMQP string or symbol: {exc}") from exc
    except TypeError as exc:  # an unhashable map key (a list, a map)
        raise MessageFormatError(f"an AMQP map key cannot be used: {exc}") from exc
    except (ValueError, OverflowError) as exc:  # a char past U+10FFFF ...
        raise MessageFormatError(f"an AMQP value is out of range: {exc}") from exc
    except RecursionError as exc:
        raise MessageFormatError("AMQP values nested too deeply") from exc


def read_value(buf: bytes, pos: int) -> tuple[Any, int]:
    """The value at ``pos`` and the position after it; may raise plain exceptions on malformed
    input (``decode_value`` translates them)."""
    return _READERS[buf[pos]](buf, pos + 1)


def _unknown(code: int) -> Reader:
    def reader(buf: bytes, pos: int) -> tuple[Any, int]:
        raise MessageFormatError(f"unknown AMQP format code 0x{code:02x} at byte {pos - 1}")

    return reader


def _constant(value: Any) -> Reader:
    def reader(buf: bytes, pos: int) -> tuple[Any, int]:
        return value, pos

    return reader


def _fixed(unpack: Callable[[bytes, int], tuple[Any, ...]], width: int, cls: Any) -> Reader:
    def reader(buf: bytes, pos: int) -> tuple[Any, int]:
        return cls(unpack(buf, pos)[0]), pos + width

    return reader


def _ubyte_as(cls: Any) -> Reader:
    def reader(buf: bytes, pos: int) -> tuple[Any, int]:
        return cls(buf[pos]), pos + 1

    return reader


def _boolean(buf: bytes, pos: int) -> tuple[Any, int]:
    value = buf[pos]
    if value > 1:
        raise MessageFormatError(f"an AMQP boolean is 0 or 1, not {value} (byte {pos})")
    return value == 1, pos + 1


def _char(buf: bytes, pos: int) -> tuple[Any, int]:
    return proton.char(chr(_I(buf, pos)[0])), pos + 4


def _decimal128(buf: bytes, pos: int) -> tuple[Any, int]:
    return proton.decimal128(_span(buf, pos, 16)), pos + 16


def _uuid(buf: bytes, pos: int) -> tuple[Any, int]:
    return uuid.UUID(bytes=_span(buf, pos, 16)), pos + 16


def _span(buf: bytes, pos: int, size: int) -> bytes:
    end = pos + size
    if end > len(buf):
        raise MessageFormatError(
            f"truncated AMQP value: {size} bytes at byte {pos}, {len(buf) - pos} left"
        )
    return bytes(buf[pos:end])


def _variable(width: int, convert: Callable[[bytes], Any]) -> Reader:
    def reader(buf: bytes, pos: int) -> tuple[Any, int]:
        size = buf[pos] if width == 1 else _I(buf, pos)[0]
        pos += width
        return convert(_span(buf, pos, size)), pos + size

    return reader


def _text(data: bytes) -> str:
    return data.decode("utf-8")


def _symbol(data: bytes) -> proton.symbol:
    return proton.symbol(data.decode("utf-8"))


def _sizes(buf: bytes, pos: int, width: int) -> tuple[int, int, int]:
    """A compound's (count, position of its first element, end)."""
    if width == 1:
        size, count, first = buf[pos], buf[pos + 1], pos + 2
    else:
        size, count = _II(buf, pos)
        first = pos + 8
    end = pos + width + size
    if size < width or end > len(buf):
        raise MessageFormatError(
            f"truncated AMQP compound value at byte {pos - 1}: size {size}, "
            f"{len(buf) - pos - width} bytes left"
        )
    return count, first, end


def _items(buf: bytes, pos: int, count: int, end: int) -> list[Any]:
    items = []
    readers = _READERS
    for _ in range(count):
        if pos >= end:
            raise MessageFormatError(f"an AMQP list or map ends early (byte {pos})")
        value, pos = readers[buf[pos]](buf, pos + 1)
        items.append(value)
    if pos != end:
        raise MessageFormatError(f"an AMQP list or map has {end - pos} bytes past its elements")
    return items


def _list(width: int) -> Reader:
    def reader(buf: bytes, pos: int) -> tuple[Any, int]:
        count, first, end = _sizes(buf, pos, width)
        return _items(buf, first, count, end), end

    return reader


def _map(width: int) -> Reader:
    def reader(buf: bytes, pos: int) -> tuple[Any, int]:
        count, first, end = _sizes(buf, pos, width)
        if count % 2:
            raise MessageFormatError(f"an AMQP map with an odd number of items at byte {pos - 1}")
        items = _items(buf, first, count, end)
        return dict(zip(items[::2], items[1::2], strict=True)), end

    return reader


def _array(width: int) -> Reader:
    def reader(buf: bytes, pos: int) -> tuple[Any, int]:
        count, p, end = _sizes(buf, pos, width)
        descriptor: Any = proton.UNDESCRIBED
        if buf[p] == f.DESCRIBED:
            descriptor, p = read_value(buf, p + 1)
        code = buf[p]
        element_type = _ARRAY_TYPES.get(code)
        if element_type is None:
            raise MessageFormatError(f"no AMQP array of format code 0x{code:02x} (byte {p})")
        if code in _ZERO_WIDTH and count > _MAX_ZERO_WIDTH_ELEMENTS:
            raise MessageFormatError(f"an AMQP array claims {count} zero-width elements")
        read = _READERS[code]
        elements, p = [], p + 1
        for _ in range(count):
            if p >= end and code not in _ZERO_WIDTH:
                raise MessageFormatError(f"an AMQP array ends early (byte {p})")
            value, p = read(buf, p)
            elements.append(value)
        if p != end:
            raise MessageFormatError(f"an AMQP array's size does not match its elements (byte {p})")
        return proton.Array(descriptor, element_type, *elements), end

    return reader


def _described(buf: bytes, pos: int) -> tuple[Any, int]:
    descriptor, pos = read_value(buf, pos)
    value, pos = read_value(buf, pos)
    return proton.Described(descriptor, value), pos


_ARRAY_TYPES: Final[dict[int, int]] = {
    f.NULL: proton.Data.NULL,
    f.BOOLEAN: proton.Data.BOOL,
    f.TRUE: proton.Data.BOOL,
    f.FALSE: proton.Data.BOOL,
    f.UBYTE: proton.Data.UBYTE,
    f.BYTE: proton.Data.BYTE,
    f.USHORT: proton.Data.USHORT,
    f.SHORT: proton.Data.SHORT,
    f.UINT: proton.Data.UINT,
    f.SMALLUINT: proton.Data.UINT,
    f.UINT0: proton.Data.UINT,
    f.INT: proton.Data.INT,
    f.SMALLINT: proton.Data.INT,
    f.CHAR: proton.Data.CHAR,
    f.ULONG: proton.Data.ULONG,
    f.SMALLULONG: proton.Data.ULONG,
    f.ULONG0: proton.Data.ULONG,
    f.LONG: proton.Data.LONG,
    f.SMALLLONG: proton.Data.LONG,
    f.TIMESTAMP: proton.Data.TIMESTAMP,
    f.FLOAT: proton.Data.FLOAT,
    f.DOUBLE: proton.Data.DOUBLE,
    f.DECIMAL32: proton.Data.DECIMAL32,
    f.DECIMAL64: proton.Data.DECIMAL64,
    f.DECIMAL128: proton.Data.DECIMAL128,
    f.UUID: proton.Data.UUID,
    f.VBIN8: proton.Data.BINARY,
    f.VBIN32: proton.Data.BINARY,
    f.STR8: proton.Data.STRING,
    f.STR32: proton.Data.STRING,
    f.SYM8: proton.Data.SYMBOL,
    f.SYM32: proton.Data.SYMBOL,
    f.LIST0: proton.Data.LIST,
    f.LIST8: proton.Data.LIST,
    f.LIST32: proton.Data.LIST,
    f.MAP8: proton.Data.MAP,
    f.MAP32: proton.Data.MAP,
    f.ARRAY8: proton.Data.ARRAY,
    f.ARRAY32: proton.Data.ARRAY,
}


def _signed_byte(buf: bytes, pos: int) -> int:
    value = buf[pos]
    return value - 256 if value > 127 else value


_READERS: Final[list[Reader]] = [_unknown(code) for code in range(256)]
_READERS[f.DESCRIBED] = _described
_READERS[f.NULL] = _constant(None)
_READERS[f.TRUE] = _constant(True)
_READERS[f.FALSE] = _constant(False)
_READERS[f.UINT0] = _constant(proton.uint(0))
_READERS[f.ULONG0] = _constant(proton.ulong(0))
_READERS[f.LIST0] = lambda buf, pos: ([], pos)
_READERS[f.UBYTE] = _ubyte_as(proton.ubyte)
_READERS[f.BYTE] = lambda buf, pos: (proton.byte(_signed_byte(buf, pos)), pos + 1)
_READERS[f.SMALLUINT] = _ubyte_as(proton.uint)
_READERS[f.SMALLULONG] = _ubyte_as(proton.ulong)
_READERS[f.SMALLINT] = lambda buf, pos: (proton.int32(_signed_byte(buf, pos)), pos + 1)
_READERS[f.SMALLLONG] = lambda buf, pos: (_signed_byte(buf, pos), pos + 1)
_READERS[f.BOOLEAN] = _boolean
_READERS[f.USHORT] = _fixed(_H, 2, proton.ushort)
_READERS[f.SHORT] = _fixed(_h, 2, proton.short)
_READERS[f.UINT] = _fixed(_I, 4, proton.uint)
_READERS[f.INT] = _fixed(_i, 4, proton.int32)
_READERS[f.FLOAT] = _fixed(_f, 4, proton.float32)
_READERS[f.CHAR] = _char
_READERS[f.DECIMAL32] = _fixed(_I, 4, proton.decimal32)
_READERS[f.ULONG] = _fixed(_Q, 8, proton.ulong)
_READERS[f.LONG] = _fixed(_q, 8, int)
_READERS[f.DOUBLE] = _fixed(_d, 8, float)
_READERS[f.TIMESTAMP] = _fixed(_q, 8, proton.timestamp)
_READERS[f.DECIMAL64] = _fixed(_Q, 8, proton.decimal64)
_READERS[f.DECIMAL128] = _decimal128
_READERS[f.UUID] = _uuid
_READERS[f.VBIN8] = _variable(1, bytes)
_READERS[f.VBIN32] = _variable(4, bytes)
_READERS[f.STR8] = _variable(1, _text)
_READERS[f.STR32] = _variable(4, _text)
_READERS[f.SYM8] = _variable(1, _symbol)
_READERS[f.SYM32] = _variable(4, _symbol)
_READERS[f.LIST8] = _list(1)
_READERS[f.LIST32] = _list(4)
_READERS[f.MAP8] = _map(1)
_READERS[f.MAP32] = _map(4)
_READERS[f.ARRAY8] = _array(1)
_READERS[f.ARRAY32] = _array(4)


# Skipping a value without decoding it ----------------------------------------------------------

_FIXED_WIDTHS: Final[dict[int, int]] = {
    **dict.fromkeys((f.NULL, f.TRUE, f.FALSE, f.UINT0, f.ULONG0, f.LIST0), 0),
    **dict.fromkeys((f.UBYTE, f.BYTE, f.SMALLUINT, f.SMALLULONG, f.SMALLINT, f.SMALLLONG), 1),
    f.BOOLEAN: 1,
    **dict.fromkeys((f.USHORT, f.SHORT), 2),
    **dict.fromkeys((f.UINT, f.INT, f.FLOAT, f.CHAR, f.DECIMAL32), 4),
    **dict.fromkeys((f.ULONG, f.LONG, f.DOUBLE, f.TIMESTAMP, f.DECIMAL64), 8),
    **dict.fromkeys((f.DECIMAL128, f.UUID), 16),
}
_SIZE_WIDTHS: Final[dict[int, int]] = {
    **dict.fromkeys((f.VBIN8, f.STR8, f.SYM8, f.LIST8, f.MAP8, f.ARRAY8), 1),
    **dict.fromkeys((f.VBIN32, f.STR32, f.SYM32, f.LIST32, f.MAP32, f.ARRAY32), 4),
}


def skip_value(buf: bytes, pos: int) -> int:
    """The position after the value at ``pos``, found from sizes alone (nothing is decoded).

    Raises:
        MessageFormatError: the value is cut short or its format code is unknown.
    """
    pending = 1  # values still to skip: a described value adds its descriptor (no recursion)
    while pending:
        if pos >= len(buf):
            raise MessageFormatError(f"truncated AMQP value: nothing at byte {pos}")
        code = buf[pos]
        if code == f.DESCRIBED:
            pos += 1
            pending += 1
            continue
        pos = _value_end(buf, pos, code)
        if pos > len(buf):
            raise MessageFormatError(f"truncated AMQP value: it ends past the data (byte {pos})")
        pending -= 1
    return pos


def _value_end(buf: bytes, pos: int, code: int) -> int:
    width = _FIXED_WIDTHS.get(code)
    if width is not None:
        return pos + 1 + width
    width = _SIZE_WIDTHS.get(code)
    if width is None:
        raise MessageFormatError(f"unknown AMQP format code 0x{code:02x} at byte {pos}")
    if pos + 1 + width > len(buf):
        raise MessageFormatError(f"truncated AMQP value at byte {pos}: no size")
    size = buf[pos + 1] if width == 1 else _I(buf, pos + 1)[0]
    return pos + 1 + width + size
