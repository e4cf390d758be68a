"""Run a matrix of faults x workloads on a bed, writing one ledger.

A run is a sequence of rounds. In each round every chosen workload runs at once, on streams of
its own (``<workload>-r<round>``), on one event loop in a worker thread, while the main thread
injects the round's faults one after the other (their order drawn from the seeded ``Random``),
so every fault of a round hits every workload. Then the workloads are told to stop and drain.
A workload still running ``hang_after`` seconds after the stop is cancelled and written down as
hung. The audit (``chaos.audit``) judges the ledger afterwards.

Every connection the workloads open is exported by a ``haclient.metrics`` endpoint (the
caller's, or one the run serves itself on a free loopback port); at the end the run scrapes it
once over HTTP (``MatrixRun.metrics``), and the report plots failover durations from it.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field

import anyio

import haclient.aio as aio
import haclient.metrics
from chaos.audit import Ledger
from chaos.bed import Bed, FaultRecord
from chaos.faults import FAULTS, IDLE_TIMEOUT
from chaos.scenarios.workloads import WORKLOADS, WorkloadContext
from chaos.scrape import Scrape, scrape

__all__ = ["MatrixRun", "run_matrix"]

log = logging.getLogger("chaos.runner")

WARM_UP = 0.5
GAP = 0.3
HANG_AFTER = 60.0


@dataclass
class MatrixRun:
    """What a run did: the ledger, the faults injected (in order), when it ran, and the last
    scrape of the metrics of every connection it opened."""

    ledger: Ledger = field(default_factory=Ledger)
    faults: list[FaultRecord] = field(default_factory=list)
    workloads: list[str] = field(default_factory=list)
    seed: int = 0
    started: float = 0.0
    ended: float = 0.0
    metrics: Scrape | None = None


def plan(
    faults: Sequence[str],
    rng: random.Random,
    *,
    count: int | None,
    per_round: int,
    shuffle: bool = True,
) -> list[list[str]]:
    """The faults of each round: every fault once per pass, in a shuffled order (unless
    ``shuffle`` is False), until ``count`` faults (default: one pass)."""
    total = count if count is not None else len(faults)
    order: list[str] = []
    while len(order) < total:
        shuffled = list(faults)
        if shuffle:
            rng.shuffle(shuffled)
        order.extend(shuffled)
    order = order[:total]
    return [order[i : i + per_round] for i in range(0, len(order), per_round)]


def run_matrix(
    bed: Bed,
    *,
    faults: Sequence[str] = tuple(FAULTS),
    workloads: Sequence[str] = tuple(WORKLOADS),
    seed: int = 0,
    count: int | None = None,
    duration: float | None = None,
    per_round: int = 10,
    on_fault: Callable[[FaultRecord], None] | None = None,
    drain: float = 8.0,
    gap: float = GAP,
    shuffle: bool = True,
    on_connect: Callable[[aio.Connection], None] | None = None,
    metrics: haclient.metrics.MetricsServer | None = None,
) -> MatrixRun:
    """Inject ``count`` faults (or as many as fit in ``duration`` seconds; default one of
    each), ``gap`` seconds apart, while ``workloads`` run; returns the run with its ledger and
    the final scrape of ``metrics`` (default: an endpoint served for the run), which exports
    every connection the workloads opened. ``on_connect`` is told of each of them too."""
    rng = random.Random(seed)
    run = MatrixRun(workloads=list(workloads), seed=seed, started=time.time())
    total = count if duration is None else 10**6
    rounds = plan(faults, rng, count=total, per_round=per_round, shuffle=shuffle)
    deadline = None if duration is None else time.monotonic() + duration
    url = bed.url()
    with ExitStack() as stack:
        server = metrics or stack.enter_context(haclient.metrics.serve(0))

        def connected(connection: aio.Connection) -> None:
            server.collector.add(connection)
            if on_connect is not None:
                on_connect(connection)

        for number, round_faults in enumerate(rounds):
            if deadline is not None and time.monotonic() > deadline:
                break
            _round(
                bed, run, url, number, round_faults, rng, on_fault, deadline, drain, gap, connected
            )
        run.metrics = scrape(server.url)
    run.ended = time.time()
    return run


def _round(
    bed: Bed,
    run: MatrixRun,
    url: str,
    number: int,
    faults: list[str],
    rng: random.Random,
    on_fault: Callable[[FaultRecord], None] | None,
    deadline: float | None,
    drain: float,
    gap: float,
    on_connect: Callable[[aio.Connection], None] | None = None,
) -> None:
    stop = threading.Event()
    contexts = [
        WorkloadContext(
            url,
            f"{name}-r{number}",
            run.ledger,
            stop,
            idle_timeout=IDLE_TIMEOUT,
            drain=drain,
            on_connect=on_connect,
        )
        for name in run.workloads
    ]
    worker = threading.Thread(
        target=anyio.run, args=(_run_all, contexts, stop), name=f"chaos-round-{number}"
    )
    worker.start()
    try:
        time.sleep(WARM_UP)
        for name in faults:
            if deadline is not None and time.monotonic() > deadline:
                break
            record = FAULTS[name](bed, rng)
            run.faults.append(record)
            run.ledger.add(
                "fault",
                call=record.name,
                message=record.detail,
                t=record.end,
                duration=record.end - record.start,
            )
            if on_fault is not None:
                on_fault(record)
            time.sleep(gap)
    finally:
        stop.set()
        worker.join()


async def _run_all(contexts: list[WorkloadContext], stop: threading.Event) -> None:
    async with anyio.create_task_group() as tg:
        for context in contexts:
            tg.start_soon(_guarded, context, stop)


async def _guarded(context: WorkloadContext, stop: threading.Event) -> None:
    """Run the stream's workload; cancel it and write it down as hung when it outlives the
    stop by ``HANG_AFTER`` seconds."""
    workload = WORKLOADS[context.stream.rsplit("-r", 1)[0]]
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:

            async def watchdog() -> None:
                while not stop.is_set():
                    await anyio.sleep(0.05)
                await anyio.sleep(HANG_AFTER + context.drain)
                context.record("hung", "workload", "", message=f"{HANG_AFTER:.0f} s after stop")
                scope.cancel()

            tg.start_soon(watchdog)
            try:
                await workload(context)
            except Exception as exc:  # a workload that died is a promise the audit judges
                leaves = _leaves(exc)  # a task group's, or the one exception
                log.error("workload %s died", context.stream, exc_info=exc)
                context.record(
                    "error",
                    "workload",
                    "",
                    call="run",
                    error=" + ".join(type(leaf).__name__ for leaf in leaves),
                    message="; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves)[:200],
                )
            tg.cancel_scope.cancel()


def _leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside ``error``: its leaves when it is a group (of groups), else itself."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]
