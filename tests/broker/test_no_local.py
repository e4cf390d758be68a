"""No-local, as the JMS 2.0 clarification (seed ``000_aad2b2664e0e108b``, JMS_SPEC-65) defines it.

A subscription created with ``apache.org:no-local-filter:list`` while the connection has a
client id (its container id) never gets a message published by any connection with that
client id, whenever it was published, for the life of the subscription. Without a client id
(a subscription in the global namespace) the filter has no effect.
"""

from __future__ import annotations

import anyio
import pytest
from brokerkit import TIMEOUT, body_of, connect, message, receive, receiver, sender, sync, wake

from chaos.broker import Broker
from chaos.broker.filters import NO_LOCAL_CODE, NO_LOCAL_FILTER
from haclient.amqp.connection import AmqpConnection
from haclient.amqp.types import (
    Accepted,
    AmqpDescribed,
    Durability,
    ExpiryPolicy,
    Symbol,
    Terminus,
    ULong,
)

pytestmark = pytest.mark.anyio

TOPIC = "topic://news"


def no_local_source(*capabilities: str, durable: bool = True, by_code: bool = False) -> Terminus:
    descriptor = ULong(NO_LOCAL_CODE) if by_code else Symbol(NO_LOCAL_FILTER)
    return Terminus(
        address="news",
        capabilities=("topic", *capabilities),
        durable=Durability.UNSETTLED_STATE if durable else Durability.NONE,
        expiry_policy=ExpiryPolicy.NEVER if durable else ExpiryPolicy.LINK_DETACH,
        filter={NO_LOCAL_FILTER: AmqpDescribed(descriptor, [])},
    )


async def publish(conn: AmqpConnection, body: str) -> None:
    link = await sender(conn, TOPIC)
    assert await conn.send(link, message(body)) == Accepted()


def depth(broker: Broker) -> int:
    [info] = broker.state.subscriptions()
    return info.depth


async def step(broker: Broker, *, send: str | None) -> list[str]:
    """One connection with client id "foo": (re)create subscription "bar", maybe publish."""
    async with connect(broker, "foo") as conn:
        link = await receiver(conn, no_local_source(), name="bar")
        assert NO_LOCAL_FILTER in (link.remote_source.filter or {})  # echoed: applied
        if send is not None:
            await publish(conn, send)
        await sync(conn)
        got = []
        while (received := conn.receive_nowait(link)) is not None:
            got.append(body_of(received))
        link.detach()
        wake(conn)
        await sync(conn)
        return got


async def test_case_1_own_connection_messages_are_not_received(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        assert await step(broker, send="Hello") == []
        assert depth(broker) == 0


async def test_case_2_message_of_the_creating_connection_is_never_added(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        assert await step(broker, send="Hello") == []
        assert await step(broker, send=None) == []  # a second connection, same client id
        assert depth(broker) == 0


async def test_case_3_any_connection_with_the_client_id_never_adds(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        assert await step(broker, send="Hello") == []
        assert await step(broker, send="Hello again") == []
        # a connection with the client id that never attached the subscription: still local
        async with connect(broker, "foo") as conn:
            await publish(conn, "from a producer-only connection")
        # another client id's messages are added
        async with connect(broker, "someone-else") as conn:
            await publish(conn, "foreign")
        assert await step(broker, send=None) == ["foreign"]


async def test_no_client_id_global_subscription_no_local_has_no_effect(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "random-1") as conn:
            link = await receiver(conn, no_local_source("shared", "global"), name="bar|global")
            await publish(conn, "mine")
            assert body_of(await receive(conn, link)) == "mine"


async def test_volatile_topic_consumer_with_no_local_by_code(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "foo") as conn, connect(broker, "bar") as other:
            link = await receiver(conn, no_local_source(durable=False, by_code=True), name="s")
            await publish(conn, "mine")
            await publish(other, "theirs")
            assert body_of(await receive(conn, link)) == "theirs"
            await sync(conn)
            assert conn.receive_nowait(link) is None
