"""The broker's header reader and writer agree with proton's codec."""

from __future__ import annotations

import pytest

from chaos.broker.wire import MessageHeader, WireError, parse_header, read_routing
from haclient.amqp.codec import AmqpMessage, BodyKind, decode_message, encode_message
from haclient.amqp.types import Byte

MESSAGES = [
    AmqpMessage(body="plain"),
    AmqpMessage(
        body=b"x" * 300,
        body_kind=BodyKind.DATA,
        durable=True,
        priority=7,
        ttl=5.0,
        delivery_count=3,
        to="queue://a",
        message_id="ID:1",
        message_annotations={"x-opt-jms-dest": Byte(1)},
    ),
    AmqpMessage(body=[1, 2], body_kind=BodyKind.SEQUENCE, to="t", delivery_count=1000),
]


@pytest.mark.parametrize("original", MESSAGES, ids=["defaults", "full", "big-count"])
def test_header_is_read_and_rewritten_without_touching_the_rest(original: AmqpMessage) -> None:
    payload = encode_message(original)
    header, offset = parse_header(payload)
    assert header.durable == original.durable
    assert header.priority == original.priority
    assert header.delivery_count == original.delivery_count
    header.delivery_count += 300
    rewritten = decode_message(header.encode() + payload[offset:])
    assert rewritten.delivery_count == original.delivery_count + 300
    assert rewritten.ttl == original.ttl
    assert (rewritten.to, rewritten.message_id) == (original.to, original.message_id)
    body = bytes(rewritten.body) if isinstance(original.body, bytes) else rewritten.body
    assert body == original.body


def test_routing_fields_are_found_after_the_header() -> None:
    payload = encode_message(MESSAGES[1])
    _header, offset = parse_header(payload)
    assert read_routing(payload, offset) == ("queue://a", 1)
    assert read_routing(encode_message(MESSAGES[0])) == (None, None)


def test_message_without_header_gets_defaults() -> None:
    assert parse_header(b"") == (MessageHeader(), 0)
    body_only = b"\x00\x53\x77\xa1\x02hi"
    assert parse_header(body_only) == (MessageHeader(), 0)


def test_garbage_is_a_wire_error() -> None:
    with pytest.raises(WireError):
        parse_header(b"\x99garbage")
    with pytest.raises(WireError):
        parse_header(b"\x00\x53\x70\xc0\x10\x05")
