"""Rules X1-X3 on PostgreSQL (psycopg, the ``postgresql`` extra): the outbox, the relay (the
``haclient-relay`` command included) and the inbox as on SQLite, in both APIs, against a
private PostgreSQL server the tests start (``postgres_server`` in tests/conftest.py: initdb into
a temporary directory, 127.0.0.1 on a free port, stopped by its pid) and the reference broker.

PostgreSQL's own hole: concurrent transactions commit out of ``seq`` order. The relay must
neither skip a row that an older transaction commits late nor send a younger transaction's row
for the same destination before it (X2).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from apikit import Api, Proxy

import haclient.aio as aio
from chaos.broker import BrokerThread
from haclient import AckMode, Message, Queue, TextMessage
from haclient.errors import IllegalStateError
from haclient.exactly_once import (
    SCHEMA_VERSION,
    Inbox,
    Outbox,
    OutboxTransaction,
    Relay,
    RelayStatistics,
    install,
    outbox_depth,
    require,
    version,
)
from haclient.exactly_once import aio as xaio

try:
    import psycopg
except ModuleNotFoundError:  # every test takes postgres_server, which skips (or fails in CI)
    psycopg = None

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90), pytest.mark.postgresql]

TIMEOUT = 10.0


def _db(url: str) -> Any:
    """The application's connection: its tables and the outbox's and inbox's."""
    db = psycopg.connect(url)
    install(db)
    with db.transaction():
        db.execute("CREATE TABLE IF NOT EXISTS effects (n INTEGER, message_id TEXT)")
    return db


def _effects(db: Any) -> list[tuple[int, str]]:
    with db.transaction():
        return list(db.execute("SELECT n, message_id FROM effects ORDER BY message_id"))


def _effect(db: Any) -> Any:
    def effect(message: Message) -> None:
        db.execute("INSERT INTO effects (n, message_id) VALUES (%s, %s)", (0, message.message_id))

    return effect


async def _relay_all(api: Api, connection: Proxy, url: str) -> RelayStatistics:
    if api.name == "aio":
        async with xaio.Relay(connection.target, url) as relay:
            await relay.wait_empty(TIMEOUT)
            return relay.statistics()

    def run() -> RelayStatistics:
        with Relay(connection.target, url) as relay:
            relay.wait_empty(TIMEOUT)
            return relay.statistics()

    return await anyio.to_thread.run_sync(run)


def _queue(name: str) -> Queue:
    return Queue(f"{name}-{os.getpid()}-{time.monotonic_ns()}")


def test_X5_the_schema_installs_once_and_a_database_without_it_is_refused(
    postgres_url: str,
) -> None:
    with psycopg.connect(postgres_url) as db:
        assert version(db) == 0
        with pytest.raises(IllegalStateError, match="install"):
            require(db)
        with pytest.raises(IllegalStateError, match="install"):
            outbox_depth(db)
        assert install(db) == SCHEMA_VERSION == install(db)  # idempotent
        require(db)
        assert outbox_depth(db) == (0, None)
        assert db.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_X1_a_rolled_back_transaction_leaves_no_message_and_a_committed_one_its_rows(
    postgres_url: str,
) -> None:
    db = _db(postgres_url)
    outbox = Outbox()
    with pytest.raises(RuntimeError), outbox.transaction(db) as tx:
        db.execute("INSERT INTO effects VALUES (1, 'rolled back')")
        tx.send(Queue("x1"), TextMessage("never"))
        raise RuntimeError("the business change failed")
    assert outbox_depth(db)[0] == 0 and _effects(db) == []
    with outbox.transaction(db) as tx:
        db.execute("INSERT INTO effects VALUES (2, 'kept')")
        first = tx.send(Queue("x1"), TextMessage("a"))
        second = tx.send(Queue("x1"), TextMessage("b"))
    assert outbox_depth(db)[0] == 2 and _effects(db) == [(2, "kept")]
    with (
        pytest.raises(IllegalStateError, match="in the outbox already"),
        outbox.transaction(db) as tx,
    ):
        tx.send(Queue("x1"), TextMessage("again", message_id=first))
    assert first != second and outbox.statistics().written == 2
    db.close()


async def test_X2_the_relay_sends_a_postgresql_outbox_in_write_order_with_its_ids(
    api: Api, reference_broker: BrokerThread, postgres_url: str
) -> None:
    db = _db(postgres_url)
    queues = [_queue(f"x2-pg-{api.name}-{n}") for n in range(2)]
    written: dict[Queue, list[str]] = {queue: [] for queue in queues}
    outbox, async_outbox = Outbox(), xaio.Outbox()

    def write(batch: int, tx: OutboxTransaction) -> None:
        for n in range(5):
            queue = queues[n % 2]
            written[queue].append(tx.send(queue, TextMessage(f"{batch}.{n}")))

    for batch in range(4):  # several transactions, several rows each, by the API under test
        if api.name == "aio":
            await async_outbox.run(db, lambda tx, batch=batch: write(batch, tx))
        else:
            with outbox.transaction(db) as tx:
                write(batch, tx)
    async with await api.connect(reference_broker.url) as connection:
        stats = await _relay_all(api, connection, postgres_url)
        assert stats.relayed == 20 and outbox_depth(db)[0] == 0
        await connection.start()
        session = await connection.create_session(AckMode.AUTO)
        for queue in queues:
            consumer = await session.create_consumer(queue)
            got = [(await consumer.receive(TIMEOUT)).message_id for _ in written[queue]]
            assert got == written[queue]
            assert await consumer.receive(0.2) is None
    db.close()


async def test_X2_a_row_committed_late_by_an_older_transaction_is_neither_skipped_nor_overtaken(
    reference_broker: BrokerThread, postgres_url: str
) -> None:
    older, younger = _db(postgres_url), _db(postgres_url)
    queue = _queue("x2-pg-late")
    outbox = Outbox()
    async with await aio.connect(reference_broker.url) as connection:
        await connection.start()
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(queue)
        async with xaio.Relay(connection, postgres_url, poll_interval=0.02) as relay:
            with outbox.transaction(older) as slow:  # its row gets the smaller seq ...
                first = slow.send(queue, TextMessage("older"))
                with outbox.transaction(younger) as fast:
                    second = fast.send(queue, TextMessage("younger"))
                # ... and commits last: the younger row waits behind it, not sent before it
                assert await consumer.receive(0.5) is None
                assert relay.statistics().relayed == 0
            got = [await consumer.receive(TIMEOUT) for _ in range(2)]
            assert [m.message_id for m in got if m is not None] == [first, second]
            await relay.wait_empty(TIMEOUT)
            # a late commit after the relay's cursor moved on is not skipped either
            with outbox.transaction(older) as slow:
                third = slow.send(queue, TextMessage("older again"))
                with outbox.transaction(younger) as fast:
                    fourth = fast.send(queue, TextMessage("younger again"))
                with outbox.transaction(younger) as fast:
                    fifth = fast.send(queue, TextMessage("youngest"))
                await anyio.sleep(0.3)
            got = [await consumer.receive(TIMEOUT) for _ in range(3)]
            assert [m.message_id for m in got if m is not None] == [third, fourth, fifth]
            await relay.wait_empty(TIMEOUT)
            assert relay.statistics().relayed == 5
        assert await consumer.receive(0.2) is None
    assert outbox_depth(older)[0] == 0
    older.close()
    younger.close()


async def test_X2_concurrent_writers_lose_no_row_and_keep_each_writers_order(
    reference_broker: BrokerThread, postgres_url: str
) -> None:
    """Four threads commit transactions at once while the relay runs: every row arrives, and
    each writer's rows (one destination each) arrive in its order."""
    queue_of = [_queue(f"x2-pg-writer{n}") for n in range(4)]
    written: list[list[str]] = [[] for _ in queue_of]
    outbox = Outbox()

    def write(n: int) -> None:
        db = _db(postgres_url)
        for k in range(40):
            with outbox.transaction(db) as tx:
                written[n].append(tx.send(queue_of[n], TextMessage(f"{n}.{k}")))
                if k % 3 == 0:
                    time.sleep(0.002)  # a transaction held open while others commit
        db.close()

    _db(postgres_url).close()  # the tables, before the relay starts
    async with await aio.connect(reference_broker.url) as connection:
        async with xaio.Relay(connection, postgres_url, batch_size=7) as relay:
            threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
            for thread in threads:
                thread.start()
            await anyio.to_thread.run_sync(lambda: [t.join() for t in threads])
            await relay.wait_empty(30)
        await connection.start()
        session = await connection.create_session(AckMode.AUTO)
        for n, queue in enumerate(queue_of):
            consumer = await session.create_consumer(queue)
            got = [(await consumer.receive(TIMEOUT)).message_id for _ in written[n]]
            assert got == written[n]
            assert await consumer.receive(0.1) is None


class _Inboxes:
    def __init__(self, api: Api, name: str) -> None:
        self.api = api
        self.blocking = Inbox(name)
        self.aio = xaio.Inbox(name)

    async def handle(self, db: Any, message: Message) -> bool:
        if self.api.name == "aio":
            return await self.aio.handle(db, message, _effect(db))
        return await anyio.to_thread.run_sync(self.blocking.handle, db, message, _effect(db))

    async def handle_all(self, db: Any, messages: list[Message]) -> list[bool]:
        if self.api.name == "aio":
            return await self.aio.handle_all(db, messages, _effect(db))
        return await anyio.to_thread.run_sync(self.blocking.handle_all, db, messages, _effect(db))


async def test_X3_a_postgresql_inbox_applies_each_id_once_and_acknowledges_copies(
    api: Api, reference_broker: BrokerThread, postgres_url: str
) -> None:
    db = _db(postgres_url)
    queue = _queue(f"x3-pg-{api.name}")
    inboxes = _Inboxes(api, "x3pg")
    async with await api.connect(reference_broker.url, dedup_window=0) as connection:
        await connection.start()
        session = await connection.create_session(AckMode.CLIENT)
        producer = await session.create_producer(queue)
        producer.preserve_message_id = True
        for n in (1, 1, 2, 1, 3):
            await producer.send(TextMessage(str(n), message_id=f"ID:pg{n}"))
        consumer = await session.create_consumer(queue)
        first = await consumer.receive(TIMEOUT)
        assert await inboxes.handle(db, first) is True
        second = await consumer.receive(TIMEOUT)
        assert await inboxes.handle(db, second) is False
        batch = [await consumer.receive(TIMEOUT) for _ in range(3)]
        assert await inboxes.handle_all(db, batch) == [True, False, True]
        assert _effects(db) == [(0, "ID:pg1"), (0, "ID:pg2"), (0, "ID:pg3")]
        await session.close()
        again = await connection.create_session(AckMode.CLIENT)
        assert await (await again.create_consumer(queue)).receive(0.3) is None  # all acked
    db.close()


def test_X3_two_consumers_applying_one_id_at_once_apply_it_once(postgres_url: str) -> None:
    """The id's insert is where two connections meet: the second waits for the first's commit
    and skips (no error, no second effect)."""
    inbox = Inbox("x3race")
    message = TextMessage("race", message_id="ID:race")
    results: list[bool] = []
    inside = threading.Event()
    first_db, second_db = _db(postgres_url), _db(postgres_url)

    def slow(message: Message) -> None:
        _effect(first_db)(message)
        inside.set()
        time.sleep(0.3)  # the second consumer's insert waits on this transaction

    thread = threading.Thread(target=lambda: results.append(inbox.apply(first_db, message, slow)))
    thread.start()
    assert inside.wait(TIMEOUT)
    results.append(inbox.apply(second_db, message, _effect(second_db)))
    thread.join(TIMEOUT)
    assert sorted(results) == [False, True]
    assert _effects(first_db) == [(0, "ID:race")]
    assert inbox.statistics().duplicates == 1
    first_db.close()
    second_db.close()


async def test_X2_haclient_relay_relays_a_postgresql_outbox_and_stops_cleanly(
    reference_broker: BrokerThread, postgres_url: str, tmp_path: Path
) -> None:
    db = _db(postgres_url)
    queue = _queue("x2-pg-cli")
    with Outbox().transaction(db) as tx:
        ids = [tx.send(queue, TextMessage(str(n))) for n in range(5)]
    pid_file = tmp_path / "relay.pid"
    relay = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "haclient.exactly_once.cli",
            "--url",
            reference_broker.url,
            "--database",
            postgres_url,
            "--pid-file",
            str(pid_file),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while outbox_depth(db)[0] and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        assert outbox_depth(db)[0] == 0
        os.kill(relay.pid, signal.SIGTERM)
        _out, err = relay.communicate(timeout=TIMEOUT)
        assert relay.returncode == 0, err
    finally:
        if relay.poll() is None:
            os.kill(relay.pid, signal.SIGKILL)
            relay.wait()
    async with await aio.connect(reference_broker.url) as connection:
        await connection.start()
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(queue)
        assert [(await consumer.receive(TIMEOUT)).message_id for _ in ids] == ids
    db.close()


async def test_X2_a_relay_killed_before_its_delete_resends_with_the_same_id_on_postgresql(
    reference_broker: BrokerThread, postgres_url: str
) -> None:
    """A ``haclient-relay`` SIGKILLed after the broker accepted its send and before its delete
    committed (a lock holds the delete): the row stays, the next relay sends it again with its
    id, and the inbox skips the copy."""
    db = _db(postgres_url)
    queue = _queue("x2-pg-kill")
    with Outbox().transaction(db) as tx:
        message_id = tx.send(queue, TextMessage("1"))
    lock = psycopg.connect(postgres_url)
    lock.execute("SELECT seq FROM haclient_outbox FOR UPDATE")  # the relay's delete waits
    relay_args = [sys.executable, "-m", "haclient.exactly_once.cli", "--url", reference_broker.url]
    relay_args += ["--database", postgres_url]
    inbox = xaio.Inbox("x2pg")
    relays: list[subprocess.Popen[bytes]] = []
    try:
        async with await aio.connect(reference_broker.url, dedup_window=0) as connection:
            await connection.start()
            session = await connection.create_session(AckMode.CLIENT)
            consumer = await session.create_consumer(queue)
            relays.append(subprocess.Popen(relay_args, stderr=subprocess.DEVNULL))
            first = await consumer.receive(TIMEOUT)  # the broker accepted it ...
            assert first is not None and first.message_id == message_id
            os.kill(relays[-1].pid, signal.SIGKILL)  # ... and the relay dies before its delete
            relays[-1].wait(TIMEOUT)
            lock.rollback()
            assert outbox_depth(db)[0] == 1
            assert await inbox.handle(db, first, _effect(db)) is True
            relays.append(subprocess.Popen(relay_args, stderr=subprocess.DEVNULL))
            copy = await consumer.receive(TIMEOUT)
            assert copy is not None and copy.message_id == message_id  # again, same id
            assert await inbox.handle(db, copy, _effect(db)) is False
            deadline = time.monotonic() + TIMEOUT
            while outbox_depth(db)[0] and time.monotonic() < deadline:
                await anyio.sleep(0.05)
            assert outbox_depth(db)[0] == 0
            os.kill(relays[-1].pid, signal.SIGTERM)
            assert relays[-1].wait(TIMEOUT) == 0  # a clean stop
    finally:
        for relay in relays:
            if relay.poll() is None:
                os.kill(relay.pid, signal.SIGKILL)
                relay.wait()
        lock.close()
    assert _effects(db) == [(0, message_id)]
    db.close()
