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
  stands in for its attempt (``failover.walk``): no connect.

A variant may name the watch's interval in milliseconds: ``stand-in@8`` probes every 8 ms
(default: ``failover.schedule.PORT_WATCH``'s).

The *cost* of a variant is its median less the median of ``off`` (what the watch adds to the
attempts); its *total*, its median less the median of ``idle`` (what the failover costs while
both ports refuse: attempts and watch). The machine's other work
shows in every variant alike; run several rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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

VARIANTS = ("idle", "off", "loop", "thread", "stand-in")
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
        setattr(failover.supervisor, "TcpProbe", lambda resolve, *_: TcpProbe(resolve))  # noqa: B010
    try:
        yield
    finally:
        failover.schedule.PORT_WATCH = _PORT_WATCH
        setattr(failover.supervisor, "TcpProbe", TcpProbe)  # noqa: B010
        setattr(failover.walk.Walker, "_refuses", _REFUSES)  # noqa: B010


async def measure(variant: str, work_dir: Path, window: float) -> float:
    """This process's CPU, in % of one CPU, over ``window`` s while both brokers refuse."""
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
                cpu, wall = time.process_time(), time.monotonic()
                await anyio.sleep(window)
                cpu, wall = time.process_time() - cpu, time.monotonic() - wall
            finally:
                with anyio.move_on_after(10, shield=True):
                    await conn.close()
    finally:
        broker.stop()
    return 100.0 * cpu / wall


async def _run(rounds: int, window: float, variants: Sequence[str]) -> dict[str, list[float]]:
    got: dict[str, list[float]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(prefix="bench-probe-cost-") as tmp:
        for index in range(rounds):
            order = [*variants[index % len(variants) :], *variants[: index % len(variants)]]
            for name in order:
                got[name].append(await measure(name, Path(tmp), window))
            print(
                f"round {index + 1}: "
                + ", ".join(f"{name} {got[name][-1]:.2f} %" for name in variants),
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
    got = anyio.run(_run, args.rounds, args.window, variants)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
