"""Orders with exactly-once effects: a transactional outbox, its relay, and an idempotent inbox
(blocking API; docs/guide/outbox-inbox.md, rules X1-X3).

    .venv/bin/haclient-broker --port 5672 --user app:secret
    .venv/bin/python examples/exactly_once_orders.py 'failover:(amqp://app:secret@127.0.0.1:5672)'

The shop writes each order and its message in one SQLite transaction (the outbox); a relay
sends the messages and deletes each row once the broker accepted it. Then the same messages
are sent a second time, with the same ids, as a relay killed after its send and before its
delete would send them again; the warehouse's inbox applies every order once and skips the
copies. The exit status is 1 when an order was shipped twice or not at all.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
from pathlib import Path

import haclient
from haclient import AckMode, Queue, TextMessage
from haclient.exactly_once import Inbox, Outbox, Relay, install


def database(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path)
    install(db)  # the outbox and inbox tables (idempotent), WAL mode
    db.execute("CREATE TABLE IF NOT EXISTS orders (n INTEGER, message_id TEXT)")
    db.execute("CREATE TABLE IF NOT EXISTS shipments (n INTEGER)")
    db.commit()
    return db


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--queue", default="exactly-once-orders")
    args = parser.parse_args()
    queue = Queue(args.queue)
    with tempfile.TemporaryDirectory() as tmp:
        shop, warehouse = database(Path(tmp) / "shop.db"), database(Path(tmp) / "warehouse.db")
        outbox = Outbox()
        for n in range(1, args.count + 1):
            with outbox.transaction(shop) as tx:  # the order and its message commit together
                message_id = tx.send(queue, TextMessage(str(n), properties={"n": n}))
                shop.execute("INSERT INTO orders VALUES (?, ?)", (n, message_id))
        # dedup_window=0: haclient's in-memory duplicate window would drop these copies before
        # the inbox; it dies with the process, the inbox does not (this shows the inbox)
        with haclient.connect(args.url, dedup_window=0) as connection:
            with Relay(connection, Path(tmp) / "shop.db") as relay:
                relay.wait_empty(timeout=30)
            session = connection.create_session(AckMode.CLIENT)
            again = session.create_producer(queue)
            again.preserve_message_id = True  # a relay's re-send carries the row's id
            for n, message_id in shop.execute("SELECT n, message_id FROM orders"):
                again.send(TextMessage(str(n), message_id=message_id, properties={"n": n}))
            connection.start()
            consumer = session.create_consumer(queue)
            inbox = Inbox("warehouse")

            def ship(message: haclient.Message) -> None:
                warehouse.execute("INSERT INTO shipments VALUES (?)", (message.properties["n"],))

            while (message := consumer.receive(timeout=1.0)) is not None:
                inbox.handle(warehouse, message, ship)  # the effect, then the acknowledgement
        shipped = [n for (n,) in warehouse.execute("SELECT n FROM shipments ORDER BY n")]
        stats = inbox.statistics()
        print(f"orders {args.count}, shipped {len(shipped)}, copies skipped {stats.duplicates}")
        return 0 if shipped == list(range(1, args.count + 1)) else 1


if __name__ == "__main__":
    sys.exit(main())
