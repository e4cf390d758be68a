"""Malformed input: garbage, truncated and mutated encodings give ``MessageFormatError`` naming
the problem (or a message, when the bytes happen to be one), never another exception or a hang.
Values that have no AMQP encoding are refused the same way on the send side."""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest
from codeckit import CODEC, amqp_values
from hypothesis import given
from hypothesis import strategies as st

from haclient.amqp.codec import (
    AmqpMessage,
    BodyKind,
    MessageView,
    decode_coordinator_request,
    decode_message,
    decode_value,
    encode_message,
    encode_value,
)
from haclient.errors import MessageFormatError

_SEED = encode_message(
    AmqpMessage(
        body={"k": [1, "two", b"3"]},
        durable=True,
        message_id="ID:1",
        to="q",
        creation_time=1.5,
        message_annotations={"x-opt-jms-msg-type": 2},
        application_properties={"p": 1},
    )
)


def _read_all(payload: bytes) -> None:
    """Decode ``payload`` both ways, every field: a message or MessageFormatError only."""
    try:
        view = MessageView(payload)
        view.to_message()
    except MessageFormatError as exc:
        assert str(exc)  # it names the problem
    with contextlib.suppress(MessageFormatError):
        decode_message(payload)


@CODEC
@given(st.binary(max_size=200))
def test_garbage_is_a_message_or_a_format_error(payload: bytes) -> None:
    _read_all(payload)
    with contextlib.suppress(MessageFormatError):
        decode_value(payload)
    with contextlib.suppress(MessageFormatError):
        decode_coordinator_request(payload)


@CODEC
@given(st.data())
def test_mutated_messages_are_a_message_or_a_format_error(data: st.DataObject) -> None:
    payload = bytearray(_SEED)
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(payload) - 1))
        payload[index] = data.draw(st.integers(0, 255))
    _read_all(bytes(payload))


@CODEC
@given(amqp_values, st.data())
def test_truncated_values_are_format_errors(value: Any, data: st.DataObject) -> None:
    encoded = encode_value(value)
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(MessageFormatError):
        decode_value(encoded[:cut])


def test_every_truncation_of_a_message_is_a_message_or_a_format_error() -> None:
    for cut in range(len(_SEED)):
        _read_all(_SEED[:cut])


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (b"\x40", "starts no section"),
        (b"\x00\x53\x99\x40", "unknown section 0x99"),
        (b"\x00\xa3\x03a:b\x40", "unknown section descriptor"),
        (b"\x00\x53\x77\xff", "unknown AMQP format code 0xff"),
        (b"\x00\x53\x77\xa1\x09abc", "truncated"),
        (b"\x00\x53\x70\x45\x00\x53\x70\x45", "two sections"),
        (b"\x00\x53\x77\xa1\x02\xc3\x28", "invalid text"),
        (b"\x00\x53\x77\xc1\x03\x01\x40\x40", "odd number"),
        (b"\x00\x53\x77\xc0\x03\x05\x40\x40", "ends early"),
        (b"\x00\x53\x77\xc0\x03\x01\x40\x40", "bytes past its elements"),
        (b"\x00\x53\x77\x56\x07", "boolean"),
        (b"\x00\x53\x77\x73\x7f\xff\xff\xff", "out of range"),
        (b"\x00\x53\x77\xc1\x03\x04\x40\x40", "ends early"),  # the count lies
        (b"\x00\x53\x77\xc1\x03\x02\x45\x40", "map key"),  # a list as a key
        (b"\x00\x53\x75\xa1\x01x", "not binary"),
        (b"\x00\x53\x70\xa1\x01x", "header is not a list"),
        (b"\x00\x53\x73\xc0\x05\x03\x40\x40\x55\x05", "field 2 of the properties section is a int"),
    ],
)
def test_each_problem_is_named(payload: bytes, problem: str) -> None:
    with pytest.raises(MessageFormatError, match=problem):
        view = MessageView(payload)
        view.to_message()


@pytest.mark.parametrize(
    "payload",
    [
        b"\x00\x53\x77\xf0\x00\x00\x00\x05\xff\xff\xff\xff\x40",  # 4 billion nulls in 5 bytes
        b"\x00\x53\x77\xd0\x00\x00\x00\x04\xff\xff\xff\xff",  # 4 billion items in 0 bytes
        b"\x00\x53\x77" + b"\xc0\x02\x01" * 5000 + b"\x40",  # nested past the recursion limit
        b"\x00\x53\x77" + b"\x00" * 5000 + b"\x40" * 5001,  # descriptors of descriptors ...
        b"\x00\x53\x77" + b"\x00\x40" * 5000 + b"\x40",  # described values in described values
        # 20,000 arrays of 65,535 nulls each in 200 kB: the cap per array keeps this small
        b"\x00\x53\x77\xd0"
        + (200_004).to_bytes(4, "big")
        + (20_000).to_bytes(4, "big")
        + b"\xf0\x00\x00\x00\x05\x00\x00\xff\xff\x40" * 20_000,
    ],
)
def test_hostile_sizes_fail_fast(payload: bytes) -> None:
    started = time.monotonic()
    with pytest.raises(MessageFormatError):
        decode_message(payload)
    assert time.monotonic() - started < 1


@pytest.mark.parametrize(
    "value",
    [object(), 2**64, {1, 2}, "\ud800", (1, 2)],
)
def test_values_without_an_amqp_encoding_are_format_errors(value: Any) -> None:
    with pytest.raises(MessageFormatError):
        encode_value(value)
    with pytest.raises(MessageFormatError):
        encode_message(AmqpMessage(body=value))


def test_a_body_of_the_wrong_kind_is_a_format_error() -> None:
    with pytest.raises(MessageFormatError, match="needs a list"):
        encode_message(AmqpMessage(body="x", body_kind=BodyKind.SEQUENCE))
    with pytest.raises(MessageFormatError, match="str"):
        encode_message(AmqpMessage(application_properties={1: "x"}))  # type: ignore[dict-item]
    with pytest.raises(MessageFormatError, match="ASCII"):
        encode_message(AmqpMessage(content_type="é"))
