"""Strategies and helpers for the codec tests: AMQP values as proton's Python types, proton's
codec as the oracle, and a comparison that sees types (``int32(1)`` is not ``ulong(1)``)."""

from __future__ import annotations

import os
import uuid
from typing import Any

import proton
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from haclient.amqp._convert import owned

__all__ = [
    "CODEC",
    "amqp_values",
    "keys",
    "proton_decode",
    "proton_encode",
    "scalars",
    "symbols",
    "typed",
]


def examples(count: int) -> int:
    """``count`` property examples, scaled by ``$HACLIENT_PROPERTY_SCALE`` (``make test-quick``
    runs a quarter of them; ``make test`` all)."""
    return max(10, round(count * float(os.environ.get("HACLIENT_PROPERTY_SCALE", "1"))))


CODEC = settings(
    max_examples=examples(200),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

symbols = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=300).map(
    proton.symbol
)
_text = st.text(max_size=300)  # hypothesis leaves out lone surrogates: every str is UTF-8

_INT_SCALARS = {
    "ubyte": st.integers(0, 2**8 - 1).map(proton.ubyte),
    "ushort": st.integers(0, 2**16 - 1).map(proton.ushort),
    "uint": st.integers(0, 2**32 - 1).map(proton.uint),
    "ulong": st.integers(0, 2**64 - 1).map(proton.ulong),
    "byte": st.integers(-(2**7), 2**7 - 1).map(proton.byte),
    "short": st.integers(-(2**15), 2**15 - 1).map(proton.short),
    "int": st.integers(-(2**31), 2**31 - 1).map(proton.int32),
    "long": st.integers(-(2**63), 2**63 - 1),
    "timestamp": st.integers(-(2**63), 2**63 - 1).map(proton.timestamp),
}

scalars = st.one_of(
    st.none(),
    st.booleans(),
    *_INT_SCALARS.values(),
    st.floats(width=32, allow_nan=False).map(proton.float32),
    st.floats(allow_nan=False),
    st.uuids(),
    st.binary(max_size=300),
    _text,
    symbols,
    st.characters(blacklist_categories=("Cs",)).map(proton.char),
    st.integers(0, 2**32 - 1).map(proton.decimal32),
    st.integers(0, 2**64 - 1).map(proton.decimal64),
    st.binary(min_size=16, max_size=16).map(proton.decimal128),
)
keys = st.one_of(_text, symbols, _INT_SCALARS["ulong"], _INT_SCALARS["long"])
descriptors = st.one_of(_INT_SCALARS["ulong"], symbols)

# Arrays: one element type each, as (proton type, element strategy).
_ARRAY_TYPES = [
    (proton.Data.BOOL, st.booleans()),
    (proton.Data.UBYTE, _INT_SCALARS["ubyte"]),
    (proton.Data.SHORT, _INT_SCALARS["short"]),
    (proton.Data.INT, _INT_SCALARS["int"]),
    (proton.Data.UINT, _INT_SCALARS["uint"]),
    (proton.Data.LONG, _INT_SCALARS["long"]),
    (proton.Data.ULONG, _INT_SCALARS["ulong"]),
    (proton.Data.TIMESTAMP, _INT_SCALARS["timestamp"]),
    (proton.Data.DOUBLE, st.floats(allow_nan=False)),
    (proton.Data.UUID, st.uuids()),
    (proton.Data.BINARY, st.binary(max_size=300)),
    (proton.Data.STRING, _text),
    (proton.Data.SYMBOL, symbols),
]


@st.composite
def arrays(draw: st.DrawFn) -> proton.Array:
    kind, elements = draw(st.sampled_from(_ARRAY_TYPES))
    descriptor = draw(st.one_of(st.just(proton.UNDESCRIBED), descriptors))
    return proton.Array(descriptor, kind, *draw(st.lists(elements, max_size=20)))


def _compound(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=8),
        st.dictionaries(keys, children, max_size=8),
        # proton's decoder loses what follows a described value that holds a described value
        # (it reads [D(0, D(0, None)), None] as one item): not generated.
        st.builds(
            proton.Described,
            descriptors,
            children.filter(lambda v: not isinstance(v, proton.Described)),
        ),
    )


amqp_values = st.recursive(st.one_of(scalars, arrays()), _compound, max_leaves=30)


def typed(value: Any) -> Any:
    """``value`` as nested tuples that carry every type, so equal means equal and same types."""
    if isinstance(value, memoryview):
        value = value.tobytes()
    if isinstance(value, list):
        return ("list", [typed(v) for v in value])
    if isinstance(value, dict):
        return ("map", [(typed(k), typed(v)) for k, v in value.items()])
    if isinstance(value, proton.Described):
        return ("described", typed(value.descriptor), typed(value.value))
    if isinstance(value, proton.Array):
        descriptor = None if value.descriptor is proton.UNDESCRIBED else typed(value.descriptor)
        return ("array", descriptor, value.type, [typed(v) for v in value.elements])
    if isinstance(value, float) and value == 0:
        return (type(value).__name__, str(value))  # -0.0 and 0.0 differ on the wire
    if isinstance(value, uuid.UUID):
        return ("uuid", value.bytes)
    return (type(value).__name__, value)


def proton_encode(value: Any) -> bytes:
    """proton's encoding of ``value``."""
    data = proton.Data()
    data.put_object(value)
    return bytes(data.encode())


def proton_decode(payload: bytes) -> Any:
    """The one value proton decodes from ``payload`` (all of it must be used)."""
    data = proton.Data()
    used = data.decode(payload)
    assert used == len(payload), f"proton used {used} of {len(payload)} bytes"
    data.rewind()
    data.next()
    return owned(data.get_object())
