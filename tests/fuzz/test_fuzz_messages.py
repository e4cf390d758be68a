"""Fuzzing message decoding: arbitrary bytes, and valid encodings mutated, give a
message or ``MessageFormatError`` from ``decode_message`` and the JMS mapping, never another
exception (a consumer must be able to reject a bad message and go on)."""

from __future__ import annotations

from fuzzkit import FUZZ
from hypothesis import example, given
from hypothesis import strategies as st
from proton import Data, Described, symbol, ubyte

from haclient.amqp.codec import decode_message
from haclient.destination import Queue
from haclient.errors import MessageFormatError
from haclient.mapping import from_amqp, to_amqp
from haclient.message import BytesMessage, MapMessage, StreamMessage, TextMessage


def _jms(message: object) -> bytes:
    from haclient.amqp.codec import encode_message

    amqp = to_amqp(message)  # type: ignore[arg-type]
    return encode_message(amqp)


def _symbolic() -> bytes:
    data = Data()
    data.put_object(Described(symbol("amqp:header:list"), [True, ubyte(4)]))
    data.put_object(Described(symbol("amqp:properties:list"), ["ID:1", None, "queue://q"]))
    data.put_object(Described(symbol("amqp:amqp-value:*"), "hi"))
    return bytes(data.encode())


def _seeds() -> list[bytes]:
    text = TextMessage("hello", properties={"region": "eu", "n": 3})
    text.message_id = "ID:abc"
    text.destination = Queue("orders")
    return [
        _jms(text),
        _jms(BytesMessage(b"\x00\x01\x02")),
        _jms(MapMessage({"a": 1, "b": "two", "c": 2.5})),
        _jms(StreamMessage([1, "two", b"3"])),
        _symbolic(),
    ]


SEEDS = _seeds()


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid encoding with a few bytes flipped, inserted, deleted, or the tail cut."""
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data) - 1))
        match draw(st.sampled_from(["flip", "insert", "delete", "cut"])):
            case "flip":
                data[at] = draw(st.integers(0, 255))
            case "insert":
                data[at:at] = draw(st.binary(min_size=1, max_size=4))
            case "delete":
                del data[at : at + draw(st.integers(1, 4))]
            case "cut":
                del data[at:]
        if not data:
            break
    return bytes(data)


def _check(payload: bytes) -> None:
    try:
        message = from_amqp(decode_message(payload))
    except MessageFormatError as exc:
        assert str(exc).isprintable()
        return
    message.properties  # noqa: B018  (reading the headers and properties must work too)
    message.message_id  # noqa: B018


@FUZZ
@given(st.binary(max_size=200))
@example(b"")
@example(b"\x00")
@example(b"\x00\x53\x77")
@example(b"\x00\xa3\x00\x40")
def test_arbitrary_bytes_decode_or_raise_message_format_error(payload: bytes) -> None:
    _check(payload)


@FUZZ
@given(mutated())
def test_mutated_messages_decode_or_raise_message_format_error(payload: bytes) -> None:
    _check(payload)


def test_the_seeds_decode() -> None:
    for seed in SEEDS:
        from_amqp(decode_message(seed))
