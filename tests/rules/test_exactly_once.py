"""Rules X1-X5: the outbox and the inbox against the reference broker, in both APIs, and with
the application's processes killed by SIGKILL at the two holes (between the database commit and
the send, between the effect and the acknowledgement).

Every process a test starts it stops itself, by its pid; the brokers listen on free loopback
ports (``chaos.broker.BrokerThread``, ``failoverkit.HaPair``).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from apikit import Api, Proxy
from failoverkit import HaPair, failover_url

import haclient.aio as aio
from chaos.broker import BrokerThread
from chaos.scenarios.apps import effects_of, open_database
from haclient import AckMode, Message, Queue, TextMessage
from haclient.errors import IllegalStateError
from haclient.exactly_once import Inbox, Outbox, Relay, RelayStatistics, outbox_depth
from haclient.exactly_once import aio as xaio

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

TIMEOUT = 10.0


def _db(path: Path) -> sqlite3.Connection:
    db = open_database(str(path))
    db.close()
    return sqlite3.connect(path, check_same_thread=False, timeout=30.0)


async def _relay_all(api: Api, connection: Proxy, path: Path) -> RelayStatistics:
    """Relay the outbox at ``path`` until it is empty, with the API under test."""
    if api.name == "aio":
        async with xaio.Relay(connection.target, path) as relay:
            await relay.wait_empty(TIMEOUT)
            return relay.statistics()

    def run() -> RelayStatistics:
        with Relay(connection.target, path) as relay:
            relay.wait_empty(TIMEOUT)
            return relay.statistics()

    return await anyio.to_thread.run_sync(run)


class _Inboxes:
    """An inbox of the API under test, called the same way from the test."""

    def __init__(self, api: Api, name: str) -> None:
        self.api = api
        self.blocking = Inbox(name)
        self.aio = xaio.Inbox(name)

    @property
    def inbox(self) -> Any:
        return self.aio if self.api.name == "aio" else self.blocking

    async def handle(self, db: sqlite3.Connection, message: Message) -> bool:
        def effect(message: Message) -> None:
            db.execute("INSERT INTO effects (n, message_id) VALUES (?, ?)", (0, message.message_id))

        if self.api.name == "aio":
            return await self.aio.handle(db, message, effect)
        return await anyio.to_thread.run_sync(self.blocking.handle, db, message, effect)

    async def handle_all(self, db: sqlite3.Connection, messages: list[Message]) -> list[bool]:
        def effect(message: Message) -> None:
            db.execute("INSERT INTO effects (n, message_id) VALUES (?, ?)", (0, message.message_id))

        if self.api.name == "aio":
            return await self.aio.handle_all(db, messages, effect)
        return await anyio.to_thread.run_sync(self.blocking.handle_all, db, messages, effect)


async def test_X2_the_relay_sends_each_destinations_rows_in_write_order_with_their_ids(
    api: Api, reference_broker: BrokerThread, tmp_path: Path
) -> None:
    path = tmp_path / "app.db"
    db = _db(path)
    queues = [Queue(f"x2-order-{api.name}-{n}") for n in range(2)]
    written: dict[Queue, list[str]] = {queue: [] for queue in queues}
    outbox = Outbox()
    with outbox.transaction(db) as tx:
        for n in range(20):
            queue = queues[n % 2]
            written[queue].append(tx.send(queue, TextMessage(f"m{n}")))
    assert outbox_depth(db)[0] == 20
    async with await api.connect(reference_broker.url) as connection:
        stats = await _relay_all(api, connection, path)
        assert stats.relayed == 20 and outbox_depth(db)[0] == 0
        await connection.start()
        session = await connection.create_session(AckMode.AUTO)
        for queue in queues:
            consumer = await session.create_consumer(queue)
            got = [(await consumer.receive(TIMEOUT)).message_id for _ in range(10)]
            assert got == written[queue]  # write order, the ids fixed at the write
            assert await consumer.receive(0.2) is None


async def test_X5_a_relay_on_a_database_without_the_tables_raises_what_to_do(
    api: Api, reference_broker: BrokerThread, tmp_path: Path
) -> None:
    path = tmp_path / "empty.db"
    sqlite3.connect(path).close()
    async with await api.connect(reference_broker.url) as connection:
        with pytest.raises(IllegalStateError, match=r"install\(db\)"):
            await _relay_all(api, connection, path)  # raised as it is, from the async with too


async def test_X3_a_duplicate_is_acknowledged_skipped_counted_and_told(
    api: Api, reference_broker: BrokerThread, tmp_path: Path
) -> None:
    db = _db(tmp_path / "consumer.db")
    queue = Queue(f"x3-dup-{api.name}-{os.getpid()}-{time.monotonic_ns()}")
    inboxes = _Inboxes(api, "x3")
    told: list[tuple[str, str]] = []

    class Listener:
        def duplicate_skipped(self, inbox: str, message_id: str) -> None:
            told.append((inbox, message_id))

    inboxes.inbox.add_listener(Listener())
    # the session's in-memory duplicate window off: the copy reaches the inbox, as it does
    # after the consumer's process was killed and started again
    async with await api.connect(reference_broker.url, dedup_window=0) as connection:
        await connection.start()
        session = await connection.create_session(AckMode.CLIENT)
        producer = await session.create_producer(queue)
        producer.preserve_message_id = True
        for _ in range(2):  # a producer's re-send: the same id twice
            await producer.send(TextMessage("once", message_id="ID:x3-fixed"))
        consumer = await session.create_consumer(queue)
        first = await consumer.receive(TIMEOUT)
        assert await inboxes.handle(db, first) is True
        second = await consumer.receive(TIMEOUT)
        assert await inboxes.handle(db, second) is False
        assert effects_of_db(db) == [(0, "ID:x3-fixed")]
        assert told == [("x3", "ID:x3-fixed")]
        stats = inboxes.inbox.statistics()
        assert (stats.applied, stats.duplicates) == (1, 1)
        await session.close()
        again = await connection.create_session(AckMode.CLIENT)
        assert await (await again.create_consumer(queue)).receive(0.3) is None  # both acked


async def test_X3_a_batch_commits_its_effects_once_then_acknowledges_them_all(
    api: Api, reference_broker: BrokerThread, tmp_path: Path
) -> None:
    db = _db(tmp_path / "consumer.db")
    queue = Queue(f"x3-batch-{api.name}-{os.getpid()}-{time.monotonic_ns()}")
    inboxes = _Inboxes(api, "x3b")
    async with await api.connect(reference_broker.url, dedup_window=0) as connection:
        await connection.start()
        session = await connection.create_session(AckMode.CLIENT)
        producer = await session.create_producer(queue)
        producer.preserve_message_id = True
        for n in (1, 2, 1, 3):  # a re-send of ID:b1 inside the batch
            await producer.send(TextMessage(str(n), message_id=f"ID:b{n}"))
        consumer = await session.create_consumer(queue)
        batch = [await consumer.receive(TIMEOUT) for _ in range(4)]
        assert await inboxes.handle_all(db, batch) == [True, True, False, True]
        assert effects_of_db(db) == [(0, "ID:b1"), (0, "ID:b2"), (0, "ID:b3")]
        await session.close()
        again = await connection.create_session(AckMode.CLIENT)
        assert await (await again.create_consumer(queue)).receive(0.3) is None  # all acked


def effects_of_db(db: sqlite3.Connection) -> list[tuple[int, str]]:
    return list(db.execute("SELECT n, message_id FROM effects ORDER BY rowid"))


async def test_X2_the_relay_rides_out_a_master_kill_and_every_row_arrives(
    tmp_path: Path,
) -> None:
    path = tmp_path / "app.db"
    db = _db(path)
    outbox = Outbox()
    ids: set[str] = set()
    with HaPair(tmp_path / "store") as pair:
        url = failover_url(*pair.members, connectdelay=20, cyclecount=1000)
        async with await aio.connect(url) as connection:
            async with xaio.Relay(connection, path, batch_size=20) as relay:
                for n in range(300):
                    with outbox.transaction(db) as tx:
                        ids.add(tx.send(Queue("x2-failover"), TextMessage(str(n))))
                    if n == 100:
                        pair.kill_master()
                    if n % 20 == 0:
                        await anyio.sleep(0.01)
                await relay.wait_empty(30)
            assert outbox_depth(db)[0] == 0
            await connection.start()
            session = await connection.create_session(AckMode.AUTO)
            consumer = await session.create_consumer(Queue("x2-failover"))
            got: set[str] = set()
            while (message := await consumer.receive(2)) is not None:
                got.add(str(message.message_id))
            assert got == ids  # every row, none lost (copies share an id)


# The application killed ------------------------------------------------------------------------


@contextmanager
def _process(*args: str) -> Iterator[subprocess.Popen[str]]:
    """A Python process of ``args``, stopped by its pid when the block ends."""
    proc = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def _wait_line(proc: subprocess.Popen[str], prefix: str) -> str:
    assert proc.stdout is not None
    while line := proc.stdout.readline():
        if line.startswith(prefix):
            return line.strip()
    raise AssertionError(f"the process ended (status {proc.wait()}) before saying {prefix!r}")


def _kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL


def _wait_until(check: Any, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


async def test_X2_a_relay_killed_after_its_send_and_before_its_delete_resends_with_the_same_id(
    reference_broker: BrokerThread, tmp_path: Path
) -> None:
    path = tmp_path / "producer.db"
    db = _db(path)
    queue = Queue(f"x2-kill-{time.monotonic_ns()}")
    with Outbox().transaction(db) as tx:  # the business change, committed with its message
        db.execute("INSERT INTO business (n, message_id) VALUES (1, 'pending')")
        message_id = tx.send(queue, TextMessage("1"))
    lock = sqlite3.connect(path, isolation_level=None, timeout=30.0)
    lock.execute("BEGIN IMMEDIATE")  # the relay's delete waits: it is killed after its send
    relay_args = ("-m", "haclient.exactly_once.cli", "--url", reference_broker.url)
    consumer_db = _db(tmp_path / "consumer.db")
    inbox = xaio.Inbox("x2")
    # no in-memory duplicate window: the copy reaches the inbox, as in a consumer started anew
    async with await aio.connect(reference_broker.url, dedup_window=0) as connection:
        await connection.start()
        session = await connection.create_session(AckMode.CLIENT)
        consumer = await session.create_consumer(queue)
        with _process(*relay_args, "--database", str(path)) as relay:
            first = await consumer.receive(TIMEOUT)  # the broker accepted it ...
            assert first is not None and first.message_id == message_id
            _kill(relay)  # ... and the relay dies before deleting the row
        lock.rollback()
        assert outbox_depth(db)[0] == 1
        assert await inbox.handle(consumer_db, first, _effect(consumer_db)) is True
        with _process(*relay_args, "--database", str(path)) as relay:
            copy = await consumer.receive(TIMEOUT)
            assert copy is not None and copy.message_id == message_id  # sent again, same id
            assert await inbox.handle(consumer_db, copy, _effect(consumer_db)) is False
            await anyio.to_thread.run_sync(_wait_until, lambda: outbox_depth(db)[0] == 0)
            os.kill(relay.pid, signal.SIGTERM)
            assert relay.wait(timeout=TIMEOUT) == 0  # a clean stop
    assert effects_of(str(tmp_path / "consumer.db")) == [(1, message_id)]


def _effect(db: sqlite3.Connection) -> Any:
    def effect(message: Message) -> None:
        db.execute(
            "INSERT INTO effects (n, message_id) VALUES (?, ?)",
            (int(str(message.text)), message.message_id),
        )

    return effect


async def test_X3_a_consumer_killed_between_its_effect_and_its_acknowledgement_applies_it_once(
    reference_broker: BrokerThread, tmp_path: Path
) -> None:
    path = tmp_path / "consumer.db"
    queue = f"x3-kill-{time.monotonic_ns()}"
    async with await aio.connect(reference_broker.url) as connection:
        session = await connection.create_session(AckMode.AUTO)
        producer = await session.create_producer(Queue(queue))
        message = TextMessage("7", properties={"n": 7})
        await producer.send(message)
        args = ("-m", "chaos.scenarios.apps", "consumer", "--url", reference_broker.url)
        with _process(
            *args, "--database", str(path), "--queue", queue, "--pause-before-ack"
        ) as app:
            line = await anyio.to_thread.run_sync(_wait_line, app, "applied")
            assert line == f"applied {message.message_id}"  # committed, not acknowledged
            _kill(app)
        with _process(*args, "--database", str(path), "--queue", queue) as app:
            await anyio.to_thread.run_sync(_wait_line, app, "ready")
            # the broker redelivers; the new process skips it as a duplicate and acknowledges
            await anyio.to_thread.run_sync(
                _wait_until, lambda: reference_broker.queue_depth(queue) == 0
            )
    assert effects_of(str(path)) == [(7, message.message_id)]


async def test_X5_the_metrics_show_depth_age_relay_rate_and_duplicates(
    reference_broker: BrokerThread, tmp_path: Path
) -> None:
    from prometheus_client import CollectorRegistry

    from haclient.exactly_once.metrics import ExactlyOnceCollector

    path = tmp_path / "app.db"
    db = _db(path)
    with Outbox().transaction(db) as tx:
        for n in range(3):
            tx.send(Queue("x5-metrics"), TextMessage(str(n)))
    inbox = Inbox("x5")
    inbox.apply(db, TextMessage("d", message_id="ID:x5"), lambda _m: None)
    inbox.apply(db, TextMessage("d", message_id="ID:x5"), lambda _m: None)
    connection = await aio.connect(reference_broker.url)
    async with connection, xaio.Relay(connection, path) as relay:
        registry = CollectorRegistry()
        registry.register(ExactlyOnceCollector(relays=[relay], inboxes=[inbox]))
        await relay.wait_empty(TIMEOUT)

        def value(name: str, **labels: str) -> float | None:
            return registry.get_sample_value(name, labels)

        assert value("haclient_outbox_relayed_total", outbox="app.db") == 3
        assert value("haclient_outbox_depth", outbox="app.db") == 0
        assert value("haclient_outbox_oldest_age_seconds", outbox="app.db") == 0
        assert value("haclient_inbox_duplicates_total", inbox="x5") == 1
        assert value("haclient_inbox_applied_total", inbox="x5") == 1
