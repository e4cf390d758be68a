"""The redelivery limit: a message whose delivery failed goes to the dead-letter queue, instead
of back to its queue, once its delivery-count after the failure's increment reaches the limit
(it was delivered that many times). Released (and modified without delivery-failed) outcomes do
not count; a link or connection that goes away with the message unsettled does.
"""

from __future__ import annotations

import anyio
import pytest
from brokerkit import (
    TIMEOUT,
    body_of,
    connect,
    coordinator,
    count_of,
    declare,
    message,
    receive,
    receiver,
    sender,
    sync,
)

from chaos.broker import Broker
from haclient.amqp.codec import encode_discharge
from haclient.amqp.connection import AmqpConnection
from haclient.amqp.types import Accepted, Modified, Released, TransactionalState

pytestmark = pytest.mark.anyio

FAILED = Modified(delivery_failed=True)


async def put(conn: AmqpConnection, address: str, body: str) -> None:
    assert await conn.send(await sender(conn, address), message(body)) == Accepted()


async def test_modified_delivery_failed_dead_letters_at_the_limit() -> None:
    async with Broker(max_delivery_count=3) as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                await put(conn, "q", "poison")
                link = await receiver(conn, "q", credit=1)
                for expected in (0, 1, 2):  # three deliveries
                    got = await receive(conn, link)
                    assert count_of(got) == expected
                    conn.settle(got, FAILED)
                    conn.flow(link, 1)
                await sync(conn)
                assert conn.receive_nowait(link) is None
                assert broker.queue_depth("q") == 0 and broker.unacked_count("q") == 0
                dead = await receive(conn, await receiver(conn, "DLQ"))
                assert body_of(dead) == "poison" and count_of(dead) == 3


async def test_released_does_not_count_towards_the_limit() -> None:
    async with Broker(max_delivery_count=1) as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                await put(conn, "q", "x")
                link = await receiver(conn, "q", credit=1)
                for _ in range(3):
                    got = await receive(conn, link)
                    conn.settle(got, Released())
                    conn.flow(link, 1)
                got = await receive(conn, link)
                assert count_of(got) == 0
                conn.settle(got, Modified())  # not failed: does not count either
                conn.flow(link, 1)
                got = await receive(conn, link)
                conn.settle(got, FAILED)  # the first failed delivery reaches a limit of 1
                await sync(conn)
                assert broker.queue_depth("q") == 0 and broker.queue_depth("DLQ") == 1


async def test_connection_loss_with_the_message_unsettled_counts_towards_the_limit() -> None:
    async with Broker(max_delivery_count=2) as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker, "producer") as conn:
                await put(conn, "q", "poison")
                for expected in (0, 1):
                    async with connect(broker, f"doomed-{expected}") as doomed:
                        got = await receive(doomed, await receiver(doomed, "q"))
                        assert count_of(got) == expected
                    # closing the connection released the unsettled delivery (count + 1)
                await sync(conn)
                assert broker.queue_depth("q") == 0 and broker.unacked_count("q") == 0
                dead = await receive(conn, await receiver(conn, "DLQ"))
                assert body_of(dead) == "poison" and count_of(dead) == 2


async def test_rolled_back_acknowledgement_counts_towards_the_limit() -> None:
    async with Broker(max_delivery_count=1) as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                await put(conn, "q", "x")
                coord = await coordinator(conn)
                txn_id = await declare(conn, coord)
                link = await receiver(conn, "q", credit=1)
                conn.settle(await receive(conn, link), TransactionalState(txn_id, Accepted()))
                assert await conn.send(coord, encode_discharge(txn_id, fail=True)) == Accepted()
                assert broker.queue_depth("q") == 0 and broker.unacked_count("q") == 0
                dead = await receive(conn, await receiver(conn, "DLQ"))
                assert body_of(dead) == "x" and count_of(dead) == 1


async def test_per_queue_limit_overrides_the_default() -> None:
    policies = {"fragile": 1, "unbounded": None}
    async with Broker(max_delivery_count=2, queue_policies=policies) as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                for address in ("fragile", "default", "unbounded"):
                    await put(conn, address, address)
                for address, deliveries in (("fragile", 1), ("default", 2), ("unbounded", 5)):
                    link = await receiver(conn, address, credit=1)
                    for _ in range(deliveries):
                        conn.settle(await receive(conn, link), FAILED)
                        conn.flow(link, 1)
                    await sync(conn)
                    expect_depth = 1 if address == "unbounded" else 0
                    assert broker.queue_depth(address) + broker.unacked_count(address) == (
                        expect_depth
                    )
                dead = await receiver(conn, "DLQ")
                got = [await receive(conn, dead) for _ in range(2)]
                assert sorted(body_of(m) for m in got) == ["default", "fragile"]


async def test_without_a_limit_a_failing_message_keeps_coming_back(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await put(conn, "q", "x")
            link = await receiver(conn, "q", credit=1)
            for expected in range(20):
                got = await receive(conn, link)
                assert count_of(got) == expected
                conn.settle(got, FAILED)
                conn.flow(link, 1)
            assert "DLQ" not in [node.name for node in broker.nodes()]


async def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        async with Broker(max_delivery_count=0):
            pass


async def test_E6_in_activemq_mode_undeliverable_here_moves_the_message_to_activemq_dlq() -> None:
    """Issue 39, item 11: E6's default outcome past max_redeliveries, modified(delivery-failed,
    undeliverable-here), is a poison ack to ActiveMQ 5.x: the message goes to ActiveMQ.DLQ
    (verified on 5.17), where the reference broker kept it on the queue."""
    async with Broker(mode="activemq") as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                await put(conn, "q", "poison")
                link = await receiver(conn, "q", credit=1)
                got = await receive(conn, link)
                conn.settle(got, Modified(delivery_failed=True, undeliverable_here=True))
                await sync(conn)
                assert broker.queue_depth("q") == 0 and broker.unacked_count("q") == 0
                dead = await receive(conn, await receiver(conn, "ActiveMQ.DLQ"))
                assert body_of(dead) == "poison"


async def test_E6_outside_activemq_mode_undeliverable_here_keeps_the_message() -> None:
    async with Broker() as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                await put(conn, "q", "kept")
                link = await receiver(conn, "q", credit=1)
                got = await receive(conn, link)
                conn.settle(got, Modified(delivery_failed=True, undeliverable_here=True))
                await sync(conn)
                assert broker.queue_depth("q") == 1  # not to this consumer again, still there
