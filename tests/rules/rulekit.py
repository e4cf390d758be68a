"""Small steps the rule tests share: open a started connection, send, count what is left."""

from __future__ import annotations

from typing import Any

from apikit import Api, Bed, Proxy

import haclient.aio as aio
from haclient.destination import Destination, Queue
from haclient.message import Message, TextMessage
from haclient.modes import AckMode

TIMEOUT = 5.0


async def started(api: Api, bed: Bed, **options: Any) -> Proxy:
    """A started connection through ``api``."""
    connection = await api.connect(bed.url, **bed.options(**options))
    await connection.start()
    return connection


async def send(bed: Bed, destination: Destination, *messages: Message | str) -> None:
    """Send with the async core on a connection of its own (the setup, not the rule)."""
    async with await aio.connect(bed.url, **bed.options()) as connection:
        session = await connection.create_session()
        producer = await session.create_producer(destination)
        for message in messages:
            await producer.send(TextMessage(message) if isinstance(message, str) else message)


async def leftovers(bed: Bed, queue: str, wait: float = 0.5) -> list[Any]:
    """Bodies a fresh consumer (async core, AUTO) still finds on ``queue``: what the broker
    kept, i.e. what was not acknowledged."""
    bodies = []
    async with await aio.connect(bed.url, **bed.options()) as connection:
        await connection.start()
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue(queue))
        while (message := await consumer.receive(wait)) is not None:
            bodies.append(message.body)
    return bodies
