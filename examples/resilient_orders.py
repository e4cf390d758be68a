"""A producer and a CLIENT_ACKNOWLEDGE consumer on one failover connection (blocking API).

Run it against any AMQP 1.0 broker list, for example two reference brokers::

    haclient-broker --port 5672 &  haclient-broker --port 5673 &
    python examples/resilient_orders.py \
        'failover:(amqp://127.0.0.1:5672,amqp://127.0.0.1:5673)?failover.method=roundrobin'

Kill the broker in use while it runs: sends and receives block until the connection is back,
then go on. An acknowledge that failover made impossible raises AcknowledgeFailedError (F8);
the broker redelivers those messages, so the consumer simply goes on and sees them again.
"""

from __future__ import annotations

import argparse
import sys

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
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", help="a broker URL or a failover:(...) URL")
    parser.add_argument("--queue", default="orders")
    parser.add_argument("--count", type=int, default=100)
    args = parser.parse_args(argv)

    with haclient.connect(args.url, client_id="resilient-orders") as connection:
        connection.add_listener(PrintFailovers())
        connection.start()
        with connection.create_session(AckMode.AUTO) as sending:
            producer = sending.create_producer(Queue(args.queue))
            for n in range(args.count):
                # PERSISTENT (the default): returns once the broker accepted the message; a send
                # cut by failover is sent again, with the same message id (F11).
                producer.send(TextMessage(f"order {n}", properties={"n": n}))
        print(f"sent {args.count} orders", flush=True)

        seen: set[int] = set()
        with connection.create_session(AckMode.CLIENT) as receiving:
            consumer = receiving.create_consumer(Queue(args.queue))
            while len(seen) < args.count:
                message = consumer.receive(timeout=10)
                if message is None:
                    print(f"no more orders after {len(seen)}", file=sys.stderr)
                    return 1
                seen.add(message.properties["n"])
                if len(seen) % 10 == 0:
                    try:
                        message.acknowledge()  # every message so far; broker-confirmed (A2)
                    except haclient.AcknowledgeFailedError as exc:
                        print(f"acknowledge lost to failover, redelivery follows: {exc}")
            receiving.acknowledge()
        print(f"received {len(seen)} distinct orders", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
