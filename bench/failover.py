"""Failover downtime and restore time of haclient's connection, against the reference broker.

Run from the repository root::

    .venv/bin/python -m bench.failover              # 10 kills per method, 3 restores
    .venv/bin/python -m bench.failover --quick      # 3 kills per method, 1 restore
    .venv/bin/python -m bench.failover --kill process --json /tmp/failover.json

Every reference broker runs in its own process, a small host (``python -m bench.failover
serve-broker``) around ``chaos.broker.Broker`` that takes commands on its stdin (``kill``,
``restart``, ``start``, ``nodes``), so the client under test shares neither its event loop nor
its GIL with a broker. A hard kill is ``Broker.kill()`` in that process: every client socket
is reset (SO_LINGER 0), nothing is said, the in-memory state is lost; ``start()`` serves again
on the same port within milliseconds. ``--kill process`` kills the host process with SIGKILL
instead and starts a new one (a Python start-up, 0.3-0.5 s here: in the ``singlebroker``
downtime, and in the wait before the next kill for the others).

1. Downtime, for each failover method, ``--kills`` times: one connection, one AUTO session and
   one producer send PERSISTENT messages in a loop (each ``send`` returns once the broker
   accepted it). The broker in use is killed; the downtime is the time from just before
   ``kill()`` (read in the broker's process: ``time.monotonic()`` is the same clock in every
   process) to the first send that completes on the next connection (a higher connection
   epoch). The killed broker is then started again, so the next kill has somewhere to go.

   - ``roundrobin``: two independent brokers A and B, ``failover:(A,B)``.
   - ``singlebroker``: one broker, killed and restarted at once (``Broker.restart()``); its
     downtime includes the broker's restart.
   - ``exchange``: the seed list holds only A; A announces B (``--peer``) and B announces A, so
     the client must learn B (F12) to fail over at all. If it has not learned B within a few
     seconds of connecting, the row says "not measured" and why; if a failover fails, FAILED
     and the cause. Neither stops the other methods.

   Every URL has ``failover.connectdelay=0``. Besides the bench's own measure, each kill records
   the client's view: the failover listener's ``failover_started`` time (detection) and the
   downtime it reports in ``failover_completed``, and ``statistics().last_downtime``.

2. What users get on a real HA pair (``bench.failover_ha``, ``--no-ha`` skips it): a
   shared-store pair of ``haclient-broker --store`` processes, the **default** URL
   ``failover:(A,B)`` (no ``failover.*`` option), ``--kills`` SIGKILLs of the master; takeover
   (kill -> the standby's port accepts), downtime (kill -> first PERSISTENT send completed on
   the standby) and overhead = downtime - takeover, median and max, and where the overhead
   goes (phases). Two pairs (``--ha-mode`` picks one): the reference brokers (goal: overhead
   median <= 50 ms, max <= 100 ms) and brokers in ActiveMQ mode with a cold start, which model
   ActiveMQ 5.17's measured phases: the protocol header answered 94-134 ms after the port
   opens, the first Open, attach and durable message 44, 15 and 18 ms slower (goal: the
   overhead above that floor, median <= 25 ms, max <= 75 ms; ``--ha-readiness-delay`` and
   ``--ha-not-ready`` set the brokers' ``--readiness-delay`` and ``--not-ready``).

3. The planned return to a preferred broker (F16, ``bench.failover_return``, ``--no-return``
   skips it), ``--returns`` rounds on independent brokers: the preferred one killed, the
   connection fails over, the preferred one started again and the connection returns; how long
   calls wait at the gate, the longest send, and that nothing accepted is lost.

4. Restore time, ``--restore-runs`` times: one connection (roundrobin over A and B) with
   ``--consumers`` consumers over ``--sessions`` AUTO sessions, ``--temp-queues`` of them on
   temporary queues (one consumer each) and the rest on named queues. The broker in use is
   killed; the restore time is ``failover_started`` to ``failover_completed`` (listener). After
   each restore the bench checks on the new broker that every named queue has exactly one
   consumer, that there are exactly ``--temp-queues`` temporary queues, each at the address its
   ``TemporaryQueue`` object now holds and with one consumer, and that a message sent to each
   destination (anonymous producer) reaches its consumer.

Goals: downtime median under 100 ms (loopback, zero connect delay, hard kill); restore
under 1 s. The table marks each PASS or MISSED (FAILED / NOT MEASURED as above); the exit
status is 0 either way (1 when the bench itself fails with ``BenchError``). Progress, one line
per kill and per restore, goes to stderr; the table to stdout.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import logging
import os
import pstats
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import trustme

import haclient.aio as aio
from bench.failover_client import (
    FAILOVER_TIMEOUT,
    START_TIMEOUT,
    STOP_TIMEOUT,
    Recorder,
    Sender,
    kill_in_turn,
)
from bench.failover_ha import HA_PAIRS, ha_report, measure_ha
from bench.failover_return import measure_return, return_report
from bench.throughput import HOST, BenchError, Progress, _process_jiffies, check, machine_info
from chaos.net import free_port
from haclient.destination import Queue, TemporaryQueue
from haclient.message import DeliveryMode, TextMessage
from haclient.modes import AckMode

ROUNDROBIN = "roundrobin"
SINGLEBROKER = "singlebroker"
EXCHANGE = "exchange"
METHODS = (ROUNDROBIN, SINGLEBROKER, EXCHANGE)
KILL_BROKER = "broker"
KILL_PROCESS = "process"
DOWNTIME_GOAL = 0.100
RESTORE_GOAL = 1.0
COMMAND_TIMEOUT = 60.0
LEARN_TIMEOUT = 5.0
PROFILED_KILLS = 5
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# The broker host: one reference broker in its own process, driven through stdin/stdout --------


async def _serve(
    port: int, peers: Sequence[str], tls: tuple[str, str] | None, users: dict[str, str]
) -> None:
    from chaos.broker import Broker
    from haclient.amqp.config import TlsServerOptions

    broker = Broker(
        host=HOST,
        port=port,
        peers=peers,
        tls=None if tls is None else TlsServerOptions(*tls),
        users=users or None,
    )

    def say(text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    async with broker:
        say(f"ready {broker.port}")
        while True:
            line = await anyio.to_thread.run_sync(sys.stdin.readline)
            words = line.split()
            if not words or words[0] == "quit":  # EOF: the bench is gone
                return
            command = words[0]
            if command == "kill":
                t = time.monotonic()
                await broker.kill()
                say(f"killed {t!r}")
            elif command == "restart":
                t = time.monotonic()
                await broker.restart()
                say(f"restarted {t!r}")
            elif command == "start":
                await broker.start()
                say("started")
            elif command == "nodes":
                say(json.dumps([asdict(n) for n in broker.nodes()]))
            else:
                say(f"error unknown command {command!r}")


def serve_main(argv: Sequence[str]) -> int:
    """``python -m bench.failover serve-broker --port P [--peer URL ...]``."""
    parser = argparse.ArgumentParser(prog="python -m bench.failover serve-broker")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--peer", action="append", default=[])
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"), default=None)
    parser.add_argument("--user", action="append", default=[], metavar="NAME:PASS")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the bench stops us (Ctrl-C reaches us too)
    users = dict(user.split(":", 1) for user in args.user)
    anyio.run(_serve, args.port, args.peer, args.tls, users)
    return 0


class BrokerHost:
    """The client side of one broker host process, on a fixed free port.

    ``kill_mode`` ``broker``: ``kill()`` is ``Broker.kill()`` inside the process; ``process``:
    SIGKILL of the process, and ``revive()`` starts a new one on the same port. Stopped by its
    pid at the end (stdin closed, then SIGKILL after ``STOP_TIMEOUT``).
    """

    def __init__(
        self,
        name: str,
        work_dir: Path,
        *,
        kill_mode: str,
        peers: Sequence[int] = (),
        secure: Secure | None = None,
    ) -> None:
        self.name = name
        self.secure = secure
        self.port = free_port(HOST)
        self.peers = [f"amqp://{HOST}:{p}" for p in peers]
        self.kill_mode = kill_mode
        self.log_path = work_dir / f"broker-{name}-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self.start_seconds = 0.0

    @property
    def url(self) -> str:
        return f"{'amqps' if self.secure else 'amqp'}://{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def set_peers(self, peers: Sequence[int]) -> None:
        """Only before ``spawn()``."""
        self.peers = [f"amqp://{HOST}:{p}" for p in peers]

    def spawn(self) -> None:
        argv = [sys.executable, "-m", "bench.failover", "serve-broker", "--port", str(self.port)]
        for peer in self.peers:
            argv += ["--peer", peer]
        if self.secure is not None:
            argv += ["--tls", str(self.secure.cert), str(self.secure.key)]
            argv += ["--user", f"{self.secure.user}:{self.secure.password}"]
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
            )
        self._buffer = b""
        reply = self._read_line(START_TIMEOUT)
        check(reply == f"ready {self.port}", f"broker {self.name}: unexpected {reply!r}")
        self.start_seconds = time.monotonic() - started

    def command(self, text: str, timeout: float = COMMAND_TIMEOUT) -> str:
        proc = self.proc
        if proc is None or proc.stdin is None:
            raise BenchError(f"broker {self.name} is not running")
        proc.stdin.write(text.encode() + b"\n")
        proc.stdin.flush()
        reply = self._read_line(timeout)
        if reply.startswith("error"):
            raise BenchError(f"broker {self.name}: {reply}")
        return reply

    def _read_line(self, timeout: float) -> str:
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"broker {self.name}: no answer in {timeout:g} s\n{self._tail()}")
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    proc.wait()
                    raise BenchError(
                        f"broker {self.name} exited with {proc.returncode}\n{self._tail()}"
                    )
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def kill(self) -> float:
        """Kill the broker hard; returns ``time.monotonic()`` just before the kill."""
        if self.kill_mode == KILL_PROCESS:
            assert self.proc is not None
            t = time.monotonic()
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            return t
        return float(self.command("kill").split()[1])

    def restart(self) -> float:
        """Kill and start again at once; returns the time just before the kill."""
        if self.kill_mode == KILL_PROCESS:
            t = self.kill()
            self.spawn()
            return t
        return float(self.command("restart").split()[1])

    def revive(self) -> None:
        """Serve again after ``kill()``."""
        if self.kill_mode == KILL_PROCESS:
            self.spawn()
        else:
            self.command("start")

    def cpu_seconds(self) -> float:
        """CPU time of the broker's process so far (0 when it is not running)."""
        if self.proc is None or self.proc.poll() is not None:
            return 0.0
        try:
            return _process_jiffies(str(self.proc.pid)) / CLOCK_TICKS
        except OSError:
            return 0.0

    def nodes(self) -> dict[str, dict[str, Any]]:
        return {n["name"]: n for n in json.loads(self.command("nodes"))}

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(STOP_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired):
            print(f"broker {self.name} did not stop: killing it", file=sys.stderr)
        finally:  # also when interrupted while waiting
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()

    def _tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class Secure:
    """TLS and a SCRAM login for the warm-backup part: the files of a CA made for the run and
    of a certificate for ``HOST`` it signs, and the one user every broker knows."""

    ca: Path
    cert: Path
    key: Path
    user: str = "bench"
    password: str = "bench-secret"

    @classmethod
    def make(cls, work_dir: Path) -> Secure:
        ca = trustme.CA()
        server = ca.issue_cert(HOST)
        secure = cls(work_dir / "ca.pem", work_dir / "server.pem", work_dir / "server.key")
        ca.cert_pem.write_to_path(str(secure.ca))
        secure.cert.write_bytes(b"".join(pem.bytes() for pem in server.cert_chain_pems))
        server.private_key_pem.write_to_path(str(secure.key))
        return secure


@dataclass(frozen=True)
class Variant:
    """A ``roundrobin`` row of the downtime part with TLS and SCRAM on (``Secure``), with or
    without the warm backup (F17, ``failover.backup=true``)."""

    label: str
    backup: bool


VARIANTS = (Variant("rr tls+scram", False), Variant("rr +backup", True))
SPARE_TIMEOUT = 10.0
"""Seconds the warm spare may take to be ready again before a kill."""


class Hosts:
    """The broker hosts of one measurement, stopped together."""

    def __init__(
        self, stack: ExitStack, work_dir: Path, kill_mode: str, secure: Secure | None = None
    ) -> None:
        self.stack = stack
        self.work_dir = work_dir
        self.kill_mode = kill_mode
        self.secure = secure
        self.by_port: dict[int, BrokerHost] = {}

    def make(self, name: str) -> BrokerHost:
        host = BrokerHost(name, self.work_dir, kill_mode=self.kill_mode, secure=self.secure)
        self.by_port[host.port] = host
        self.stack.callback(host.stop)
        return host


@dataclass
class Kill:
    method: str
    number: int
    killed: str
    next_broker: str | None = None
    downtime: float | None = None
    """Kill -> first send completed on the next connection (the bench's measure)."""
    detected: float | None = None
    """Kill -> failover_started."""
    completed: float | None = None
    """Kill -> failover_completed."""
    client_downtime: float | None = None
    """What failover_completed reported."""
    stats_downtime: float | None = None
    """``statistics().last_downtime`` afterwards."""
    resumed: float | None = None
    """failover_completed -> first send completed."""
    error: str | None = None


@dataclass
class MethodResult:
    method: str
    kills: list[Kill] = field(default_factory=list)
    note: str | None = None
    """Why the row is not (fully) measured."""


def _url(method: str, brokers: Sequence[BrokerHost], variant: Variant | None = None) -> str:
    listed = ",".join(b.url for b in brokers)
    options = [f"failover.method={method}", "failover.connectdelay=0"]
    if method == SINGLEBROKER:
        options.append("failover.retries=1000000")
    else:
        options.append("failover.cyclecount=100")
    secure = brokers[0].secure
    if secure is not None:
        options += [
            f"transport.trustStoreLocation={secure.ca}",
            "amqp.saslMechanisms=SCRAM-SHA-256",
        ]
    if variant is not None and variant.backup:
        options.append("failover.backup=true")
    return f"failover:({listed})?{'&'.join(options)}"


async def _spare_ready(conn: aio.Connection) -> None:
    """Wait until the warm spare is open again (F17), so that the next kill has one."""
    with anyio.move_on_after(SPARE_TIMEOUT):
        while conn.statistics().standby_broker is None:
            await anyio.sleep(0.01)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


async def measure_method(
    method: str,
    hosts: Hosts,
    kills: int,
    run_id: str,
    log: Any,
    profile_top: int | None = None,
    variant: Variant | None = None,
) -> MethodResult:
    result = MethodResult(method if variant is None else variant.label)
    if method == SINGLEBROKER:
        seed = [hosts.make("S")]
    else:
        a, b = hosts.make("A"), hosts.make("B")
        if method == EXCHANGE:
            a.set_peers([b.port])
            b.set_peers([a.port])
            seed = [a]
        else:
            seed = [a, b]
    for host in hosts.by_port.values():
        await anyio.to_thread.run_sync(host.spawn)
    url = _url(method, seed, variant)
    print(f"{result.method}: {url}", file=log)
    recorder = Recorder()
    login: dict[str, Any] = {}
    if hosts.secure is not None:
        login = {"username": hosts.secure.user, "password": hosts.secure.password}
    name = method if variant is None else variant.label.replace(" ", "-").replace("+", "")
    conn = await aio.connect(url, client_id=f"bench-failover-{run_id}-{name}", **login)
    try:
        conn.add_listener(recorder)
        if method == EXCHANGE:
            other = {p for p in hosts.by_port if p != seed[0].port}
            with anyio.move_on_after(LEARN_TIMEOUT):
                while not other <= {b.port for b in conn.brokers}:
                    await anyio.sleep(0.01)
            learned = [str(b) for b in conn.brokers]
            if not other <= {b.port for b in conn.brokers}:
                result.note = (
                    f"not measured: the client did not learn the peer broker from the seed "
                    f"within {LEARN_TIMEOUT:g} s (conn.brokers = {learned}); exchange learning "
                    "(F12) does not work (yet)"
                )
                print(f"{method}: {result.note}", file=log)
                return result
            print(f"{method}: learned {learned}", file=log)
        async with Sender.running(conn, f"failover-{run_id}-{method}") as sender:
            result.note = await kill_in_turn(
                sender,
                kills,
                lambda number: _one_kill(
                    method, number, conn, sender, recorder, hosts, variant=variant
                ),
                result.kills,
                lambda number, kill: (
                    f"{result.method} kill {number}/{kills}: {kill.killed} -> "
                    f"{kill.next_broker}: "
                    f"downtime {_ms(kill.downtime)} ms (detected {_ms(kill.detected)}, "
                    f"failover completed {_ms(kill.completed)}, client says "
                    f"{_ms(kill.client_downtime)}, statistics {_ms(kill.stats_downtime)})"
                ),
                log,
            )
            if profile_top and result.note is None:
                profiler = cProfile.Profile()
                for number in range(1, PROFILED_KILLS + 1):
                    await sender.settle()
                    kill = await _one_kill(method, number, conn, sender, recorder, hosts, profiler)
                    print(
                        f"{method} profiled kill {number}/{PROFILED_KILLS}: downtime "
                        f"{_ms(kill.downtime)} ms" + (f" ERROR {kill.error}" if kill.error else ""),
                        file=log,
                    )
                _print_profile(
                    profiler,
                    profile_top,
                    f"kill -> first send completed, {method}, {PROFILED_KILLS} kills",
                )
    finally:
        with anyio.move_on_after(10, shield=True):
            await conn.close()
    return result


async def _one_kill(
    method: str,
    number: int,
    conn: aio.Connection,
    sender: Sender,
    recorder: Recorder,
    hosts: Hosts,
    profiler: cProfile.Profile | None = None,
    *,
    variant: Variant | None = None,
) -> Kill:
    if variant is not None and variant.backup:
        await _spare_ready(conn)
    broker = conn.broker
    assert broker is not None and broker.port is not None
    host = hosts.by_port[broker.port]
    kill = Kill(method if variant is None else variant.label, number, host.name)
    epoch = conn.statistics().epoch
    started, completed = len(recorder.started), len(recorder.completed)
    if profiler is not None:
        profiler.enable()
    if method == SINGLEBROKER:
        t_kill = await anyio.to_thread.run_sync(host.restart)
    else:
        t_kill = await anyio.to_thread.run_sync(host.kill)
    with anyio.move_on_after(FAILOVER_TIMEOUT):
        while True:
            events = (sender.changed, recorder.changed)
            if sender.first_after(epoch) is not None or sender.error or recorder.failed:
                break
            await _wait_any(events)
    if profiler is not None:
        profiler.disable()
    first = sender.first_after(epoch)
    if len(recorder.started) > started:
        kill.detected = recorder.started[started] - t_kill
    if len(recorder.completed) > completed:
        t_done, name, downtime = recorder.completed[completed]
        kill.completed = t_done - t_kill
        kill.client_downtime = downtime
        new = conn.broker
        kill.next_broker = hosts.by_port[new.port].name if new and new.port else name
        if first is not None:
            kill.resumed = first - t_done
    kill.stats_downtime = conn.statistics().last_downtime
    if first is not None:
        kill.downtime = first - t_kill
    elif recorder.failed:
        kill.error = f"failover failed: {recorder.failed[-1]}"
    elif sender.error is not None:
        kill.error = f"send failed: {sender.error!r}"
    else:
        kill.error = f"no send completed within {FAILOVER_TIMEOUT:g} s of the kill"
    if method != SINGLEBROKER:
        await anyio.to_thread.run_sync(host.revive)
    return kill


async def _wait_any(events: Sequence[anyio.Event]) -> None:
    """Return as soon as one of ``events`` is set."""
    async with anyio.create_task_group() as tg:

        async def one(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()

        for event in events:
            tg.start_soon(one, event)


# Restore time -----------------------------------------------------------------------------------


@dataclass
class Restore:
    number: int
    killed: str
    next_broker: str | None = None
    restore: float | None = None
    """failover_started -> failover_completed (the listener)."""
    kill_to_completed: float | None = None
    client_downtime: float | None = None
    client_cpu: float | None = None
    """This process's CPU time from the kill to failover_completed."""
    broker_cpu: float | None = None
    """The new broker's CPU time from the kill to just after failover_completed (10 ms
    resolution)."""
    check_seconds: float | None = None
    not_restored: int = 0
    error: str | None = None


@dataclass
class RestoreResult:
    consumers: int
    temp_queues: int
    sessions: int
    setup_seconds: float = 0.0
    runs: list[Restore] = field(default_factory=list)
    note: str | None = None


async def measure_restore(
    hosts: Hosts,
    runs: int,
    consumers: int,
    temp_queues: int,
    sessions: int,
    run_id: str,
    log: Any,
    profile_top: int | None = None,
) -> RestoreResult:
    result = RestoreResult(consumers, temp_queues, sessions)
    a, b = hosts.make("A"), hosts.make("B")
    for host in (a, b):
        await anyio.to_thread.run_sync(host.spawn)
    url = _url(ROUNDROBIN, [a, b])
    recorder = Recorder()
    conn = await aio.connect(url, client_id=f"bench-failover-{run_id}-restore")
    try:
        conn.add_listener(recorder)
        t0 = time.monotonic()
        named: list[tuple[aio.MessageConsumer, Queue]] = []
        temporary: list[tuple[aio.MessageConsumer, TemporaryQueue]] = []
        all_sessions = [await conn.create_session(AckMode.AUTO) for _ in range(sessions)]
        progress = Progress("restore set-up: consumers", consumers)
        for n in range(consumers):
            session = all_sessions[n % sessions]
            if n < temp_queues:
                tq = await session.create_temporary_queue()
                temporary.append((await session.create_consumer(tq), tq))
            else:
                queue = Queue(f"restore-{run_id}-{n:05d}")
                named.append((await session.create_consumer(queue), queue))
            progress.update(n + 1)
        progress.close()
        check_session = await conn.create_session(AckMode.AUTO)
        producer = await check_session.create_producer(None)
        producer.delivery_mode = DeliveryMode.NON_PERSISTENT
        await conn.start()
        result.setup_seconds = time.monotonic() - t0
        print(
            f"restore: {consumers} consumers ({len(temporary)} on temporary queues) over "
            f"{sessions} sessions set up in {result.setup_seconds:.2f} s",
            file=log,
        )
        await _verify(hosts, conn, named, temporary, producer, "before the first kill")
        profiler: cProfile.Profile | None = None
        for number in range(1, runs + (2 if profile_top else 1)):
            broker = conn.broker
            assert broker is not None and broker.port is not None
            host = hosts.by_port[broker.port]
            run = Restore(number, host.name)
            started, completed = len(recorder.started), len(recorder.completed)
            not_restored = len(recorder.not_restored)
            if number > runs:  # the extra, profiled run
                profiler = cProfile.Profile()
                profiler.enable()
            cpu0 = time.process_time()
            broker_cpu0 = {h.name: h.cpu_seconds() for h in hosts.by_port.values()}
            t_kill = await anyio.to_thread.run_sync(host.kill)
            with anyio.move_on_after(FAILOVER_TIMEOUT * 4):
                while True:
                    event = recorder.changed
                    if len(recorder.completed) > completed or recorder.failed:
                        break
                    await event.wait()
            if profiler is not None:
                profiler.disable()
            if len(recorder.completed) > completed and len(recorder.started) > started:
                t_done, _, downtime = recorder.completed[completed]
                run.restore = t_done - recorder.started[started]
                run.kill_to_completed = t_done - t_kill
                run.client_downtime = downtime
                run.client_cpu = recorder.completed_cpu[completed] - cpu0
                new = conn.broker
                if new is not None and new.port in hosts.by_port:
                    new_host = hosts.by_port[new.port]
                    run.next_broker = new_host.name
                    run.broker_cpu = new_host.cpu_seconds() - broker_cpu0[new_host.name]
                run.not_restored = len(recorder.not_restored) - not_restored
                if run.not_restored:
                    run.error = f"not restored: {recorder.not_restored[not_restored:][:3]}"
                t1 = time.monotonic()
                try:
                    await _verify(
                        hosts, conn, named, temporary, producer, f"after restore {number}"
                    )
                except BenchError as exc:
                    run.error = run.error or str(exc)
                run.check_seconds = time.monotonic() - t1
            elif recorder.failed:
                run.error = f"failover failed: {recorder.failed[-1]}"
            else:
                run.error = "failover did not complete in time"
            if profiler is None:
                result.runs.append(run)
            label = "profiled" if profiler else f"{number}/{runs}"
            print(
                f"restore {label}: {run.killed} -> {run.next_broker}: restore "
                f"{_ms(run.restore)} ms (kill -> completed {_ms(run.kill_to_completed)} ms, "
                f"client downtime {_ms(run.client_downtime)} ms, CPU: client "
                f"{_ms(run.client_cpu)} ms, broker {_ms(run.broker_cpu)} ms), not restored "
                f"{run.not_restored}, checked in {run.check_seconds or 0:.2f} s"
                + (f" ERROR {run.error}" if run.error else ""),
                file=log,
            )
            if run.error is not None:
                result.note = f"stopped at run {number}: {run.error}"
                break
            await anyio.to_thread.run_sync(host.revive)
    finally:
        with anyio.move_on_after(30, shield=True):
            await conn.close()
    if profiler is not None and profile_top:
        _print_profile(
            profiler, profile_top, f"kill -> failover_completed, {consumers} consumers restored"
        )
    return result


def _print_profile(profiler: cProfile.Profile, top: int, what: str) -> None:
    for key in ("tottime", "cumulative"):
        stream = io.StringIO()
        stats = pstats.Stats(profiler, stream=stream)
        stats.sort_stats(key).print_stats(top)
        text = stream.getvalue()
        print(f"\n== profile: {what}; top {top} by {key}")
        print(text[text.find("   ncalls") :].rstrip())


async def _verify(
    hosts: Hosts,
    conn: aio.Connection,
    named: Sequence[tuple[aio.MessageConsumer, Queue]],
    temporary: Sequence[tuple[aio.MessageConsumer, TemporaryQueue]],
    producer: aio.MessageProducer,
    when: str,
) -> None:
    """On the broker in use: every named queue has one consumer; the temporary queues are
    exactly the addresses the ``TemporaryQueue`` objects hold, with one consumer each; then one
    message to each destination reaches its consumer."""
    broker = conn.broker
    assert broker is not None and broker.port is not None
    host = hosts.by_port[broker.port]
    nodes = await anyio.to_thread.run_sync(host.nodes)
    bad = [
        (q.address, nodes.get(q.address, {}).get("consumers"))
        for _, q in named
        if nodes.get(q.address, {}).get("consumers") != 1
    ]
    check(not bad, f"{when}: {len(bad)} named queues without exactly one consumer: {bad[:5]}")
    temps = {name for name, n in nodes.items() if n["temporary"] and n["kind"] == "queue"}
    ours = {tq.address for _, tq in temporary}
    check(
        temps == ours,
        f"{when}: the broker's temporary queues ({len(temps)}) are not the client's "
        f"({len(ours)}): {sorted(temps ^ ours)[:5]}",
    )
    bad = [(a, nodes[a]["consumers"]) for a in ours if nodes[a]["consumers"] != 1]
    check(not bad, f"{when}: temporary queues without exactly one consumer: {bad[:5]}")
    everyone: list[tuple[aio.MessageConsumer, Queue | TemporaryQueue]] = [*named, *temporary]
    tag = uuid.uuid4().hex[:8]
    for n, (_, destination) in enumerate(everyone):
        await producer.send(destination, TextMessage(f"check-{tag}-{n}"))
    await producer.flush()
    for n, (consumer, destination) in enumerate(everyone):
        message = await consumer.receive(timeout=10.0)
        if message is None:
            raise BenchError(f"{when}: nothing arrived for {destination}")
        text = message.text
        check(text == f"check-{tag}-{n}", f"{when}: {destination} received {text!r}")


# Report -----------------------------------------------------------------------------------------


def _stats(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    got = [v for v in values if v is not None]
    return (statistics.median(got), max(got)) if got else (None, None)


def _verdict(value: float | None, goal: float) -> str:
    if value is None:
        return "-"
    return "PASS" if value < goal else "MISSED"


def report(
    methods: Sequence[MethodResult], restore: RestoreResult | None, kill_mode: str
) -> tuple[str, dict[str, Any]]:
    lines: list[str] = []
    if methods:
        lines += [
            "failover downtime (ms): kill of the broker in use -> first PERSISTENT send completed "
            "on the next broker; median and max over the kills",
            "  detect: kill -> failover_started; failover: kill -> failover_completed; client: "
            "the downtime failover_completed reports (loss noticed -> restored); resume: "
            "failover_completed -> that first send (detect, failover, resume: medians)",
            f"{'method':<14}{'kills':>6}{'median':>9}{'max':>9}{'detect':>9}{'failover':>10}"
            f"{'client':>9}{'client max':>11}{'resume':>9}  goal <{DOWNTIME_GOAL * 1000:.0f} ms",
        ]
    summary: dict[str, Any] = {"downtime": {}, "restore": None}
    for m in methods:
        ok = [k for k in m.kills if k.downtime is not None]
        median, worst = _stats([k.downtime for k in ok])
        client, client_max = _stats([k.client_downtime for k in ok])
        detect, _ = _stats([k.detected for k in ok])
        failover, _ = _stats([k.completed for k in ok])
        resume, _ = _stats([k.resumed for k in ok])
        if any(k.error for k in m.kills):  # failover did not work every time
            verdict = "FAILED"
        elif not ok:
            verdict = "NOT MEASURED"
        elif m.note:
            verdict = "MISSED"
        else:
            verdict = _verdict(median, DOWNTIME_GOAL)
        summary["downtime"][m.method] = {
            "kills": len(ok),
            "median_s": median,
            "max_s": worst,
            "client_median_s": client,
            "client_max_s": client_max,
            "detect_median_s": detect,
            "failover_median_s": failover,
            "resume_median_s": resume,
            "verdict": verdict,
            "note": m.note,
        }
        lines.append(
            f"{m.method:<14}{len(ok):>6}{_ms(median):>9}{_ms(worst):>9}{_ms(detect):>9}"
            f"{_ms(failover):>10}{_ms(client):>9}{_ms(client_max):>11}{_ms(resume):>9}  {verdict}"
        )
        if m.method == SINGLEBROKER and ok:
            restart = (
                "Broker.restart() in its process"
                if kill_mode == KILL_BROKER
                else "a new broker process (Python start-up)"
            )
            lines.append(f"{'':<14}  includes the broker's restart: {restart}")
        if m.note:
            lines.append(f"{'':<14}  {m.note}")
    if restore is not None:
        ok_runs = [r for r in restore.runs if r.restore is not None and r.error is None]
        median, worst = _stats([r.restore for r in ok_runs])
        k_median, k_worst = _stats([r.kill_to_completed for r in ok_runs])
        cpu, _ = _stats([r.client_cpu for r in ok_runs])
        broker_cpu, _ = _stats([r.broker_cpu for r in ok_runs])
        if not ok_runs:
            verdict = "NOT MEASURED"
        elif restore.note:
            verdict = "MISSED"
        else:
            verdict = _verdict(median, RESTORE_GOAL)
        summary["restore"] = {
            "consumers": restore.consumers,
            "temp_queues": restore.temp_queues,
            "sessions": restore.sessions,
            "runs": len(ok_runs),
            "median_s": median,
            "max_s": worst,
            "kill_to_completed_median_s": k_median,
            "client_cpu_median_s": cpu,
            "broker_cpu_median_s": broker_cpu,
            "verdict": verdict,
            "note": restore.note,
        }
        if lines:
            lines.append("")
        lines += [
            f"restore time (ms): {restore.consumers:,} consumers over {restore.sessions} sessions, "
            f"{restore.temp_queues} of them on temporary queues; failover_started -> "
            "failover_completed; verified after each run; CPU time from the kill to "
            "failover_completed (median): client (this process), broker (the new one)",
            f"{'runs':>6}{'median':>9}{'max':>9}{'kill->completed':>17}{'max':>9}"
            f"{'client CPU':>12}{'broker CPU':>12}  goal <{RESTORE_GOAL * 1000:.0f} ms",
            f"{len(ok_runs):>6}{_ms(median):>9}{_ms(worst):>9}{_ms(k_median):>17}"
            f"{_ms(k_worst):>9}{_ms(cpu):>12}{_ms(broker_cpu):>12}  {verdict}",
        ]
        if restore.note:
            lines.append(f"  {restore.note}")
    lines.append("")
    for m in methods:
        cell = summary["downtime"][m.method]
        lines.append(
            f"goal downtime {m.method}: median < {DOWNTIME_GOAL * 1000:.0f} ms: "
            f"{_ms(cell['median_s'])} ms -> {cell['verdict']}"
            + (" (includes the broker's restart)" if m.method == SINGLEBROKER else "")
        )
    if summary["restore"] is not None:
        cell = summary["restore"]
        lines.append(
            f"goal restore {restore.consumers if restore else 0:,} consumers + "
            f"{restore.temp_queues if restore else 0} temporary queues: median < "
            f"{RESTORE_GOAL:g} s: {_ms(cell['median_s'])} ms -> {cell['verdict']}"
        )
    return "\n".join(lines), summary


async def measure_backup(
    kills: int, work_dir: Path, kill_mode: str, run_id: str, log: Any
) -> list[MethodResult]:
    """The warm-backup part: ``roundrobin`` over two independent brokers with TLS and SCRAM on,
    without and with ``failover.backup=true`` (F17), in alternating rounds of at most three
    kills each (interleaved: the machine's load falls on both alike); one row each."""
    secure = Secure.make(work_dir)
    rows = {variant: MethodResult(variant.label) for variant in VARIANTS}
    left = kills
    while left > 0:
        batch = min(3, left)
        for variant in VARIANTS:
            with ExitStack() as hosts_stack:
                hosts = Hosts(hosts_stack, work_dir, kill_mode, secure)
                part = await measure_method(ROUNDROBIN, hosts, batch, run_id, log, variant=variant)
            rows[variant].kills += part.kills
            rows[variant].note = rows[variant].note or part.note
        left -= batch
    for row in rows.values():
        for number, kill in enumerate(row.kills, 1):
            kill.number = number
    return list(rows.values())


# Orchestration ----------------------------------------------------------------------------------


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.failover",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="3 kills per method, 1 restore")
    parser.add_argument("--kills", type=int, default=None, help="kills per method (10)")
    parser.add_argument("--restore-runs", type=int, default=None, help="restores measured (3)")
    parser.add_argument("--consumers", type=int, default=1000)
    parser.add_argument("--temp-queues", type=int, default=100)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument(
        "--method",
        action="append",
        choices=METHODS,
        help="measure only this method (repeatable; default: all)",
    )
    parser.add_argument("--no-downtime", action="store_true", help="skip the downtime part")
    parser.add_argument("--no-restore", action="store_true", help="skip the restore part")
    parser.add_argument("--no-ha", action="store_true", help="skip the HA pair part")
    parser.add_argument(
        "--no-backup", action="store_true", help="skip the warm backup part (TLS and SCRAM on)"
    )
    parser.add_argument(
        "--ha-mode",
        action="append",
        choices=tuple(HA_PAIRS),
        help="measure only this HA pair (repeatable; default: all)",
    )
    parser.add_argument(
        "--ha-ab",
        action="store_true",
        help="A/B of the client on each HA pair: --kills kills of each variant, alternating "
        "(before: without the watch of a refused port; after: as it is)",
    )
    parser.add_argument(
        "--ha-readiness-delay",
        metavar="SECONDS",
        help="the HA brokers' --readiness-delay (SECONDS, LOW-HIGH or LOW-MEDIAN-HIGH; "
        "default: their mode's)",
    )
    parser.add_argument(
        "--ha-not-ready",
        choices=("wait", "drop", "either"),
        help="the HA brokers' --not-ready (default: their mode's: either in ActiveMQ mode)",
    )
    parser.add_argument(
        "--no-return", action="store_true", help="skip the return to a preferred broker part"
    )
    parser.add_argument("--returns", type=int, default=None, help="returns measured (5)")
    parser.add_argument(
        "--kill",
        choices=(KILL_BROKER, KILL_PROCESS),
        default=KILL_BROKER,
        help="broker: Broker.kill() in the broker's process (default); process: SIGKILL it",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help=f"after the measured kills of each method, {PROFILED_KILLS} more under cProfile "
        "(kill -> first send), and after the restore runs one more restore (kill -> "
        "failover_completed); not in the table: print the client's top functions",
    )
    parser.add_argument("--profile-top", type=int, default=30)
    parser.add_argument("--verbose", action="store_true", help="show haclient's warnings")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    return parser


async def _run(args: argparse.Namespace, work_dir: Path, run_id: str) -> Any:
    log = sys.stderr
    methods: list[MethodResult] = []
    restore: RestoreResult | None = None
    ha: Any = None
    returned: Any = None
    if not args.no_downtime:
        for method in args.method or METHODS:
            with ExitStack() as hosts_stack:
                hosts = Hosts(hosts_stack, work_dir, args.kill)
                top = args.profile_top if args.profile else None
                methods.append(await measure_method(method, hosts, args.kills, run_id, log, top))
    if not args.no_backup:
        methods += await measure_backup(args.kills, work_dir, args.kill, run_id, log)
    if not args.no_return:

        def make_pair(stack: ExitStack) -> tuple[BrokerHost, BrokerHost]:
            hosts = Hosts(stack, work_dir, args.kill)
            return hosts.make("A"), hosts.make("B")

        returned = await measure_return(args.returns, make_pair, run_id, log)
    if not args.no_ha:
        broker_args: list[str] = []
        if args.ha_readiness_delay is not None:
            broker_args += ["--readiness-delay", args.ha_readiness_delay]
        if args.ha_not_ready is not None:
            broker_args += ["--not-ready", args.ha_not_ready]
        modes = tuple(args.ha_mode or HA_PAIRS)
        ha = await measure_ha(
            args.kills, work_dir, run_id, log, modes, tuple(broker_args), args.ha_ab
        )
    if not args.no_restore:
        with ExitStack() as hosts_stack:
            hosts = Hosts(hosts_stack, work_dir, args.kill)
            restore = await measure_restore(
                hosts,
                args.restore_runs,
                args.consumers,
                args.temp_queues,
                args.sessions,
                run_id,
                log,
                args.profile_top if args.profile else None,
            )
    return methods, restore, ha, returned


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve-broker"]:
        return serve_main(argv[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    args.kills = args.kills if args.kills is not None else (3 if args.quick else 10)
    args.restore_runs = (
        args.restore_runs if args.restore_runs is not None else (1 if args.quick else 3)
    )
    args.returns = args.returns if args.returns is not None else (2 if args.quick else 5)
    if args.kills < 1 or args.restore_runs < 1 or args.sessions < 1 or args.returns < 1:
        parser.error("--kills, --restore-runs, --returns and --sessions must be positive")
    if not 0 <= args.temp_queues <= args.consumers:
        parser.error("--temp-queues must be between 0 and --consumers")
    logging.basicConfig(
        level=logging.WARNING if args.verbose else logging.ERROR,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    signal.signal(signal.SIGTERM, _interrupt)
    run_id = uuid.uuid4().hex[:6]
    machine = machine_info()
    with ExitStack() as stack:
        work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-failover-")))
        methods, restore, ha, returned = anyio.run(_run, args, work_dir, run_id, backend="asyncio")
    text, summary = report(methods, restore, args.kill)
    if returned is not None:
        return_lines, summary["return"] = return_report(returned)
        text = "\n".join([*([text, ""] if text.strip() else []), *return_lines])
    if ha is not None:
        summary["ha"] = {}
        ha_lines: list[str] = []
        for result in ha:
            lines, summary["ha"][result.mode] = ha_report(result)
            ha_lines += [*lines, ""]
        text = "\n".join([*ha_lines, text])
    print(
        f"\n{machine['date_utc']}, {machine['cpus']} CPUs ({machine['cpu_model']}), "
        f"Python {machine['python']}, haclient {machine['git']}; brokers in their own "
        f"processes, kill = "
        + ("Broker.kill()" if args.kill == KILL_BROKER else "SIGKILL of the broker's process")
    )
    print(text)
    if args.json:
        document = {
            "config": {k: v for k, v in vars(args).items() if k != "json"},
            "machine": machine,
            "summary": summary,
            "methods": [asdict(m) for m in methods],
            "restore": asdict(restore) if restore is not None else None,
            "ha": [asdict(result) for result in ha] if ha is not None else None,
            "return": asdict(returned) if returned is not None else None,
        }
        with open(args.json, "w") as f:
            json.dump(document, f, indent=2)
            f.write("\n")
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
