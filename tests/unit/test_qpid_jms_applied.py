"""Qpid JMS options applied with Qpid JMS's meaning: address prefixes, JMSXUserID, message ids.

Each test checks an option's effect where it shows: the prefixes a connection to a broker uses
(``jms.queuePrefix`` / ``jms.topicPrefix``; the prefix a broker announces in its Open wins, as
in Qpid JMS, whose ``AmqpConnectionProperties`` overwrites the configured one with it); the
``user-id`` of every message sent (``jms.populateJMSXUserID``: the logged-in user's name,
replacing the application's, as Qpid JMS's ``JmsSession.send`` does).
"""

from __future__ import annotations

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
from haclient.message import DeliveryMode, TextMessage
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
