"""The end of a run: empty every queue it used and write down what was left.

A workload's consumer stops once it consumed what its producer promised, or after a quiet
spell; a copy that arrives later (a send re-sent after a failover, F11) or a message it never
got stays on the queue. ``drain`` takes each of them off and writes one ``left`` event per
message into the ledger, with the stream the queue belongs to, so the audit accounts for it (a
copy of a consumed message is a duplicate to report) and no later run finds it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import anyio

import haclient.aio as aio
from chaos.audit import Ledger
from haclient import AckMode, Queue

__all__ = ["QUIET", "drain"]

log = logging.getLogger("chaos.runner")

QUIET = 1.0
"""Seconds a queue stays empty before the drain leaves it."""
AT_ONCE = 32
"""Queues drained at the same time (one session and consumer each)."""
DRAIN_DEADLINE = 300.0
"""The longest a drain may take: longer means it is stuck, not that queues are still full."""


async def drain(
    url: str, queues: Mapping[str, str], ledger: Ledger, *, quiet: float = QUIET
) -> None:
    """Empty each queue of ``queues`` (queue name -> its stream) over one connection to
    ``url``, writing a ``left`` event per message taken off.

    Raises:
        TimeoutError: the drain took longer than ``DRAIN_DEADLINE``.
        HAClientError: the connection failed.
    """
    limiter = anyio.CapacityLimiter(AT_ONCE)
    with anyio.fail_after(DRAIN_DEADLINE):
        async with await aio.connect(url, close_timeout=1.0) as connection:
            await connection.start()
            async with anyio.create_task_group() as tg:
                for queue, stream in queues.items():
                    tg.start_soon(_drain_one, connection, limiter, queue, stream, ledger, quiet)


async def _drain_one(
    connection: aio.Connection,
    limiter: anyio.CapacityLimiter,
    queue: str,
    stream: str,
    ledger: Ledger,
    quiet: float,
) -> None:
    async with limiter:
        session = await connection.create_session(AckMode.AUTO)
        try:
            consumer = await session.create_consumer(Queue(queue))
            while (message := await consumer.receive(quiet)) is not None:
                ids = [str(message.message_id)]
                ledger.add("left", stream=stream, actor="drain", ids=ids)
        finally:
            await session.close()
    log.debug("drained %s", queue)
