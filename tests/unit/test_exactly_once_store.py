"""Rules X1, X4, X5 on the database alone (no broker): the outbox write belongs to the
application's transaction, inbox ids are kept for their retention, and bad input says what is
wrong."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from haclient import MapMessage, Queue, TemporaryQueue, TextMessage, Topic
from haclient.errors import (
    ClosedError,
    ConfigurationError,
    IllegalStateError,
    InvalidDestinationError,
    MessageFormatError,
)
from haclient.exactly_once import SCHEMA_VERSION, Inbox, Outbox, install, outbox_depth, version
from haclient.exactly_once.rows import message_of

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def db(tmp_path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(tmp_path / "app.db")
    install(connection)
    connection.execute("CREATE TABLE orders (n INTEGER)")
    connection.commit()
    return connection


def test_X1_a_committed_transaction_leaves_its_change_and_its_messages_with_fixed_ids(
    db: sqlite3.Connection,
) -> None:
    message = MapMessage({"n": 1, "b": b"\x00"}, properties={"region": "eu"})
    with Outbox().transaction(db) as tx:
        db.execute("INSERT INTO orders VALUES (1)")
        message_id = tx.send(Topic("orders"), message)
    assert message_id.startswith("ID:") and message.message_id == message_id
    rows = db.execute("SELECT destination, message_id, payload FROM haclient_outbox").fetchall()
    assert [(d, i) for d, i, _ in rows] == [("topic:orders", message_id)]
    stored = message_of(rows[0][2])  # the message itself, every type kept
    assert (stored.message_id, stored.body, stored.properties) == (
        message_id,
        {"n": 1, "b": b"\x00"},
        {"region": "eu"},
    )
    assert db.execute("SELECT count(*) FROM orders").fetchone() == (1,)


def test_X1_a_rolled_back_transaction_writes_neither_its_change_nor_its_messages(
    db: sqlite3.Connection,
) -> None:
    outbox = Outbox()
    with pytest.raises(RuntimeError, match="business rule"), outbox.transaction(db) as tx:
        db.execute("INSERT INTO orders VALUES (1)")
        tx.send(Queue("orders"), TextMessage("1"))
        raise RuntimeError("business rule broken")
    assert outbox_depth(db) == (0, None)
    assert db.execute("SELECT count(*) FROM orders").fetchone() == (0,)
    assert outbox.statistics().rolled_back == 1 and outbox.statistics().written == 0
    with pytest.raises(ClosedError):
        tx.send(Queue("orders"), TextMessage("late"))


def test_X1_write_joins_the_applications_own_transaction_and_needs_one(
    db: sqlite3.Connection,
) -> None:
    outbox = Outbox()
    with pytest.raises(IllegalStateError, match="open transaction"):
        outbox.write(db, Queue("orders"), TextMessage("alone"))
    db.execute("BEGIN")
    outbox.write(db, Queue("orders"), TextMessage("1"))
    db.rollback()
    assert outbox_depth(db)[0] == 0


def test_X4_ids_are_remembered_for_their_retention_then_pruned(db: sqlite3.Connection) -> None:
    db.execute("CREATE TABLE effects (id TEXT)")
    inbox = Inbox("x4", retention=60, prune_every=1)
    message = TextMessage("1", message_id="ID:1")

    def effect(m: TextMessage) -> None:
        db.execute("INSERT INTO effects VALUES (?)", (m.message_id,))

    assert inbox.apply(db, message, effect) is True
    assert inbox.apply(db, message, effect) is False  # within its retention: a duplicate
    assert inbox.seen(db, "ID:1") and not Inbox("other").seen(db, "ID:1")  # per inbox name
    assert inbox.prune(db, now=1e12) == 1  # long after: forgotten
    assert not inbox.seen(db, "ID:1")
    assert db.execute("SELECT count(*) FROM effects").fetchone() == (1,)


def test_X4_an_effect_that_raises_records_nothing_and_the_message_is_applied_later(
    db: sqlite3.Connection,
) -> None:
    inbox = Inbox()
    message = TextMessage("1", message_id="ID:2")

    def failing(_m: TextMessage) -> None:
        db.execute("INSERT INTO orders VALUES (9)")
        raise ValueError("not now")

    with pytest.raises(ValueError, match="not now"):
        inbox.apply(db, message, failing)
    assert not inbox.seen(db, "ID:2") and db.execute("SELECT count(*) FROM orders").fetchone() == (
        0,
    )
    assert inbox.apply(db, message, lambda _m: None) is True


def test_X5_a_database_without_the_tables_is_refused_saying_how_to_install_them(
    tmp_path: Path,
) -> None:
    bare = sqlite3.connect(tmp_path / "bare.db")
    assert version(bare) == 0
    with pytest.raises(IllegalStateError, match="install"), Outbox().transaction(bare) as tx:
        tx.send(Queue("q"), TextMessage("x"))
    with pytest.raises(IllegalStateError, match="install"):
        Inbox().apply(bare, TextMessage("x", message_id="ID:3"), lambda _m: None)
    assert install(bare) == SCHEMA_VERSION == version(bare)
    assert install(bare) == SCHEMA_VERSION  # idempotent
    bare.execute("UPDATE haclient_schema SET version = 99")
    bare.commit()
    with pytest.raises(IllegalStateError, match="newer"):
        install(bare)


def test_X5_bad_input_is_refused_with_what_is_wrong(db: sqlite3.Connection) -> None:
    outbox = Outbox()
    with pytest.raises(ConfigurationError, match=r"sqlite3\.Connection"):
        outbox.transaction("app.db").__enter__()  # type: ignore[arg-type]
    with outbox.transaction(db) as tx:
        with pytest.raises(InvalidDestinationError, match="Queue or a Topic"):
            tx.send(TemporaryQueue.__new__(TemporaryQueue), TextMessage("x"))
        with pytest.raises(MessageFormatError):
            tx.send(Queue("q"), "text")  # type: ignore[arg-type]
        tx.send(Queue("q"), TextMessage("x", message_id="ID:same"))
        with pytest.raises(IllegalStateError, match="in the outbox already"):
            tx.send(Queue("q"), TextMessage("y", message_id="ID:same"))
    with pytest.raises(MessageFormatError, match="no message id"):
        Inbox().apply(db, TextMessage("x"), lambda _m: None)
    for bad in ({"retention": 0}, {"prune_every": 0}):
        with pytest.raises(ConfigurationError):
            Inbox(**bad)  # type: ignore[arg-type]


def test_X3_a_batch_applies_each_id_once_in_one_transaction(db: sqlite3.Connection) -> None:
    inbox = Inbox("batch")
    assert inbox.apply(db, TextMessage("0", message_id="ID:old"), lambda _m: None) is True
    batch = [
        TextMessage("1", message_id="ID:a"),
        TextMessage("2", message_id="ID:old"),  # applied by an earlier transaction
        TextMessage("3", message_id="ID:b"),
        TextMessage("4", message_id="ID:a"),  # earlier in this batch
    ]
    told: list[str] = []

    class Listener:
        def duplicate_skipped(self, _inbox: str, message_id: str) -> None:
            told.append(message_id)

    inbox.add_listener(Listener())
    applied = inbox.apply_all(
        db, batch, lambda m: db.execute("INSERT INTO orders VALUES (?)", (int(m.text),))
    )
    assert applied == [True, False, True, False]
    assert told == ["ID:old", "ID:a"]
    assert [n for (n,) in db.execute("SELECT n FROM orders ORDER BY rowid")] == [1, 3]
    stats = inbox.statistics()
    assert (stats.applied, stats.duplicates) == (3, 2)


def test_X3_an_effect_that_raises_in_a_batch_rolls_the_whole_batch_back(
    db: sqlite3.Connection,
) -> None:
    inbox = Inbox()
    batch = [TextMessage(str(n), message_id=f"ID:{n}") for n in range(3)]

    def effect(m: TextMessage) -> None:
        db.execute("INSERT INTO orders VALUES (?)", (int(m.text),))
        if m.text == "2":
            raise ValueError("not now")

    with pytest.raises(ValueError, match="not now"):
        inbox.apply_all(db, batch, effect)
    assert db.execute("SELECT count(*) FROM orders").fetchone() == (0,)
    assert not any(inbox.seen(db, f"ID:{n}") for n in range(3))
    assert inbox.apply_all(db, batch, lambda _m: None) == [True, True, True]


def test_X2_a_row_keeps_the_bytes_a_send_would_send_and_an_expiring_one_is_encoded_again() -> None:
    from haclient.destination import NO_PREFIXES, DestinationPrefixes
    from haclient.exactly_once.rows import Row, encoded_of, payload_of
    from haclient.outgoing import STORED, EncodingTerms

    message = TextMessage("x", message_id="ID:k", properties={"JMSXUserID": "mallory"})
    message.destination = Queue("q")
    message.timestamp = 1000.0
    payload = payload_of(message)
    assert message_of(payload).properties.get("JMSXUserID") is None  # cleared, as a send does (M7)
    sent = encoded_of(Row(1, "queue:q", "ID:k", payload, 1000.0, None), now=2000.0)
    assert sent.payload is payload and sent.message_id == "ID:k"
    assert sent.terms.fit(EncodingTerms(7, NO_PREFIXES, None))  # any connection like it
    assert not sent.terms.fit(EncodingTerms(7, DestinationPrefixes(queue="queue://"), None))
    assert not sent.terms.fit(EncodingTerms(7, NO_PREFIXES, b"bob"))
    assert not EncodingTerms(-1, NO_PREFIXES, None).fit(EncodingTerms(7, NO_PREFIXES, None))
    assert sent.terms.epoch == STORED
    message.expiration = 1060.0  # written at 1000 with 60 s to live, sent at 1050
    expiring = encoded_of(Row(2, "queue:q", "ID:k", payload_of(message), 1000.0, 1060.0), 1050.0)
    again = message_of(expiring.payload)
    assert again.expiration == 1060.0 and again.timestamp == 1050.0  # 10 s left in the header
    assert again.message_id == "ID:k"


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
@pytest.mark.anyio
async def test_X1_a_cancelled_async_write_still_ends_its_transaction_first(
    tmp_path: Path, anyio_backend: str
) -> None:
    """The async outbox's database thread: a caller cancelled while its transaction runs is
    let go only once the transaction ended (committed here), never half way (on trio the
    cancellation then comes at the next checkpoint); calls after it run in order."""
    import threading
    import time

    import anyio

    from haclient.exactly_once import aio as xaio

    db = sqlite3.connect(tmp_path / "app.db", check_same_thread=False)
    install(db)
    db.execute("CREATE TABLE orders (n INTEGER)")
    db.commit()
    outbox = xaio.Outbox()
    ended = threading.Event()

    def slow(tx: object) -> None:
        db.execute("INSERT INTO orders VALUES (1)")
        time.sleep(0.3)
        ended.set()

    with anyio.move_on_after(0.05) as scope:
        await outbox.run(db, slow)
        assert ended.is_set()
        await anyio.sleep(0)
    assert scope.cancelled_caught and ended.is_set()  # cancelled after the transaction ended
    assert db.execute("SELECT count(*) FROM orders").fetchone() == (1,)  # and it committed
    written = [await outbox.run(db, lambda tx, n=n: tx.send(Queue("q"), TextMessage(str(n))))
               for n in range(3)]  # fmt: skip
    assert len(set(written)) == 3 and outbox_depth(db)[0] == 3
