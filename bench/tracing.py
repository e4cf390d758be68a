"""What tracing costs: the hot path before tracing existed, with tracing off, and with it on.

Run from the repository root::

    .venv/bin/python -m bench.tracing --base f9342d5 --rounds 7

One run starts one reference broker process (``bench.broker.BrokerProcess``) and measures, in
rounds, three variants of the client, each in a fresh worker process of its own (two versions
of haclient cannot share a process): ``before`` (the tree of ``--base``, extracted with ``git
archive`` into a temporary directory; the commit before tracing), ``off`` (this tree, tracing
not asked for) and ``on`` (this tree, ``tracer_provider=`` an OpenTelemetry SDK provider whose
``BatchSpanProcessor`` feeds an exporter that drops the spans: the SDK's work without an
export's I/O). The variants are interleaved, A/B/C in a rotating order each round, so that the
noise of a shared machine falls on all of them alike. Each worker, with the async API
(``haclient.aio``) and then the blocking one (``haclient``), times what ``bench.jms`` times:
``--count`` PERSISTENT sends (each returns once the broker accepted it), ``--pipelined-count``
NON_PERSISTENT sends and a ``flush()``, ``--count`` AUTO receives, and ``--count`` PERSISTENT
``send_async`` calls until every completion listener was called, after ``--warmup``
untimed messages each, and prints this process's CPU microseconds per message (``time.
process_time``) and the rate. The table shows the median of the rounds, and ``on - off`` per
message: what a traced message costs. ``--traced-base COMMIT`` adds a fourth variant,
``on-base`` (the tree of ``COMMIT``, traced as ``on`` is), and a second table, ``on`` against
it: what a change to tracing itself gained or cost.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("before", "off", "on")
PHASES = ("sync send", "pipelined send", "receive AUTO", "async send")
APIS = ("aio", "blocking")


# The worker: runs in a process whose sys.path holds one version of haclient ------------------


def tracer_provider() -> Any:
    """An OpenTelemetry SDK provider whose batch processor feeds an exporter that drops the
    spans: what tracing costs the application, without an export's I/O."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropped()))
    return provider


def _timed(count: int, run: Any) -> dict[str, float]:
    started, cpu = time.perf_counter(), time.process_time()
    run()
    wall, used = time.perf_counter() - started, time.process_time() - cpu
    return {"cpu_us": used / count * 1e6, "rate": count / wall}


def _worker_aio(url: str, options: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    import anyio

    import haclient.aio as aio
    from haclient import AckMode, DeliveryMode, Queue, TextMessage

    results: dict[str, Any] = {}

    async def main() -> None:
        async with await aio.connect(url, **options) as connection:
            await connection.start()
            session = await connection.create_session(AckMode.AUTO)
            queue = Queue(f"bench-tracing-aio-{os.getpid()}")
            producer = await session.create_producer(queue)
            consumer = await session.create_consumer(queue)

            async def sends(count: int, mode: DeliveryMode) -> None:
                for n in range(count):
                    await producer.send(TextMessage(f"message {n:08d}"), delivery_mode=mode)
                await producer.flush()

            async def receives(count: int) -> None:
                for _ in range(count):
                    if await consumer.receive(30) is None:
                        raise RuntimeError("a message did not come")

            for phase, count, mode in (
                ("sync send", args.count, DeliveryMode.PERSISTENT),
                ("pipelined send", args.pipelined_count, DeliveryMode.NON_PERSISTENT),
            ):
                await sends(args.warmup, mode)
                await receives(args.warmup)
                started, cpu = time.perf_counter(), time.process_time()
                await sends(count, mode)
                wall, used = time.perf_counter() - started, time.process_time() - cpu
                results[phase] = {"cpu_us": used / count * 1e6, "rate": count / wall}
                started, cpu = time.perf_counter(), time.process_time()
                await receives(count)
                wall, used = time.perf_counter() - started, time.process_time() - cpu
                if phase == "sync send":
                    results["receive AUTO"] = {"cpu_us": used / count * 1e6, "rate": count / wall}

            async def sends_async(count: int) -> None:
                done = anyio.Event()
                left = count

                def completed(message: Any, error: BaseException | None) -> None:
                    nonlocal left
                    left -= 1
                    if left == 0:
                        done.set()

                for n in range(count):
                    await producer.send_async(
                        TextMessage(f"message {n:08d}"), on_completion=completed
                    )
                await done.wait()

            await sends_async(args.warmup)
            await receives(args.warmup)
            started, cpu = time.perf_counter(), time.process_time()
            await sends_async(args.count)
            wall, used = time.perf_counter() - started, time.process_time() - cpu
            results["async send"] = {"cpu_us": used / args.count * 1e6, "rate": args.count / wall}
            await receives(args.count)

    anyio.run(main)
    return results


def _worker_blocking(url: str, options: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    import haclient
    from haclient import AckMode, DeliveryMode, Queue, TextMessage

    results: dict[str, Any] = {}
    with haclient.connect(url, **options) as connection:
        connection.start()
        session = connection.create_session(AckMode.AUTO)
        queue = Queue(f"bench-tracing-blocking-{os.getpid()}")
        producer = session.create_producer(queue)
        consumer = session.create_consumer(queue)

        def sends(count: int, mode: DeliveryMode) -> None:
            for n in range(count):
                producer.send(TextMessage(f"message {n:08d}"), delivery_mode=mode)
            producer.flush()

        def receives(count: int) -> None:
            for _ in range(count):
                if consumer.receive(30) is None:
                    raise RuntimeError("a message did not come")

        for phase, count, mode in (
            ("sync send", args.count, DeliveryMode.PERSISTENT),
            ("pipelined send", args.pipelined_count, DeliveryMode.NON_PERSISTENT),
        ):
            sends(args.warmup, mode)
            receives(args.warmup)
            results[phase] = _timed(count, lambda c=count, m=mode: sends(c, m))
            received = _timed(count, lambda c=count: receives(c))
            if phase == "sync send":
                results["receive AUTO"] = received

        def sends_async(count: int) -> None:
            done = threading.Semaphore(0)
            for n in range(count):
                producer.send_async(
                    TextMessage(f"message {n:08d}"), on_completion=lambda m, e: done.release()
                )
            for _ in range(count):
                done.acquire()

        sends_async(args.warmup)
        receives(args.warmup)
        results["async send"] = _timed(args.count, lambda: sends_async(args.count))
        receives(args.count)
    return results


def worker(args: argparse.Namespace) -> int:
    options: dict[str, Any] = {"username": "guest", "password": "guest"}  # bench.broker's user
    if args.variant in ("on", "on-base"):
        options["tracer_provider"] = tracer_provider()
    import haclient

    results = {
        "haclient": haclient.__file__,
        "aio": _worker_aio(args.url, options, args),
        "blocking": _worker_blocking(args.url, options, args),
    }
    print(json.dumps(results))
    return 0


# The driver ----------------------------------------------------------------------------------


def _extract(commit: str, into: Path, name: str = "base") -> Path:
    """The client packages of ``commit`` (``haclient``, ``failover``), extracted into
    ``into/name``."""
    archive = into / f"{name}.tar"
    subprocess.run(
        ["git", "archive", "-o", str(archive), commit, "haclient", "failover"],
        cwd=ROOT,
        check=True,
    )
    tree = into / name
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def _run_worker(
    variant: str, tree: Path, url: str, args: argparse.Namespace
) -> dict[str, Any] | None:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # -P: the script's own directory (bench/, whose failover.py would shadow the failover
    # package) does not go on sys.path; PYTHONPATH puts the variant's tree first.
    argv = [sys.executable, "-P", str(Path(__file__)), "--worker", variant, "--url", url]
    argv += ["--count", str(args.count), "--pipelined-count", str(args.pipelined_count)]
    argv += ["--warmup", str(args.warmup)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        print(f"{variant}: worker failed:\n{done.stderr}", file=sys.stderr)
        return None
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    if not result["haclient"].startswith(str(tree)):
        raise RuntimeError(f"{variant}: ran {result['haclient']}, not the tree {tree}")
    return result


def table(
    runs: dict[str, list[dict[str, Any]]], variants: Sequence[str], base: str, measured: str
) -> list[str]:
    """The median CPU us per message and rate of each (api, phase) for ``variants``, and
    ``measured - base`` per message (``on - off``: what a traced message costs)."""
    cpu_heads = "".join(f" {v} us/msg |" for v in variants)
    rate_heads = "".join(f" {v} msg/s |" for v in variants)
    lines = [
        f"| API | phase |{cpu_heads} {measured} - {base} us/msg |{rate_heads}",
        "|---|---|" + "---|" * (2 * len(variants) + 1),
    ]
    for api, phase in itertools.product(APIS, PHASES):
        cpu = {v: statistics.median(r[api][phase]["cpu_us"] for r in runs[v]) for v in variants}
        rate = {v: statistics.median(r[api][phase]["rate"] for r in runs[v]) for v in variants}
        cpus = "".join(f" {cpu[v]:.1f} |" for v in variants)
        rates = "".join(f" {rate[v]:,.0f} |" for v in variants)
        lines.append(f"| {api} | {phase} |{cpus} {cpu[measured] - cpu[base]:+.1f} |{rates}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--base", default="f9342d5", help="the commit before tracing")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--pipelined-count", type=int, default=10000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument(
        "--traced-base", metavar="COMMIT", help="also measure COMMIT's tree traced (on-base)"
    )
    parser.add_argument(
        "--worker", choices=(*VARIANTS, "on-base"), dest="variant", help=argparse.SUPPRESS
    )
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--json", metavar="PATH", help="also write every round's results")
    args = parser.parse_args(argv)
    if args.variant is not None:
        return worker(args)
    from bench.broker import BrokerProcess

    variants = (*VARIANTS, "on-base") if args.traced_base else VARIANTS
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="bench-tracing-") as tmp:
        trees = {"before": _extract(args.base, Path(tmp)), "off": ROOT, "on": ROOT}
        if args.traced_base:
            trees["on-base"] = _extract(args.traced_base, Path(tmp), "traced-base")
        with BrokerProcess("tracing", Path(tmp), store=False) as broker:
            url = f"amqp://127.0.0.1:{broker.port}"
            for rnd in range(args.rounds):
                turn = rnd % len(variants)
                order = variants[turn:] + variants[:turn]
                for variant in order:
                    result = _run_worker(variant, trees[variant], url, args)
                    if result is None:
                        return 1
                    runs[variant].append(result)
                print(f"round {rnd + 1}/{args.rounds} done", file=sys.stderr)
    print("\n".join(table(runs, VARIANTS, "off", "on")))
    if args.traced_base:
        print("\n" + "\n".join(table(runs, ("on-base", "on"), "on-base", "on")))
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
