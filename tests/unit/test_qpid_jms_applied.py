"""Qpid JMS options applied with Qpid JMS's meaning: address prefixes, JMSXUserID, message ids.

Each test checks an option's effect where it shows: the prefixes a connection to a broker uses
(``jms.queuePrefix`` / ``jms.topicPrefix``; the prefix a broker announces in its Open wins, as
in Qpid JMS, whose ``AmqpConnectionProperties`` overwrites the configured one with it).
"""

from __future__ import annotations

import anyio
import pytest

from chaos.broker import BrokerThread
from failover.url import parse_url
from haclient.aio.options import ConnectionOptions
from haclient.aio.physical import _prefixes, open_physical
from haclient.destination import DestinationPrefixes, Queue, TemporaryQueue, address_of

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
