"""Throughput of the reference broker (``chaos.broker``) against RabbitMQ, in one run.

Run from the repository root::

    .venv/bin/python -m bench.broker --messages 20000 --repeat 3 --json bench/broker-results.json

One run starts:

- the reference broker twice, each in its own process (``python -m chaos.broker.cli``), so it
  does not share an interpreter (and its GIL) with the client: ``memory`` without a store, for
  transient messages, and ``store`` with ``--store`` (SQLite) in a temporary directory, for
  durable messages;
- one private RabbitMQ node (``chaos.rabbitmq.RabbitMQNode``), for both kinds.

Every broker process is stopped at the end, whatever happens (reference broker: SIGTERM, then
SIGKILL after 10 s; RabbitMQ: its context manager).

For each broker and each kind of message (``transient``: ``durable=False``; ``durable``:
``durable=True``), with the same message count, payloads and credit window, haclient's engine
(``bench.throughput.haclient_send`` / ``haclient_receive``) sends the messages pipelined until
every delivery is settled Accepted, then receives them, accepting each one. Rates are in msgs/s
(send: first transfer .. last Accepted; receive: first message .. last accept). Each phase checks
itself: all Accepted, every message received once, in order, with its body and its ``durable``
flag, and the queue empty afterwards; anything else stops the run with ``BenchError``.

``--repeat K`` runs K rounds, alternating the order of the brokers; the table shows medians.
The target (the reference broker alone: at least 5,000 transient msgs/s on a 2-core
machine) is checked on the medians of the reference broker's transient send and receive;
the exit status is 3 when it is missed.

``--broker-profile DIR`` runs the reference broker processes under cProfile (stopped with SIGINT,
so the profile is written) and prints their hot spots; the rates of such a run are skewed.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import pstats
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from proton import Message

from bench.throughput import (
    HOST,
    PASSWORD,
    USER,
    BenchError,
    ForeignLoad,
    Phase,
    Workload,
    _percent,
    _process_jiffies,
    _short_paths,
    assert_queue_empty,
    check,
    check_received,
    machine_info,
    make_workload,
    run_phase,
)
from chaos.net import free_port
from chaos.rabbitmq import RabbitMQNode

KINDS = ("transient", "durable")
DIRECTIONS = ("send", "receive")
REFERENCE = "reference"
RABBITMQ = "rabbitmq"
BROKERS = (REFERENCE, RABBITMQ)
TARGET_MSGS_PER_S = 5_000.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0


# The reference broker in its own process ---------------------------------------------------------


class BrokerProcess:
    """``python -m chaos.broker.cli`` on a free loopback port, as a context manager.

    Ready once it printed its listening line and the port accepts a connection. Stopped by its
    pid: SIGTERM (SIGINT when profiled, so cProfile writes its file), then SIGKILL after
    ``STOP_TIMEOUT``. Its stdout and stderr go to ``log_path``.
    """

    def __init__(
        self, name: str, work_dir: Path, *, store: bool, profile_dir: str | None = None
    ) -> None:
        self.name = name
        self.work_dir = work_dir
        self.store_path = work_dir / f"{name}.sqlite" if store else None
        self.log_path = work_dir / f"{name}.log"
        self.profile_path = (
            os.path.join(profile_dir, f"profile-broker-{name}.pstats") if profile_dir else None
        )
        self.port = 0
        self.scheme = "amqp"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_seconds = 0.0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def argv(self) -> list[str]:
        argv = [sys.executable]
        if self.profile_path:
            argv += ["-m", "cProfile", "-o", self.profile_path]
        argv += ["-m", "chaos.broker.cli", "--host", HOST, "--port", str(self.port)]
        argv += ["--user", f"{USER}:{PASSWORD}", "--log-level", "WARNING"]
        if self.store_path is not None:
            argv += ["--store", str(self.store_path)]
        return argv

    def start(self) -> None:
        self.port = free_port(HOST)
        started = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = started + START_TIMEOUT
        listening = f"listening on {self.scheme}://{HOST}:{self.port}"
        while True:
            if self.proc.poll() is not None:
                raise BenchError(
                    f"reference broker {self.name} exited with {self.proc.returncode}:\n"
                    + self._tail()
                )
            if listening in self.log_path.read_text(errors="replace") and _accepts(self.port):
                break
            if time.monotonic() > deadline:
                raise BenchError(
                    f"reference broker {self.name} not listening on port {self.port} after "
                    f"{START_TIMEOUT:g} s:\n" + self._tail()
                )
            time.sleep(0.05)
        self.start_seconds = time.monotonic() - started

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGINT if self.profile_path else signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            print(f"reference broker {self.name} did not stop: killing it", file=sys.stderr)
        finally:  # also when interrupted while waiting
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def _tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> BrokerProcess:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class ActiveMQModeBroker(BrokerProcess):
    """The reference broker process with ``--activemq``: it grants receiver settle mode
    ``first`` when ``second`` is asked, announces the ``queue://``/``topic://`` prefixes and
    refuses a duplicate container id, as ActiveMQ 5.x's AMQP transport does."""

    def argv(self) -> list[str]:
        return [*super().argv(), "--activemq"]


class TlsBroker(BrokerProcess):
    """The reference broker process serving ``amqps://`` only (``--tls-cert``, ``--tls-key``):
    this certificate chain and key, files in PEM."""

    def __init__(self, name: str, work_dir: Path, *, store: bool, cert: Path, key: Path) -> None:
        super().__init__(name, work_dir, store=store)
        self.scheme = "amqps"
        self.cert, self.key = cert, key

    def argv(self) -> list[str]:
        return [*super().argv(), "--tls-cert", str(self.cert), "--tls-key", str(self.key)]


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


# Measurement -------------------------------------------------------------------------------------


@dataclass
class BrokerPhase(Phase):
    """One timed phase: ``impl`` is always haclient; which broker, which kind of message."""

    broker: str = ""
    kind: str = ""
    broker_cpu_seconds: float | None = None

    @property
    def broker_cpu_us_per_message(self) -> float | None:
        """The broker process's CPU over the whole phase (connection set-up included)."""
        if self.broker_cpu_seconds is None:
            return None
        return self.broker_cpu_seconds / self.messages * 1e6


def workload(kind: str, count: int, size: int, window: int) -> Workload:
    """``bench.throughput``'s workload, with transient payloads for ``transient``."""
    work = make_workload(count, size, codec=False, window=window)
    if kind == "durable":
        return work
    payloads = [bytes(Message(body=b, durable=False).encode()) for b in work.bodies]
    return dataclasses.replace(work, payloads=payloads)


def check_durable_flags(label: str, got: Sequence[bytes], durable: bool) -> None:
    """Every received message kept the ``durable`` flag it was sent with."""
    for n, payload in enumerate(got):
        message = Message()
        message.decode(payload)
        if bool(message.durable) != durable:
            raise BenchError(f"{label}: message {n} arrived with durable={message.durable}")


def broker_cpu(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        return _process_jiffies(str(pid)) / CLOCK_TICKS
    except (OSError, ValueError, IndexError):
        return None


def measure(
    broker: str, kind: str, rnd: int, port: int, pid: int | None, address: str, work: Workload
) -> list[BrokerPhase]:
    """Send, then receive, then check the queue is empty; both phases checked."""
    phases = []
    for direction in DIRECTIONS:
        label = f"{broker} {kind} {direction}"
        load = ForeignLoad(pid)
        cpu0 = broker_cpu(pid)
        clock, got = run_phase("haclient", direction, port, address, work)
        cpu1 = broker_cpu(pid)
        foreign = load.share()
        check(clock.wall > 0, f"{label}: the clock did not run")
        if got is not None:
            check_received(label, work, got)
            check_durable_flags(label, got, kind == "durable")
        phase = BrokerPhase(
            "haclient",
            direction,
            rnd,
            work.count,
            clock.wall,
            clock.cpu,
            foreign,
            broker=broker,
            kind=kind,
            broker_cpu_seconds=None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
        )
        phases.append(phase)
        broker_us = phase.broker_cpu_us_per_message
        print(
            f"round {rnd + 1} {broker:<9} {kind:<9} {direction:<8} {phase.rate:>10,.0f} msgs/s "
            f"({clock.wall:.2f} s, client CPU {phase.cpu_us_per_message:.1f} us/msg, broker CPU "
            f"{'?' if broker_us is None else f'{broker_us:.1f}'} us/msg, "
            f"other load {_percent(foreign)})",
            file=sys.stderr,
        )
    assert_queue_empty(port, address, f"{broker} {kind}")
    return phases


# Results -----------------------------------------------------------------------------------------


@dataclass
class BrokerResults:
    config: dict[str, Any]
    machine: dict[str, Any]
    phases: list[BrokerPhase] = dataclasses.field(default_factory=list)

    def of(self, broker: str, kind: str, direction: str) -> list[BrokerPhase]:
        return [
            p for p in self.phases if p.broker == broker and p.kind == kind and p.phase == direction
        ]

    def median_rate(self, broker: str, kind: str, direction: str) -> float | None:
        rates = [p.rate for p in self.of(broker, kind, direction)]
        return statistics.median(rates) if rates else None

    def ratios(self) -> dict[str, float]:
        out = {}
        for kind in KINDS:
            for direction in DIRECTIONS:
                ours = self.median_rate(REFERENCE, kind, direction)
                theirs = self.median_rate(RABBITMQ, kind, direction)
                if ours and theirs:
                    out[f"{kind} {direction}"] = ours / theirs
        return out

    def target(self) -> tuple[bool, str]:
        """The target: the reference broker's transient send and receive medians."""
        send = self.median_rate(REFERENCE, "transient", "send")
        receive = self.median_rate(REFERENCE, "transient", "receive")
        passed = (
            send is not None
            and receive is not None
            and send >= TARGET_MSGS_PER_S
            and receive >= TARGET_MSGS_PER_S
        )
        text = (
            f"{'PASS' if passed else 'FAIL'}: reference broker transient send "
            f"{_rate(send)} msgs/s, receive {_rate(receive)} msgs/s "
            f"(target >= {TARGET_MSGS_PER_S:,.0f} each, medians)"
        )
        return passed, text

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for broker in BROKERS:
            for kind in KINDS:
                cell: dict[str, float | None] = {}
                for direction in DIRECTIONS:
                    phases = self.of(broker, kind, direction)
                    if not phases:
                        continue
                    cell[f"{direction}_msgs_per_s"] = statistics.median(p.rate for p in phases)
                    cell[f"{direction}_client_cpu_us_per_msg"] = statistics.median(
                        p.cpu_us_per_message for p in phases
                    )
                    broker_us = [
                        p.broker_cpu_us_per_message
                        for p in phases
                        if p.broker_cpu_us_per_message is not None
                    ]
                    cell[f"{direction}_broker_cpu_us_per_msg"] = (
                        statistics.median(broker_us) if broker_us else None
                    )
                if cell:
                    out.setdefault(broker, {})[kind] = cell
        out["ratios_reference_over_rabbitmq"] = self.ratios()
        passed, text = self.target()
        out["target"] = {"msgs_per_s": TARGET_MSGS_PER_S, "passed": passed, "text": text}
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "machine": self.machine,
            "summary": self.summary(),
            "phases": [
                asdict(p)
                | {
                    "rate": p.rate,
                    "cpu_us_per_message": p.cpu_us_per_message,
                    "broker_cpu_us_per_message": p.broker_cpu_us_per_message,
                }
                for p in self.phases
            ],
        }

    def table(self) -> str:
        c = self.config
        lines = [
            f"{c['messages']} messages x {c['repeat']} round(s), payload {c['payload_bytes']} B "
            f"encoded ({c['body_chars']}-character text body), credit window {c['window']}, "
            "client: haclient's engine; reference broker: transient into one without a store, "
            "durable into one with --store (SQLite)",
            "msgs/s: median (best) over the rounds; CPU us/msg: median, client = this process, "
            "broker = the broker's process (whole phase); other load: highest share of the "
            "machine busy with other work",
            f"{'broker':<11}{'kind':<11}{'direction':<10}{'msgs/s':>18}{'client CPU':>12}"
            f"{'broker CPU':>12}{'other load':>12}",
        ]
        for broker in BROKERS:
            for kind in KINDS:
                for direction in DIRECTIONS:
                    phases = self.of(broker, kind, direction)
                    if not phases:
                        continue
                    rates = [p.rate for p in phases]
                    client = statistics.median(p.cpu_us_per_message for p in phases)
                    broker_us = [
                        p.broker_cpu_us_per_message
                        for p in phases
                        if p.broker_cpu_us_per_message is not None
                    ]
                    loads = [p.foreign_load for p in phases if p.foreign_load is not None]
                    lines.append(
                        f"{broker:<11}{kind:<11}{direction:<10}"
                        f"{f'{statistics.median(rates):,.0f} ({max(rates):,.0f})':>18}"
                        f"{client:>12.1f}"
                        f"{(f'{statistics.median(broker_us):.1f}' if broker_us else '?'):>12}"
                        f"{(_percent(max(loads)) if loads else '?'):>12}"
                    )
        lines.append("")
        ratios = self.ratios()
        for name, ratio in ratios.items():
            lines.append(f"ratio msgs/s reference/rabbitmq {name:<18}{ratio:>6.2f}")
        if ratios:
            lines.append("")
        lines.append(self.target()[1])
        return "\n".join(lines)


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:,.0f}"


# Profiles of the broker processes ----------------------------------------------------------------


def print_broker_profile(path: str, top: int) -> None:
    if not os.path.exists(path):
        print(f"\nno profile at {path} (the broker did not stop cleanly)")
        return
    for key in ("tottime", "cumulative"):
        stream = io.StringIO()
        stats = pstats.Stats(path, stream=stream)
        stats.sort_stats(key)
        stats.print_stats(top)
        text = stream.getvalue()
        print(f"\n== profile {os.path.basename(path)}: top {top} by {key}")
        print(_short_paths(text[text.find("   ncalls") :].rstrip()))


def dirty_paths() -> list[str] | None:
    """Uncommitted changes under chaos/ and haclient/ (what this run measured beyond the commit)."""
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--", "chaos", "haclient"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [line[3:] for line in out.splitlines()]


# Orchestration -----------------------------------------------------------------------------------


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.broker",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--messages", type=int, default=20_000, help="messages per phase")
    parser.add_argument("--repeat", type=int, default=3, help="alternating rounds")
    parser.add_argument("--size", type=int, default=32, help="text body length in characters")
    parser.add_argument("--window", type=int, default=500, help="receiver credit window")
    parser.add_argument(
        "--broker",
        action="append",
        choices=BROKERS,
        help="broker(s) to measure (default: both)",
    )
    parser.add_argument(
        "--kind", action="append", choices=KINDS, help="kind(s) of message (default: both)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--broker-profile",
        metavar="DIR",
        help="run the reference broker under cProfile, write its .pstats here and print them",
    )
    parser.add_argument("--profile-top", type=int, default=30)
    args = parser.parse_args(argv)
    if args.messages < 1 or args.repeat < 1:
        parser.error("--messages and --repeat must be positive")
    # SIGTERM unwinds like Ctrl-C, so that every broker process is still stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    brokers: list[str] = args.broker or list(BROKERS)
    kinds: list[str] = args.kind or list(KINDS)

    works = {kind: workload(kind, args.messages, args.size, args.window) for kind in kinds}
    run_id = uuid.uuid4().hex[:6]
    results = BrokerResults(
        config={
            "messages": args.messages,
            "repeat": args.repeat,
            "body_chars": args.size,
            "payload_bytes": len(next(iter(works.values())).payloads[0]),
            "window": args.window,
            "brokers": brokers,
            "kinds": kinds,
            "reference_brokers": {"transient": "memory", "durable": "store"},
            "broker_profiled": bool(args.broker_profile),
        },
        machine=machine_info() | {"git_dirty_paths": dirty_paths()},
    )
    log = sys.stderr
    if args.broker_profile:
        os.makedirs(args.broker_profile, exist_ok=True)
    # (broker, kind) -> (port, pid of the process doing the work)
    targets: dict[tuple[str, str], tuple[int, int | None]] = {}
    reference_procs: list[BrokerProcess] = []
    with ExitStack() as stack:
        work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-broker-")))
        if REFERENCE in brokers:
            for kind in kinds:
                name = "memory" if kind == "transient" else "store"
                print(f"starting the reference broker ({name}) ...", file=log)
                proc = stack.enter_context(
                    BrokerProcess(
                        name, work_dir, store=kind == "durable", profile_dir=args.broker_profile
                    )
                )
                reference_procs.append(proc)
                print(
                    f"reference broker ({name}) pid {proc.pid} ready on port {proc.port} in "
                    f"{proc.start_seconds:.1f} s",
                    file=log,
                )
                targets[(REFERENCE, kind)] = (proc.port, proc.pid)
        if RABBITMQ in brokers:
            print("starting a private RabbitMQ node ...", file=log)
            node = stack.enter_context(RabbitMQNode())
            print(f"RabbitMQ ready on port {node.port} in {node.start_seconds:.1f} s", file=log)
            for kind in kinds:
                targets[(RABBITMQ, kind)] = (node.port, node.vm_pid)
        for rnd in range(args.repeat):
            order = brokers if rnd % 2 == 0 else list(reversed(brokers))
            for broker in order:
                for kind in kinds:
                    port, pid = targets[(broker, kind)]
                    address = f"/queue/bench-{run_id}-{broker}-{kind}-r{rnd}"
                    results.phases += measure(broker, kind, rnd, port, pid, address, works[kind])
        print("stopping the brokers ...", file=log)
    for proc in reference_procs:  # stopped by the ExitStack; their pids must be gone
        check(proc.proc is None, f"reference broker {proc.name} still running")
    results.machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]

    m = results.machine
    print()
    print(
        f"{m['date_utc']}, {m['cpus']} CPUs ({m['cpu_model']}), Python {m['python']}, "
        f"proton {m['proton']}, haclient {m['git']}, load average (1/5/15 min) "
        f"{m['load_average_at_start']} at start, {m['load_average_at_end']} at end"
    )
    if m["git_dirty_paths"]:
        print(f"uncommitted changes measured: {', '.join(m['git_dirty_paths'])}")
    if args.broker_profile:
        print("NOTE: the reference broker ran under cProfile: its rates are skewed")
    print(results.table())
    if args.broker_profile:
        for proc in reference_procs:
            assert proc.profile_path is not None
            print_broker_profile(proc.profile_path, args.profile_top)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results.to_json(), f, indent=2)
            f.write("\n")
        print(f"\nresults written to {args.json}")
    passed, _ = results.target()
    if REFERENCE in brokers and "transient" in kinds and not passed:
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
