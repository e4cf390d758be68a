"""What users get on a real HA pair: the default URL over a shared-store pair of reference brokers.

Part of ``python -m bench.failover`` (``--no-ha`` skips it; ``--kills`` sets the kills,
``--ha-mode`` the pairs). Two ``haclient-broker --store F`` processes share one SQLite store: the
master serves, the standby waits on the store's lock (polling it every 0.5 s, the broker's
default) and takes over, with every stored message, when the master dies. The client connects
with the **default** URL, ``failover:(A,B)`` without a single ``failover.*`` option, and one AUTO
session's producer sends PERSISTENT messages in a loop (each ``send`` returns once the broker
accepted it).

Two pairs, one after the other (``--ha-mode`` picks one):

- ``reference``: the brokers as they are, serving the moment the port opens;
- ``activemq``: the brokers in ActiveMQ mode with a cold start (``--activemq --cold-start``),
  which model the phases measured on ActiveMQ 5.17's pair (``chaos.broker.readiness``): the
  protocol header answered 94-134 ms (median 101) after the port opens, then, once per start,
  the first Open 44 ms, the first attach 15 ms and the first durable message 18 ms later than
  a warm broker answers them (``--ha-readiness-delay``, ``--ha-not-ready`` and
  ``--ha-cold-start`` change them).

Each kill is a SIGKILL of the master's process. Measured, from just before the kill:

- takeover: until the standby's port accepts a TCP connection (a probe connects every
  millisecond from a thread): what the brokers need, which no client can beat;
- downtime: until the first send completes on the new connection (a higher epoch): the sender's
  gap;
- overhead: downtime - takeover, what the client adds (noticing the loss, its reconnect
  schedule, the new connection, restoring the session and producer, the first send).

The killed broker is then started again, as the new standby, before the next kill. On the
ActiveMQ-mode pair no client can do better than the model's *floor*: the readiness delay the
standby drew at its start (it prints it) plus the cold-start delays; *over floor* = overhead -
floor is the client's share and the wire's. Goals: overhead median <= 50 ms, max <= 100 ms on the
reference pair (floor 0); over floor median <= 25 ms, max <= 75 ms on the ActiveMQ-mode pair.
Each kill's overhead is also cut into phases (``bench.failover_phases``): the
reconnect schedule's wait after the port opened, the TCP connection, the wait for the broker's
answer to the protocol header, SASL, the Open, the restore, the first send.
"""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

import failover.schedule
import haclient.aio as aio
from bench.failover_client import (
    FAILOVER_TIMEOUT,
    START_TIMEOUT,
    STOP_TIMEOUT,
    Recorder,
    Sender,
    kill_in_turn,
)
from bench.failover_phases import PHASES, Timeline, phases
from bench.throughput import HOST, BenchError
from chaos.broker.readiness import ACTIVEMQ_COLD_START, WARM, ColdStart
from chaos.net import free_port

PROBE_EVERY = 0.001


@dataclass(frozen=True, slots=True)
class HaPair:
    """One kind of pair: its brokers' extra arguments and the goals, on the overhead above the
    pair's floor (the standby's readiness delay and its cold start: what no client can beat)."""

    mode: str
    broker_args: tuple[str, ...]
    median_goal: float
    max_goal: float
    cold_start: ColdStart = WARM


VARIANTS = {
    "before": "the reconnect schedule as it was: no watch of a refused port (the fast "
    "phase's next pass 25-50 ms later), a broker not ready yet tried again after 5-10 ms",
    "after": "the reconnect schedule as it is: a refused port watched in the fast phase's "
    "waits (every 5 ms, tried as soon as it accepts), a broker not ready yet tried again "
    "after 1-2 ms",
}
"""The client variants ``--ha-ab`` alternates, kill by kill."""
_PORT_WATCH = failover.schedule.PORT_WATCH
_QUICK_RETRY = failover.schedule.NOT_READY_RETRY

REFERENCE = HaPair("reference", (), 0.050, 0.100)
ACTIVEMQ = HaPair("activemq", ("--activemq", "--cold-start"), 0.025, 0.075, ACTIVEMQ_COLD_START)
HA_PAIRS = {pair.mode: pair for pair in (REFERENCE, ACTIVEMQ)}


class HaMember:
    """One ``haclient-broker --store`` process on a fixed port; stopped by its pid. Its log
    (at ``log_level``) goes to ``log_path``."""

    def __init__(
        self,
        name: str,
        store: Path,
        work_dir: Path,
        broker_args: tuple[str, ...] = (),
        log_level: str = "WARNING",
    ) -> None:
        self.name = name
        self.broker_args = broker_args
        self.port = free_port(HOST)
        self.store = store
        self.log_level = log_level
        self.log_path = work_dir / f"ha-{name}-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://{HOST}:{self.port}"

    def spawn(self, role: str) -> None:
        """Start the process and wait until it says it serves (``master``) or waits on the
        store's lock (``standby``)."""
        argv = [sys.executable, "-m", "chaos.broker.cli", "--host", HOST, "--port"]
        argv += [str(self.port), "--store", str(self.store), "--log-level", self.log_level]
        argv += self.broker_args
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log)
        assert self.proc.stdout is not None
        expected = "listening on" if role == "master" else "waiting as its slave"
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline().decode()
            if not line:
                raise BenchError(f"HA broker {self.name} exited: see {self.log_path}")
            if expected in line:
                return
        raise BenchError(f"HA broker {self.name} did not become {role} in {START_TIMEOUT:g} s")

    def ready_after(self, timeout: float) -> float | None:
        """The readiness delay (seconds) the broker says it drew when it took over: from the
        line it prints once it serves (None: no such line within ``timeout``)."""
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([proc.stdout], [], [], left)
            if not readable:
                return None
            line = proc.stdout.readline().decode()
            if not line:
                return None
            if "listening on" in line:
                ready = line.partition("(ready ")[2].partition(" ms")[0]
                return float(ready) / 1000 if ready else 0.0
        return None

    def kill(self) -> float:
        """SIGKILL; returns ``time.monotonic()`` just before it."""
        proc, self.proc = self.proc, None
        assert proc is not None
        t = time.monotonic()
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        return t

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def wait_accepting(port: int, timeout: float) -> float | None:
    """``time.monotonic()`` when ``port`` first accepted a connection (None: not in time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return time.monotonic()
        except OSError:
            time.sleep(PROBE_EVERY)
    return None


@dataclass
class HaKill:
    number: int
    takeover: float | None = None
    downtime: float | None = None
    error: str | None = None
    phases: dict[str, float | None] = field(default_factory=dict)
    early: int = 0
    """Attempts on the standby that failed after its port opened."""
    floor: float | None = None
    """What no client can beat: the standby's readiness delay and its cold start."""
    variant: str | None = None
    """The client variant (``--ha-ab``), or None."""

    @property
    def overhead(self) -> float | None:
        if self.takeover is None or self.downtime is None:
            return None
        return self.downtime - self.takeover

    @property
    def over_floor(self) -> float | None:
        """The overhead above the floor: the client's share, and the wire's."""
        if self.overhead is None or self.floor is None:
            return None
        return self.overhead - self.floor


@dataclass
class HaResult:
    url: str
    mode: str = REFERENCE.mode
    broker_args: tuple[str, ...] = ()
    kills: list[HaKill] = field(default_factory=list)
    note: str | None = None


async def measure_ha(
    kills: int,
    work_dir: Path,
    run_id: str,
    log: Any,
    modes: tuple[str, ...] = tuple(HA_PAIRS),
    broker_args: tuple[str, ...] = (),
    ab: bool = False,
) -> list[HaResult]:
    """``kills`` SIGKILLs of the master of each pair of ``modes``, under the default URL;
    ``broker_args`` go to every broker too. With ``ab``, ``kills`` for each client variant
    (``VARIANTS``), alternating."""
    results = []
    variants = tuple(VARIANTS) if ab else (None,)
    with Timeline.installed() as timeline:
        for mode in modes:
            pair = HA_PAIRS[mode]
            args = (*pair.broker_args, *broker_args)
            result = await _measure_pair(
                pair, args, kills, variants, work_dir, run_id, log, timeline
            )
            results.append(result)
    return results


@contextmanager
def _client_variant(variant: str | None) -> Iterator[None]:
    """The client as ``variant`` has it (None, "after": as it is) for the block."""
    before = variant == "before"
    failover.schedule.PORT_WATCH = None if before else _PORT_WATCH
    failover.schedule.NOT_READY_RETRY = failover.schedule.STARTUP_RETRY if before else _QUICK_RETRY
    try:
        yield
    finally:
        failover.schedule.PORT_WATCH = _PORT_WATCH
        failover.schedule.NOT_READY_RETRY = _QUICK_RETRY


async def _measure_pair(
    pair: HaPair,
    broker_args: tuple[str, ...],
    kills: int,
    variants: tuple[str | None, ...],
    work_dir: Path,
    run_id: str,
    log: Any,
    timeline: Timeline,
) -> HaResult:
    with ExitStack() as stack:
        store = work_dir / f"ha-{run_id}-{pair.mode}.sqlite"
        members = [HaMember(name, store, work_dir, broker_args) for name in ("A", "B")]
        for member in members:
            stack.callback(member.stop)
        await anyio.to_thread.run_sync(members[0].spawn, "master")
        await anyio.to_thread.run_sync(members[1].spawn, "standby")
        url = f"failover:({members[0].url},{members[1].url})"
        result = HaResult(url, pair.mode, broker_args)
        print(f"ha pair ({pair.mode} {' '.join(broker_args)}): {url} (the default URL)", file=log)
        conn = await aio.connect(url, client_id=f"bench-failover-{run_id}-ha-{pair.mode}")
        try:
            await _kills(conn, members, kills, variants, result, run_id, log, timeline, pair)
        finally:
            with anyio.move_on_after(10, shield=True):
                await conn.close()
        return result


async def _kills(
    conn: aio.Connection,
    members: list[HaMember],
    kills: int,
    variants: tuple[str | None, ...],
    result: HaResult,
    run_id: str,
    log: Any,
    timeline: Timeline,
    pair: HaPair,
) -> None:
    recorder = Recorder()
    conn.add_listener(recorder)
    total = kills * len(variants)

    async def one_kill(number: int) -> HaKill:
        variant = variants[(number - 1) % len(variants)]
        with _client_variant(variant):
            kill = await _one_kill(number, conn, members, sender, recorder, timeline, pair)
        kill.variant = variant
        return kill

    async with Sender.running(conn, f"failover-{run_id}-ha") as sender:
        result.note = await kill_in_turn(
            sender,
            total,
            one_kill,
            result.kills,
            lambda number, kill: (
                f"ha {result.mode} kill {number}/{total}"
                + (f" ({kill.variant})" if kill.variant else "")
                + f": takeover {_ms(kill.takeover)} ms, "
                f"downtime {_ms(kill.downtime)} ms, overhead {_ms(kill.overhead)} ms ("
                + ", ".join(f"{name} {_ms(kill.phases.get(name))}" for name in PHASES)
                + (f"; {kill.early} attempts failed after the port opened" if kill.early else "")
                + ")"
            ),
            log,
        )


async def _one_kill(
    number: int,
    conn: aio.Connection,
    members: list[HaMember],
    sender: Sender,
    recorder: Recorder,
    timeline: Timeline,
    pair: HaPair,
) -> HaKill:
    kill = HaKill(number)
    broker = conn.broker
    master = next(m for m in members if broker is not None and m.port == broker.port)
    standby = next(m for m in members if m is not master)
    epoch = conn.statistics().epoch
    t_kill = await anyio.to_thread.run_sync(master.kill)
    opened = await anyio.to_thread.run_sync(wait_accepting, standby.port, FAILOVER_TIMEOUT)
    with anyio.move_on_after(FAILOVER_TIMEOUT):
        while sender.first_after(epoch) is None and not sender.error and not recorder.failed:
            await anyio.sleep(0.005)  # the figures are timestamps: polling adds nothing to them
    first = sender.first_after(epoch)
    kill.takeover = None if opened is None else opened - t_kill
    kill.downtime = None if first is None else first - t_kill
    if opened is None:
        kill.error = f"the standby did not take over within {FAILOVER_TIMEOUT:g} s"
    elif first is None:
        cause = recorder.failed[-1] if recorder.failed else repr(sender.error)
        kill.error = f"no send completed on the standby: {cause}"
    else:
        completed = next((at for at, _, _ in recorder.completed if at >= t_kill), None)
        entries = timeline.between(t_kill, first)
        kill.phases, kill.early = phases(entries, standby.port, opened, completed, first)
        ready = await anyio.to_thread.run_sync(standby.ready_after, 5.0)
        if ready is not None:
            kill.floor = ready + pair.cold_start.total
    await anyio.to_thread.run_sync(master.spawn, "standby")
    return kill


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def _median_max(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    ordered = sorted(values)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return median, ordered[-1]


def ha_report(result: HaResult) -> tuple[list[str], dict[str, Any]]:
    """The table lines and the JSON summary of one pair of the HA part (of each client variant
    with ``--ha-ab``)."""
    brokers = " ".join(("haclient-broker", *result.broker_args))
    lines = [
        f"HA pair ({result.mode}: {brokers}), the default URL {result.url}: SIGKILL of the "
        "master; takeover = kill -> the standby's port accepts; downtime = kill -> first "
        "PERSISTENT send completed on it; overhead = downtime - takeover",
    ]
    summary: dict[str, Any] = {"mode": result.mode, "url": result.url, "note": result.note}
    variants = list(dict.fromkeys(k.variant for k in result.kills)) or [None]
    for variant in variants:
        kills = [k for k in result.kills if k.variant == variant]
        if variant is not None:
            lines.append(f"client {variant}: {VARIANTS[variant]}")
        table, numbers = _variant_report(HA_PAIRS[result.mode], kills)
        lines += table
        if variant is None:
            summary.update(numbers)
        else:
            summary[variant] = numbers
    if result.note:
        lines.append(f"  {result.note}")
    return lines, summary


def _variant_report(pair: HaPair, kills: list[HaKill]) -> tuple[list[str], dict[str, Any]]:
    ok = [k for k in kills if k.overhead is not None]
    rows = {
        "takeover": _median_max([k.takeover for k in ok if k.takeover is not None]),
        "downtime": _median_max([k.downtime for k in ok if k.downtime is not None]),
        "overhead": _median_max([k.overhead for k in ok if k.overhead is not None]),
    }
    floors = [k for k in ok if k.floor]
    if floors:
        rows["floor"] = _median_max([k.floor for k in floors if k.floor is not None])
        rows["over floor"] = _median_max([v for k in floors if (v := k.over_floor) is not None])
    median, worst = rows["over floor" if floors else "overhead"]
    if any(k.error for k in kills) or median is None or worst is None:
        verdict = "FAILED" if kills else "NOT MEASURED"
    else:
        met = median <= pair.median_goal and worst <= pair.max_goal
        verdict = "PASS" if met else "MISSED"
    lines = [f"{'':<10}{'kills':>6}{'median':>9}{'max':>9}"]
    for name, (med, top) in rows.items():
        lines.append(f"{name:<10}{len(ok):>6}{_ms(med):>9}{_ms(top):>9}")
    breakdown = {
        name: _median_max([v for k in ok if (v := k.phases.get(name)) is not None])
        for name in PHASES
    }
    lines.append(
        "  where the overhead goes, median (max) ms: "
        + ", ".join(f"{n} {_ms(m)} ({_ms(t)})" for n, (m, t) in breakdown.items())
    )
    early = sum(k.early for k in ok)
    if early:
        lines.append(f"  {early} attempts on the standby failed after its port opened")
    lines.append(
        f"goal {'over floor' if floors else 'overhead'}: median <= "
        f"{pair.median_goal * 1000:.0f} ms, max <= "
        f"{pair.max_goal * 1000:.0f} ms: {_ms(median)} / {_ms(worst)} ms -> {verdict}"
    )
    summary: dict[str, Any] = {
        f"{name.replace(' ', '_')}_{stat}_s": value
        for name, stats in rows.items()
        for stat, value in zip(("median", "max"), stats, strict=True)
    }
    summary.update({f"{name}_median_s": stats[0] for name, stats in breakdown.items()})
    summary.update({"kills": len(ok), "early_attempts": early, "verdict": verdict})
    return lines, summary
