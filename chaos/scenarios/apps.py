"""Application processes with an outbox and an inbox, for tests and chaos runs to kill.

    python -m chaos.scenarios.apps producer --url URL --database P.db --queue Q --count N
    python -m chaos.scenarios.apps consumer --url URL --database C.db --queue Q

The **producer** makes business changes: each is one row of ``business(n, message_id)`` and,
in the same transaction, one outbox message (``haclient.exactly_once.Outbox``) to ``Q``
carrying ``n``; a relay in the same process (``haclient.exactly_once.Relay``) sends them. It
goes on from the highest ``n`` committed, so a producer killed and started again continues
where it stopped, until ``n`` reaches ``--count`` or ``--stop-file`` exists; then it waits for
its relay to empty the outbox and says ``done``. The **consumer** receives in a CLIENT
session and applies each message with ``haclient.exactly_once.Inbox.handle``: the effect is
one row of ``effects(n, message_id)`` (no unique key: a second application would show as a
second row).

Each prints ``ready`` once connected, and flushes every line, so that a test can wait for it.
``--pause-before-ack`` makes the consumer print ``applied <id>`` after its first commit and
wait there without acknowledging (a test kills it at that point); ``--crash-at K`` does so at
its K-th message. ``--crash-after-commit K`` makes the producer print ``committed K`` after the
commit of change K and wait there, before any send of it (the demo kills it there).

``--naive`` runs either without the pattern, as an application would without haclient's
``exactly_once``: the producer commits its change, then sends the message itself; the consumer
commits the effect, then acknowledges. Killed between the two, the naive producer has a change
whose message is never sent, the naive consumer applies a redelivered message a second time:
what ``chaos.crash_demo`` counts. ``effects_of`` and
``business_of`` read the two databases for an audit.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import haclient
from haclient import AckMode, Queue, TextMessage
from haclient.exactly_once import Inbox, Outbox, Relay, install
from haclient.exactly_once.database import connect, dialect_of, is_url

__all__ = ["business_of", "effects_of", "main", "open_database", "read_rows"]


def open_database(path: str) -> Any:
    """The application's database at ``path`` (a SQLite file, or a ``postgresql://`` URL), with
    its tables and the outbox/inbox's."""
    if is_url(path):
        import psycopg

        db: Any = psycopg.connect(path, autocommit=True)  # each statement commits, or the
        # outbox's and inbox's transactions (BEGIN ... COMMIT) hold several
    else:
        db = sqlite3.connect(path, timeout=30.0)
    install(db)
    if not is_url(path):
        db.execute("PRAGMA synchronous=NORMAL")  # WAL: a process crash loses no commit
    db.execute("CREATE TABLE IF NOT EXISTS business (n INTEGER PRIMARY KEY, message_id TEXT)")
    db.execute("CREATE TABLE IF NOT EXISTS effects (n INTEGER, message_id TEXT)")
    db.commit()
    return db


def _sql(db: Any, statement: str) -> str:
    """``statement`` (``?`` marks) for ``db``'s driver."""
    return dialect_of(db).sql(statement)


def read_rows(path: str, statement: str) -> list[tuple[Any, ...]]:
    """The rows of a query on the database at ``path`` (a SQLite file or a URL)."""
    db = connect(path)
    try:
        return list(db.execute(statement).fetchall())
    finally:
        db.close()


def business_of(path: str) -> dict[int, str]:
    """The producer's committed business changes: n -> the id of the message it wrote."""
    return dict(read_rows(path, "SELECT n, message_id FROM business"))


def effects_of(path: str) -> list[tuple[int, str]]:
    """The consumer's applied effects, one (n, message id) per application."""
    order = "ctid" if is_url(path) else "rowid"  # the order of the inserts, near enough
    return [
        (n, i) for n, i in read_rows(path, f"SELECT n, message_id FROM effects ORDER BY {order}")
    ]


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def produce(
    url: str,
    database: str,
    queue: str,
    count: int,
    pace: float,
    stop_file: str | None = None,
    crash_after: int = 0,
) -> None:
    """Make business changes ``n`` (from the last committed one + 1) up to ``count``, or
    until ``stop_file`` exists."""
    db = open_database(database)
    outbox = Outbox()
    with haclient.connect(url) as connection, Relay(connection, database) as relay:
        _say("ready")
        (last,) = db.execute("SELECT coalesce(max(n), 0) FROM business").fetchone()
        insert = _sql(db, "INSERT INTO business (n, message_id) VALUES (?, ?)")
        for n in range(last + 1, count + 1):
            if stop_file is not None and os.path.exists(stop_file):
                break
            with outbox.transaction(db) as tx:
                message_id = tx.send(Queue(queue), TextMessage(str(n), properties={"n": n}))
                db.execute(insert, (n, message_id))
            _pause_if(n == crash_after, f"committed {n}")
            if pace:
                time.sleep(pace)
        relay.wait_empty(timeout=120)
        _say("done")


def produce_naively(url: str, database: str, queue: str, count: int, crash_after: int) -> None:
    """``produce`` without the outbox: commit the change, then send its message."""
    db = open_database(database)
    with haclient.connect(url) as connection:
        session = connection.create_session()
        producer = session.create_producer(Queue(queue))
        _say("ready")
        (last,) = db.execute("SELECT coalesce(max(n), 0) FROM business").fetchone()
        for n in range(last + 1, count + 1):
            db.execute(_sql(db, "INSERT INTO business (n, message_id) VALUES (?, NULL)"), (n,))
            db.commit()
            _pause_if(n == crash_after, f"committed {n}")
            producer.send(TextMessage(str(n), properties={"n": n}))
        _say("done")


def _pause_if(now: bool, line: str) -> None:
    if now:
        _say(line)
        threading.Event().wait()  # killed here


def consume_naively(url: str, database: str, queue: str, crash_at: int) -> None:
    """``consume`` without the inbox: commit the effect, then acknowledge."""
    db = open_database(database)
    with haclient.connect(url) as connection:
        connection.start()
        session = connection.create_session(AckMode.CLIENT)
        consumer = session.create_consumer(Queue(queue))
        _say("ready")
        handled = 0
        while True:
            message = consumer.receive(timeout=1.0)
            if message is None:
                continue
            db.execute(
                _sql(db, "INSERT INTO effects (n, message_id) VALUES (?, ?)"),
                (message.properties.get("n"), message.message_id),
            )
            db.commit()
            handled += 1
            _pause_if(handled == crash_at, f"applied {message.message_id}")
            message.acknowledge()


def consume(url: str, database: str, queue: str, crash_at: int) -> None:
    """Apply every message of ``queue`` once, until killed."""
    db = open_database(database)
    inbox = Inbox("chaos")

    def effect(message: haclient.Message) -> None:
        db.execute(
            _sql(db, "INSERT INTO effects (n, message_id) VALUES (?, ?)"),
            (message.properties.get("n"), message.message_id),
        )

    with haclient.connect(url) as connection:
        connection.start()
        session = connection.create_session(AckMode.CLIENT)
        consumer = session.create_consumer(Queue(queue))
        _say("ready")
        handled = 0
        while True:
            message = consumer.receive(timeout=1.0)
            if message is None:
                continue
            handled += 1
            if handled == crash_at:
                inbox.apply(db, message, effect)
                _pause_if(True, f"applied {message.message_id}")  # before the acknowledgement
            try:
                inbox.handle(db, message, effect)
            except haclient.AcknowledgeFailedError:
                session.recover()  # F8: the messages come again; the inbox skips the applied


def main(argv: Sequence[str] | None = None) -> int:
    """Run one application (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m chaos.scenarios.apps")
    parser.add_argument("role", choices=("producer", "consumer"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--pace", type=float, default=0.0)
    parser.add_argument("--pause-before-ack", action="store_true", help="--crash-at 1")
    parser.add_argument("--crash-at", type=int, default=0, help="consumer: pause at message K")
    parser.add_argument(
        "--crash-after-commit", type=int, default=0, help="producer: pause after change K"
    )
    parser.add_argument("--naive", action="store_true", help="without the outbox or inbox")
    parser.add_argument("--stop-file", default=None, help="the producer stops once it exists")
    args = parser.parse_args(argv)
    crash_at = 1 if args.pause_before_ack else args.crash_at
    if args.role == "producer" and args.naive:
        produce_naively(args.url, args.database, args.queue, args.count, args.crash_after_commit)
    elif args.role == "producer":
        produce(
            args.url,
            args.database,
            args.queue,
            args.count,
            args.pace,
            args.stop_file,
            args.crash_after_commit,
        )
    elif args.naive:
        consume_naively(args.url, args.database, args.queue, crash_at)
    else:
        consume(args.url, args.database, args.queue, crash_at)
    return 0


if __name__ == "__main__":
    sys.exit(main())
