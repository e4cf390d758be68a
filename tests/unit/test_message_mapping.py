"""Messages and the AMQP <-> JMS mapping (rules M1-M3, E4), through the real codec.

Every round trip goes ``OutgoingEncoder`` (= ``to_amqp`` -> ``encode_message``, byte for byte)
-> ``MessageView`` -> ``from_amqp``,
so what is checked is what a peer on the wire sees. The wire fields asserted are the ones Qpid
JMS writes and reads (``AmqpJmsMessageFacade``, ``AmqpDestinationHelper``,
``AmqpMessageIdHelper``, ``AmqpJmsMessageBuilder``).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import haclient.mapping as hm
from haclient.amqp.codec import (
    AmqpMessage,
    BodyKind,
    MessageView,
    decode_message,
    encode_message,
)
from haclient.amqp.types import Symbol, UInt, ULong
from haclient.destination import (
    NO_PREFIXES,
    DestinationPrefixes,
    Queue,
    TemporaryQueue,
    TemporaryTopic,
    Topic,
)
from haclient.errors import MessageFormatError
from haclient.mapping import from_amqp, to_amqp
from haclient.message import (
    Byte,
    BytesMessage,
    DeliveryMode,
    Double,
    Float,
    Int,
    Long,
    MapMessage,
    Message,
    MessageIdGenerator,
    Short,
    StreamMessage,
    TextMessage,
)
from haclient.outgoing import OutgoingEncoder

ACTIVEMQ = DestinationPrefixes(queue="queue://", topic="topic://")
T0 = 1_700_000_000.123  # millisecond-exact times survive the wire exactly


def wire(amqp: AmqpMessage) -> AmqpMessage:
    """What the peer decodes."""
    return decode_message(encode_message(amqp))


def round_trip(message: Message, **kwargs: Any) -> Message:
    """``message`` as a consumer reads it, sent the way a producer sends it (``OutgoingEncoder``,
    checked to write what ``to_amqp`` + ``encode_message`` write) and read lazily."""
    prefixes = kwargs.pop("prefixes", NO_PREFIXES)
    payload = OutgoingEncoder().encode(message, prefixes)
    assert payload == encode_message(to_amqp(message, destination_prefixes=prefixes))
    return from_amqp(MessageView(payload), prefixes=prefixes)


TYPED = {
    "b": Byte(-5),
    "s": Short(300),
    "i": Int(70000),
    "l": 2**40,
    "f": Float(1.5),
    "d": 2.25,
    "t": True,
    "text": "eu",
}


# --- M1: every message type, every body ---------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        Message(),
        TextMessage("hello"),
        TextMessage(""),
        TextMessage(None),
        TextMessage("ünïcødé ✓"),
        BytesMessage(b"\x00\x01\xff"),
        BytesMessage(b""),
        MapMessage({"k": 1, "i": Int(2), "b": b"\x01", "n": None, "f": Float(0.5), "x": True}),
        MapMessage({}),
        StreamMessage([1, "a", Byte(2), Short(3), b"z", None, 1.5, False]),
        StreamMessage([]),
    ],
    ids=repr,
)
def test_M1_every_message_type_round_trips(message: Message) -> None:
    back = round_trip(message)
    assert type(back) is type(message)
    assert back == message
    assert back.body == message.body


def test_M1_typed_properties_keep_their_type() -> None:
    back = round_trip(TextMessage("x", properties=TYPED))
    assert back.properties == TYPED
    for name, value in TYPED.items():
        assert type(back.properties[name]) is type(value), name


def test_M1_typed_map_and_stream_values_keep_their_type() -> None:
    values = [Byte(1), Short(2), Int(3), 4, Float(0.25), 0.5, True, "s", b"b"]
    back_map = round_trip(MapMessage({f"k{i}": v for i, v in enumerate(values)}))
    back_stream = round_trip(StreamMessage(values))
    assert [type(v) for v in back_map.body.values()] == [type(v) for v in values]
    assert [type(v) for v in back_stream.body] == [type(v) for v in values]


def test_long_and_double_are_python_int_and_float() -> None:
    assert Long is int and Double is float
    amqp = to_amqp(TextMessage("x", properties={"l": Long(3), "d": Double(1.0)}))
    assert type(amqp.application_properties["l"]) is int
    assert type(amqp.application_properties["d"]) is float


def test_text_is_body() -> None:
    message = TextMessage("a")
    message.body = "b"
    assert message.text == "b"
    message.text = "c"
    assert message.body == "c"
    with pytest.raises(MessageFormatError):
        message.text = b"bytes"  # type: ignore[assignment]


# --- M2: every header ---------------------------------------------------------------------------


def full_headers() -> dict[str, Any]:
    return {
        "message_id": "ID:4b1e:1",
        "correlation_id": "order-17",
        "reply_to": TemporaryQueue("amq.tmp.1"),
        "destination": Queue("orders"),
        "type": "OrderPlaced",
        "priority": 7,
        "delivery_mode": DeliveryMode.NON_PERSISTENT,
        "timestamp": T0,
        "expiration": 1_700_000_030.124,
        "delivery_time": 1_700_000_005.623,
    }


@pytest.mark.parametrize("prefixes", [NO_PREFIXES, ACTIVEMQ])
def test_M2_every_header_round_trips(prefixes: DestinationPrefixes) -> None:
    message = TextMessage("hello", properties=TYPED, **full_headers())
    back = round_trip(message, prefixes=prefixes)
    assert back == message
    assert (back.redelivered, back.delivery_count) == (False, 1)


def test_M2_defaults() -> None:
    message = TextMessage("x")
    assert message.priority == 4
    assert message.delivery_mode is DeliveryMode.PERSISTENT
    assert message.message_id is None and message.timestamp is None
    back = round_trip(message)
    assert back.delivery_mode is DeliveryMode.PERSISTENT
    assert back.expiration is None and back.delivery_time is None


@pytest.mark.parametrize("cls", [Message, TextMessage, BytesMessage, MapMessage, StreamMessage])
def test_M2_a_misspelt_header_is_refused_by_name(cls: type[Message]) -> None:
    with pytest.raises(TypeError, match="priorty"):
        cls(priorty=9)  # type: ignore[call-arg]


@pytest.mark.parametrize("destination", [Queue("q"), Topic("t"), TemporaryTopic("tt")])
def test_M2_destinations_and_reply_to_of_every_type(destination: Any) -> None:
    back = round_trip(
        TextMessage("x", destination=destination, reply_to=destination), prefixes=ACTIVEMQ
    )
    assert back.destination == destination and back.reply_to == destination


def test_E4_delivery_count_and_redelivered_from_the_header() -> None:
    amqp = wire(to_amqp(TextMessage("x")))
    assert amqp.delivery_count == 0
    first = from_amqp(amqp)
    assert (first.delivery_count, first.redelivered) == (1, False)
    amqp.delivery_count = 2  # the broker counted two failed deliveries
    again = from_amqp(wire(amqp))
    assert (again.delivery_count, again.redelivered) == (3, True)
    # The consumer may know better (client-side redelivery, rule E4).
    local = from_amqp(amqp, delivery_count=1)
    assert (local.delivery_count, local.redelivered) == (1, False)


def test_sender_always_writes_delivery_count_zero() -> None:
    message = TextMessage("x", redelivered=True, delivery_count=4)
    assert to_amqp(message).delivery_count == 0


def test_ttl_without_absolute_expiry_expires_relative_to_receipt() -> None:
    amqp = wire(AmqpMessage(body="x", ttl=2.5))
    assert from_amqp(amqp, now=T0).expiration == pytest.approx(T0 + 2.5)


def test_delivery_time_defaults_to_timestamp_and_is_sent_only_for_a_delay() -> None:
    same = to_amqp(TextMessage("x", timestamp=T0, delivery_time=T0))
    assert hm.DELIVERY_TIME_ANNOTATION not in same.message_annotations
    assert from_amqp(wire(same)).delivery_time == T0


def test_priority_is_checked_and_clamped() -> None:
    with pytest.raises(MessageFormatError):
        to_amqp(TextMessage("x", priority=10))
    assert from_amqp(wire(AmqpMessage(body="x", priority=200))).priority == 9


def test_message_id_generator() -> None:
    ids = MessageIdGenerator()
    first, second = ids(), ids()
    assert first.startswith("ID:") and first.endswith(":1") and second.endswith(":2")
    assert first.rsplit(":", 1)[0] == second.rsplit(":", 1)[0]
    uuid.UUID(first.split(":")[1])
    assert MessageIdGenerator("conn-1")() == "ID:conn-1:1"


# --- M3: the exact wire fields Qpid JMS writes and reads ----------------------------------------


@pytest.mark.parametrize(
    ("message", "msg_type", "kind", "content_type"),
    [
        (Message(), 0, BodyKind.VALUE, None),
        (MapMessage({"a": 1}), 2, BodyKind.VALUE, None),
        (BytesMessage(b"x"), 3, BodyKind.DATA, "application/octet-stream"),
        (StreamMessage([1]), 4, BodyKind.SEQUENCE, None),
        (TextMessage("x"), 5, BodyKind.VALUE, None),
    ],
)
def test_M3_message_type_annotation_and_body_section(
    message: Message, msg_type: int, kind: BodyKind, content_type: str | None
) -> None:
    amqp = wire(to_amqp(message))
    annotation = amqp.message_annotations["x-opt-jms-msg-type"]
    assert type(annotation) is Byte and annotation == msg_type
    assert amqp.body_kind is kind
    assert amqp.content_type == content_type


def test_M3_header_and_property_fields() -> None:
    message = TextMessage(
        "x",
        properties={"JMSXGroupID": "g1", "JMSXGroupSeq": Int(4), "JMSXUserID": "bob", "a": 1},
        **full_headers(),
    )
    amqp = wire(to_amqp(message, destination_prefixes=ACTIVEMQ))
    assert amqp.message_id == "ID:4b1e:1"
    assert amqp.correlation_id == "order-17"
    assert amqp.subject == "OrderPlaced"
    assert amqp.to == "queue://orders"
    assert amqp.reply_to == "amq.tmp.1"
    ann = amqp.message_annotations
    assert type(ann["x-opt-jms-dest"]) is Byte and ann["x-opt-jms-dest"] == 0
    assert type(ann["x-opt-jms-reply-to"]) is Byte and ann["x-opt-jms-reply-to"] == 2
    assert type(ann["x-opt-delivery-time"]) is int
    assert ann["x-opt-delivery-time"] == 1_700_000_005_623
    assert amqp.durable is False and amqp.priority == 7
    assert amqp.creation_time == T0
    assert amqp.absolute_expiry_time == 1_700_000_030.124
    assert amqp.ttl == 30.001
    assert (amqp.group_id, amqp.group_sequence, amqp.user_id) == ("g1", 4, b"bob")
    assert amqp.application_properties == {"a": 1}  # JMSX ones live in AMQP properties
    back = from_amqp(amqp, prefixes=ACTIVEMQ)
    assert back.properties == message.properties
    assert type(back.properties["JMSXGroupSeq"]) is Int


def test_M3_persistent_is_durable() -> None:
    assert to_amqp(TextMessage("x")).durable is True
    assert from_amqp(wire(AmqpMessage(body="x"))).delivery_mode is DeliveryMode.NON_PERSISTENT


@pytest.mark.parametrize(
    ("jms_id", "amqp_id"),
    [
        ("ID:abc", "ID:abc"),
        ("ID:AMQP_ULONG:42", ULong(42)),
        (
            "ID:AMQP_UUID:6ba7b810-9dad-11d1-80b4-00c04fd430c8",
            uuid.UUID(int=0x6BA7B8109DAD11D180B400C04FD430C8),
        ),
        ("ID:AMQP_BINARY:00FF10", b"\x00\xff\x10"),
        ("ID:AMQP_NO_PREFIX:plain", "plain"),
        ("ID:AMQP_STRING:ID:AMQP_ULONG:1", "ID:AMQP_ULONG:1"),
    ],
)
def test_M3_message_id_encodings_both_ways(jms_id: str, amqp_id: Any) -> None:
    amqp = wire(to_amqp(TextMessage("x", message_id=jms_id, correlation_id=jms_id)))
    assert amqp.message_id == amqp_id and amqp.correlation_id == amqp_id
    assert type(amqp.message_id) is type(amqp_id) or isinstance(amqp_id, ULong)
    back = from_amqp(amqp)
    assert back.message_id == jms_id
    # A string correlation id without "ID:" is an application's own and reads back as is.
    assert back.correlation_id == (amqp_id if jms_id.startswith("ID:AMQP_NO_PREFIX:") else jms_id)


def test_M3_ids_from_other_senders() -> None:
    back = from_amqp(wire(AmqpMessage(body="x", message_id="plain", correlation_id="app-corr")))
    assert back.message_id == "ID:AMQP_NO_PREFIX:plain"
    assert back.correlation_id == "app-corr"  # an application correlation id stays as is
    amqp = wire(AmqpMessage(body="x", message_id=ULong(7), correlation_id=b"\xab"))
    back = from_amqp(amqp)
    assert (back.message_id, back.correlation_id) == ("ID:AMQP_ULONG:7", "ID:AMQP_BINARY:AB")


@pytest.mark.parametrize("bad", ["ID:AMQP_ULONG:x", "ID:AMQP_UUID:nope", "ID:AMQP_BINARY:ABC"])
def test_M3_invalid_encoded_ids(bad: str) -> None:
    with pytest.raises(MessageFormatError):
        to_amqp(TextMessage("x", message_id=bad))


def test_bytes_correlation_id_goes_as_binary() -> None:
    amqp = wire(to_amqp(TextMessage("x", correlation_id=b"\x01\x02")))
    assert amqp.correlation_id == b"\x01\x02"
    assert from_amqp(amqp).correlation_id == "ID:AMQP_BINARY:0102"


def test_M3_legacy_and_prefix_destination_reading() -> None:
    amqp = wire(
        AmqpMessage(
            body="x",
            to="topic://prices",
            reply_to="r",
            message_annotations={"x-opt-reply-type": "temporary,topic"},
        )
    )
    back = from_amqp(amqp, prefixes=ACTIVEMQ)
    assert back.destination == Topic("prices") and back.reply_to == TemporaryTopic("r")
    assert from_amqp(wire(AmqpMessage(body="x")), consumer_destination=Queue("q")).destination == (
        Queue("q")
    )


def test_invalid_message_type_annotation() -> None:
    with pytest.raises(MessageFormatError):
        from_amqp(wire(AmqpMessage(body="x", message_annotations={"x-opt-jms-msg-type": Byte(9)})))


def test_object_message_body_is_kept_raw() -> None:
    amqp = AmqpMessage(
        body=b"\xac\xed",
        body_kind=BodyKind.DATA,
        content_type="application/x-java-serialized-object",
        message_annotations={"x-opt-jms-msg-type": Byte(1)},
    )
    back = from_amqp(wire(amqp))
    assert type(back) is Message and back.body == b"\xac\xed"


# --- messages from non-JMS senders (no x-opt-jms-msg-type) --------------------------------------


@pytest.mark.parametrize(
    ("amqp", "cls", "body"),
    [
        (AmqpMessage(body="hi"), TextMessage, "hi"),
        (AmqpMessage(body=b"\x01", body_kind=BodyKind.DATA), BytesMessage, b"\x01"),
        (AmqpMessage(body=b"\x01"), BytesMessage, b"\x01"),  # amqp-value binary
        (AmqpMessage(body={"a": 1}), MapMessage, {"a": 1}),
        (AmqpMessage(body=[1, "a"]), StreamMessage, [1, "a"]),
        (AmqpMessage(body=[1, "a"], body_kind=BodyKind.SEQUENCE), StreamMessage, [1, "a"]),
        (AmqpMessage(body=42), Message, 42),
        (AmqpMessage(body={1: "a"}), Message, {1: "a"}),
        (AmqpMessage(body=None), BytesMessage, b""),
        (AmqpMessage(body=None, content_type="text/plain"), TextMessage, None),
        (AmqpMessage(body=None, content_type="image/png"), Message, None),
        (
            AmqpMessage(body=b"{}", body_kind=BodyKind.DATA, content_type="application/json"),
            TextMessage,
            "{}",
        ),
        (
            AmqpMessage(
                body="é".encode("latin-1"),
                body_kind=BodyKind.DATA,
                content_type="text/plain; charset=iso-8859-1",
            ),
            TextMessage,
            "é",
        ),
        (
            AmqpMessage(body=b"\xff\xfe", body_kind=BodyKind.DATA, content_type="text/plain"),
            BytesMessage,
            b"\xff\xfe",
        ),
        (
            AmqpMessage(body=b"\x89PNG", body_kind=BodyKind.DATA, content_type="image/png"),
            BytesMessage,
            b"\x89PNG",
        ),
    ],
    ids=repr,
)
def test_messages_from_non_jms_senders(amqp: AmqpMessage, cls: type, body: Any) -> None:
    back = from_amqp(wire(amqp))
    assert type(back) is cls
    assert back.body == body


def test_foreign_property_types_are_kept_on_receipt() -> None:
    amqp = wire(AmqpMessage(body="x", application_properties={"u": UInt(3), "sym": Symbol("s")}))
    back = from_amqp(amqp)
    assert type(back.properties["u"]) is UInt and back.properties["sym"] == "s"


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["", "1abc", "a-b", "a b", "NULL", "true", "And", "between", "escape", "JMSType", "JMSfoo", 5],
)
def test_invalid_property_names(name: Any) -> None:
    with pytest.raises(MessageFormatError):
        TextMessage("x", properties={name: 1})


@pytest.mark.parametrize("name", ["a", "_x", "$y", "a1$_", "JMSXGroupID", "JMS_AMQP_X", "région"])
def test_valid_property_names(name: str) -> None:
    assert name in TextMessage("x", properties={name: "v"}).properties


class _Unsendable:
    """A value of no type a message can carry, with the same id in every test process."""

    def __repr__(self) -> str:
        return "<unsendable>"


UNSENDABLE = _Unsendable()


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"bytes",
        [1],
        {"a": 1},
        UNSENDABLE,
        ULong(1),
        Byte(200),
        Short(2**15),
        Int(2**31),
        2**63,
    ],
    ids=repr,
)
def test_invalid_property_values(value: Any) -> None:
    with pytest.raises(MessageFormatError):
        TextMessage("x", properties={"p": value})


def test_properties_are_checked_again_when_sent() -> None:
    message = TextMessage("x")
    message.properties["bad"] = [1]
    with pytest.raises(MessageFormatError):
        to_amqp(message)


def test_delivery_count_is_not_a_property() -> None:
    with pytest.raises(MessageFormatError):
        TextMessage("x", properties={"JMSXDeliveryCount": Int(2)})


@pytest.mark.parametrize("seq", ["1", True, 2**32])
def test_invalid_group_sequence(seq: Any) -> None:
    with pytest.raises(MessageFormatError):
        to_amqp(TextMessage("x", properties={"JMSXGroupSeq": seq}))


def test_reply_to_group_id_property() -> None:
    message = TextMessage("x", properties={"JMS_AMQP_REPLY_TO_GROUP_ID": "rg"})
    amqp = wire(to_amqp(message))
    assert amqp.reply_to_group_id == "rg" and amqp.application_properties == {}
    assert from_amqp(amqp).properties == {"JMS_AMQP_REPLY_TO_GROUP_ID": "rg"}


def test_group_sequence_zero_means_none() -> None:
    # As in Qpid JMS, where JMSXGroupSeq 0 does not exist.
    back = round_trip(TextMessage("x", properties={"JMSXGroupSeq": Int(0)}))
    assert "JMSXGroupSeq" not in back.properties


def test_negative_group_sequence_wraps_like_a_java_int() -> None:
    back = round_trip(TextMessage("x", properties={"JMSXGroupSeq": Int(-1)}))
    assert back.properties["JMSXGroupSeq"] == -1


@pytest.mark.parametrize(
    ("cls", "body"),
    [
        (MapMessage, {"": 1}),
        (MapMessage, {1: 1}),
        (MapMessage, {"a": [1]}),
        (MapMessage, {"a": {"b": 1}}),
        (MapMessage, [("a", 1)]),
        (StreamMessage, [UNSENDABLE]),
        (StreamMessage, [[1]]),
        (StreamMessage, "abc"),
        (BytesMessage, "text"),
        (TextMessage, 5),
    ],
    ids=repr,
)
def test_invalid_bodies(cls: Any, body: Any) -> None:
    with pytest.raises(MessageFormatError):
        cls(body)


def test_bytes_like_bodies_become_bytes() -> None:
    assert BytesMessage(bytearray(b"ab")).body == b"ab"
    assert StreamMessage([bytearray(b"a")]).body == [b"a"]


def test_equality_and_repr() -> None:
    assert TextMessage("a") == TextMessage("a")
    assert TextMessage("a") != TextMessage("b")
    assert TextMessage("a") != BytesMessage(b"a")
    assert "TextMessage('a'" in repr(TextMessage("a"))


# --- Hypothesis: random property maps of JMS types ----------------------------------------------

RESERVED = {"NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE"}

names = st.from_regex(r"[A-Za-z_$][A-Za-z0-9_$]{0,12}", fullmatch=True).filter(
    lambda n: n.upper() not in RESERVED and not n.startswith("JMS")
)
values = st.one_of(
    st.booleans(),
    st.integers(-(2**7), 2**7 - 1).map(Byte),
    st.integers(-(2**15), 2**15 - 1).map(Short),
    st.integers(-(2**31), 2**31 - 1).map(Int),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(width=32, allow_nan=False).map(Float),
    st.floats(allow_nan=False),
    st.text(max_size=20),
)


@given(st.dictionaries(names, values, max_size=12))
def test_random_property_maps_round_trip_with_their_types(properties: dict[str, Any]) -> None:
    back = round_trip(TextMessage("x", properties=properties))
    assert back.properties == properties
    assert {k: type(v) for k, v in back.properties.items()} == {
        k: type(v) for k, v in properties.items()
    }


@given(st.lists(st.one_of(values, st.binary(max_size=8), st.none()), max_size=8))
def test_random_streams_and_maps_round_trip(items: list[Any]) -> None:
    stream = round_trip(StreamMessage(items))
    assert stream.body == items and [type(v) for v in stream.body] == [type(v) for v in items]
    as_map = {f"k{i}": v for i, v in enumerate(items)}
    assert round_trip(MapMessage(as_map)).body == as_map


def test_to_amqp_leaves_the_message_alone() -> None:
    properties = {"JMSXGroupID": "g", "a": Int(1)}
    message = TextMessage("x", properties=properties, destination=Queue("q"))
    to_amqp(message, destination_prefixes=ACTIVEMQ)
    assert message.properties == properties and message.destination == Queue("q")


def test_all_names_exist() -> None:
    import haclient.destination as hd

    for module in (hm, hd):
        assert all(hasattr(module, name) for name in module.__all__), module.__name__


def test_M1_text_reads_on_any_received_message_and_names_the_type_where_there_is_none() -> None:
    from haclient.errors import MessageFormatError
    from haclient.message import BytesMessage, Message, TextMessage

    received: Message = TextMessage("hi")  # what receive() is typed to return
    assert isinstance(received, Message) and received.text == "hi"
    with pytest.raises(MessageFormatError, match="BytesMessage has no text"):
        _ = BytesMessage(b"x").text
