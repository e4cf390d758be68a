"""Rules M1-M3 (message types, headers, the Qpid JMS wire mapping) and the errors the API owes
(invalid destination, invalid selector), through both APIs."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest
from apikit import Api, Bed
from rulekit import TIMEOUT, leftovers, started

from haclient.aio import decoding
from haclient.amqp.codec import AmqpMessage, BodyKind, decode_message, encode_message
from haclient.amqp.config import ClientAuth, EngineConfig
from haclient.amqp.connection import AmqpConnection, open_connection
from haclient.amqp.types import Byte as AmqpByte
from haclient.destination import Queue, TemporaryQueue, Topic
from haclient.errors import InvalidDestinationError, InvalidSelectorError
from haclient.mapping import from_amqp
from haclient.message import (
    Byte,
    BytesMessage,
    DeliveryMode,
    Double,
    Float,
    Int,
    Long,
    MapMessage,
    Short,
    StreamMessage,
    TextMessage,
)
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio

PROPERTIES = {
    "byte": Byte(-7),
    "short": Short(300),
    "int": Int(70000),
    "long": Long(2**40),
    "float": Float(1.5),
    "double": Double(2.25),
    "bool": True,
    "str": "text",
}


def same_types(received: dict[str, object], sent: dict[str, object]) -> None:
    assert received == sent
    assert {k: type(v) for k, v in received.items()} == {k: type(v) for k, v in sent.items()}


async def test_M1_message_types_and_typed_properties_round_trip(api: Api, bed: Bed) -> None:
    queue = Queue(bed.unique("m1"))
    sent = [
        TextMessage("héllo", properties=PROPERTIES),
        BytesMessage(b"\x00\x01\xff", properties=PROPERTIES),
        MapMessage({"i": Int(1), "l": 2, "s": "x", "b": False, "d": 0.5}, properties=PROPERTIES),
        StreamMessage([Short(1), "a", 2.5, True], properties=PROPERTIES),
    ]
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.AUTO)
        producer = await session.create_producer(queue)
        for message in sent:
            await producer.send(message)
        consumer = await session.create_consumer(queue)
        for message in sent:
            received = await consumer.receive(TIMEOUT)
            assert received is not None
            assert type(received) is type(message)
            assert received.body == message.body
            if isinstance(message.body, dict | list):
                items = (
                    message.body.items()
                    if isinstance(message.body, dict)
                    else enumerate(message.body)
                )
                for key, value in items:
                    assert type(received.body[key]) is type(value), key
            same_types(received.properties, PROPERTIES)


async def test_M2_a_producer_keeps_a_preset_message_id_only_when_told(api: Api, bed: Bed) -> None:
    queue = Queue(bed.unique("m2id"))
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.AUTO)
        producer = await session.create_producer(queue)
        assigned = TextMessage("a", message_id="ID:job:1:0:7")
        await producer.send(assigned)
        assert assigned.message_id != "ID:job:1:0:7"  # JMS: the provider assigns the id
        producer.preserve_message_id = True
        kept = TextMessage("k", message_id="ID:job:1:0:7")
        await producer.send(kept)
        fresh = TextMessage("f")
        await producer.send(fresh)  # no id to keep: one is assigned
        consumer = await session.create_consumer(queue)
        ids = [(await consumer.receive(TIMEOUT)).message_id for _ in range(3)]  # type: ignore[union-attr]
        assert ids == [assigned.message_id, "ID:job:1:0:7", fresh.message_id]
        assert fresh.message_id is not None and fresh.message_id.startswith("ID:")


async def test_M2_headers_round_trip(api: Api, bed: Bed) -> None:
    queue = Queue(bed.unique("m2"))
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.CLIENT)
        reply_to = Queue(bed.unique("replies"))
        producer = await session.create_producer(queue)
        producer.priority = 7
        message = TextMessage("h", correlation_id="corr-1", reply_to=reply_to, type="kind")
        before = time.time()
        await producer.send(message, delivery_mode=DeliveryMode.NON_PERSISTENT, time_to_live=60.0)
        await producer.flush()
        consumer = await session.create_consumer(queue)
        received = await consumer.receive(TIMEOUT)
        assert received is not None
        assert received.message_id == message.message_id
        assert received.message_id is not None and received.message_id.startswith("ID:")
        assert received.correlation_id == "corr-1"
        assert received.reply_to == reply_to
        assert received.type == "kind"
        assert received.priority == 7
        assert received.delivery_mode is DeliveryMode.NON_PERSISTENT
        assert received.destination == queue
        assert received.timestamp is not None and before - 1 <= received.timestamp <= time.time()
        assert received.expiration is not None
        assert abs(received.expiration - (received.timestamp + 60.0)) < 0.01
        assert received.delivery_time == pytest.approx(received.timestamp, abs=0.01)
        assert (received.redelivered, received.delivery_count) == (False, 1)
        await session.recover()
        again = await consumer.receive(TIMEOUT)
        assert again is not None and again.message_id == message.message_id
        if bed.reference:
            assert (again.redelivered, again.delivery_count) == (True, 2)
        await api.acknowledge(again)


async def test_M2_temporary_queue_as_reply_to(api: Api, bed: Bed) -> None:
    queue = Queue(bed.unique("m2t"))
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.AUTO)
        reply_to = await bed.lacks(
            "temporary queues (dynamic nodes)", session.create_temporary_queue
        )
        assert isinstance(reply_to, TemporaryQueue)
        producer = await session.create_producer(queue)
        await producer.send(TextMessage("ask", reply_to=reply_to))
        consumer = await session.create_consumer(queue)
        request = await consumer.receive(TIMEOUT)
        assert request is not None and request.reply_to == reply_to
        responder = await session.create_producer(request.reply_to)
        await responder.send(TextMessage("answer", correlation_id=request.message_id))
        replies = await session.create_consumer(reply_to)
        answer = await replies.receive(TIMEOUT)
        assert answer is not None and answer.body == "answer"
        assert answer.correlation_id == request.message_id


async def test_M2_delivery_delay_sets_delivery_time(api: Api, bed: Bed) -> None:
    queue = Queue(bed.unique("m2d"))
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.AUTO)
        producer = await session.create_producer(queue)
        message = TextMessage("later")
        await producer.send(message, delivery_delay=0.5)
        consumer = await session.create_consumer(queue)
        early = await consumer.receive(0.1)
        if early is not None and not bed.reference:
            pytest.skip("broker lacks delayed delivery (delivered before its delivery time)")
        assert early is None  # not yet due
        received = await consumer.receive(TIMEOUT)
        assert received is not None and received.body == "later"
        assert received.delivery_time is not None and received.timestamp is not None
        assert received.delivery_time - received.timestamp == pytest.approx(0.5, abs=0.01)
        assert time.time() >= received.delivery_time - 0.05


@asynccontextmanager
async def bare(bed: Bed) -> AsyncIterator[AmqpConnection]:
    """A connection with the bare engine (no JMS mapping) to the bed's broker."""
    url = urlsplit(bed.url)
    auth = ClientAuth(url.username, url.password, allow_insecure=True)
    config = EngineConfig(container_id=bed.unique("bare"), auth=auth)
    assert url.hostname is not None and url.port is not None
    async with open_connection(url.hostname, url.port, config, connect_timeout=TIMEOUT) as conn:
        yield conn


def address(bed: Bed, name: str) -> str:
    return name if bed.reference else f"/queue/{name}"


async def test_M3_what_the_client_sends_follows_the_qpid_jms_mapping(api: Api, bed: Bed) -> None:
    name = bed.unique("m3")
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.AUTO)
        producer = await session.create_producer(Queue(name))
        text = TextMessage("t", type="kind", reply_to=Topic("replies"), properties={"n": Int(3)})
        await producer.send(text)
        await producer.send(BytesMessage(b"b"))
        await producer.send(MapMessage({"k": 1}))
        await producer.send(StreamMessage([1]))
    async with bare(bed) as conn:
        link_session = await conn.open_session()
        link = await conn.open_receiver(
            address(bed, name), session=link_session, credit=10, timeout=TIMEOUT
        )
        got = []
        for _ in range(4):
            raw = await conn.receive(link, TIMEOUT)
            assert raw is not None
            conn.settle(raw, __import__("haclient.amqp.types").amqp.types.ACCEPTED)
            got.append(decode_message(raw.payload))
    types = [m.message_annotations["x-opt-jms-msg-type"] for m in got]
    assert types == [5, 3, 2, 4] and all(type(t) is AmqpByte for t in types)
    first = got[0]
    assert first.message_annotations["x-opt-jms-dest"] == 0
    assert first.message_annotations["x-opt-jms-reply-to"] == 1
    assert isinstance(first.message_id, str) and first.message_id.startswith("ID:")
    assert first.message_id == text.message_id
    assert first.subject == "kind" and first.body == "t" and first.body_kind is BodyKind.VALUE
    assert type(first.application_properties["n"]) is Int and first.durable
    assert got[1].body_kind is BodyKind.DATA and got[1].content_type == "application/octet-stream"
    assert got[2].body == {"k": 1} and got[3].body_kind is BodyKind.SEQUENCE


async def test_M3_a_qpid_jms_shaped_message_is_read_by_the_client(api: Api, bed: Bed) -> None:
    name = bed.unique("m3in")
    amqp = AmqpMessage(
        body=b"\x01\x02",
        body_kind=BodyKind.DATA,
        content_type="application/octet-stream",
        durable=True,
        message_id="ID:java-1:1:1:1",
        correlation_id="ID:java-0",
        subject="JavaType",
        to=address(bed, name),
        creation_time=1_700_000_000.0,
        message_annotations={"x-opt-jms-msg-type": AmqpByte(3), "x-opt-jms-dest": AmqpByte(0)},
        application_properties={"i": Int(1), "l": 2, "s": Short(3)},
    )
    async with bare(bed) as conn:
        link_session = await conn.open_session()
        link = await conn.open_sender(address(bed, name), session=link_session, timeout=TIMEOUT)
        await conn.send(link, encode_message(amqp))
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue(name))
        received = await consumer.receive(TIMEOUT)
    assert type(received) is BytesMessage
    assert received.body == b"\x01\x02"
    assert received.message_id == "ID:java-1:1:1:1"
    assert received.correlation_id == "ID:java-0"
    assert received.type == "JavaType"
    assert received.destination == Queue(name)
    assert received.delivery_mode is DeliveryMode.PERSISTENT
    assert received.timestamp == 1_700_000_000.0
    same_types(received.properties, {"i": Int(1), "l": 2, "s": Short(3)})


async def test_errors_invalid_destination_carries_the_broker_description(
    api: Api, bed: Bed
) -> None:
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.AUTO)
        gone = TemporaryQueue(f"haclient.tmp.queue.{bed.unique('gone')}")
        if not bed.reference:
            gone = TemporaryQueue(f"/exchange/{bed.unique('no-such-exchange')}/key")
        with pytest.raises(InvalidDestinationError) as caught:
            await session.create_consumer(gone)
        assert "not-found" in str(caught.value) or "not_found" in str(caught.value)
        assert caught.value.description  # the broker's own words


async def test_errors_invalid_selector_is_raised_client_side_with_its_column(
    api: Api, bed: Bed
) -> None:
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.AUTO)
        with pytest.raises(InvalidSelectorError) as caught:
            await session.create_consumer(Queue(bed.unique("sel")), selector="a = ")
        assert caught.value.column == 5


async def test_A1_auto_decodes_each_message_once_and_rejects_an_undecodable_one(
    api: Api, bed: Bed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AUTO decodes the next message while the broker confirms an acknowledgement: each
    message is decoded once, in order, and a message the JMS mapping refuses (here an unknown
    message type) is still rejected when it is taken, never handed out."""
    name = bed.unique("ahead")
    bodies = [f"m{n}" for n in range(6)]
    bad = AmqpMessage(
        body="bad",
        message_id="ID:bad",
        message_annotations={"x-opt-jms-msg-type": AmqpByte(99)},
    )
    async with bare(bed) as conn:
        link_session = await conn.open_session()
        link = await conn.open_sender(address(bed, name), session=link_session, timeout=TIMEOUT)
        for n, body in enumerate(bodies):
            await conn.send(link, encode_message(AmqpMessage(body=body, message_id=f"ID:{n}")))
            if n == 2:
                await conn.send(link, encode_message(bad))
    decoded: list[tuple[str, str]] = []  # (message id, decoded by)

    def counting(amqp: Any, **kwargs: Any) -> Any:
        decoded.append((amqp.message_id, sys._getframe(2).f_code.co_name))
        return from_amqp(amqp, **kwargs)

    monkeypatch.setattr(decoding, "from_amqp", counting)
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue(name))
        received = [await consumer.receive(TIMEOUT) for _ in bodies]
        assert await consumer.receive(0.2) is None
    assert [m.body if m is not None else None for m in received] == bodies
    good = [(i, by) for i, by in decoded if i != "ID:bad"]
    assert sorted(i for i, _ in good) == [f"ID:{n}" for n in range(6)]  # each one once
    assert any(by == "_decode_next" for _, by in good), decoded  # on every event loop
    assert await leftovers(bed, name) == []  # rejected, not left for redelivery
