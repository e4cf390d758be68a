"""The reference broker's ActiveMQ mode against haclient: the client's fallbacks for ActiveMQ 5.x
(mode ``second`` granted as ``first``, announced address prefixes, a refused duplicate client
id) run on a broker CI has."""

from __future__ import annotations

import anyio
import pytest
from apikit import Bed

import haclient.aio as aio
from chaos.broker import Broker, BrokerThread
from chaos.broker.cli import build_parser
from chaos.broker.state import BrokerMode
from haclient.destination import Queue, Topic
from haclient.errors import ClientIdInUseError, InvalidDestinationError
from haclient.message import TextMessage
from haclient.modes import AckConfirmation, AckMode

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0


def _attached_addresses(broker: BrokerThread) -> set[str]:
    """Every address the broker's current links were attached with (source or target)."""

    def collect() -> set[str]:
        found: set[str] = set()
        for connection in broker.broker.state.connections.values():
            for link in connection.links:
                for terminus in (link.remote_source, link.remote_target):
                    if terminus.address:
                        found.add(terminus.address)
        return found

    return broker.portal.call(collect)


async def test_the_open_frame_announces_the_prefixes_and_the_client_applies_them(
    activemq_broker: BrokerThread,
) -> None:
    queue, topic = Bed.unique("amq-q"), Bed.unique("amq-t")
    with anyio.fail_after(TIMEOUT):
        async with await aio.connect(activemq_broker.url) as connection:
            await connection.start()
            session = await connection.create_session(AckMode.AUTO)
            subscriber = await session.create_consumer(Topic(topic))
            producer = await session.create_producer(Queue(queue))
            publisher = await session.create_producer(Topic(topic))
            addresses = _attached_addresses(activemq_broker)
            assert {f"queue://{queue}", f"topic://{topic}"} <= addresses
            await producer.send(TextMessage("to the queue"))
            await publisher.send(TextMessage("to the topic"))
            received = await subscriber.receive(TIMEOUT)
            assert received is not None and received.body == "to the topic"
            assert activemq_broker.queue_depth(queue) == 1  # the node is named without the prefix


async def test_mode_second_is_granted_as_first_and_auto_confirms_another_way(
    activemq_broker: BrokerThread,
) -> None:
    queue = Bed.unique("amq-auto")
    with anyio.fail_after(TIMEOUT):
        async with await aio.connect(activemq_broker.url) as connection:
            await connection.start()
            session = await connection.create_session(AckMode.AUTO)
            producer = await session.create_producer(Queue(queue))
            await producer.send(TextMessage("one"))
            consumer = await session.create_consumer(Queue(queue))
            message = await consumer.receive(TIMEOUT)
            assert message is not None and message.body == "one"
            assert session.ack_confirmation is not AckConfirmation.SETTLE_SECOND
            assert session.ack_confirmation is not AckConfirmation.NONE
            assert activemq_broker.unacked_count(queue) == 0  # confirmed before receive returned
            assert activemq_broker.queue_depth(queue) == 0


async def test_a_second_connection_with_the_same_client_id_is_refused(
    activemq_broker: BrokerThread,
) -> None:
    client_id = Bed.unique("amq-client")
    with anyio.fail_after(TIMEOUT):
        async with await aio.connect(activemq_broker.url, client_id=client_id) as first:
            with pytest.raises(ClientIdInUseError) as refused:
                await aio.connect(activemq_broker.url, client_id=client_id)
            assert refused.value.condition == "amqp:invalid-field"
            assert first.client_id == client_id
        async with await aio.connect(activemq_broker.url, client_id=client_id):
            pass  # free again once the first one closed


def test_the_command_line_switch_selects_the_mode() -> None:
    assert build_parser().parse_args(["--activemq"]).activemq
    assert not build_parser().parse_args([]).activemq
    assert Broker(mode="activemq").mode is BrokerMode.ACTIVEMQ
    assert Broker().mode is BrokerMode.REFERENCE
    with pytest.raises(ValueError):
        Broker(mode="artemis")


async def test_item19_a_reply_to_a_temporary_queue_that_is_gone_is_an_invalid_destination(
    activemq_broker: BrokerThread,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with await aio.connect(activemq_broker.url) as replier:
            replies = await (await replier.create_session()).create_producer()
            requester = await aio.connect(activemq_broker.url)
            inbox = await (await requester.create_session()).create_temporary_queue()
            assert inbox.address.startswith("temp-queue://ID:")  # as ActiveMQ names it
            assert str(inbox) == inbox.address  # the scheme once
            await replies.send(inbox, TextMessage("in time"))
            await requester.close()  # the queue goes with its connection, as in a failover
            with pytest.raises(InvalidDestinationError) as gone:
                await replies.send(inbox, TextMessage("too late"))
    assert gone.value.condition == "failed"  # ActiveMQ 5.x's words, not amqp:not-found
    assert inbox.address in str(gone.value)
