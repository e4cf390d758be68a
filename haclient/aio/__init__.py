"""The async JMS-style API (the implementation; the blocking ``haclient`` API wraps it).

Runs on any anyio backend (asyncio or trio)::

    import haclient.aio as aio

    async with aio.connect("amqp://127.0.0.1:5672", client_id="app-1") as conn:
        await conn.start()
        async with await conn.create_session(AckMode.CLIENT) as session:
            consumer = await session.create_consumer(Queue("orders"))
            async for msg in consumer:
                await msg.acknowledge()

Every call that needs the network is a coroutine; ``close()`` may be called from any task.
``async with aio.connect(...)`` owns the connection's background tasks in the calling task
(structured); ``conn = await aio.connect(...)`` hosts them in a task of their own until
``close()`` (kept for compatibility).
"""

from __future__ import annotations

from haclient.aio.browser import QueueBrowser
from haclient.aio.connection import (
    Connecting,
    Connection,
    ConnectionFactory,
    ConnectionState,
    ConnectionStatistics,
    connect,
)
from haclient.aio.consumer import MessageConsumer, MessageListener
from haclient.aio.options import ConnectionOptions
from haclient.aio.producer import CompletionListener, MessageProducer
from haclient.aio.session import Session
from haclient.modes import AckConfirmation, AckMode

__all__ = [
    "AckConfirmation",
    "AckMode",
    "CompletionListener",
    "Connecting",
    "Connection",
    "ConnectionFactory",
    "ConnectionOptions",
    "ConnectionState",
    "ConnectionStatistics",
    "MessageConsumer",
    "MessageListener",
    "MessageProducer",
    "QueueBrowser",
    "Session",
    "connect",
]
