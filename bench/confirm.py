"""What each acknowledgement confirmation costs (A6): AUTO receive, per broker.

For each broker (the reference broker, the reference broker in ActiveMQ mode, a private RabbitMQ
node when installed) and each confirmation the broker answers (``ack_confirmation=...``), fill a
new queue (not timed), then time ``--count`` AUTO ``receive()`` calls (each returns only once the
broker confirmed the acknowledgement) and report msgs/s and this process's CPU per message,
medians over ``--rounds``. Checks: every message once, in order; the session used the
confirmation asked for; a fresh consumer finds the queue empty afterwards.

    .venv/bin/python -m bench.confirm                # 2,000 messages, 3 rounds
    .venv/bin/python -m bench.confirm --count 500 --rounds 1 --no-rabbitmq
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

import haclient.aio as aio
from bench.broker import ActiveMQModeBroker, BrokerProcess
from bench.throughput import PASSWORD, USER, BenchError
from chaos.rabbitmq import RabbitMQNode
from haclient.destination import Queue
from haclient.message import DeliveryMode, TextMessage
from haclient.modes import AckConfirmation, AckMode

STRATEGIES = {
    "reference": ("settle-second", "drain", "round-trip"),
    "activemq": ("drain", "round-trip"),
    "rabbitmq": ("link-flow", "round-trip"),
}


async def _fill(url: str, queue: str, count: int) -> None:
    async with await aio.connect(url, username=USER, password=PASSWORD) as connection:
        session = await connection.create_session()
        producer = await session.create_producer(Queue(queue))
        producer.delivery_mode = DeliveryMode.NON_PERSISTENT  # pipelined: the setup, not timed
        for i in range(count):
            await producer.send(TextMessage(str(i)))
        await producer.flush()


async def _left(url: str, queue: str) -> bool:
    async with await aio.connect(url, username=USER, password=PASSWORD) as connection:
        await connection.start()
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue(queue))
        return await consumer.receive(0.3) is not None


async def timed_auto_receive(
    url: str, count: int, name: str, **options: Any
) -> tuple[float, float, AckConfirmation]:
    """Fill a new queue with ``count`` messages, then time their AUTO receive on a connection
    with ``options``: (msgs/s, CPU us per message, the confirmation the session used). Checks
    every message once, in order, and the queue empty afterwards (``name`` in the errors)."""
    queue = f"confirm-{name}-{uuid.uuid4().hex[:8]}"
    await _fill(url, queue, count)
    async with await aio.connect(url, username=USER, password=PASSWORD, **options) as connection:
        await connection.start()
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue(queue))
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(count):
            message = await consumer.receive(10)
            if message is None or message.body != str(i):
                raise BenchError(f"{name}: message {i} missing or out of order")
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        confirmation = session.ack_confirmation
    await anyio.sleep(0.2)  # unconfirmed acknowledgements reach the broker before the check
    if await _left(url, queue):
        raise BenchError(f"{name}: the queue is not empty afterwards")
    return count / wall, cpu / count * 1e6, confirmation


async def _phase(url: str, strategy: str, count: int) -> tuple[float, float]:
    """One timed AUTO receive of ``count`` messages: (msgs/s, CPU us per message)."""
    rate, cpu, used = await timed_auto_receive(url, count, strategy, ack_confirmation=strategy)
    if used.value != strategy:
        raise BenchError(f"asked for {strategy}, used {used.value}")
    return rate, cpu


@contextmanager
def _brokers(rabbitmq: bool, work: Path) -> Iterator[dict[str, str]]:
    reference = BrokerProcess("reference", work, store=False)
    activemq = ActiveMQModeBroker("activemq", work, store=False)
    node = RabbitMQNode() if rabbitmq and RabbitMQNode.available() else None
    try:
        reference.start()
        activemq.start()
        urls = {
            "reference": f"amqp://127.0.0.1:{reference.port}",
            "activemq": f"amqp://127.0.0.1:{activemq.port}",
        }
        if node is not None:
            node.start()
            urls["rabbitmq"] = f"amqp://127.0.0.1:{node.port}"
        yield urls
    finally:
        reference.stop()
        activemq.stop()
        if node is not None:
            node.stop()


def main(argv: list[str] | None = None) -> int:
    """Run the measurements and print one line per broker and strategy."""
    parser = argparse.ArgumentParser(prog="bench.confirm", description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-rabbitmq", action="store_true")
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory(prefix="bench-confirm-") as work,
        _brokers(not args.no_rabbitmq, Path(work)) as urls,
    ):
        print("broker     confirmation     msgs/s  CPU us/msg  (medians of rounds)")
        for broker, url in urls.items():
            for strategy in STRATEGIES[broker]:
                runs = [anyio.run(_phase, url, strategy, args.count) for _ in range(args.rounds)]
                rate = statistics.median(r for r, _ in runs)
                cpu = statistics.median(c for _, c in runs)
                print(f"{broker:10} {strategy:14} {rate:8,.0f}  {cpu:10,.0f}", flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
