"""Orders through a failover: a producer and a CLIENT_ACKNOWLEDGE consumer, one order at a time,
long enough to kill the broker in use while it runs (blocking API).

Run it against a shared-store pair of reference brokers (docs/guide/getting-started.md, step 5):
the slave takes the store over when the master dies, so what the master accepted survives::

    .venv/bin/haclient-broker --port 5672 --user app:secret --store /tmp/orders.db
    .venv/bin/haclient-broker --port 5673 --user app:secret --store /tmp/orders.db
    .venv/bin/python examples/resilient_orders.py \\
        'failover:(amqp://app:secret@127.0.0.1:5672,amqp://app:secret@127.0.0.1:5673)'

Kill the master (kill -9) while it runs: sends and receives block until the connection is on
the slave, then go on. An acknowledge that failover made impossible raises
AcknowledgeFailedError (F8) and the broker redelivers those orders: they are counted once.
Brokers without a shared store lose what the dead one held in memory; the summary says what
was lost, and the exit status is 1 when anything was.
"""

from __future__ import annotations

import argparse
import sys
import time

import haclient
from haclient import AckMode, Queue, TextMessage


class PrintFailovers:
    """A failover listener: haclient calls it on a thread of its own (F14)."""

    def failover_started(self, cause: BaseException) -> None:
        print(f"failover started: {cause}", flush=True)

    def failover_completed(self, broker: object, downtime: float) -> None:
        print(f"failover completed: now on {broker} after {downtime * 1000:.0f} ms", flush=True)

    def failover_failed(self, cause: BaseException) -> None:
        print(f"failover gave up: {cause}", flush=True)

    def resource_not_restored(self, resource: object, error: BaseException) -> None:
        print(f"could not restore {resource}: {error}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("url", help="a broker URL or a failover:(...) URL")
    parser.add_argument("--queue", default="orders")
    parser.add_argument(
        "--count", type=int, default=20000, help="orders to send (20000: long enough to kill)"
    )
    parser.add_argument(
        "--metrics-port", type=int, default=None, help="serve haclient.metrics on this port"
    )
    args = parser.parse_args(argv)

    started = time.monotonic()
    with haclient.connect(args.url, client_id="resilient-orders") as connection:
        connection.add_listener(PrintFailovers())
        metrics = None
        if args.metrics_port is not None:
            from haclient.metrics import serve  # the metrics extra

            metrics = serve(args.metrics_port, connections=[connection])
            print(f"metrics at {metrics.url}", flush=True)
        connection.start()
        try:
            seen, duplicates = exchange(connection, Queue(args.queue), args.count)
        finally:
            if metrics is not None:
                metrics.stop()
    lost = args.count - len(seen)
    print(
        f"sent {args.count} orders, received {len(seen)} distinct "
        f"({duplicates} redelivered and counted once), lost {lost}, "
        f"in {time.monotonic() - started:.1f} s",
        flush=True,
    )
    return 0 if lost == 0 else 1


def exchange(connection: haclient.Connection, queue: Queue, count: int) -> tuple[set[int], int]:
    """Send ``count`` orders, receiving as they go, then the rest: the numbers seen, and how
    many came more than once (redelivered after a failover)."""
    seen: set[int] = set()
    duplicates = 0
    with (
        connection.create_session(AckMode.AUTO) as sending,
        connection.create_session(AckMode.CLIENT) as receiving,
    ):
        producer = sending.create_producer(queue)
        consumer = receiving.create_consumer(queue)
        n = 0
        while len(seen) < count:
            if n < count:
                # PERSISTENT (the default): returns once the broker accepted (and stored) the
                # order; a send cut off by failover is sent again, same message id (F11).
                producer.send(TextMessage(f"order {n}", properties={"n": n}))
                n += 1
                if n % 2000 == 0:
                    print(f"sent {n} orders, received {len(seen)}", flush=True)
            message = consumer.receive(timeout=10)
            if message is None:
                break  # nothing for 10 s: what is missing now is lost
            number = message.properties["n"]
            if number in seen:
                duplicates += 1
            seen.add(number)
            if len(seen) % 100 == 0:
                try:
                    message.acknowledge()  # every order so far; broker-confirmed (A2)
                except haclient.AcknowledgeFailedError as exc:
                    print(f"acknowledge lost to failover, redelivery follows: {exc}")
        receiving.acknowledge()
    return seen, duplicates


if __name__ == "__main__":
    sys.exit(main())
