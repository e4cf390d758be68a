"""Rule S5: after failover, durable and shared subscriptions are attached again with the same
name, selector and no-local setting, through both APIs.

Two independent reference brokers: the connection starts on the first, which is killed; the
second has never seen the subscriptions, so what it holds afterwards is exactly what the client
re-attached (its admin API shows name, selector and no-local), and messages published there
show the selector and no-local at work.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from apikit import Api, Bed

import haclient.aio as aio
from chaos.broker import BrokerThread
from haclient.destination import Topic
from haclient.message import TextMessage
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0


@pytest.fixture
def two_brokers() -> Iterator[tuple[BrokerThread, BrokerThread]]:
    with BrokerThread() as first, BrokerThread() as second:
        yield first, second


def _failover_url(*brokers: BrokerThread) -> str:
    members = ",".join(broker.url for broker in brokers)
    return f"failover:({members})?failover.method=roundrobin&failover.connectdelay=0"


def _subscriptions(broker: BrokerThread) -> dict[str | None, Any]:
    return {info.name: info for info in Bed("reference", broker.url, admin=broker).subscriptions()}


async def _publish(url: str, *messages: TextMessage, topic: Topic) -> None:
    """Publish from a connection of its own (another client id: not 'local')."""
    async with await aio.connect(url) as connection:
        session = await connection.create_session()
        producer = await session.create_producer(topic)
        for message in messages:
            await producer.send(message)


async def test_S5_durable_and_shared_subscriptions_are_reattached_after_failover(
    api: Api, two_brokers: tuple[BrokerThread, BrokerThread]
) -> None:
    first, second = two_brokers
    topic = Topic(Bed.unique("s5-prices"))
    durable_name, shared_name = Bed.unique("s5-durable"), Bed.unique("s5-shared")
    async with await api.connect(_failover_url(first, second), client_id="s5-client") as conn:
        await conn.start()
        session = await conn.create_session(AckMode.AUTO)
        durable = await session.create_durable_consumer(
            topic, durable_name, selector="region = 'eu'", no_local=True
        )
        shared = await session.create_shared_consumer(topic, shared_name)
        before = _subscriptions(first)
        assert before[durable_name].selector == "region = 'eu'" and before[durable_name].no_local

        first.kill()
        with anyio.fail_after(TIMEOUT):
            while len(_subscriptions(second)) < 2:  # the client re-attaches on the second
                await anyio.sleep(0.02)
        after = _subscriptions(second)
        assert after[durable_name].durable and not after[durable_name].shared
        assert after[durable_name].selector == "region = 'eu'"
        assert after[durable_name].no_local
        assert after[shared_name].shared and not after[shared_name].durable
        assert after[durable_name].consumers == after[shared_name].consumers == 1

        own = await session.create_producer(topic)
        await own.send(TextMessage("local", properties={"region": "eu"}))  # no-local: withheld
        await _publish(
            second.url,
            TextMessage("eu", properties={"region": "eu"}),
            TextMessage("us", properties={"region": "us"}),
            topic=topic,
        )
        got = await durable.receive(TIMEOUT)
        assert got is not None and got.text == "eu"
        assert await durable.receive(0.3) is None  # neither "us" (selector) nor "local"
        shared_bodies = sorted([(await shared.receive(TIMEOUT)).text for _ in range(3)])
        assert shared_bodies == ["eu", "local", "us"]
