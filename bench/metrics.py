"""What metrics cost: send and receive with and without a scraped collector, same broker, same run.

Run from the repository root::

    .venv/bin/python -m bench.metrics --count 20000 --rounds 5

One run starts the reference broker (``python -m chaos.broker.cli`` in its own process, on a free
loopback port, stopped by its pid at the end). In each round, once without and once with metrics
(the order alternates between rounds), a new ``haclient.aio`` connection:

1. sends ``--count`` NON_PERSISTENT text messages and ``flush()``es (all accepted): the
   cheapest send, where a per-message cost shows most;
2. receives them in AUTO (each acknowledgement confirmed by the broker, timed by the ack
   latency histogram).

"With metrics": ``haclient.metrics.serve()`` exposes the connection and a thread scrapes the
endpoint every ``--interval`` seconds (1 s, as Prometheus would) during both phases. The
counters themselves are always kept (they are plain increments on the hot path); what this
measures is the collector and its scrapes. The table shows medians over the rounds of msgs/s
and of this process's CPU per message (``time.process_time``, scrape thread included), and the
overhead of "with" against "without". Goal: under 3 %. It also times ``Histogram.observe`` and
one whole scrape.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import threading
import time
import timeit
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import anyio

import haclient.aio as aio
import haclient.metrics
from bench.broker import BrokerProcess
from bench.throughput import HOST, PASSWORD, USER, BenchError, check
from haclient.aio.stats import Histogram
from haclient.destination import Queue
from haclient.message import DeliveryMode, TextMessage
from haclient.modes import AckMode

GOAL = 3.0  # percent
VARIANTS = ("without", "with")
PHASES = ("send", "receive")


@contextmanager
def scraped(connection: aio.Connection, interval: float) -> Iterator[list[float]]:
    """Serve ``connection``'s metrics and scrape them every ``interval`` s from a thread;
    yields the list the scrape durations go to."""
    durations: list[float] = []
    stop = threading.Event()
    with haclient.metrics.serve(0, connections=[connection]) as server:

        def scrape() -> None:
            while not stop.wait(interval):
                started = time.perf_counter()
                with urllib.request.urlopen(server.url, timeout=5) as response:
                    check(b"haclient_messages_sent_total" in response.read(), "bad scrape")
                durations.append(time.perf_counter() - started)

        thread = threading.Thread(target=scrape, name="scraper", daemon=True)
        thread.start()
        try:
            yield durations
        finally:
            stop.set()
            thread.join()


async def one_round(port: int, count: int, metrics: bool, interval: float) -> dict[str, float]:
    """msgs/s and CPU µs per message of each phase, for one variant."""
    url = f"amqp://{USER}:{PASSWORD}@{HOST}:{port}"
    queue = Queue(f"bench-metrics-{uuid.uuid4().hex[:8]}")
    result: dict[str, float] = {}
    async with await aio.connect(url, client_id=f"bench-{uuid.uuid4().hex[:8]}") as conn:
        await conn.start()
        with ExitStack() as stack:
            if metrics:
                stack.enter_context(scraped(conn, interval))
            session = await conn.create_session(AckMode.AUTO)
            producer = await session.create_producer(queue)
            producer.delivery_mode = DeliveryMode.NON_PERSISTENT
            wall, cpu = time.perf_counter(), time.process_time()
            for n in range(count):
                await producer.send(TextMessage(f"m-{n:08d}"))
            await producer.flush()
            _record(result, "send", count, wall, cpu)
            consumer = await session.create_consumer(queue)
            wall, cpu = time.perf_counter(), time.process_time()
            for n in range(count):
                message = await consumer.receive(10.0)
                check(message is not None, f"message {n} missing")
            _record(result, "receive", count, wall, cpu)
            stats = conn.statistics()
            check(stats.messages_sent == stats.messages_received == count, "miscounted")
    return result


def _record(result: dict[str, float], phase: str, count: int, wall: float, cpu: float) -> None:
    result[f"{phase} msgs/s"] = count / (time.perf_counter() - wall)
    result[f"{phase} cpu us"] = (time.process_time() - cpu) / count * 1e6


def observe_ns() -> float:
    histogram = Histogram()
    runs = 200_000
    return min(timeit.repeat(lambda: histogram.observe(0.0123), number=runs, repeat=5)) / runs * 1e9


def report(rounds: dict[str, list[dict[str, float]]]) -> float:
    """Print the table; return the worst overhead in percent (msgs/s and CPU per message)."""
    worst = -math.inf
    print(f"{'phase':<10}{'without':>14}{'with':>14}{'overhead':>10}   (medians)")
    for phase in PHASES:
        for key, unit, higher_is_better in (
            ("msgs/s", "msgs/s", True),
            ("cpu us", "µs/msg", False),
        ):
            name = f"{phase} {key}"
            off = statistics.median(r[name] for r in rounds["without"])
            on = statistics.median(r[name] for r in rounds["with"])
            overhead = (off / on - 1 if higher_is_better else on / off - 1) * 100
            worst = max(worst, overhead)
            print(f"{phase:<10}{off:>10,.1f} {unit:<3}{on:>10,.1f} {unit:<3}{overhead:>+9.1f}%")
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=20000, help="messages per phase")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (order alternates)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes")
    args = parser.parse_args(argv)
    rounds: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    with (
        tempfile.TemporaryDirectory() as work,
        BrokerProcess("metrics", Path(work), store=False) as broker,
    ):
        anyio.run(one_round, broker.port, max(args.count // 10, 1), True, args.interval)  # warm-up
        for n in range(args.rounds):
            order = VARIANTS if n % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                result = anyio.run(
                    one_round, broker.port, args.count, variant == "with", args.interval
                )
                rounds[variant].append(result)
                print(
                    f"round {n + 1} {variant:<8}",
                    *(f"{k} {v:,.1f}" for k, v in result.items()),
                    file=sys.stderr,
                )
    worst = report(rounds)
    print(f"Histogram.observe: {observe_ns():.0f} ns per call")
    print(f"worst overhead {worst:+.1f}% (goal under {GOAL:g}%)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"bench.metrics: {exc}", file=sys.stderr)
        sys.exit(1)
