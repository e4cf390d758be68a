"""The outbox relay against plain pipelined sends, and the inbox against a plain acknowledge.

Run from the repository root::

    .venv/bin/python -m bench.outbox --count 5000 --rounds 3

One run starts the reference broker in its own process (``python -m chaos.broker.cli``, a free
loopback port, stopped by its pid at the end) and, in each round, measures with the async API:

1. ``pipelined send``: ``count`` NON_PERSISTENT sends then ``producer.flush()`` (bench.jms's
   pipelined send), and ``send_async``: PERSISTENT sends pipelined, all outcomes awaited.
2. ``relay``: ``count`` rows written beforehand (not timed) into a SQLite outbox (WAL), then a
   ``Relay`` from its start until the outbox is empty (every row accepted and deleted).
   Goal: >= 0.8x the pipelined send.
3. ``receive CLIENT each``: receive and ``message.acknowledge()`` per message; ``inbox``: the
   same with ``Inbox.handle`` (an effect row and the id in one SQLite transaction, synchronous
   NORMAL, then the acknowledgement). Goal: inbox cost per message <= 2x the plain one, one
   message per transaction (``inbox``) and in batches (``inbox batch``).

Every phase checks its count; the median of the rounds is reported. ``--database postgresql``
keeps the outbox and the inbox in a private PostgreSQL server instead (``chaos.postgresql``:
Debian's ``postgresql``, started and stopped by the bench; psycopg), a fresh database per phase.
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

import haclient.aio as aio
from bench.broker import BrokerProcess
from bench.throughput import PASSWORD, USER
from chaos.postgresql import PostgresServer
from haclient import AckMode, DeliveryMode, Message, Queue, TextMessage
from haclient.exactly_once import Outbox, install
from haclient.exactly_once import aio as xaio
from haclient.exactly_once.database import dialect_of, is_url

GOAL_RELAY = 0.8
GOAL_INBOX = 2.0


class BenchError(Exception):
    """A phase did not do what it should."""


async def pipelined(url: str, queue: str, count: int) -> float:
    async with await aio.connect(url) as conn:
        session = await conn.create_session()
        producer = await session.create_producer(Queue(queue))
        start = time.perf_counter()
        for n in range(count):
            await producer.send(TextMessage(f"m{n}"), delivery_mode=DeliveryMode.NON_PERSISTENT)
        await producer.flush()
        return time.perf_counter() - start


async def send_async(url: str, queue: str, count: int) -> float:
    async with await aio.connect(url) as conn:
        session = await conn.create_session()
        producer = await session.create_producer(Queue(queue))
        done = anyio.Event()
        left = count

        def completed(_m: Message, error: BaseException | None) -> None:
            nonlocal left
            if error is not None:
                raise BenchError(f"refused: {error}")
            left -= 1
            if left == 0:
                done.set()

        start = time.perf_counter()
        for n in range(count):
            await producer.send_async(TextMessage(f"m{n}"), on_completion=completed)
        await done.wait()
        return time.perf_counter() - start


Target = Callable[[str], str]
"""Where a phase keeps its database: a fresh SQLite file or PostgreSQL URL for a name."""


def _open(target: str) -> Any:
    """A connection to ``target`` (a SQLite file or a ``postgresql://`` URL), usable from the
    async objects' database thread."""
    if is_url(target):
        import psycopg

        return psycopg.connect(target)
    return sqlite3.connect(target, check_same_thread=False)


async def relay(url: str, queue: str, count: int, path: str) -> float:
    db = _open(path)
    install(db)
    with Outbox().transaction(db) as tx:
        for n in range(count):
            tx.send(Queue(queue), TextMessage(f"m{n}"))
    db.close()
    async with await aio.connect(url) as conn:
        start = time.perf_counter()
        async with xaio.Relay(conn, path) as running:
            await running.wait_empty(120)
            elapsed = time.perf_counter() - start
            if running.statistics().relayed != count:
                raise BenchError(f"relayed {running.statistics().relayed} of {count}")
        return elapsed


async def receive(url: str, queue: str, count: int, path: str | None, batch: int = 1) -> float:
    """Receive ``count`` messages acknowledging each, through an inbox when ``path``: one
    message per transaction (``handle``), or with ``batch`` > 1 what has arrived, up to
    ``batch`` messages, in one transaction (``handle_all``)."""
    async with await aio.connect(url) as conn:
        await conn.start()
        session = await conn.create_session(AckMode.CLIENT)
        consumer = await session.create_consumer(Queue(queue))
        inbox = xaio.Inbox("bench")
        db = None
        if path is not None:
            db = _open(path)
            install(db)
            if not is_url(path):
                db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE IF NOT EXISTS effects (body TEXT)")
            db.commit()
        start = time.perf_counter()
        left = count
        while left > 0:
            message = await consumer.receive(10)
            if message is None:
                raise BenchError("a message is missing")
            if db is None:
                await message.acknowledge()
                left -= 1
            elif batch == 1:
                await inbox.handle(db, message, _effect(db))
                left -= 1
            else:
                messages = [message]
                while len(messages) < min(batch, left):
                    more = await consumer.receive_nowait()
                    if more is None:
                        break
                    messages.append(more)
                await inbox.handle_all(db, messages, _effect(db))
                left -= len(messages)
        if db is not None and db.execute("SELECT count(*) FROM effects").fetchone()[0] != count:
            raise BenchError("an effect is missing or applied twice")
        return time.perf_counter() - start


def _effect(db: Any) -> xaio.Effect:
    insert = dialect_of(db).sql("INSERT INTO effects VALUES (?)")
    return lambda m: db.execute(insert, (m.text,))


async def fill(url: str, queue: str, count: int) -> None:
    async with await aio.connect(url) as conn:
        session = await conn.create_session()
        producer = await session.create_producer(Queue(queue))
        for n in range(count):
            await producer.send(TextMessage(f"m{n}"), delivery_mode=DeliveryMode.NON_PERSISTENT)
        await producer.flush()


async def one_round(
    url: str, count: int, rnd: int, target: Target, batch: int
) -> dict[str, tuple[float, float]]:
    """Each phase's msgs/s and this process's CPU per message (us; its threads included)."""
    rates: dict[str, tuple[float, float]] = {}

    async def timed(name: str, phase: Awaitable[float]) -> None:
        cpu = time.process_time()
        seconds = await phase
        rates[name] = (count / seconds, 1e6 * (time.process_time() - cpu) / count)

    await timed("pipelined send", pipelined(url, f"p-{rnd}", count))
    await timed("send_async", send_async(url, f"a-{rnd}", count))
    await timed("relay", relay(url, f"r-{rnd}", count, target(f"relay-{rnd}")))
    await fill(url, f"c-{rnd}", count)
    await fill(url, f"i-{rnd}", count)
    await fill(url, f"b-{rnd}", count)
    await timed("receive CLIENT each", receive(url, f"c-{rnd}", count, None))
    await timed("inbox", receive(url, f"i-{rnd}", count, target(f"inbox-{rnd}")))
    await timed("inbox batch", receive(url, f"b-{rnd}", count, target(f"batch-{rnd}"), batch=batch))
    return rates


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print the table; exit 1 when a goal is missed."""
    parser = argparse.ArgumentParser(prog="python -m bench.outbox")
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--batch", type=int, default=64, help="most messages per inbox transaction (inbox batch)"
    )
    parser.add_argument(
        "--database",
        choices=("sqlite", "postgresql"),
        default="sqlite",
        help="where the outbox and the inbox live (postgresql: a private server, started here)",
    )
    args = parser.parse_args(argv)
    rounds = []
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        broker = stack.enter_context(BrokerProcess("reference", tmp, store=False))  # listening
        url = f"amqp://{USER}:{PASSWORD}@127.0.0.1:{broker.port}"
        target: Target = lambda name: str(tmp / f"{name}.db")  # noqa: E731
        if args.database == "postgresql":
            server = stack.enter_context(PostgresServer())
            target = lambda _name: server.create_database()  # noqa: E731
        print(f"database: {args.database}")
        for rnd in range(args.rounds):
            rounds.append(anyio.run(one_round, url, args.count, rnd, target, args.batch))
    print(
        f"{'phase':22} {'msg/s':>10} {'us/msg':>9} {'CPU us/msg':>11}   (median of {args.rounds})"
    )
    for name in rounds[0]:
        rate = statistics.median(r[name][0] for r in rounds)
        cpu = statistics.median(r[name][1] for r in rounds)
        print(f"{name:22} {rate:10.0f} {1e6 / rate:9.1f} {cpu:11.1f}")

    def ratio(top: str, bottom: str) -> float:
        """The median over the rounds of each round's ratio (phases of one round ran one
        after the other, so they share the machine's load)."""
        return statistics.median(r[top][0] / r[bottom][0] for r in rounds)

    relay_ratio = ratio("relay", "pipelined send")
    inbox_ratio = ratio("receive CLIENT each", "inbox")
    batch_ratio = ratio("receive CLIENT each", "inbox batch")
    print(f"relay / pipelined send:       {relay_ratio:.2f}x (goal >= {GOAL_RELAY})")
    print(f"relay / send_async:           {ratio('relay', 'send_async'):.2f}x")
    print(
        f"inbox cost / plain ack:       {inbox_ratio:.2f}x (goal <= {GOAL_INBOX}; one message "
        "per transaction)"
    )
    print(f"inbox batch cost / plain ack: {batch_ratio:.2f}x (goal <= {GOAL_INBOX})")
    met = relay_ratio >= GOAL_RELAY and max(inbox_ratio, batch_ratio) <= GOAL_INBOX
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
