"""Rules F7 (a transaction open at failover rolls back; the session goes on) and F13 (a silent
broker is found by heartbeats), on real reference brokers, through both APIs."""

from __future__ import annotations

import time

import pytest
from apikit import Api
from failoverkit import Recorder, brokers, failover_url, port_of, send_to

import haclient.aio as aio
from haclient.destination import Queue
from haclient.errors import TransactionRolledBackError
from haclient.message import TextMessage
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio


async def _bodies(url: str, queue: str) -> list[str]:
    """What a fresh AUTO consumer finds on ``queue`` of one broker."""
    async with await aio.connect(url) as connection:
        await connection.start()
        session = await connection.create_session()
        consumer = await session.create_consumer(Queue(queue))
        bodies = []
        while (message := await consumer.receive(0.5)) is not None:
            bodies.append(message.text)  # type: ignore[attr-defined]
        return bodies


async def test_F7_a_dirty_transaction_rolls_back_at_failover_and_can_be_replayed(
    api: Api,
) -> None:
    with brokers(2) as (first, second):
        recorder = Recorder()
        url = failover_url(first, second)
        async with await api.connect(url) as connection:
            await connection.add_listener(recorder)
            session = await connection.create_session(AckMode.TRANSACTED)
            producer = await session.create_producer(Queue("f7"))
            await producer.send(TextMessage("lost with the broker"))  # dirty
            first.kill()
            await recorder.wait_for("completed")
            with pytest.raises(TransactionRolledBackError) as rolled_back:
                await session.commit()
            assert not rolled_back.value.in_doubt
            for body in ("replayed 1", "replayed 2"):  # the application replays it
                await producer.send(TextMessage(body))
            await session.commit()
            await producer.send(TextMessage("clean commit"))
            await session.commit()
        assert await _bodies(second.url, "f7") == ["replayed 1", "replayed 2", "clean commit"]


async def test_F7_a_transaction_that_received_rolls_back_at_failover(api: Api) -> None:
    with brokers(2) as (first, second):
        for broker in (first, second):
            await send_to(broker.url, "f7r", f"on {broker.port}")
        recorder = Recorder()
        async with await api.connect(failover_url(first, second)) as connection:
            await connection.add_listener(recorder)
            await connection.start()
            session = await connection.create_session(AckMode.TRANSACTED)
            consumer = await session.create_consumer(Queue("f7r"))
            received = await consumer.receive(5)
            assert received.text == f"on {first.port}"  # dirty: consumed, not committed
            first.kill()
            await recorder.wait_for("completed")
            with pytest.raises(TransactionRolledBackError) as rolled_back:
                await session.commit()
            assert not rolled_back.value.in_doubt
            replayed = await consumer.receive(5)  # the application receives again
            assert replayed.text == f"on {second.port}"
            await session.commit()
        assert second.queue_depth("f7r") == 0


async def test_F7_a_clean_transaction_commits_normally_after_failover(api: Api) -> None:
    with brokers(2) as (first, second):
        recorder = Recorder()
        async with await api.connect(failover_url(first, second)) as connection:
            await connection.add_listener(recorder)
            session = await connection.create_session(AckMode.TRANSACTED)
            producer = await session.create_producer(Queue("f7c"))
            await producer.send(TextMessage("before"))
            await session.commit()  # clean from here on
            first.kill()
            await recorder.wait_for("completed")
            await producer.send(TextMessage("after"))
            await session.commit()  # no TransactionRolledBackError: nothing was lost
        assert await _bodies(second.url, "f7c") == ["after"]


async def test_F13_a_silent_broker_is_detected_by_heartbeats(api: Api) -> None:
    idle = 0.5
    with brokers(2) as (first, second):
        recorder = Recorder()
        url = failover_url(first, second)
        async with await api.connect(url, idle_timeout=idle) as connection:
            await connection.add_listener(recorder)
            session = await connection.create_session()
            producer = await session.create_producer(Queue("f13"))
            first.pause()  # no bytes in or out, the socket stays open: TCP says nothing
            silenced = time.monotonic()
            try:
                started = await recorder.wait_for("started", timeout=4 * idle + 2)
                detected = recorder.events[0][2] - silenced
                await recorder.wait_for("completed")
                await producer.send(TextMessage("on the second broker"))
            finally:
                first.resume()
        assert "idle" in str(started[0]).lower() or "heartbeat" in str(started[0]).lower()
        assert detected < 2 * idle + 1.0  # about two idle timeouts, with slack for the loop
        assert [port_of(b) for b in recorder.named("completed")] == [second.port]
        assert second.queue_depth("f13") == 1
