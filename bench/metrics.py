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

"With metrics": ``haclient.metrics.serve()`` exposes the connection and another process (as
Prometheus is) scrapes the endpoint every ``--interval`` seconds (1 s) during both phases;
"without", the same process runs but only sleeps, so both variants share the machine alike.
The counters themselves are always kept (plain increments on the hot path); what this compares
is the collector and its scrapes. The table shows, for msgs/s and for this process's CPU per
message (``time.process_time``, the HTTP thread included), the medians of each variant, the
overhead of the medians and the median of the per-round (paired) overheads. On a shared
machine those vary by tens of percent from round to round, so the run also measures the cost
directly: the CPU one scrape costs (collect and render, timed 200 times) against the CPU the
busiest phase uses per second. Goal: under 3 %. And it times ``Histogram.observe``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import anyio
from prometheus_client import CollectorRegistry, generate_latest

import haclient.aio as aio
import haclient.metrics
from bench.broker import BrokerProcess
from bench.throughput import HOST, PASSWORD, USER, BenchError, check
from haclient.aio.stats import Histogram
from haclient.destination import Queue
from haclient.message import DeliveryMode, TextMessage
from haclient.metrics import HAClientCollector
from haclient.modes import AckMode

GOAL = 3.0  # percent
VARIANTS = ("without", "with")
PHASES = ("send", "receive")


SCRAPER = """
import sys, time, urllib.request
url, interval = sys.argv[1], float(sys.argv[2])
print("ready", flush=True)
while True:
    time.sleep(interval)
    if url != "-":
        with urllib.request.urlopen(url, timeout=5) as response:
            assert b"haclient_messages_sent_total" in response.read()
"""
"""The scraper: a process of its own, as Prometheus is, so that this process's CPU time counts
only what serving the metrics costs it. With ``-`` for a URL it only sleeps: the variant without
metrics runs it too, so both variants share the machine with the same processes."""


@contextmanager
def scraper(url: str, interval: float) -> Iterator[None]:
    """The scraper process, started (interpreter up) before this returns; stopped by its pid."""
    process = subprocess.Popen(
        [sys.executable, "-c", SCRAPER, url, str(interval)], stdout=subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        check(process.stdout.readline() == b"ready\n", "the scraper did not start")
        yield
    finally:
        check(process.poll() is None, "the scraper failed")
        process.terminate()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


@contextmanager
def scraped(connection: aio.Connection, interval: float, metrics: bool) -> Iterator[None]:
    """With ``metrics``: serve ``connection``'s metrics, scraped every ``interval`` s by
    another process; without: only the idle scraper process."""
    if not metrics:
        with scraper("-", interval):
            yield
        return
    with (
        haclient.metrics.serve(0, connections=[connection]) as server,
        scraper(server.url, interval),
    ):
        yield


def scrape_ms(connection: aio.Connection) -> float:
    """CPU milliseconds one scrape costs this process (collect and render; HTTP aside)."""
    registry = CollectorRegistry()
    registry.register(HAClientCollector([connection]))
    runs = 200
    started = time.process_time()
    for _ in range(runs):
        generate_latest(registry)
    return (time.process_time() - started) / runs * 1e3


async def one_round(port: int, count: int, metrics: bool, interval: float) -> dict[str, float]:
    """msgs/s and CPU µs per message of each phase, for one variant."""
    url = f"amqp://{USER}:{PASSWORD}@{HOST}:{port}"
    queue = Queue(f"bench-metrics-{uuid.uuid4().hex[:8]}")
    result: dict[str, float] = {}
    async with await aio.connect(url, client_id=f"bench-{uuid.uuid4().hex[:8]}") as conn:
        await conn.start()
        with ExitStack() as stack:
            stack.enter_context(scraped(conn, interval, metrics))
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
            result["scrape ms"] = scrape_ms(conn)
    return result


def _record(result: dict[str, float], phase: str, count: int, wall: float, cpu: float) -> None:
    result[f"{phase} msgs/s"] = count / (time.perf_counter() - wall)
    result[f"{phase} cpu us"] = (time.process_time() - cpu) / count * 1e6


def observe_ns() -> float:
    histogram = Histogram()
    runs = 200_000
    return min(timeit.repeat(lambda: histogram.observe(0.0123), number=runs, repeat=5)) / runs * 1e9


def report(rounds: dict[str, list[dict[str, float]]], interval: float) -> float:
    """Print the table; return the estimated overhead in percent (see the module docstring)."""
    print(f"{'':<18}{'without':>12}{'with':>12}{'median':>9}{'paired':>9}")
    for phase in PHASES:
        for key, unit, higher_is_better in (
            ("msgs/s", "msgs/s", True),
            ("cpu us", "µs/msg", False),
        ):
            name = f"{phase} {key}"
            off = [r[name] for r in rounds["without"]]
            on = [r[name] for r in rounds["with"]]
            pairs = zip(off, on, strict=True)
            paired = statistics.median(_overhead(a, b, higher_is_better) for a, b in pairs)
            median = _overhead(statistics.median(off), statistics.median(on), higher_is_better)
            print(
                f"{phase + ' ' + unit:<18}{statistics.median(off):>12,.1f}"
                f"{statistics.median(on):>12,.1f}{median:>+8.1f}%{paired:>+8.1f}%"
            )
    scrape = statistics.median(r["scrape ms"] for r in rounds["with"])
    busiest = max(
        statistics.median(r[f"{p} msgs/s"] * r[f"{p} cpu us"] / 1e3 for r in rounds["without"])
        for p in PHASES
    )  # CPU ms per second the busiest phase uses
    estimate = scrape / (interval * busiest) * 100
    print(f"one scrape: {scrape:.2f} ms CPU; the busiest phase uses {busiest:.0f} ms CPU per s")
    return estimate


def _overhead(without: float, with_: float, higher_is_better: bool) -> float:
    return (without / with_ - 1 if higher_is_better else with_ / without - 1) * 100


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
    estimate = report(rounds, args.interval)
    print(f"Histogram.observe: {observe_ns():.0f} ns per call")
    print(f"scrape cost at one scrape per {args.interval:g} s: {estimate:.2f}% (goal < {GOAL:g}%)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as exc:
        print(f"bench.metrics: {exc}", file=sys.stderr)
        sys.exit(1)
