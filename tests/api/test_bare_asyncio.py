"""The async API under a bare ``asyncio.run``, as an application that never heard of anyio runs
it: no anyio runner sets the event-loop library for what runs outside a task (the driver's
reader callback, its timer), and nothing of the connection may depend on one."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

import haclient.aio as aio
from chaos.broker import BrokerThread
from haclient.destination import Queue
from haclient.message import DeliveryMode, TextMessage

HANG = 10.0


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    with BrokerThread() as thread:
        yield thread


def test_a_connection_sends_and_receives_under_a_bare_asyncio_run(broker: BrokerThread) -> None:
    async def main() -> list[str]:
        async with aio.connect(broker.url) as connection:
            await connection.start()
            session = await connection.create_session()
            producer = await session.create_producer(Queue("bare-asyncio"))
            consumer = await session.create_consumer(Queue("bare-asyncio"))
            for text in ("one", "two"):
                await producer.send(TextMessage(text), delivery_mode=DeliveryMode.PERSISTENT)
            bodies = []
            for _ in range(2):
                message = await consumer.receive(HANG)
                assert isinstance(message, TextMessage)
                bodies.append(message.text)
            return bodies

    assert asyncio.run(asyncio.wait_for(main(), HANG)) == ["one", "two"]
