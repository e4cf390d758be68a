"""End to end: a haclient connection reaches a reference broker through the embedded Toxiproxy;
a network fault injected through the API makes it fail over to a second broker, and the
application's send completes there (F3, F11). Outcomes are read on the brokers' admin API."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import anyio
import pytest

import haclient.aio as aio
from chaos.broker import BrokerThread
from chaos.toxiproxy.client import ToxiproxyClient
from haclient.destination import Queue
from haclient.message import TextMessage

pytestmark = pytest.mark.anyio

TIMEOUT = 20.0


def url_through(listen: str, second: BrokerThread) -> str:
    options = "failover.method=roundrobin&failover.connectdelay=0&failover.cyclecount=50"
    return f"failover:(amqp://{listen},{second.url})?{options}"


@pytest.fixture
def brokers() -> Iterator[tuple[BrokerThread, BrokerThread]]:
    """Two reference brokers: the first is reached through a proxy, the second directly."""
    with BrokerThread() as first, BrokerThread() as second:
        yield first, second


@asynccontextmanager
async def sent_through(
    client: ToxiproxyClient, proxy: str, brokers: tuple[BrokerThread, BrokerThread], queue: str
) -> AsyncIterator[aio.MessageProducer]:
    """A producer to ``queue`` that sent "before" to the first broker through the new proxy
    ``proxy``, on a connection that fails over to the second; closed on leaving the block."""
    first, second = brokers
    listen = client.create_proxy(proxy, f"127.0.0.1:{first.port}").listen
    async with await aio.connect(url_through(listen, second)) as connection:
        session = await connection.create_session()
        producer = await session.create_producer(Queue(queue))
        await producer.send(TextMessage("before"))
        yield producer


async def test_F3_disabling_the_proxy_fails_over_and_the_send_completes(
    client: ToxiproxyClient, brokers: tuple[BrokerThread, BrokerThread]
) -> None:
    first, second = brokers
    async with sent_through(client, "amqp-a", brokers, "tp-disable") as producer:
        assert first.queue_depth("tp-disable") == 1
        await anyio.to_thread.run_sync(client.disable, "amqp-a")
        with anyio.fail_after(TIMEOUT):
            await producer.send(TextMessage("after"))  # waits for the failover, then goes
    assert second.queue_depth("tp-disable") == 1
    assert first.queue_depth("tp-disable") == 1


async def test_F11_a_send_cut_by_reset_peer_is_resent_on_the_second_broker(
    client: ToxiproxyClient, brokers: tuple[BrokerThread, BrokerThread]
) -> None:
    first, second = brokers
    async with sent_through(client, "amqp-b", brokers, "tp-reset") as producer:
        # The next bytes the client sends (the transfer) are discarded and the connection
        # closed: the broker never sees the message.
        await anyio.to_thread.run_sync(
            lambda: client.add_toxic("amqp-b", "reset_peer", stream="upstream")
        )
        with anyio.fail_after(TIMEOUT):
            await producer.send(TextMessage("cut"))
    assert first.queue_depth("tp-reset") == 1  # "before" only
    assert second.queue_depth("tp-reset") == 1  # "cut", re-sent after the failover
