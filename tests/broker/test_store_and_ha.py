"""Persistence and HA through the bare engine: restart on the store, and a shared-store pair."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from brokerkit import TIMEOUT, body_of, connect, message, receiver, sender

from chaos.broker import Broker
from chaos.net import free_port
from haclient.amqp import Accepted
from haclient.amqp.connection import AmqpConnection
from haclient.amqp.endpoints import Receiver
from haclient.errors import ConnectionLostError, HAClientError

pytestmark = pytest.mark.anyio


async def drain_bodies(conn: AmqpConnection, link: Receiver) -> list[object]:
    """Every message the queue has now, accepted one by one."""
    bodies: list[object] = []
    while (received := await conn.receive(link, timeout=0.5)) is not None:
        bodies.append(body_of(received))
        conn.settle(received, Accepted())
    return bodies


async def test_restart_on_the_store_keeps_durable_messages_and_loses_the_others(
    tmp_path: Path,
) -> None:
    async with Broker(store=tmp_path / "broker.db") as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                link = await sender(conn, "orders")
                for n in range(6):
                    outcome = await conn.send(link, message(f"m{n}", durable=n % 2 == 0))
                    assert outcome == Accepted()
        await broker.kill()  # a crash: no Close frames, memory gone, only the store remains
        await broker.start()
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                bodies = await drain_bodies(conn, await receiver(conn, "orders"))
    assert bodies == ["m0", "m2", "m4"]  # durable ones, in order; the transient ones died


async def test_acknowledged_durable_messages_stay_gone_after_restart(tmp_path: Path) -> None:
    async with Broker(store=tmp_path / "broker.db") as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                link = await sender(conn, "q")
                for n in range(4):
                    await conn.send(link, message(n, durable=True))
                consumer = await receiver(conn, "q", credit=2)
                for _ in range(2):
                    received = await conn.receive(consumer, timeout=TIMEOUT)
                    assert received is not None
                    conn.settle(received, Accepted(), settle=False)
                    await conn.wait_settled(received.delivery)  # the broker applied it
                await conn.close()
        await broker.kill()
        await broker.start()
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                assert await drain_bodies(conn, await receiver(conn, "q")) == [2, 3]


async def test_a_second_broker_on_the_same_store_waits_as_slave(tmp_path: Path) -> None:
    store = tmp_path / "shared.db"
    async with Broker(port=free_port(), store=store) as master:
        slave = Broker(port=free_port(), store=store, ha_poll_interval=0.05)
        async with anyio.create_task_group() as tg:
            tg.start_soon(_run_until_cancelled, slave)
            await anyio.sleep(0.3)  # give the slave every chance to (wrongly) start serving
            assert master.running and not slave.running
            with pytest.raises(HAClientError):
                async with connect(slave):
                    pass
            tg.cancel_scope.cancel()


async def _run_until_cancelled(broker: Broker, ready: anyio.Event | None = None) -> None:
    async with broker:
        if ready is not None:
            ready.set()
        await anyio.sleep_forever()


async def test_ha_pair_slave_takes_over_with_every_accepted_message(tmp_path: Path) -> None:
    """Kill the master mid-stream: the slave serves every message the master had accepted."""
    store = tmp_path / "shared.db"
    master = Broker(port=free_port(), store=store)
    slave = Broker(port=free_port(), store=store, ha_poll_interval=0.05)
    accepted: list[int] = []
    slave_ready = anyio.Event()
    async with master, anyio.create_task_group() as tg:
        tg.start_soon(_run_until_cancelled, slave, slave_ready)

        async with connect(master) as conn:
            link = await sender(conn, "ledger")
            deliveries = []
            for n in range(2000):  # pipelined; the kill lands while many are in flight
                await conn.wait_for_credit(link)
                deliveries.append((n, conn.send_nowait(link, message(n, durable=True))))
                if n == 600:
                    await conn.wait_settled(deliveries[300][1])
                    await master.kill()
                    break
            for n, delivery in deliveries:
                try:
                    if await conn.wait_settled(delivery) == Accepted():
                        accepted.append(n)
                except ConnectionLostError:
                    pass  # in flight when the master died: maybe stored, maybe not
        assert len(accepted) > 300

        with anyio.fail_after(TIMEOUT):
            await slave_ready.wait()  # took over within the poll interval
        assert slave.running and not master.running
        async with connect(slave) as conn:
            with anyio.fail_after(TIMEOUT):
                bodies = await drain_bodies(conn, await receiver(conn, "ledger", credit=1000))
        assert set(accepted) <= set(bodies), "an accepted message was lost in the takeover"
        assert bodies == sorted(bodies) and len(bodies) == len(set(bodies))  # FIFO, no doubles
        tg.cancel_scope.cancel()


async def test_queues_and_topics_outlive_a_restart_even_when_empty(tmp_path: Path) -> None:
    from haclient.amqp import Terminus

    async with Broker(store=tmp_path / "broker.db") as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                await sender(conn, "empty-queue")
                await sender(conn, Terminus(address="prices", capabilities=("topic",)))
                await sender(conn, Terminus(dynamic=True, capabilities=("temporary-queue",)))
        assert broker.delete_node("empty-queue")
        async with connect(broker) as conn:
            await sender(conn, "kept-queue")
        await broker.kill()
        await broker.start()
        nodes = broker.nodes()
        kinds = {info.name: info.kind for info in nodes}
    assert kinds.get("kept-queue") == "queue"
    assert kinds.get("prices") == "topic"
    assert "empty-queue" not in kinds  # deleted before the restart
    assert all(not info.temporary for info in nodes)  # temporary nodes never persist
