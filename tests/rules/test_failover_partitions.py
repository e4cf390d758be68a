"""Failover through network partitions on a broker that notices a dead connection slowly, as
ActiveMQ 5.x does (issue 43): the reference broker in ActiveMQ mode, reached through the
embedded Toxiproxy, on both APIs.

A partition is staged with toxics on the proxy in use: a ``timeout`` each way (no frame passes,
so the client's heartbeat check declares the broker dead, and the Close frame it then sends is
dropped) and a ``slow_close`` upstream after it (the client's close of its socket does not reach
the broker either, as over a cut cable). The
broker then holds the dead connection, its client id and its unsettled deliveries until its own
idle timeout notices the silence (``STALE`` seconds advertised, twice that to notice; ActiveMQ:
15 and 30 s).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from apikit import Api, eventually
from failoverkit import Recorder

from chaos.broker import BrokerThread
from chaos.toxiproxy import ToxiproxyServer
from chaos.toxiproxy.client import ToxiproxyClient
from haclient.destination import Queue
from haclient.errors import (
    AcknowledgeFailedError,
    ConnectionFailedError,
    HAClientError,
    TransactionRolledBackError,
)
from haclient.message import TextMessage
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio

TIMEOUT = 20.0
STALE = 1.0
"""The broker's idle timeout in these tests (seconds): it drops a silent connection after
twice this. ActiveMQ's is 15 s; the rule does not depend on how long."""
CLIENT_IDLE = 0.5
"""The client's idle timeout: it declares a silent broker dead after twice this."""
FOREVER_MS = 600_000

_names = itertools.count(1)


@pytest.fixture(scope="module")
def toxiproxy() -> Iterator[ToxiproxyClient]:
    """The embedded Toxiproxy on a free loopback port, for one test module."""
    with ToxiproxyServer.running(port=0) as server:
        yield ToxiproxyClient(server.url)


@pytest.fixture
def activemq() -> Iterator[BrokerThread]:
    """A reference broker in ActiveMQ mode that notices a silent connection after 2 x STALE."""
    with BrokerThread(mode="activemq", idle_timeout=STALE) as broker:
        yield broker


@contextmanager
def proxies(client: ToxiproxyClient, broker: BrokerThread, count: int) -> Iterator[list[str]]:
    """``count`` proxies to ``broker``: their names (``listen`` addresses via ``client``)."""
    names = [f"partition-{next(_names)}-{uuid.uuid4().hex[:6]}" for _ in range(count)]
    try:
        for name in names:
            client.create_proxy(name, f"127.0.0.1:{broker.port}")
        yield names
    finally:
        for name in names:
            client.delete_proxy(name)


def url_over(client: ToxiproxyClient, names: list[str], **options: Any) -> str:
    query = "&".join(f"failover.{key}={value}" for key, value in options.items())
    listens = ",".join(f"amqp://{client.proxy(name).listen}" for name in names)
    return f"failover:({listens})?{query}"


async def partition(client: ToxiproxyClient, name: str) -> None:
    """Cut the connections through proxy ``name`` as a partition does: nothing from the broker
    arrives, and the client's close never reaches the broker."""

    def cut() -> None:
        client.add_toxic(name, "timeout", stream="downstream", timeout=0)
        client.add_toxic(name, "timeout", stream="upstream", timeout=0)  # a Close frame too
        client.add_toxic(name, "slow_close", stream="upstream", delay=FOREVER_MS)

    await anyio.to_thread.run_sync(cut)


async def hold_answers(client: ToxiproxyClient, name: str) -> None:
    """Hold everything the broker sends through proxy ``name``: what the client sends still
    arrives (an acknowledgement, a commit), the broker's answer never does."""
    await anyio.to_thread.run_sync(
        lambda: client.add_toxic(name, "timeout", stream="downstream", timeout=0)
    )


async def test_F4_a_client_id_our_dead_connection_still_holds_is_tried_again(
    api: Api,
    activemq: BrokerThread,
    toxiproxy: ToxiproxyClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The client notices the partition first; the broker still holds its connection and
    refuses the reconnect (through the other proxy) with "client id in use" until its idle
    timeout drops the dead one. The failover tries again and completes; nothing is lost."""
    queue = Queue(f"partition-{uuid.uuid4().hex[:8]}")
    recorder = Recorder()
    caplog.set_level(logging.WARNING, logger="haclient.connection")
    with proxies(toxiproxy, activemq, 2) as names, anyio.fail_after(TIMEOUT):
        url = url_over(toxiproxy, names, giveupafter=15_000)
        client_id = f"partitioned-{uuid.uuid4().hex[:8]}"
        connection = await api.connect(url, client_id=client_id, idle_timeout=CLIENT_IDLE)
        async with connection:
            await connection.add_listener(recorder)
            session = await connection.create_session()
            producer = await session.create_producer(queue)
            await producer.send(TextMessage("before"))
            await partition(toxiproxy, names[0])
            await eventually(lambda: recorder.named("completed") or recorder.named("failed"))
            assert recorder.named("failed") == []
            await producer.send(TextMessage("after"))
            statistics = await connection.statistics()
    assert statistics.client_id_refusals >= 1, statistics
    assert activemq.queue_depth(queue.name) == 2
    warnings = [r.getMessage() for r in caplog.records if "as in use" in r.getMessage()]
    assert len(warnings) == 1, warnings  # the first refusal of the failover only
    assert client_id in warnings[0]


MODES = [
    pytest.param(AckMode.AUTO, id="auto"),
    pytest.param(AckMode.CLIENT, id="client"),
    pytest.param(AckMode.TRANSACTED, id="transacted"),
]


@pytest.mark.parametrize("mode", MODES)
async def test_F4_an_acknowledgement_in_doubt_when_failover_gives_up_loses_no_message(
    api: Api, activemq: BrokerThread, toxiproxy: ToxiproxyClient, mode: AckMode
) -> None:
    """The broker applies the acknowledgement (or the commit) and its answer is cut off; the
    failover then gives up. The message is the application's all the same: in AUTO mode
    ``receive()`` hands it out flagged ``ack_in_doubt``, and only the next call raises
    ``ConnectionFailedError``; in CLIENT and TRANSACTED mode the application holds it and the
    acknowledgement or commit says that it is in doubt."""
    queue = Queue(f"in-doubt-{uuid.uuid4().hex[:8]}")
    with proxies(toxiproxy, activemq, 1) as names, anyio.fail_after(TIMEOUT):
        url = url_over(toxiproxy, names, giveupafter=1_500, connectdelay=50, maxdelay=100)
        async with await api.connect(activemq.url) as feeder:
            producer = await (await feeder.create_session()).create_producer(queue)
            await producer.send(TextMessage("M"))
        connection = await api.connect(url, idle_timeout=CLIENT_IDLE, connect_timeout=0.5)
        try:
            await _in_doubt_at_give_up(api, activemq, toxiproxy, names[0], connection, queue, mode)
        finally:
            await connection.close()
    # The broker applied it: had the client said nothing, the message would be lost.
    assert activemq.queue_depth(queue.name) == 0
    assert activemq.unacked_count(queue.name) == 0


SPIN = 2.0
"""How long the application keeps calling on its dead connection (seconds)."""


async def _call_on_a_dead_connection_until(api: Api, producer: Any, until: float) -> int:
    """Send again and again on ``producer`` (its failover gave up) until ``until`` (of
    ``time.monotonic``): an application that retries in a loop. The number of calls."""

    def spin_blocking() -> int:
        calls = 0
        while time.monotonic() < until:
            with contextlib.suppress(HAClientError):
                producer.target.send(TextMessage("again"))
            calls += 1
        return calls

    if api.name == "blocking":
        return await anyio.to_thread.run_sync(spin_blocking)
    calls = 0
    while time.monotonic() < until:
        with contextlib.suppress(HAClientError):
            await producer.target.send(TextMessage("again"))
        calls += 1
    return calls


async def test_F4_calls_on_a_connection_that_is_gone_never_hold_up_other_calls(
    api: Api, activemq: BrokerThread, toxiproxy: ToxiproxyClient
) -> None:
    """A failover gives up; the application calls on that connection again and again. Each
    such call raises at once, and is a checkpoint all the same: a ``receive(timeout)`` on
    another connection of the same application keeps its own deadline (on a real ActiveMQ
    broker, such a loop made every receive(0.5) of its event loop take 7 s)."""
    with proxies(toxiproxy, activemq, 1) as names, anyio.fail_after(TIMEOUT):
        url = url_over(toxiproxy, names, giveupafter=300, connectdelay=50, maxdelay=50)
        doomed = await api.connect(url, idle_timeout=CLIENT_IDLE)
        try:
            producer = await (await doomed.create_session()).create_producer(Queue("gone"))
            recorder = Recorder()
            await doomed.add_listener(recorder)
            await anyio.to_thread.run_sync(toxiproxy.disable, names[0])
            await recorder.wait_for("failed", timeout=TIMEOUT)
            async with await api.connect(activemq.url) as healthy:
                await healthy.start()
                session = await healthy.create_session()
                consumer = await session.create_consumer(Queue(f"quiet-{uuid.uuid4().hex[:8]}"))
                until = time.monotonic() + SPIN
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_call_on_a_dead_connection_until, api, producer, until)
                    started = time.monotonic()
                    assert await consumer.receive(0.2) is None
                    took = time.monotonic() - started
        finally:
            await doomed.close()
    assert took < SPIN / 2, f"receive(0.2) took {took:.2f} s beside the calls on the dead one"


async def _in_doubt_at_give_up(
    api: Api,
    activemq: BrokerThread,
    toxiproxy: ToxiproxyClient,
    proxy: str,
    connection: Any,
    queue: Queue,
    mode: AckMode,
) -> None:
    """The body of the test above, on ``connection`` (through ``proxy``): the message is the
    application's whatever becomes of the connection."""
    recorder = Recorder()
    await connection.add_listener(recorder)
    await connection.start()
    session = await connection.create_session(mode)
    consumer = await session.create_consumer(queue)
    await eventually(lambda: activemq.unacked_count(queue.name) == 1)  # prefetched
    if mode is AckMode.AUTO:
        await hold_answers(toxiproxy, proxy)
        message = await consumer.receive(TIMEOUT)  # acknowledged before it is returned
        assert message is not None and message.text == "M"
        assert message.ack_in_doubt and message.redelivered
        with pytest.raises(ConnectionFailedError):  # the failover had given up
            await consumer.receive(1)
    else:
        message = await consumer.receive(TIMEOUT)
        assert message is not None and message.text == "M"
        await hold_answers(toxiproxy, proxy)
        if mode is AckMode.CLIENT:
            with pytest.raises(AcknowledgeFailedError) as in_doubt:
                await api.acknowledge(message)
        else:
            with pytest.raises(TransactionRolledBackError) as in_doubt:  # type: ignore[assignment]
                await session.commit()
        assert in_doubt.value.in_doubt
    await recorder.wait_for("failed", timeout=TIMEOUT)
