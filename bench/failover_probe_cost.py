"""What the watch of a refused port costs the client while nothing listens (issue 39 item 14).

Run from the repository root::

    .venv/bin/python -m bench.failover_probe_cost --rounds 5

How this works: a reference broker (``bench.broker.BrokerProcess``) and a port on which nothing
listens make the default URL ``failover:(A,B)``; the client (``haclient.aio``, in this
process) connects to A, then A is killed (SIGKILL), and both ports refuse: the failover's fast
phase tries the list every 25-50 ms for its first 3-6 s. From 0.3 s after the kill, the bench
reads this process's CPU time (``time.process_time``: every thread of it, the port watch's
included; the broker runs in a process of its own) over ``--window`` seconds of wall time, and
prints it as a percentage of one CPU. The connection is closed and the next round starts a new
broker. Each round runs every variant, one after another, in an order that rotates:

- ``idle``: the baseline: the client connected to A, nothing killed, no failover going on;
- ``off``: no watch (``failover.schedule.PORT_WATCH = None``): the attempts alone;
- ``loop``: the watch as it was first built: the waiting task wakes every
  ``PortWatch.interval`` to probe the port itself (a ``TcpProbe`` given no ``wait_readable``);
- ``thread``: the watch in one thread of the process, which probes every watched port and
  wakes the waiting task once the port accepts or the wait ends; every attempt connects;
- ``stand-in``: as it is: the thread, and a watched wait through which the port refused
  stands in for its attempt (``failover.walk``): no connect;
- ``sleeper``: no client at all: a thread that sleeps the watch's interval and wakes, over and
  over: the least that anything waking at that interval costs on this machine;
- ``prober``: that thread connecting one socket to a port on which nothing listens at each
  wake (the watch's probe with nothing around it): the least any watch probing at that
  interval costs.

A variant may name the watch's interval in milliseconds: ``stand-in@8`` probes every 8 ms
(default: ``failover.schedule.PORT_WATCH``'s).

The *cost* of a variant is its median less the median of ``off`` (what the watch adds to the
attempts); its *total*, its median less the median of ``idle`` (what the failover costs while
both ports refuse: attempts and watch). The machine's other work
shows in every variant alike; run several rounds.

A second table splits each variant by thread: the event loop's (``time.thread_time`` of this,
the loop's, thread), the port watch's (its ``/proc/self/task/TID/schedstat``, nanoseconds; for
``sleeper`` and ``prober``, their own thread's), the attempts the connection counted in the
window (``connection_attempts``) and the event loop's CPU per attempt.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio

import failover.schedule
import failover.supervisor
import failover.walk
from bench.broker import BrokerProcess
from bench.throughput import HOST, PASSWORD, USER, machine_info
from chaos.net import free_port
from failover.ports import PortWatch, TcpProbe
from haclient import aio

__all__ = ["VARIANTS", "main", "measure"]

VARIANTS = ("idle", "off", "loop", "thread", "stand-in", "sleeper", "prober")
_BARE = ("sleeper", "prober")  # no client: a bare thread (see the module docstring)
_PORT_WATCH = failover.schedule.PORT_WATCH
_REFUSES = failover.walk.Walker._refuses


async def _no_stand_in(*_: object) -> bool:
    """``Walker._refuses`` as the walk had it before a wait stood in: never known."""
    return False


_SETTLE = 0.3  # seconds from the kill to the window: the loss noticed, the fast phase begun


@contextmanager
def _variant(name: str) -> Iterator[None]:
    """The client as ``name`` has it, for the block (see the module docstring)."""
    name, _, interval = name.partition("@")
    watch = _PORT_WATCH if not interval else PortWatch(float(interval) / 1000)
    failover.schedule.PORT_WATCH = None if name == "off" else watch
    if name != "stand-in":
        setattr(failover.walk.Walker, "_refuses", _no_stand_in)  # noqa: B010
    if name == "loop":  # the supervisor's port_probe() makes a TcpProbe without wait_readable
        setattr(failover.supervisor, "TcpProbe", lambda resolve, *_, **__: TcpProbe(resolve))  # noqa: B010
    try:
        yield
    finally:
        failover.schedule.PORT_WATCH = _PORT_WATCH
        setattr(failover.supervisor, "TcpProbe", TcpProbe)  # noqa: B010
        setattr(failover.walk.Walker, "_refuses", _REFUSES)  # noqa: B010


@dataclass(frozen=True, slots=True)
class Sample:
    """One run of a variant: CPU in % of one CPU over the window, and the attempts' rate."""

    process: float  # every thread of this process
    loop: float  # the event loop's thread
    watch: float  # the port watch's thread (0: it did not run)
    rate: float  # connection attempts counted in the window, per second

    @property
    def per_attempt_us(self) -> float | None:
        """The event loop's CPU per attempt, microseconds (None: no attempt)."""
        return None if not self.rate else self.loop * 1e4 / self.rate


def _watch_cpu() -> float:
    """CPU seconds the port watch's thread has used so far (0: it does not run)."""
    for thread in threading.enumerate():
        if thread.name == "haclient-port-watch" and thread.native_id is not None:
            try:
                with open(f"/proc/self/task/{thread.native_id}/schedstat") as stat:
                    return int(stat.read().split()[0]) / 1e9
            except OSError:
                return 0.0
    return 0.0


def _attempts(conn: aio.Connection) -> int:
    return sum(conn.statistics().connection_attempts.values())


def _bare_thread(probe: bool, interval: float, window: float) -> tuple[float, int]:
    """Run a thread that sleeps ``interval`` and wakes (and, with ``probe``, connects to a port
    on which nothing listens) for ``window`` seconds; its CPU seconds and its wakes."""
    got: list[tuple[float, int]] = []

    def run() -> None:
        sock = socket.socket()
        sock.settimeout(None)
        address = (HOST, free_port(HOST))
        wakes, start = 0, time.thread_time()
        end = time.monotonic() + window
        try:
            while time.monotonic() < end:
                time.sleep(interval)
                if probe:
                    sock.connect_ex(address)
                wakes += 1
        finally:
            sock.close()
        got.append((time.thread_time() - start, wakes))

    thread = threading.Thread(target=run, name="bench-bare-thread")
    thread.start()
    thread.join()
    return got[0]


async def measure(variant: str, work_dir: Path, window: float) -> Sample:
    """This process's CPU, in % of one CPU, over ``window`` s while both brokers refuse, and
    its split (see the module docstring)."""
    name, _, interval = variant.partition("@")
    if name in _BARE:
        every = float(interval) / 1000 if interval else PortWatch().interval
        cpu, wall = time.process_time(), time.monotonic()
        used, _ = await anyio.to_thread.run_sync(_bare_thread, name == "prober", every, window)
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        return Sample(100.0 * cpu / wall, 0.0, 100.0 * used / wall, 0.0)
    broker = BrokerProcess(f"cost-{variant.replace('@', '-')}", work_dir, store=False)
    await anyio.to_thread.run_sync(broker.start)
    try:
        closed = free_port(HOST)
        url = f"failover:(amqp://{HOST}:{broker.port},amqp://{HOST}:{closed})"
        with _variant(variant):
            conn = await aio.connect(url, username=USER, password=PASSWORD)
            try:
                assert broker.proc is not None
                if variant != "idle":
                    broker.proc.kill()
                    broker.proc.wait()
                await anyio.sleep(_SETTLE)
                made, watch = _attempts(conn), _watch_cpu()
                cpu, loop, wall = time.process_time(), time.thread_time(), time.monotonic()
                await anyio.sleep(window)
                cpu, loop = time.process_time() - cpu, time.thread_time() - loop
                wall = time.monotonic() - wall
                watch, made = max(_watch_cpu() - watch, 0.0), _attempts(conn) - made
            finally:
                with anyio.move_on_after(10, shield=True):
                    await conn.close()
    finally:
        broker.stop()
    return Sample(100.0 * cpu / wall, 100.0 * loop / wall, 100.0 * watch / wall, made / wall)


async def _run(rounds: int, window: float, variants: Sequence[str]) -> dict[str, list[Sample]]:
    got: dict[str, list[Sample]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(prefix="bench-probe-cost-") as tmp:
        for index in range(rounds):
            order = [*variants[index % len(variants) :], *variants[: index % len(variants)]]
            for name in order:
                got[name].append(await measure(name, Path(tmp), window))
            print(
                f"round {index + 1}: "
                + ", ".join(f"{name} {got[name][-1].process:.2f} %" for name in variants),
                flush=True,
            )
    return got


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover_probe_cost")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every variant")
    parser.add_argument("--window", type=float, default=3.0, help="seconds measured per run")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma-separated, of {VARIANTS}"
    )
    args = parser.parse_args(argv)
    variants = tuple(args.variants.split(","))
    names = {variant.partition("@")[0] for variant in variants}
    if not names <= set(VARIANTS) or args.rounds < 1 or args.window <= 0:
        parser.error(f"variants among {VARIANTS}, rounds >= 1, window > 0")
    info = machine_info()
    print(f"{info['date_utc']}, {info['cpus']} CPUs ({info['cpu_model']}), window {args.window} s")
    samples = anyio.run(_run, args.rounds, args.window, variants)
    got = {name: [sample.process for sample in runs] for name, runs in samples.items()}
    base = statistics.median(got["off"]) if "off" in got else None
    idle = statistics.median(got["idle"]) if "idle" in got else None
    print(
        "\n| variant | CPU median | min | max | cost (median - off) | total (median - idle) |"
        "\n|---|---|---|---|---|---|"
    )
    for name, values in got.items():
        median = statistics.median(values)
        cost = "-" if base is None or name in ("off", "idle") else f"{median - base:+.2f} %"
        total = "-" if idle is None or name == "idle" else f"{median - idle:+.2f} %"
        print(
            f"| {name} | {median:.2f} % | {min(values):.2f} | {max(values):.2f} | {cost} "
            f"| {total} |"
        )
    _print_split(samples)
    return 0


def _print_split(samples: dict[str, list[Sample]]) -> None:
    """The by-thread table (medians over the rounds)."""
    print(
        "\n| variant | event loop | watch thread | attempts/s | event loop per attempt |"
        "\n|---|---|---|---|---|"
    )
    for name, runs in samples.items():
        loop = statistics.median(sample.loop for sample in runs)
        watch = statistics.median(sample.watch for sample in runs)
        rate = statistics.median(sample.rate for sample in runs)
        costs = [cost for sample in runs if (cost := sample.per_attempt_us) is not None]
        each = f"{statistics.median(costs):.0f} us" if costs else "-"
        print(f"| {name} | {loop:.2f} % | {watch:.2f} % | {rate:.0f} | {each} |")


if __name__ == "__main__":
    sys.exit(main())
