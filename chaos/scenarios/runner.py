"""Run a matrix of faults x workloads on a bed, writing one ledger.

A run is a sequence of rounds. In each round every chosen workload runs at once, on streams of
its own (``<workload>-r<round>``, each on the queue ``chaos-<run id>-<workload>-r<round>``: no
run sees another's messages), on one event loop in a worker thread, while the main thread
injects the round's faults one after the other (their order drawn from the seeded ``Random``),
so every fault of a round hits every workload. Then the workloads are told to stop and drain.
A workload still running ``hang_after`` seconds after the stop is cancelled and written down as
hung. At the end every queue of the run is emptied (``chaos.scenarios.drain``) and what was left
on it written into the ledger. The audit (``chaos.audit``) judges the ledger afterwards.

Every connection the workloads open is exported by a ``haclient.metrics`` endpoint (the
caller's, or one the run serves itself on a free loopback port); at the end the run scrapes it
once over HTTP (``MatrixRun.metrics``), and the report plots failover durations from it.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import anyio

import haclient.aio as aio
import haclient.metrics
from chaos.audit import Ledger
from chaos.bed import Bed, FaultRecord
from chaos.faults import ALL_FAULTS, FAULTS, IDLE_TIMEOUT
from chaos.scenarios.drain import drain
from chaos.scenarios.outbox_inbox import outbox_inbox
from chaos.scenarios.workloads import WORKLOADS, Workload, WorkloadContext
from chaos.scrape import Scrape, scrape

__all__ = ["ALL_WORKLOADS", "APP_WORKLOADS", "MatrixRun", "Schedule", "run_matrix"]

log = logging.getLogger("chaos.runner")

APP_WORKLOADS: dict[str, Workload] = {"outbox_inbox": outbox_inbox}
"""Workloads that run applications in processes of their own (for the ``app_kill`` fault to
kill): slower to start, so not among a run's default workloads."""
ALL_WORKLOADS: dict[str, Workload] = {**WORKLOADS, **APP_WORKLOADS}
"""Every workload a run can be asked for, by name."""

WARM_UP = 0.5
GAP = 0.3
HANG_AFTER = 60.0
SETTLE_SLACK = 5.0


@dataclass
class MatrixRun:
    """What a run did: the ledger, the faults injected (in order), when it ran, the queues it
    used (queue name -> stream), why the final drain failed (empty when it did not), and the
    last scrape of the metrics of every connection it opened."""

    ledger: Ledger = field(default_factory=Ledger)
    run_id: str = ""
    queues: dict[str, str] = field(default_factory=dict)
    drain_error: str = ""
    faults: list[FaultRecord] = field(default_factory=list)
    workloads: list[str] = field(default_factory=list)
    seed: int = 0
    started: float = 0.0
    ended: float = 0.0
    metrics: Scrape | None = None


@dataclass(frozen=True)
class Schedule:
    """Which faults a run injects, how many, and how they are spaced.

    Every fault of ``faults`` once per pass, in an order the seeded ``Random`` shuffles (unless
    ``shuffle`` is False), until ``count`` faults (default: one pass) or, with ``duration``,
    until that many seconds have passed. A round injects ``per_round`` of them, ``gap`` seconds
    apart, while its workloads run on fresh streams; then they get ``drain`` seconds to finish.

    Raises:
        ValueError: an unknown or no fault, ``count`` together with ``duration``, or a number
            out of range or not finite (the message names it).
    """

    faults: Sequence[str] = tuple(FAULTS)
    seed: int = 0
    count: int | None = None
    duration: float | None = None
    per_round: int = 10
    gap: float = GAP
    drain: float = 8.0
    shuffle: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "faults", tuple(self.faults))  # a value, as frozen promises
        unknown = [name for name in self.faults if name not in ALL_FAULTS]
        if unknown:
            raise ValueError(f"unknown faults {unknown} (known: {', '.join(ALL_FAULTS)})")
        if not self.faults:
            raise ValueError("a schedule needs at least one fault")
        if self.count is not None and self.duration is not None:
            raise ValueError("a schedule has a count or a duration, not both")
        for name, least in (("count", 1), ("per_round", 1), ("duration", 0), ("gap", 0)):
            value = getattr(self, name)
            if value is not None and value < least:
                raise ValueError(f"{name} must be at least {least}, not {value}")
        if self.drain < 0:
            raise ValueError(f"drain must be at least 0, not {self.drain}")
        for name in ("duration", "gap", "drain"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number of seconds, not {value}")

    def rounds(self, rng: random.Random) -> list[list[str]]:
        """The faults of each round, drawn with ``rng``; with a ``duration``, more than fit."""
        total = 10**6 if self.duration is not None else self.count or len(self.faults)
        order: list[str] = []
        while len(order) < total:
            shuffled = list(self.faults)
            if self.shuffle:
                rng.shuffle(shuffled)
            order.extend(shuffled)
        order = order[:total]
        return [order[i : i + self.per_round] for i in range(0, len(order), self.per_round)]


def run_matrix(
    bed: Bed,
    schedule: Schedule | None = None,
    *,
    workloads: Sequence[str] = tuple(WORKLOADS),
    on_fault: Callable[[FaultRecord], None] | None = None,
    on_connect: Callable[[aio.Connection], None] | None = None,
    metrics: haclient.metrics.MetricsServer | None = None,
    run_id: str | None = None,
    tracer_provider: Any = None,
    databases: Callable[[], str] | None = None,
) -> MatrixRun:
    """Inject the faults of ``schedule`` (default: one of each) while ``workloads`` run;
    returns the run with its ledger and the final scrape of ``metrics`` (default: an endpoint
    served for the run), which exports every connection the workloads opened. ``on_fault``
    is told of each fault injected, ``on_connect`` of each connection opened. The queues are
    named after ``run_id`` (default: a fresh random one) and drained at the end. With
    ``tracer_provider`` (an OpenTelemetry ``TracerProvider``) the workloads' connections trace,
    and the ledger notes each message's trace id. ``databases`` makes a fresh PostgreSQL
    database (its ``postgresql://`` URL) for each application of the ``outbox_inbox`` workload
    (default: SQLite files)."""
    unknown = [name for name in workloads if name not in ALL_WORKLOADS]
    if unknown:
        raise ValueError(f"unknown workloads {unknown} (known: {', '.join(ALL_WORKLOADS)})")
    if not workloads:
        raise ValueError("a run needs at least one workload")
    schedule = schedule or Schedule()
    rng = random.Random(schedule.seed)
    run = MatrixRun(
        workloads=list(workloads),
        seed=schedule.seed,
        started=time.time(),
        run_id=run_id or uuid.uuid4().hex[:8],
    )
    deadline = None if schedule.duration is None else time.monotonic() + schedule.duration
    with ExitStack() as stack:
        server = metrics or stack.enter_context(haclient.metrics.serve(0))

        def connected(connection: aio.Connection) -> None:
            server.collector.add(connection)
            if on_connect is not None:
                on_connect(connection)

        rounds = _Rounds(
            bed, run, schedule, rng, deadline, on_fault, connected, tracer_provider, databases
        )
        for number, faults in enumerate(schedule.rounds(rng)):
            if rounds.past_deadline():
                break
            rounds.play(number, faults)
        _drain(bed, run)
        run.metrics = scrape(server.url)
    run.ended = time.time()
    return run


@dataclass
class _Rounds:
    """What every round of one run shares."""

    bed: Bed
    run: MatrixRun
    schedule: Schedule
    rng: random.Random
    deadline: float | None
    on_fault: Callable[[FaultRecord], None] | None
    on_connect: Callable[[aio.Connection], None]
    tracer_provider: Any = None
    databases: Callable[[], str] | None = None

    def past_deadline(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def play(self, number: int, faults: list[str]) -> None:
        """Round ``number``: every workload on a fresh stream, ``faults`` injected meanwhile."""
        stop, url = threading.Event(), self.bed.url()
        contexts = [
            WorkloadContext(
                url,
                f"{name}-r{number}",
                self.run.ledger,
                stop,
                idle_timeout=IDLE_TIMEOUT,
                # A broker that notices a dead connection late (ActiveMQ: 30 s) gives its
                # unsettled deliveries back only then: wait that long for them.
                drain=max(self.schedule.drain, self.bed.stale_after + 1.0),
                on_connect=self.on_connect,
                queue=f"chaos-{self.run.run_id}-{name}-r{number}",
                tracer_provider=self.tracer_provider,
                apps=self.bed.apps,
                databases=self.databases,
            )
            for name in self.run.workloads
        ]
        self.run.queues.update((c.queue, c.stream) for c in contexts)
        worker = threading.Thread(
            target=anyio.run, args=(_run_all, contexts, stop), name=f"chaos-round-{number}"
        )
        worker.start()
        try:
            time.sleep(WARM_UP)
            for name in faults:
                if self.past_deadline():
                    break
                self._inject(name)
                time.sleep(self.schedule.gap)
        finally:
            stop.set()
            worker.join()

    def _inject(self, name: str) -> None:
        record = ALL_FAULTS[name](self.bed, self.rng)
        self.run.faults.append(record)
        self.run.ledger.add(
            "fault",
            call=record.name,
            message=record.detail,
            t=record.end,
            duration=record.end - record.start,
        )
        if self.on_fault is not None:
            self.on_fault(record)


def _drain(bed: Bed, run: MatrixRun) -> None:
    """Empty every queue of the run into its ledger, once the brokers gave back what dead
    connections held (``_wait_settled``); a failure is kept in ``drain_error`` (the report says
    the leftovers are not accounted for), not raised."""
    try:
        _wait_settled(bed, run.queues)
        anyio.run(drain, bed.url(), run.queues, run.ledger)
    except Exception as exc:
        log.error("the drain failed", exc_info=exc)
        leaves = _leaves(exc)
        run.drain_error = "; ".join(f"{type(leaf).__name__}: {leaf}" for leaf in leaves)[:200]


def _wait_settled(bed: Bed, queues: Iterable[str]) -> None:
    """Wait (at most the time a broker takes to notice a dead connection, and a little) until
    no message of ``queues`` is delivered and unsettled: every workload has closed, so such a
    message is held by a connection the broker has not yet noticed is dead, and comes back to
    its queue when it does. Embedded beds only (an external broker's are not visible)."""
    deadline = time.monotonic() + bed.stale_after + SETTLE_SLACK
    held = bed.unsettled(queues)
    if held:
        log.info(
            "waiting up to %.0f s for %d messages held by dead connections", bed.stale_after, held
        )
    while held and time.monotonic() < deadline:
        time.sleep(0.1)
        held = bed.unsettled(queues)
    if held:
        log.warning("%d messages still held by connections after %.0f s", held, bed.stale_after)


async def _run_all(contexts: list[WorkloadContext], stop: threading.Event) -> None:
    async with anyio.create_task_group() as tg:
        for context in contexts:
            tg.start_soon(_guarded, context, stop)


async def _guarded(context: WorkloadContext, stop: threading.Event) -> None:
    """Run the stream's workload; cancel it and write it down as hung when it outlives the
    stop by ``HANG_AFTER`` seconds."""
    workload = ALL_WORKLOADS[context.stream.rsplit("-r", 1)[0]]
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
