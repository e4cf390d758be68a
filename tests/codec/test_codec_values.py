"""Values: our encoder and proton's decoder agree, and proton's encoder and our decoder agree,
for every type of the AMQP 1.0 type system the client uses; encodings are the smallest the
specification allows; the specification's own examples decode as it says."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from codeckit import CODEC, amqp_values, proton_decode, proton_encode, typed
from hypothesis import given
from hypothesis import strategies as st
from proton import UNDESCRIBED, Array, Data, Described, int32, symbol, uint, ulong

from haclient.amqp.codec import decode_value, encode_value
from haclient.amqp.codec.decode import skip_value


@CODEC
@given(amqp_values)
def test_ours_encoded_proton_decodes_the_same_value(value: Any) -> None:
    assert typed(proton_decode(encode_value(value))) == typed(value)


@CODEC
@given(amqp_values)
def test_proton_encoded_ours_decodes_the_same_value(value: Any) -> None:
    payload = proton_encode(value)
    decoded, end = decode_value(payload)
    assert typed(decoded) == typed(value)
    assert end == len(payload)
    assert skip_value(payload, 0) == len(payload)


@CODEC
@given(amqp_values)
def test_ours_round_trips_and_is_never_longer_than_protons(value: Any) -> None:
    ours = encode_value(value)
    assert typed(decode_value(ours)[0]) == typed(value)
    assert skip_value(ours, 0) == len(ours)
    assert len(ours) <= len(proton_encode(value))


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (None, "40"),
        (True, "41"),
        (False, "42"),
        (uint(0), "43"),
        (uint(7), "5207"),
        (uint(256), "7000000100"),
        (ulong(0), "44"),
        (ulong(255), "53ff"),
        (ulong(256), "800000000000000100"),
        (int32(-1), "54ff"),
        (int32(128), "7100000080"),
        (-128, "5580"),
        (128, "810000000000000080"),
        ([], "45"),
        ([None], "c0020140"),
        ("a", "a10161"),
        ("a" * 256, "b100000100" + "61" * 256),
        (symbol("ab"), "a3026162"),
        (b"\x01", "a00101"),
        ({"k": None}, "c10502a1016b40"),
        (Array(UNDESCRIBED, Data.INT, int32(1), int32(2)), "e00a0271" + "00000001" + "00000002"),
        (Described(ulong(0x77), "x"), "005377a10178"),
    ],
)
def test_the_smallest_encoding_is_chosen(value: Any, wire: str) -> None:
    assert encode_value(value).hex() == wire
    assert typed(decode_value(bytes.fromhex(wire))[0]) == typed(value)


def test_a_list_past_255_bytes_takes_the_32_bit_form() -> None:
    encoded = encode_value(["x" * 300])
    assert encoded[0] == 0xD0
    assert proton_decode(encoded) == ["x" * 300]


# The specification's examples (AMQP 1.0 part 1, sections 1.2 and 1.6).


def test_spec_example_described_string_with_a_string_descriptor() -> None:
    """Part 1, 1.2: a URL, a string described by the string "URL"."""
    wire = b"\x00\xa1\x03URL\xa1\x1ehttp://example.org/hello-world"
    value, end = decode_value(wire)
    assert value == Described("URL", "http://example.org/hello-world")
    assert end == len(wire)
    assert encode_value(value) == wire


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        ("56 00", False),  # boolean with a byte
        ("56 01", True),
        ("50 ff", 255),  # ubyte
        ("51 ff", -1),  # byte
        ("60 ff ff", 65535),  # ushort
        ("61 80 00", -32768),  # short
        ("83 00 00 00 00 00 00 00 01", 1),  # timestamp: ms since the epoch
        ("73 00 01 f6 00", "\U0001f600"),  # char: UTF-32BE
        ("98 " + "00" * 15 + "01", uuid.UUID(int=1)),
        ("b0 00 00 00 01 7f", b"\x7f"),  # vbin32
        ("b3 00 00 00 01 61", "a"),  # sym32
        ("d0 00 00 00 05 00 00 00 01 40", [None]),  # list32
        ("d1 00 00 00 07 00 00 00 02 a1 00 40", {"": None}),  # map32
        ("e0 02 02 40", [None, None]),  # array8 of two nulls (zero width elements)
        ("f0 00 00 00 07 00 00 00 02 56 01 00", [True, False]),  # array32 of booleans
    ],
)
def test_spec_encodings_decode(wire: str, expected: Any) -> None:
    value, end = decode_value(bytes.fromhex(wire.replace(" ", "")))
    if isinstance(value, Array):
        value = list(value.elements)
    assert value == expected
    assert end == len(bytes.fromhex(wire.replace(" ", "")))


@given(st.integers(0, 2**64 - 1))
def test_ulong_encodings_are_minimal(n: int) -> None:
    size = len(encode_value(ulong(n)))
    assert size == (1 if n == 0 else 2 if n < 256 else 9)
