"""The SASL frames both layers share (``haclient.amqp.sasl_frames``), on their own."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Array, Data, Described, symbol, ubyte, ulong

from haclient.amqp.codec import encode_value
from haclient.amqp.sasl_frames import (
    DECODE_ERROR,
    FRAMING_ERROR,
    INIT,
    MECHANISMS,
    OUTCOME,
    OUTCOME_OK,
    SaslFrameError,
    SaslLayer,
    encode_frame,
    encode_outcome,
    read_frame,
)
from haclient.amqp.types import ErrorCondition


def _frame(body: bytes, frame_type: int = 1, size: int | None = None, doff: int = 2) -> bytes:
    return struct.pack(">IBBH", size or 8 + len(body), doff, frame_type, 0) + body


def test_a_frame_reads_back_with_the_bytes_it_used() -> None:
    offered = Array(Data.NULL, Data.SYMBOL, symbol("PLAIN"), symbol("ANONYMOUS"))
    frame = encode_frame(MECHANISMS, [offered])
    read = read_frame(frame + b"AMQP")
    assert read is not None
    descriptor, fields, used = read
    assert descriptor == MECHANISMS and used == len(frame)
    assert list(fields[0].elements) == ["PLAIN", "ANONYMOUS"]


def test_a_frame_not_all_there_reads_as_none() -> None:
    frame = encode_outcome(OUTCOME_OK, b"v=proof")
    assert all(read_frame(frame[:n]) is None for n in range(len(frame)))
    assert read_frame(frame) == (OUTCOME, [OUTCOME_OK, b"v=proof"], len(frame))


def test_missing_trailing_fields_read_as_none_and_heartbeats_are_skipped() -> None:
    frame = encode_frame(INIT, [symbol("ANONYMOUS")])
    heartbeats = _frame(b"") * 2
    assert read_frame(heartbeats + frame) == (INIT, ["ANONYMOUS", None, None], 16 + len(frame))
    assert read_frame(heartbeats) is None


def test_a_symbolic_descriptor_reads_as_its_number() -> None:
    body = encode_value(Described(symbol("amqp:sasl-outcome:list"), [ubyte(1)]))
    assert read_frame(_frame(body)) == (OUTCOME, [1, None], 8 + len(body))
    assert read_frame(_frame(encode_value(Described(ulong(0x99), [])))) == (0x99, [], 12)


@pytest.mark.parametrize(
    ("garbage", "condition"),
    [
        (_frame(b"\x00\x53\x40\x45", frame_type=0), FRAMING_ERROR),
        (_frame(b"", size=4), FRAMING_ERROR),
        (_frame(b"", size=10**6), FRAMING_ERROR),
        (_frame(b"\x00\x00\x00\x00", doff=7), FRAMING_ERROR),
        (_frame(b"\xff\xfe\xfd"), DECODE_ERROR),
        (_frame(b"\x00\x53\x40\xc0\x10"), DECODE_ERROR),  # a truncated list
        (_frame(b"\xa1\x03abc"), DECODE_ERROR),  # not described
        (_frame(b"\x00\x53\x43\xa1\x02hi"), DECODE_ERROR),  # a described string
        (_frame(b"\x00\xa3\x03foo\x45"), DECODE_ERROR),  # a symbol no SASL body has
        (_frame(encode_value(Described(ulong(0x41), [])) + b"\x40"), DECODE_ERROR),  # more after
    ],
)
def test_garbage_raises_one_error_naming_its_condition(garbage: bytes, condition: str) -> None:
    with pytest.raises(SaslFrameError) as raised:
        read_frame(garbage)
    assert raised.value.condition == condition and str(raised.value)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120))
def test_any_bytes_read_as_a_frame_none_or_a_frame_error(data: bytes) -> None:
    try:
        read = read_frame(_frame(data[:80]) + data[80:])
    except SaslFrameError:
        return
    assert read is None or 8 <= read[2] <= len(data) + 8


class _Layer(SaslLayer):
    """Logs in at the first frame it reads."""

    def _advance(self) -> None:
        if self._next_frame() is not None:
            self.queue(b"outcome")
            self.release()


def test_a_layer_sends_its_frames_at_once_and_amqp_bytes_only_once_released() -> None:
    layer = _Layer(b"hdr")
    assert layer.has_output and layer.send(b"amqp1") == b"hdr"
    assert layer.receive(encode_frame(INIT, [])[:-1]) == b""
    assert layer.send(b"amqp2") == b"" and not layer.has_output
    assert layer.receive(encode_frame(INIT, [])[-1:] + b"open") == b"open"
    assert layer.has_output and layer.send(b"") == b"outcomeamqp1amqp2"
    layer.queue(b"last")
    assert layer.send(b"amqp3") == b"lastamqp3" and layer.send(b"") == b""
    assert layer.receive(b"more") == b"more"


def test_a_failed_layer_takes_no_more_input_and_sends_no_amqp_bytes() -> None:
    layer = _Layer()
    layer.error = ErrorCondition(FRAMING_ERROR, "garbage")
    assert layer.receive(encode_frame(INIT, [])) == b"" and layer.send(b"amqp") == b""
    assert not layer.has_output
