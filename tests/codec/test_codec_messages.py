"""Whole messages and each section: ours encoded, proton's ``Message.decode`` reads the same
message; proton's ``Message.encode``, ours reads the same; sections named by symbol decode like
those named by number; the JMS send path writes what ``to_amqp`` + ``encode_message`` write."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from codeckit import CODEC, amqp_values, scalars, symbols, typed
from hypothesis import given
from hypothesis import strategies as st
from proton import Data, Described, Message, symbol, ubyte, ulong

from haclient.amqp.codec import (
    AmqpMessage,
    BodyKind,
    MessageView,
    SectionMemo,
    decode_message,
    encode_message,
)
from haclient.destination import DestinationPrefixes, Queue, TemporaryQueue, Topic
from haclient.errors import MessageFormatError
from haclient.mapping import from_amqp, to_amqp
from haclient.message import (
    BytesMessage,
    DeliveryMode,
    MapMessage,
    StreamMessage,
    TextMessage,
)
from haclient.message import (
    Message as JmsMessage,
)
from haclient.outgoing import OutgoingEncoder

_millis = st.integers(1, 10**13)  # to the year 2286; proton converts through float seconds
_seconds = _millis.map(lambda ms: ms / 1000)
# proton's Message keeps its string fields as C strings: a NUL ends them there (the wire and
# our codec carry it). Not generated for the fields both sides compare.
_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40
)
_content_symbols = symbols.filter(bool).map(str).filter(lambda s: s != "None")
"""Content types and encodings, but "None": proton reads an absent one as "None" (see
``_none_symbol``), so that one cannot be told from absent through proton."""
_ids = st.one_of(st.none(), _text, st.integers(0, 2**64 - 1).map(ulong), st.uuids(), st.binary())


def _optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


@st.composite
def bodies(draw: st.DrawFn) -> tuple[Any, BodyKind]:
    kind = draw(st.sampled_from(BodyKind))
    if kind is BodyKind.DATA:
        return draw(st.binary(max_size=600)), kind
    if kind is BodyKind.SEQUENCE:
        return draw(st.lists(amqp_values, max_size=5)), kind
    return draw(amqp_values), kind


@st.composite
def messages(draw: st.DrawFn) -> AmqpMessage:
    body, kind = draw(bodies())
    return AmqpMessage(
        body=body,
        body_kind=kind,
        durable=draw(st.booleans()),
        priority=draw(st.integers(0, 255)),
        ttl=draw(_optional(st.integers(1, 2**32 - 1).map(lambda ms: ms / 1000))),
        first_acquirer=draw(st.booleans()),
        delivery_count=draw(st.integers(0, 2**32 - 1)),
        message_id=draw(_ids),
        user_id=draw(_optional(st.binary(min_size=1))),
        to=draw(_optional(_text)),
        subject=draw(_optional(_text)),
        reply_to=draw(_optional(_text)),
        correlation_id=draw(_ids),
        content_type=draw(_optional(_content_symbols)),
        content_encoding=draw(_optional(_content_symbols)),
        absolute_expiry_time=draw(_optional(_seconds)),
        creation_time=draw(_optional(_seconds)),
        group_id=draw(_optional(_text)),
        group_sequence=draw(_optional(st.integers(1, 2**32 - 1))),
        reply_to_group_id=draw(_optional(_text)),
        message_annotations=draw(st.dictionaries(symbols.map(str), scalars, max_size=4)),
        delivery_annotations=draw(st.dictionaries(symbols.map(str), scalars, max_size=3)),
        application_properties=draw(st.dictionaries(_text, scalars, max_size=5)),
    )


def _proton_seconds(seconds: float) -> float:
    """``seconds`` such that proton's truncating ``int(seconds * 1000)`` gives the rounded ms."""
    millis = round(seconds * 1000)
    return (millis + 0.5) / 1000


# The optional fields, set on proton's message only when present (its setters refuse None).
# Those proton names and types as we do ...
_SAME_FIELDS = ("user_id", "subject", "reply_to", "group_id", "group_sequence", "reply_to_group_id")
# ... and those it names or types otherwise: our name, proton's, its type.
_OTHER_FIELDS: list[tuple[str, str, Callable[[Any], Any]]] = [
    ("to", "address", str),
    ("content_type", "content_type", symbol),
    ("content_encoding", "content_encoding", symbol),
    ("ttl", "ttl", _proton_seconds),
    ("absolute_expiry_time", "expiry_time", _proton_seconds),
    ("creation_time", "creation_time", _proton_seconds),
]


def to_proton(m: AmqpMessage) -> Any:
    """A proton ``Message`` with the content of ``m`` (the oracle's encoder)."""
    pm: Any = Message()
    pm.inferred = m.body_kind is not BodyKind.VALUE
    pm.body = m.body
    pm.durable, pm.priority, pm.first_acquirer = m.durable, m.priority, m.first_acquirer
    pm.delivery_count = m.delivery_count
    pm.id, pm.correlation_id = m.message_id, m.correlation_id
    for name in _SAME_FIELDS:
        if getattr(m, name) is not None:
            setattr(pm, name, getattr(m, name))
    for ours, theirs, proton_type in _OTHER_FIELDS:
        if getattr(m, ours) is not None:
            setattr(pm, theirs, proton_type(getattr(m, ours)))
    pm.annotations = {symbol(k): v for k, v in m.message_annotations.items()} or None
    pm.instructions = {symbol(k): v for k, v in m.delivery_annotations.items()} or None
    pm.properties = dict(m.application_properties) or None
    return pm


def _none_symbol(value: Any) -> str | None:
    return None if value is None or value == "None" else str(value)  # proton's 'None' quirk


def _id(value: Any) -> Any:
    return ulong(value) if type(value) is int else value  # proton's getter says int for ulong


def from_proton(pm: Any) -> dict[str, Any]:
    """The fields of a proton-decoded message, named and typed as ``AmqpMessage``'s."""
    kind = BodyKind.VALUE
    if pm.inferred:
        kind = BodyKind.DATA if isinstance(pm.body, bytes | memoryview) else BodyKind.SEQUENCE
    return {
        "body": typed(pm.body),
        "body_kind": kind if pm.body is not None else None,
        "header": (pm.durable, pm.priority, pm.ttl or None, pm.first_acquirer, pm.delivery_count),
        "ids": (typed(_id(pm.id)), typed(_id(pm.correlation_id)), pm.user_id or None),
        "addresses": (pm.address, pm.subject, pm.reply_to, pm.group_id, pm.reply_to_group_id),
        "types": (_none_symbol(pm.content_type), _none_symbol(pm.content_encoding)),
        "times": (pm.expiry_time or None, pm.creation_time or None, pm.group_sequence or None),
        "annotations": typed({str(k): v for k, v in (pm.annotations or {}).items()}),
        "instructions": typed({str(k): v for k, v in (pm.instructions or {}).items()}),
        "properties": typed(dict(pm.properties or {})),
    }


def fields_of(m: AmqpMessage | MessageView) -> dict[str, Any]:
    """The same view of one of ours."""
    return {
        "body": typed(m.body),
        "body_kind": m.body_kind if m.body is not None else None,
        "header": (m.durable, m.priority, m.ttl, m.first_acquirer, m.delivery_count),
        "ids": (typed(m.message_id), typed(m.correlation_id), m.user_id),
        "addresses": (m.to, m.subject, m.reply_to, m.group_id, m.reply_to_group_id),
        "types": (m.content_type, m.content_encoding),
        "times": (m.absolute_expiry_time, m.creation_time, m.group_sequence),
        "annotations": typed(m.message_annotations),
        "instructions": typed(m.delivery_annotations),
        "properties": typed(m.application_properties),
    }


@CODEC
@given(messages())
def test_ours_encoded_proton_decodes_the_same_message(message: AmqpMessage) -> None:
    pm: Any = Message()
    pm.decode(encode_message(message))
    assert from_proton(pm) == fields_of(message)


@CODEC
@given(messages())
def test_proton_encoded_ours_decodes_the_same_message(message: AmqpMessage) -> None:
    payload = bytes(to_proton(message).encode())
    assert fields_of(MessageView(payload)) == fields_of(message)
    assert fields_of(decode_message(payload)) == fields_of(message)


@CODEC
@given(messages())
def test_ours_round_trips(message: AmqpMessage) -> None:
    view = MessageView(encode_message(message))
    assert fields_of(view) == fields_of(message)
    assert fields_of(view.to_message()) == fields_of(message)


_shared_memo = SectionMemo(limit=8)  # shared by every example: hits, misses and forgetting


@CODEC
@given(messages())
def test_a_section_memo_decodes_what_decoding_without_it_does(message: AmqpMessage) -> None:
    payload = encode_message(message)
    for _ in range(2):  # the second time from the memo
        view = MessageView(payload, _shared_memo)
        assert fields_of(view) == fields_of(MessageView(payload))
    assert len(_shared_memo.headers) <= 8 and len(_shared_memo.annotations) <= 8


def test_a_section_memo_hands_out_copies_and_keeps_only_values_that_cannot_change() -> None:
    memo = SectionMemo()
    plain = encode_message(AmqpMessage(body="x", message_annotations={"x-opt-a": 1}))
    first = MessageView(plain, memo).message_annotations
    first["x-opt-a"] = 2  # a reader changing its map changes no other message's
    assert MessageView(plain, memo).message_annotations == {"x-opt-a": 1}
    assert len(memo.annotations) == 1
    listed = encode_message(AmqpMessage(body="x", message_annotations={"x-opt-l": [1]}))
    MessageView(listed, memo).message_annotations["x-opt-l"].append(2)
    assert MessageView(listed, memo).message_annotations == {"x-opt-l": [1]}
    assert len(memo.annotations) == 1  # a list could be changed in place: not kept


def _symbolic(sections: list[tuple[str, Any]]) -> bytes:
    data = Data()
    for name, value in sections:
        data.put_object(Described(symbol(name), value))
    return bytes(data.encode())


@given(st.integers(0, 255), _text, amqp_values)
def test_sections_named_by_symbol_decode_like_those_named_by_number(
    priority: int, to: str, value: Any
) -> None:
    payload = _symbolic(
        [
            ("amqp:header:list", [True, ubyte(priority)]),
            ("amqp:message-annotations:map", {symbol("x-opt-a"): 1}),
            ("amqp:properties:list", ["ID:1", None, to]),
            ("amqp:application-properties:map", {"p": "v"}),
            ("amqp:amqp-value:*", value),
        ]
    )
    view = MessageView(payload)
    assert (view.durable, view.priority, view.message_id, view.to) == (True, priority, "ID:1", to)
    assert view.message_annotations == {"x-opt-a": 1}
    assert view.application_properties == {"p": "v"}
    assert typed(view.body) == typed(value)


def test_data_and_sequence_sections_by_symbol_and_by_long_numeric_descriptor() -> None:
    data = _symbolic([("amqp:data:binary", b"ab"), ("amqp:data:binary", b"cd")])
    assert (MessageView(data).body, MessageView(data).body_kind) == (b"abcd", BodyKind.DATA)
    sequence = _symbolic([("amqp:amqp-sequence:list", [1, "x"])])
    assert MessageView(sequence).body == [1, "x"]
    long_form = b"\x00\x80" + (0x77).to_bytes(8, "big") + b"\xa1\x02hi"  # ulong, not smallulong
    assert MessageView(long_form).body == "hi"


def test_sections_are_decoded_only_when_read() -> None:
    """A body that is not valid UTF-8: the header and properties still read; the body raises."""
    payload = encode_message(AmqpMessage(body="x", to="q", durable=True))
    assert payload.endswith(b"\x00\x53\x77\xa1\x01x")
    lazy = MessageView(payload[:-3] + b"\xa1\x01\xff")
    assert (lazy.durable, lazy.to) == (True, "q")
    with pytest.raises(MessageFormatError, match="undecodable AMQP message: invalid text"):
        _ = lazy.body
    with pytest.raises(MessageFormatError, match="undecodable AMQP message: truncated"):
        MessageView(payload[:-3] + b"\xa1\x05x")  # finding the sections checks their sizes


# The JMS send path -------------------------------------------------------------------------

_destinations = st.sampled_from([Queue("orders"), Topic("prices"), TemporaryQueue("tmp://q/1")])
_PREFIXES = [DestinationPrefixes(), DestinationPrefixes(queue="queue://", topic="topic://")]


@st.composite
def jms_messages(draw: st.DrawFn) -> JmsMessage:
    kind = draw(st.sampled_from(["text", "bytes", "map", "stream", "plain"]))
    message: JmsMessage
    if kind == "text":
        message = TextMessage(draw(_optional(_text)))
    elif kind == "bytes":
        message = BytesMessage(draw(st.binary(max_size=300)))
    elif kind == "map":
        message = MapMessage(draw(st.dictionaries(_text.filter(bool), st.integers(-5, 5))))
    elif kind == "stream":
        message = StreamMessage(draw(st.lists(_text, max_size=4)))
    else:
        message = JmsMessage()
    message.destination = draw(_destinations)
    message.reply_to = draw(_optional(_destinations))
    message.message_id = draw(st.sampled_from(["ID:abc:1:1:7", "ID:AMQP_ULONG:9", None]))
    message.correlation_id = draw(_optional(_text))
    message.type = draw(_optional(_text))
    message.priority = draw(st.integers(0, 9))
    message.delivery_mode = draw(st.sampled_from(DeliveryMode))
    message.timestamp = draw(_optional(_seconds))
    if message.timestamp is not None:
        message.expiration = draw(_optional(st.just(message.timestamp + 5)))
        message.delivery_time = draw(st.sampled_from([message.timestamp, message.timestamp + 1]))
    message.properties = draw(
        st.dictionaries(st.sampled_from(["a", "b", "JMSXGroupID", "JMSXUserID"]), _text)
    )
    return message


@CODEC
@given(jms_messages(), st.sampled_from(_PREFIXES))
def test_the_send_path_writes_what_to_amqp_and_encode_message_write(
    message: JmsMessage, prefixes: DestinationPrefixes
) -> None:
    encoder = OutgoingEncoder()
    expected = encode_message(to_amqp(message, destination_prefixes=prefixes))
    assert encoder.encode(message, prefixes) == expected
    assert encoder.encode(message, prefixes) == expected  # from the caches, the same bytes
    back = from_amqp(MessageView(expected), prefixes=prefixes)
    assert type(back) is type(message)
    assert (back.message_id, back.destination, back.reply_to) == (
        message.message_id,
        message.destination,
        message.reply_to,
    )


def test_the_send_path_drops_its_caches_when_the_broker_prefixes_change() -> None:
    message = TextMessage("x")
    message.destination = Queue("orders")
    encoder = OutgoingEncoder()
    plain = MessageView(encoder.encode(message, _PREFIXES[0]))
    prefixed = MessageView(encoder.encode(message, _PREFIXES[1]))
    assert (plain.to, prefixed.to) == ("orders", "queue://orders")


def test_F6_the_send_path_follows_a_temporary_queue_to_its_new_node() -> None:
    reply_to = TemporaryQueue("temp-before-failover")
    message = TextMessage("question")
    message.destination = Queue("service")
    message.reply_to = reply_to
    encoder = OutgoingEncoder()
    before = MessageView(encoder.encode(message, _PREFIXES[0]))
    reply_to._follow("temp-after-failover")  # what failover does when it remakes the node
    after = MessageView(encoder.encode(message, _PREFIXES[0]))
    assert (before.reply_to, after.reply_to) == ("temp-before-failover", "temp-after-failover")


def _bad(**changes: Any) -> JmsMessage:
    message = TextMessage("x")
    message.destination = Queue("q")
    for name, value in changes.items():
        setattr(message, name, value)
    return message


@pytest.mark.parametrize(
    "message",
    [
        _bad(priority=10),
        _bad(priority="high"),
        _bad(properties={"JMSXGroupSeq": "one"}),
        _bad(properties={"JMSXGroupSeq": 2**32}),
        _bad(properties={"JMSXGroupID": 7}),
        _bad(properties={"JMSXUserID": b"u"}),
        _bad(properties={"JMS_AMQP_REPLY_TO_GROUP_ID": 1}),
        _bad(properties={"bad name": 1}),
        _bad(properties={"x": object()}),
        _bad(message_id="ID:AMQP_ULONG:x"),
        _bad(correlation_id=5),
        _bad(type=5),
        _bad(type="\ud800"),
        _bad(destination="q"),
        _bad(reply_to=object()),
        "not a message",
    ],
)
def test_the_send_path_refuses_what_to_amqp_refuses(message: Any) -> None:
    with pytest.raises(Exception) as expected:
        encode_message(to_amqp(message))
    with pytest.raises(type(expected.value)):
        OutgoingEncoder().encode(message, _PREFIXES[0])
