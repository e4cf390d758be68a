"""Move messages from one queue to another in local transactions (blocking API).

Each batch is received and re-sent in one transaction. If the connection fails over while a
batch is open, ``commit()`` raises ``TransactionRolledBackError`` (F7): the broker has put the
received messages back, so the batch is simply done again. ``in_doubt=True`` means the commit
itself was cut off and the broker may have committed it: doing the batch again may then forward
some messages twice, which the application has to tolerate or detect.

    python examples/transacted_forwarder.py amqp://127.0.0.1:5672 --count 20
"""

from __future__ import annotations

import argparse
import sys

import haclient
from haclient import AckMode, Queue, TextMessage


def forward(
    session: haclient.Session,
    consumer: haclient.MessageConsumer,
    producer: haclient.MessageProducer,
    batch: int,
) -> int:
    """Forward up to ``batch`` messages in one transaction; return how many were committed."""
    while True:
        moved = 0
        while moved < batch and (message := consumer.receive(timeout=1)) is not None:
            producer.send(TextMessage(message.text, properties=message.properties))  # type: ignore[attr-defined]
            moved += 1
        try:
            session.commit()
            return moved
        except haclient.TransactionRolledBackError as exc:
            doubt = " (in doubt: it may have been committed)" if exc.in_doubt else ""
            print(f"batch rolled back by failover{doubt}; doing it again", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", help="a broker URL or a failover:(...) URL")
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--batch", type=int, default=5)
    args = parser.parse_args(argv)
    inbox, outbox = Queue("forwarder-in"), Queue("forwarder-out")
    with haclient.connect(args.url) as connection:
        connection.start()
        with connection.create_session() as session:
            producer = session.create_producer(inbox)
            for n in range(args.count):
                producer.send(TextMessage(f"parcel {n}"))
        total = 0
        with connection.create_session(AckMode.TRANSACTED) as session:
            consumer = session.create_consumer(inbox)
            producer = session.create_producer(outbox)
            while moved := forward(session, consumer, producer, args.batch):
                total += moved
        print(f"forwarded {total} messages from {inbox.name} to {outbox.name}")
    return 0 if total == args.count else 1


if __name__ == "__main__":
    sys.exit(main())
