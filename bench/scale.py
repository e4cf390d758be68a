"""Many blocking connections in one process: what they cost idle, and how they fail over together.

Run from the repository root::

    .venv/bin/python -m bench.scale                      # 1,000 connections; restore at 10x
    .venv/bin/python -m bench.scale --connections 50 --consumers 500 --sessions 5 --temp-queues 50

Three parts, each skippable (``--no-idle``, ``--no-failover``, ``--no-restore``):

1. **idle**: ``--connections`` N blocking connections (``haclient.connect``, the default shared
   event-loop thread), each with an AUTO session and a consumer on a queue of its own, started,
   opened one after another from the main thread, against the reference broker
   (``bench.broker.BrokerProcess``: its own process on a free 127.0.0.1 port, stopped by its
   pid). Measured: the time to open them all; the threads of this process (the kernel's count,
   ``/proc/self/status``; no listener is set, so none is a listener thread); the growth of its
   resident memory (RSS, after a full garbage collection) divided by N. One connection is
   opened and closed first, untimed, so that the imports and the loop thread are not counted.
   Goals: <= 8 threads, <= 150 KiB per idle connection, all open in < 20 s.
2. **failover**: the same N on a shared-store pair (``bench.failover_ha.HaMember``: two
   ``haclient-broker --store`` processes on one SQLite store), each connection on the default
   URL ``failover:(A,B)``; connection 0 also sends PERSISTENT messages from a thread of its own
   (a second session's producer). The master is killed with SIGKILL. Measured, from just before
   the kill: the takeover (until the standby's port accepts a TCP connection, probed every
   millisecond), and for each connection the time its failover completed (a failover
   listener on each connection notes when and to which broker; the main thread sweeps those
   notes every 20 ms, reading no connection's state through its boundary. A blocking
   connection calls its listeners on a notifier thread of its own, so the process has a thread
   per connection once the failover began: "threads after the failover" counts them). Goal:
   every connection completes within takeover + 3 s. Then the sender stops, the connections
   close, and a fresh consumer takes every message off the sender's queue: every send that
   returned must be there (0 lost; duplicates are counted). The peak rate of connections the
   new master sees: both brokers log at DEBUG, where the reference broker logs each AMQP
   connection it opens (``connection N open``, with the time to the millisecond); the new
   master's opens are counted in every 100 ms window (sliding), and the most is reported.
3. **restore**: ``bench.failover``'s restore workload at 10x (``measure_restore``): one
   connection with ``--consumers`` (10,000) consumers over ``--sessions`` (100) AUTO sessions,
   ``--temp-queues`` (1,000) of them on temporary queues; the broker in use (one of two
   independent brokers, ``failover:(A,B)``) is killed with ``Broker.kill()`` in its process and
   the other already accepts, so the takeover is immediate. Goal: restored (kill ->
   ``failover_completed``) in < 2 s; afterwards every consumer is checked on the new broker, as
   ``bench.failover`` does.

Progress goes to stderr (a progress line on the long phases when stderr is a terminal, or with
``BENCH_PROGRESS=1``); the summary with the goals, MET or MISSED, to stdout. Every process the
bench starts is stopped by its pid at the end, also on Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import json
import logging
import re
import resource
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

import haclient
from bench.broker import BrokerProcess, broker_cpu
from bench.failover import KILL_BROKER, Hosts, RestoreResult, measure_restore
from bench.failover_client import FAILOVER_TIMEOUT
from bench.failover_ha import HaMember, wait_accepting
from bench.throughput import HOST, PASSWORD, USER, BenchError, Progress, check, machine_info
from haclient.destination import Queue
from haclient.message import DeliveryMode, TextMessage
from haclient.modes import AckMode
from haclient.sync import Connection, MessageConsumer, Session

THREADS_GOAL = 8
KIB_PER_CONNECTION_GOAL = 150.0
OPEN_GOAL = 20.0
"""Seconds to open every connection (with its session and consumer) at most."""
FAILOVER_MARGIN_GOAL = 3.0
"""Every connection completes its failover within the takeover + this many seconds."""
RESTORE_GOAL = 2.0
"""The 10x restore workload restored within this many seconds of the takeover."""
SWEEP_EVERY = 0.02
"""Seconds between the sweeps over the connections' states during the failover: often enough
for a 3 s goal, seldom enough to leave the loop thread the GIL."""
WINDOW = 0.1
"""The window (seconds) over which the new master's connection opens are counted."""
OPEN_LINE = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) DEBUG chaos\.broker: connection \d+ open"
)


# The process's own figures -----------------------------------------------------------------------


def _status(field_name: str) -> int:
    """An integer field of ``/proc/self/status`` (``VmRSS`` in KiB, ``Threads``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise BenchError(f"no {field_name} in /proc/self/status")


def rss_kib() -> int:
    """This process's resident memory (KiB), after a full garbage collection."""
    gc.collect()
    return _status("VmRSS")


def os_threads() -> int:
    """This process's threads, as the kernel counts them (Python's and any other)."""
    return _status("Threads")


def thread_names() -> dict[str, int]:
    """Python's threads by name (numbers dropped), for the report."""
    names: dict[str, int] = {}
    for thread in threading.enumerate():
        name = re.sub(r"-\d+", "-N", thread.name)
        names[name] = names.get(name, 0) + 1
    return names


def raise_fd_limit(connections: int) -> str:
    """Raise the soft limit of open files for ``connections`` sockets here and in the brokers
    (children inherit it), as far as the hard limit allows; says what it did."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * connections + 1024
    if soft >= need:
        return f"open files limit {soft}"
    new = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if new > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    note = f"open files limit {new}" + (f" (raised from {soft})" if new > soft else "")
    if new < need:
        note += f", the hard limit: {need} wanted"
    return note


# Many blocking connections ----------------------------------------------------------------------


@dataclass
class Client:
    """One blocking connection with its AUTO session and a consumer on a queue of its own."""

    connection: Connection
    session: Session
    consumer: MessageConsumer


def open_client(url: str, queue: str, **options: Any) -> Client:
    connection = haclient.connect(url, **options)
    try:
        session = connection.create_session(AckMode.AUTO)
        consumer = session.create_consumer(Queue(queue))
        connection.start()
    except BaseException:
        connection.close()
        raise
    return Client(connection, session, consumer)


@contextmanager
def clients_open(
    url: str, count: int, prefix: str, log: Any, **options: Any
) -> Iterator[tuple[list[Client], float]]:
    """Open ``count`` clients one after another (queues ``<prefix>-<n>``); yield them and the
    seconds it took; close them all at the end (timed, reported on ``log``)."""
    clients: list[Client] = []
    deadline = time.monotonic() + 60.0 + count * 0.5
    progress = Progress("opening connections", count)
    try:
        t0 = time.monotonic()
        for n in range(count):
            clients.append(open_client(url, f"{prefix}-{n:05d}", **options))
            progress.update(n + 1)
            if time.monotonic() > deadline:
                raise BenchError(f"only {n + 1} of {count} connections opened in time")
        seconds = time.monotonic() - t0
        progress.close()
        yield clients, seconds
    finally:
        progress.close()
        t0 = time.monotonic()
        closing = Progress("closing connections", len(clients))
        for n, client in enumerate(clients):
            try:
                client.connection.close()
            except Exception as exc:  # the others must close all the same
                print(f"closing connection {n} failed: {exc!r}", file=log)
            closing.update(n + 1)
        closing.close()
        if clients:
            print(f"closed {len(clients)} connections in {time.monotonic() - t0:.2f} s", file=log)


# Part 1: idle connections ------------------------------------------------------------------------


@dataclass
class IdleResult:
    connections: int
    open_seconds: float = 0.0
    threads_before: int = 0
    threads: int = 0
    thread_names: dict[str, int] = field(default_factory=dict)
    rss_before_kib: int = 0
    rss_kib: int = 0
    objects_before: int = 0
    objects: int = 0
    """Objects the garbage collector tracks (``gc.get_objects()``), before and with all open."""

    @property
    def kib_per_connection(self) -> float:
        return (self.rss_kib - self.rss_before_kib) / self.connections

    @property
    def objects_per_connection(self) -> float:
        return (self.objects - self.objects_before) / self.connections


def measure_idle(count: int, work_dir: Path, run_id: str, log: Any) -> IdleResult:
    result = IdleResult(count)
    with BrokerProcess("scale-idle", work_dir, store=False) as broker:
        url = f"amqp://{HOST}:{broker.port}"
        print(f"idle: reference broker pid {broker.pid} on port {broker.port}", file=log)
        options = {"username": USER, "password": PASSWORD}
        # Untimed: the imports and the shared loop thread come with the first connection.
        open_client(url, f"scale-{run_id}-warmup", **options).connection.close()
        result.threads_before, result.rss_before_kib = os_threads(), rss_kib()
        result.objects_before = len(gc.get_objects())  # rss_kib() collected just before
        with clients_open(url, count, f"scale-{run_id}-idle", log, **options) as (_, seconds):
            result.open_seconds = seconds
            result.rss_kib = rss_kib()
            result.objects = len(gc.get_objects())
            result.threads = os_threads()
            result.thread_names = thread_names()
            print(
                f"idle: {count} connections open in {seconds:.2f} s; {result.threads} threads; "
                f"{result.kib_per_connection:.1f} KiB each",
                file=log,
            )
    return result


# Part 2: the same connections through a failover -------------------------------------------------


class Sender:
    """Sends PERSISTENT messages (``s-<n>``) from a thread of its own until ``stop()``; keeps
    the numbers of the sends that returned."""

    def __init__(self, client: Client, queue: str) -> None:
        self.session = client.connection.create_session(AckMode.AUTO)
        self.producer = self.session.create_producer(Queue(queue))
        self.producer.delivery_mode = DeliveryMode.PERSISTENT
        self.sent: list[int] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sender", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                self.producer.send(TextMessage(f"s-{n:08d}"))
            except haclient.HAClientError as exc:  # not counted as sent; the run goes on
                self.errors.append(f"{n}: {exc!r}")
                if len(self.errors) > 100:
                    return
            else:
                self.sent.append(n)
            n += 1

    def stop(self, timeout: float) -> None:
        self._stop.set()
        self._thread.join(timeout)
        check(not self._thread.is_alive(), f"the sender did not stop within {timeout:g} s")


@dataclass
class FailoverResult:
    connections: int
    url: str = ""
    open_seconds: float = 0.0
    takeover: float | None = None
    completions: list[float] = field(default_factory=list)
    """Seconds from the kill to each connection's failover completing (those that did)."""
    not_completed: int = 0
    threads_after: int = 0
    client_cpu: float | None = None
    """This process's CPU seconds from the kill to the last completion."""
    standby_cpu: float | None = None
    """The new master's CPU seconds from the kill to the last completion."""
    attempts: dict[str, int] = field(default_factory=dict)
    """Connection attempts the connections made during the failover, by broker ``host:port``
    (``statistics().connection_attempts``, after minus before)."""
    sent: int = 0
    send_errors: list[str] = field(default_factory=list)
    received: int = 0
    lost: int = 0
    duplicates: int = 0
    opens_seen: int = 0
    peak_opens_per_window: int = 0
    kill_wall: float = 0.0
    """``time.time()`` just before the kill (the broker's log has wall-clock times)."""
    heap_objects: int = 0
    """Objects the garbage collector tracked at the kill (after a full collection)."""
    collections: list[int] = field(default_factory=lambda: [0, 0, 0])
    """Collections of each generation from the kill to the last completion."""
    full_collection_seconds: float = 0.0
    """Time the full (generation-2) collections of that span took, together."""
    first_open: float | None = None
    last_open: float | None = None
    """Seconds from the kill to the new master's first and last open of the N connections."""

    @property
    def worst_after_takeover(self) -> float | None:
        """The last completion after the takeover (infinite when some never completed)."""
        if self.takeover is None or not self.completions:
            return None
        if self.not_completed:
            return float("inf")
        return max(self.completions) - self.takeover


def measure_failover(
    count: int, work_dir: Path, run_id: str, send_before: float, log: Any
) -> FailoverResult:
    result = FailoverResult(count)
    with ExitStack() as stack:
        store = work_dir / f"scale-{run_id}.sqlite"
        members = [HaMember(name, store, work_dir, log_level="DEBUG") for name in ("A", "B")]
        for member in members:
            stack.callback(member.stop)
        master, standby = members
        master.spawn("master")
        standby.spawn("standby")
        result.url = f"failover:({master.url},{standby.url})"
        print(f"failover: shared-store pair {result.url} (the default URL)", file=log)
        queue = f"scale-{run_id}-sent"
        with clients_open(result.url, count, f"scale-{run_id}-ha", log) as (clients, seconds):
            result.open_seconds = seconds
            print(f"failover: {count} connections open in {seconds:.2f} s", file=log)
            sender = Sender(clients[0], queue)
            sender.start()
            try:
                time.sleep(send_before)
                check(bool(sender.sent), f"no PERSISTENT send completed in {send_before:g} s")
                before = _attempts(clients)
                _kill_and_watch(clients, master, standby, result, log)
                after = _attempts(clients)
                result.attempts = {k: v - before.get(k, 0) for k, v in sorted(after.items())}
                time.sleep(send_before)  # sends on the new master
            finally:
                sender.stop(FAILOVER_TIMEOUT)
            result.threads_after = os_threads()
            result.sent, result.send_errors = len(sender.sent), sender.errors
        _check_sent(standby, queue, sender.sent, result)
        _count_opens(standby, result)
    return result


def _kill_and_watch(
    clients: Sequence[Client],
    master: HaMember,
    standby: HaMember,
    result: FailoverResult,
    log: Any,
) -> None:
    """Kill the master; measure the takeover, then sweep the connections until each is
    connected to the standby (or the bound passes)."""
    offset = time.time() - time.monotonic()
    gc.collect()
    result.heap_objects = len(gc.get_objects())
    with _collections_counted(result):
        _watch(clients, master, standby, result, offset, log)


@contextmanager
def _collections_counted(result: FailoverResult) -> Iterator[None]:
    """Count the garbage collections of the block by generation, and time the full ones."""
    started = [0.0]

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
            return
        result.collections[info["generation"]] += 1
        if info["generation"] == 2:
            result.full_collection_seconds += time.perf_counter() - started[0]

    gc.callbacks.append(note)
    try:
        yield
    finally:
        gc.callbacks.remove(note)


class _Completed:
    """A failover listener that keeps when, and to which broker, the failover completed."""

    def __init__(self) -> None:
        self.at: float | None = None
        self.broker: Any = None

    def failover_completed(self, broker: Any, downtime: float) -> None:
        self.broker = broker
        self.at = time.monotonic()


def _watch(
    clients: Sequence[Client],
    master: HaMember,
    standby: HaMember,
    result: FailoverResult,
    offset: float,
    log: Any,
) -> None:
    # Each connection says when it completed (a failover listener, called on the
    # connection's notifier thread): no read of the connections' state per sweep, which would
    # be a request through each one's boundary, competing with the failover on the loop.
    seen: list[Any] = [_Completed() for _ in clients]
    for client, listener in zip(clients, seen, strict=True):
        client.connection.add_listener(listener)
    cpu0, standby_cpu0 = time.process_time(), broker_cpu(standby.proc.pid if standby.proc else None)
    t_kill = master.kill()
    result.kill_wall = t_kill + offset
    opened = wait_accepting(standby.port, FAILOVER_TIMEOUT)
    if opened is None:
        raise BenchError(f"the standby did not take over within {FAILOVER_TIMEOUT:g} s")
    result.takeover = opened - t_kill
    print(f"failover: master killed; the standby took over in {result.takeover:.3f} s", file=log)
    done: dict[int, float] = {}
    deadline = opened + FAILOVER_MARGIN_GOAL + FAILOVER_TIMEOUT
    progress = Progress("connections failed over", len(clients))
    while len(done) < len(clients) and time.monotonic() < deadline:
        for n, listener in enumerate(seen):
            if n in done:
                continue
            at, broker = listener.at, listener.broker
            if at is not None and broker is not None and broker.port == standby.port:
                done[n] = at - t_kill
        progress.update(len(done))
        time.sleep(SWEEP_EVERY)
    progress.close()
    result.client_cpu = time.process_time() - cpu0
    standby_cpu = broker_cpu(standby.proc.pid if standby.proc else None)
    if standby_cpu is not None and standby_cpu0 is not None:
        result.standby_cpu = standby_cpu - standby_cpu0
    result.completions = sorted(done.values())
    result.not_completed = len(clients) - len(done)
    if result.completions:
        print(
            f"failover: {len(done)} of {len(clients)} connections completed, the last "
            f"{max(result.completions):.3f} s after the kill",
            file=log,
        )


def _attempts(clients: Sequence[Client]) -> dict[str, int]:
    """Connection attempts so far by broker, summed over ``clients``."""
    total: dict[str, int] = {}
    for client in clients:
        for broker, n in client.connection.statistics().connection_attempts.items():
            total[broker] = total.get(broker, 0) + n
    return total


def _check_sent(standby: HaMember, queue: str, sent: Sequence[int], result: FailoverResult) -> None:
    """Take every message off the sender's queue on the new master: each send that returned
    must be there."""
    received: list[int] = []
    with haclient.connect(standby.url, prefetch=1000) as conn:
        conn.start()
        with conn.create_session(AckMode.AUTO) as session:
            consumer = session.create_consumer(Queue(queue))
            deadline = time.monotonic() + FAILOVER_TIMEOUT + len(sent) / 100
            while time.monotonic() < deadline:
                message = consumer.receive(timeout=1.0)
                if message is None:
                    break
                text = message.text
                if text is None:
                    raise BenchError(f"{queue}: a message without text")
                received.append(int(text.split("-")[1]))
            else:
                raise BenchError(f"{queue}: still receiving after the deadline")
    result.received = len(received)
    result.lost = len(set(sent) - set(received))
    result.duplicates = len(received) - len(set(received))


def _count_opens(standby: HaMember, result: FailoverResult) -> None:
    """The new master's AMQP connection opens from its log: the most in any ``WINDOW``."""
    times = sorted(
        datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        for line in standby.log_path.read_text(errors="replace").splitlines()
        if (m := OPEN_LINE.match(line))
    )
    result.opens_seen = len(times)
    result.peak_opens_per_window = peak_in_window(times, WINDOW)
    herd = times[: result.connections]  # the last open is the check consumer's
    if herd:
        result.first_open = herd[0] - result.kill_wall
        result.last_open = herd[-1] - result.kill_wall


def peak_in_window(times: Sequence[float], window: float) -> int:
    """The most of the sorted ``times`` in any half-open interval ``[t, t + window)``."""
    return max((bisect.bisect_left(times, t + window) - i for i, t in enumerate(times)), default=0)


# Part 3: restore at 10x --------------------------------------------------------------------------


def measure_restore_10x(
    args: argparse.Namespace, work_dir: Path, run_id: str, log: Any
) -> RestoreResult:
    async def run() -> RestoreResult:
        with ExitStack() as stack:
            hosts = Hosts(stack, work_dir, KILL_BROKER)
            return await measure_restore(
                hosts,
                args.restore_runs,
                args.consumers,
                args.temp_queues,
                args.sessions,
                run_id,
                log,
            )

    return anyio.run(run, backend="asyncio")


# Report ------------------------------------------------------------------------------------------


def _goal(
    name: str, value: float | None, op: str, goal: float, unit: str
) -> tuple[str, bool | None]:
    met = None if value is None else (value <= goal if op == "<=" else value < goal)
    verdict = {None: "NOT MEASURED", True: "MET", False: "MISSED"}[met]
    shown = "-" if value is None else f"{value:,.{0 if unit == '' else 2}f}{unit}"
    return f"goal {name} {op} {goal:g}{unit}: {shown} -> {verdict}", met


def _percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(
    idle: IdleResult | None, fo: FailoverResult | None, restore: RestoreResult | None
) -> tuple[str, dict[str, Any]]:
    lines: list[str] = []
    summary: dict[str, Any] = {}
    goals: list[tuple[str, bool | None]] = []
    if idle is not None:
        lines += [
            f"idle: {idle.connections} blocking connections (each a session and a consumer) on "
            "the reference broker",
            f"  open all: {idle.open_seconds:.2f} s, one after another "
            f"({idle.open_seconds / idle.connections * 1000:.1f} ms each)",
            f"  threads: {idle.threads} (before: {idle.threads_before}; Python's: "
            + ", ".join(f"{name} x{n}" for name, n in sorted(idle.thread_names.items()))
            + ")",
            f"  memory: RSS {idle.rss_before_kib:,} -> {idle.rss_kib:,} KiB: "
            f"{idle.kib_per_connection:.1f} KiB per idle connection",
            f"  objects the garbage collector tracks: {idle.objects_before:,} -> "
            f"{idle.objects:,}: {idle.objects_per_connection:.0f} per idle connection",
        ]
        goals += [
            _goal("idle: threads", idle.threads, "<=", THREADS_GOAL, ""),
            _goal(
                "idle: memory per connection",
                idle.kib_per_connection,
                "<=",
                KIB_PER_CONNECTION_GOAL,
                " KiB",
            ),
            _goal("idle: all open in", idle.open_seconds, "<", OPEN_GOAL, " s"),
        ]
        summary["idle"] = asdict(idle) | {
            "kib_per_connection": idle.kib_per_connection,
            "objects_per_connection": idle.objects_per_connection,
        }
    if fo is not None:
        lines += _failover_lines(fo)
        goals += [
            _goal(
                "failover: last connection completed after the takeover",
                fo.worst_after_takeover,
                "<=",
                FAILOVER_MARGIN_GOAL,
                " s",
            ),
            _goal("failover: PERSISTENT messages lost", fo.lost if fo.sent else None, "<=", 0, ""),
        ]
        summary["failover"] = asdict(fo) | {"worst_after_takeover_s": fo.worst_after_takeover}
    if restore is not None:
        ok = [r for r in restore.runs if r.kill_to_completed is not None and r.error is None]
        worst = (
            max((r.kill_to_completed for r in ok if r.kill_to_completed is not None), default=None)
            if len(ok) == len(restore.runs)
            else None
        )
        lines.append(
            f"restore: {restore.consumers} consumers over {restore.sessions} sessions, "
            f"{restore.temp_queues} on temporary queues (set up in {restore.setup_seconds:.1f} s)"
        )
        for r in restore.runs:
            lines.append(
                f"  run {r.number}: kill -> failover_completed {_s(r.kill_to_completed)}, "
                f"failover_started -> completed {_s(r.restore)}, not restored {r.not_restored}"
                + (f", ERROR {r.error}" if r.error else "")
            )
        if restore.note:
            lines.append(f"  {restore.note}")
        goals.append(
            _goal("restore (kill -> completed, worst run)", worst, "<", RESTORE_GOAL, " s")
        )
        summary["restore"] = asdict(restore)
    lines += [text for text, _ in goals]
    summary["goals"] = [{"line": text, "met": met} for text, met in goals]
    return "\n".join(lines), summary


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"


def _failover_lines(fo: FailoverResult) -> list[str]:
    lines = [
        f"failover: {fo.connections} blocking connections on a shared-store pair, "
        f"{fo.url}, opened in {fo.open_seconds:.2f} s; SIGKILL of the master",
        f"  takeover (kill -> the standby accepts): {_s(fo.takeover)}",
    ]
    if fo.completions and fo.takeover is not None:
        after = [c - fo.takeover for c in fo.completions]
        lines.append(
            f"  failover completed, after the takeover: median {statistics.median(after):.3f} s, "
            f"p90 {_percentile(after, 0.9):.3f} s, max {max(after):.3f} s "
            f"({len(after)} of {fo.connections}; {fo.not_completed} not completed)"
        )
    lines += [
        f"  new master's log: {fo.opens_seen} AMQP connection opens, the first "
        f"{min(fo.connections, fo.opens_seen)} from {_s(fo.first_open)} to {_s(fo.last_open)} "
        f"after the kill; peak {fo.peak_opens_per_window} in {WINDOW * 1000:.0f} ms "
        f"(= {fo.peak_opens_per_window / WINDOW:,.0f}/s)",
        f"  PERSISTENT sends: {fo.sent} returned, {len(fo.send_errors)} raised; received "
        f"{fo.received}: lost {fo.lost}, duplicates {fo.duplicates}",
        "  connection attempts during the failover: "
        + (", ".join(f"{k} {v:,}" for k, v in fo.attempts.items()) or "-"),
        f"  CPU from the kill to the last completion: this process {_s(fo.client_cpu)}, the new "
        f"master {_s(fo.standby_cpu)}; threads after the failover: {fo.threads_after}",
        "  garbage collections in that span (generations 0/1/2): "
        + "/".join(str(n) for n in fo.collections)
        + f"; the full ones took {fo.full_collection_seconds:.2f} s, on a heap of "
        f"{fo.heap_objects:,} tracked objects at the kill",
    ]
    if fo.send_errors:
        lines.append(f"  send errors: {fo.send_errors[:3]}")
    return lines


# Orchestration -----------------------------------------------------------------------------------


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--connections", type=int, default=1000, help="blocking connections")
    parser.add_argument(
        "--send-before",
        type=float,
        default=0.5,
        help="seconds the sender sends before the kill, and after the failover",
    )
    parser.add_argument("--consumers", type=int, default=10_000, help="restore: consumers")
    parser.add_argument("--sessions", type=int, default=100, help="restore: sessions")
    parser.add_argument(
        "--temp-queues", type=int, default=1000, help="restore: consumers on temporary queues"
    )
    parser.add_argument("--restore-runs", type=int, default=1, help="restore: kills measured")
    parser.add_argument("--no-idle", action="store_true", help="skip the idle part")
    parser.add_argument("--no-failover", action="store_true", help="skip the failover part")
    parser.add_argument("--no-restore", action="store_true", help="skip the restore part")
    parser.add_argument("--verbose", action="store_true", help="show haclient's warnings")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if min(args.connections, args.sessions, args.restore_runs) < 1:
        parser.error("--connections, --sessions and --restore-runs must be positive")
    if not 0 <= args.temp_queues <= args.consumers:
        parser.error("--temp-queues must be between 0 and --consumers")
    logging.basicConfig(
        level=logging.WARNING if args.verbose else logging.ERROR,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    signal.signal(signal.SIGTERM, _interrupt)
    log = sys.stderr
    print(raise_fd_limit(args.connections), file=log)  # the restore part uses one socket
    run_id = uuid.uuid4().hex[:6]
    machine = machine_info()
    idle = fo = restore = None
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        work_dir = Path(tmp)
        if not args.no_idle:
            idle = measure_idle(args.connections, work_dir, run_id, log)
        if not args.no_failover:
            fo = measure_failover(args.connections, work_dir, run_id, args.send_before, log)
        if not args.no_restore:
            restore = measure_restore_10x(args, work_dir, run_id, log)
    text, summary = report(idle, fo, restore)
    print(
        f"\n{machine['date_utc']}, {machine['cpus']} CPUs ({machine['cpu_model']}), "
        f"Python {machine['python']}, haclient {machine['git']}; brokers in their own processes"
    )
    print(text)
    if args.json:
        document = {
            "config": {k: v for k, v in vars(args).items() if k != "json"},
            "machine": machine,
            "summary": summary,
        }
        with open(args.json, "w") as f:
            json.dump(document, f, indent=2)
            f.write("\n")
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
