"""Qpid JMS options applied with Qpid JMS's meaning: address prefixes, JMSXUserID, message ids.

Each test checks an option's effect where it shows: the prefixes a connection to a broker uses
(``jms.queuePrefix`` / ``jms.topicPrefix``; the prefix a broker announces in its Open wins, as
in Qpid JMS, whose ``AmqpConnectionProperties`` overwrites the configured one with it); the
``user-id`` of every message sent (``jms.populateJMSXUserID``: the logged-in user's name,
replacing the application's, as Qpid JMS's ``JmsSession.send`` does); the message ids a
producer makes (``jms.messageIDPolicy.messageIDType``, Qpid JMS's ``JmsMessageIDBuilder``).
"""

from __future__ import annotations

import re
import uuid

import anyio
import pytest

import haclient.aio as aio
from chaos.broker import BrokerThread
from failover.url import parse_url
from haclient.aio.options import ConnectionOptions
from haclient.aio.physical import _prefixes, open_physical
from haclient.amqp.codec import decode_message
from haclient.destination import (
    NO_PREFIXES,
    DestinationPrefixes,
    Queue,
    TemporaryQueue,
    address_of,
)
from haclient.mapping import message_id_from_amqp
from haclient.message import DeliveryMode, TextMessage, uuid_message_ids
from haclient.outgoing import OutgoingEncoder

# --- jms.queuePrefix / jms.topicPrefix -----------------------------------------------------------


def test_prefix_options_are_read_from_the_url_and_keywords() -> None:
    url = parse_url("amqp://a?jms.queuePrefix=queue://&jms.topicPrefix=topic://")
    options = ConnectionOptions.build(url, {})
    assert (options.queue_prefix, options.topic_prefix) == ("queue://", "topic://")
    options = ConnectionOptions.build(url, {"queue_prefix": "q."})
    assert options.queue_prefix == "q."
    assert ConnectionOptions().queue_prefix is None


def test_the_configured_prefix_applies_when_the_broker_announces_none() -> None:
    prefixes = _prefixes({}, None, ("q.", "t."))
    assert prefixes == DestinationPrefixes(queue="q.", topic="t.")
    assert address_of(Queue("orders"), prefixes) == "q.orders"
    assert address_of(Queue("q.orders"), prefixes) == "q.orders"
    assert address_of(TemporaryQueue("tmp-1"), prefixes) == "tmp-1"


def test_the_prefix_the_broker_announces_wins_kind_by_kind() -> None:
    announced = {"queue-prefix": "queue://"}
    assert _prefixes(announced, None, ("q.", "t.")) == DestinationPrefixes("queue://", "t.")
    assert _prefixes(announced, None, (None, None)) == DestinationPrefixes("queue://", "")


def test_rabbitmq_defaults_yield_to_the_configured_prefix() -> None:
    assert _prefixes({}, "RabbitMQ", (None, None)) == DestinationPrefixes("/queue/", "/topic/")
    assert _prefixes({}, "RabbitMQ", ("/amq/queue/", None)) == DestinationPrefixes(
        "/amq/queue/", "/topic/"
    )


@pytest.mark.anyio
async def test_a_connection_to_a_broker_uses_the_configured_prefixes() -> None:
    with BrokerThread() as broker:
        url = parse_url(f"amqp://127.0.0.1:{broker.port}?jms.queuePrefix=q.&jms.topicPrefix=t.")
        options = ConnectionOptions.build(url, {})
        async with anyio.create_task_group() as group:
            physical = await open_physical(group, url.brokers[0], options, "applied")
            assert physical.prefixes == DestinationPrefixes(queue="q.", topic="t.")
            await physical.amqp.close()
            group.cancel_scope.cancel()


# --- jms.populateJMSXUserID ----------------------------------------------------------------------


def _user_id(payload: bytes) -> bytes | None:
    return decode_message(payload).user_id


def test_the_encoder_stamps_the_user_id_only_when_asked() -> None:
    message = TextMessage("x", destination=Queue("q"))
    message.properties["JMSXUserID"] = "mallory"
    encoder = OutgoingEncoder()
    assert _user_id(encoder.encode(message, NO_PREFIXES)) == b"mallory"
    assert _user_id(encoder.encode(message, NO_PREFIXES, b"alice", stamp_user_id=True)) == (
        b"alice"
    )
    assert _user_id(encoder.encode(message, NO_PREFIXES, None, stamp_user_id=True)) is None


@pytest.mark.anyio
async def test_a_sent_message_carries_the_logged_in_user_as_jmsx_user_id() -> None:
    with BrokerThread() as broker:  # the open broker takes PLAIN with any name
        url = f"amqp://127.0.0.1:{broker.port}?jms.populateJMSXUserID=true"
        async with aio.connect(url, username="alice", password="secret") as connection:
            await connection.start()
            session = await connection.create_session()
            producer = await session.create_producer(Queue("user-id"))
            consumer = await session.create_consumer(Queue("user-id"))
            message = TextMessage("hi")
            message.properties["JMSXUserID"] = "mallory"
            await producer.send(message, delivery_mode=DeliveryMode.PERSISTENT)
            received = await consumer.receive(5.0)
            assert received is not None
            assert received.properties["JMSXUserID"] == "alice"


# --- jms.messageIDPolicy.messageIDType -----------------------------------------------------------

SOME_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def test_message_id_types_are_read_in_any_case_with_qpid_jms_names() -> None:
    for raw, kind in (("UUID", "uuid"), ("Prefixed_UUID_String", "prefixed_uuid_string")):
        url = parse_url(f"amqp://a?jms.messageIDPolicy.messageIDType={raw}")
        assert ConnectionOptions.build(url, {}).message_id_type == kind
    url = parse_url("amqp://a?jms.messageIDPolicy.messageIDType=DEFAULT")
    assert ConnectionOptions.build(url, {}).message_id_type == "default"
    assert ConnectionOptions().message_id_type == "original"


@pytest.mark.parametrize(
    ("kind", "wire", "jms_id"),
    [
        ("uuid", uuid.UUID, rf"ID:AMQP_UUID:{SOME_UUID}"),
        ("uuid_string", str, rf"ID:AMQP_NO_PREFIX:{SOME_UUID}"),
        ("prefixed_uuid_string", str, rf"ID:{SOME_UUID}"),
    ],
)
def test_uuid_ids_go_on_the_wire_as_qpid_jms_sends_them(kind: str, wire: type, jms_id: str) -> None:
    ids = uuid_message_ids(kind)
    first, second = ids(), ids()
    assert first != second and re.fullmatch(jms_id, first)
    message = TextMessage("x", destination=Queue("q"))
    message.message_id = first
    amqp_id = decode_message(OutgoingEncoder().encode(message, NO_PREFIXES)).message_id
    assert type(amqp_id) is wire
    if kind == "uuid_string":
        assert re.fullmatch(SOME_UUID, amqp_id)
    if kind == "prefixed_uuid_string":
        assert amqp_id == first
    assert message_id_from_amqp(amqp_id) == first


@pytest.mark.anyio
async def test_a_producer_sends_uuid_message_ids_when_asked() -> None:
    with BrokerThread() as broker:
        url = f"amqp://127.0.0.1:{broker.port}?jms.messageIDPolicy.messageIDType=UUID"
        async with aio.connect(url) as connection:
            await connection.start()
            session = await connection.create_session()
            producer = await session.create_producer(Queue("uuid-ids"))
            consumer = await session.create_consumer(Queue("uuid-ids"))
            message = TextMessage("hi")
            await producer.send(message, delivery_mode=DeliveryMode.PERSISTENT)
            assert message.message_id is not None
            assert re.fullmatch(rf"ID:AMQP_UUID:{SOME_UUID}", message.message_id)
            received = await consumer.receive(5.0)
            assert received is not None and received.message_id == message.message_id
