"""The message codec: every section round-trips, and decoded values own their memory."""

from __future__ import annotations

import gc

import pytest

from haclient.amqp.codec import (
    AmqpMessage,
    BodyKind,
    Declare,
    Discharge,
    decode_coordinator_request,
    decode_message,
    encode_declare,
    encode_discharge,
    encode_message,
)
from haclient.amqp.types import Byte, Int, Short, Symbol
from haclient.errors import MessageFormatError


def test_every_section_round_trips() -> None:
    message = AmqpMessage(
        body={"k": b"\x00\x01", "nested": [b"abc", {"x": b"y"}]},
        durable=True,
        priority=7,
        ttl=5.0,
        delivery_count=2,
        message_id="ID:abc:1",
        correlation_id=b"corr",
        to="queue://orders",
        subject="JMSType",
        reply_to="queue://replies",
        content_type="application/json",
        creation_time=1_700_000_000.0,
        group_id="g",
        message_annotations={"x-opt-jms-msg-type": Byte(2)},
        application_properties={"b": Byte(1), "s": Short(2), "i": Int(3), "l": 4, "f": 1.5},
    )
    back = decode_message(encode_message(message))
    assert back == message
    assert type(back.application_properties["s"]) is Short
    assert type(back.message_annotations["x-opt-jms-msg-type"]) is Byte


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (b"\x00raw", BodyKind.DATA),
        ([1, "two", Symbol("three")], BodyKind.SEQUENCE),
        ("t", BodyKind.VALUE),
    ],
)
def test_each_body_section_kind_round_trips(body: object, kind: BodyKind) -> None:
    back = decode_message(encode_message(AmqpMessage(body=body, body_kind=kind)))
    assert (back.body, back.body_kind) == (body, kind)


def test_decoded_binaries_are_owned_bytes_not_views_of_freed_memory() -> None:
    """proton hands out memoryviews into its decoder's buffer; ours must survive the decoder."""
    payload = encode_message(AmqpMessage(body={"k": [b"keep-me" * 10]}, correlation_id=b"c-1"))
    message = decode_message(payload)
    gc.collect()
    filler = [bytes(range(256)) * 64 for _ in range(200)]  # reuse freed memory if any
    assert message.body == {"k": [b"keep-me" * 10]}
    assert type(message.body["k"][0]) is bytes
    assert message.correlation_id == b"c-1"
    del filler


def test_coordinator_requests_round_trip() -> None:
    assert decode_coordinator_request(encode_declare()) == Declare()
    assert decode_coordinator_request(encode_discharge(b"tx-1", fail=False)) == Discharge(
        b"tx-1", fail=False
    )


def test_garbage_is_a_message_format_error() -> None:
    with pytest.raises(MessageFormatError, match="undecodable"):
        decode_message(b"\x00\x53\x77\xff\xff")
    with pytest.raises(MessageFormatError, match="not a coordinator request"):
        decode_coordinator_request(encode_message(AmqpMessage(body="hello")))


def test_a_data_body_must_be_bytes() -> None:
    with pytest.raises(MessageFormatError, match="needs bytes"):
        encode_message(AmqpMessage(body="text", body_kind=BodyKind.DATA))


def test_times_travel_to_the_nearest_millisecond() -> None:
    """proton truncates seconds to milliseconds; 1.001 s must not arrive as 1.000 s."""
    sent = AmqpMessage(creation_time=1_700_000_000.001, absolute_expiry_time=1.001, ttl=0.007)
    back = decode_message(encode_message(sent))
    assert (back.creation_time, back.absolute_expiry_time, back.ttl) == (
        1_700_000_000.001,
        1.001,
        0.007,
    )
