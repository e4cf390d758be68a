"""The first program with the async API: the same calls, awaited (asyncio or trio).

Start a reference broker first (docs/guide/getting-started.md):

    .venv/bin/haclient-broker --port 5672 --user app:secret
"""

import anyio

import haclient.aio as aio
from haclient import Queue, TextMessage

URL = "failover:(amqp://app:secret@127.0.0.1:5672)"


async def main() -> None:
    async with aio.connect(URL) as connection:  # its tasks live in this block
        await connection.start()
        async with await connection.create_session() as session:
            producer = await session.create_producer(Queue("orders"))
            await producer.send(TextMessage("order 2"))
            print("sent: order 2")

            consumer = await session.create_consumer(Queue("orders"))
            message = await consumer.receive(timeout=5)
            if message is None:
                raise SystemExit("nothing received within 5 s")
            print(f"received: {message.text}")


anyio.run(main)  # anyio.run(main, backend="trio") on trio
