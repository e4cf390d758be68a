"""F5: a watched wait through which the broker's port refused stands in for its attempt
(``failover.walk``): the attempt is not made, and fails with the error of that broker's last
refused connect, counted, logged and given up on as a refused attempt; a port that opens
during the wait still gets a real attempt at once."""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import anyio
import pytest

import failover.schedule
import failover.supervisor
from failover import machine as m
from failover.errors import ConnectionFailedError
from failover.events import AttemptFailed, Connect, Opened
from failover.manager import ConnectionManager
from failover.policy import Attempt, FailoverPolicy
from failover.ports import PortWatch, PortWatcher, TcpProbe, Watched, tcp_refused
from failover.supervisor import wait_readable
from failover.url import BrokerURL
from failover.walk import StandIn, Walker

pytestmark = pytest.mark.anyio

HANG = 30.0  # seconds: a hang bound, not a measure


@contextmanager
def _closed_port() -> Iterator[socket.socket]:
    """A loopback port that nothing listens on (bound, not listening: no one else takes it)."""
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        yield spare


def _broker(sock: socket.socket) -> BrokerURL:
    return BrokerURL("amqp", "127.0.0.1", sock.getsockname()[1])


class _Conn:
    """A TCP connection, as the manager needs to know one."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self._stream = stream
        self.is_open = True

    async def wait_closed(self) -> BaseException | None:
        await anyio.sleep_forever()
        return None

    async def close(self) -> None:
        self.is_open = False
        await self._stream.aclose()


class _Tcp:
    """A connector that opens a real TCP connection (refused where nothing listens), and
    counts its calls and the attempts stood in for."""

    def __init__(self) -> None:
        self.calls: list[BrokerURL] = []
        self.stood_in: list[BrokerURL] = []

    async def __call__(self, broker: BrokerURL) -> _Conn:
        self.calls.append(broker)
        return _Conn(await anyio.connect_tcp(broker.host, broker.port or 0))


def _lenient() -> PortWatcher:
    """A port watcher for which any refusal its thread saw is the port's latest word, however
    late the thread woke: on a busy machine a late tick makes a refusal older than the wait's
    interval, the wait ends as run out and the attempt is made for real (the safe side, which
    these tests would see as a flake). Here the ports' states change only where a test says."""
    return PortWatcher(slack=HANG)


def _probe(watcher: PortWatcher) -> TcpProbe:
    """The supervisor's probe, with ``watcher``: its bell read by the loop (asyncio)."""
    return TcpProbe(None, wait_readable, watcher, reader_loop=asyncio.get_running_loop())


def _walker(connector: _Tcp, watcher: PortWatcher) -> Walker[_Conn]:
    return Walker(
        StandIn(connector, connector.stood_in.append),
        clock=time.monotonic,
        sleep=anyio.sleep,
        port_probe=lambda: _probe(watcher),
    )


def _connect(index: int, broker: BrokerURL, delay: float, number: int) -> Connect:
    watch = PortWatch() if delay > 0 else None
    return Connect(Attempt(index, broker, delay, number), watch)


async def test_F5_a_wait_through_which_the_port_refused_stands_in_for_its_attempt() -> None:
    """The first attempt on each broker connects (refused); the next, after a watched wait
    on A, stands in for A, and for B right after it (B's port probed at the wait's end):
    refused with the error of the broker's last connect, the connector not called, its
    ``stood_in`` told."""
    connector, watcher = _Tcp(), _lenient()
    walker = _walker(connector, watcher)
    with _closed_port() as a_sock, _closed_port() as b_sock, anyio.fail_after(HANG):
        a, b = _broker(a_sock), _broker(b_sock)
        first_a, _ = await walker.attempt(_connect(0, a, 0.0, 1))
        first_b, _ = await walker.attempt(_connect(1, b, 0.0, 2))
        assert isinstance(first_a, AttemptFailed) and tcp_refused(first_a.error)
        assert isinstance(first_b, AttemptFailed) and tcp_refused(first_b.error)
        assert connector.calls == [a, b]
        for number in (3, 5):
            again_a, conn = await walker.attempt(_connect(0, a, 0.03, number))
            again_b, _ = await walker.attempt(_connect(1, b, 0.0, number + 1))
            assert isinstance(again_a, AttemptFailed) and conn is None
            assert again_a.error is first_a.error and again_a.broker == a
            assert isinstance(again_b, AttemptFailed) and again_b.error is first_b.error
        assert connector.calls == [a, b]  # no connect since
        assert connector.stood_in == [a, b, a, b]
        walker.end_walk()
        # a new walk: nothing refused in it yet, so its first attempt connects
        await walker.attempt(_connect(0, a, 0.0, 1))
        assert connector.calls == [a, b, a]
        walker.end_walk()


async def test_F5_a_port_that_opens_during_the_wait_gets_a_real_attempt_at_once() -> None:
    """A's port opens during its watched wait: the wait ends, the attempt connects. B's port
    opens while A is watched: A's attempt stands in, B's right after it connects."""
    connector, watcher = _Tcp(), _lenient()
    walker = _walker(connector, watcher)
    with _closed_port() as a_sock, _closed_port() as b_sock, anyio.fail_after(HANG):
        a, b = _broker(a_sock), _broker(b_sock)
        await walker.attempt(_connect(0, a, 0.0, 1))
        await walker.attempt(_connect(1, b, 0.0, 2))

        async def open_a_later() -> None:
            await anyio.sleep(0.05)
            a_sock.listen()

        started = time.monotonic()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(open_a_later)
            opened, conn = await walker.attempt(_connect(0, a, 10.0, 3))
        assert isinstance(opened, Opened) and conn is not None
        assert time.monotonic() - started < HANG / 2  # long before its 10 s
        await conn.close()
        assert connector.calls == [a, b, a] and connector.stood_in == []
        walker.end_walk()

    with _closed_port() as a_sock, _closed_port() as b_sock, anyio.fail_after(HANG):
        a, b = _broker(a_sock), _broker(b_sock)
        connector = _Tcp()
        walker = _walker(connector, watcher)
        await walker.attempt(_connect(0, a, 0.0, 1))
        await walker.attempt(_connect(1, b, 0.0, 2))
        b_sock.listen()
        stood, _ = await walker.attempt(_connect(0, a, 0.03, 3))
        opened, conn = await walker.attempt(_connect(1, b, 0.0, 4))
        assert isinstance(stood, AttemptFailed) and connector.stood_in == [a]
        assert isinstance(opened, Opened) and conn is not None
        assert connector.calls == [a, b, b]
        await conn.close()
        walker.end_walk()


async def _give_up(watch: PortWatch | None, cycles: int) -> tuple[int, _Tcp, list[str]]:
    """A first connect to two closed ports with ``cycles`` passes: the attempts it made, the
    connector's record and the attempt-failed log lines."""
    connector = _Tcp()
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.msg.startswith("attempt %d to connect"):
                records.append(record.getMessage())

    log = logging.getLogger("haclient.failover")
    handler, level = Keep(), log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    saved = failover.schedule.PORT_WATCH
    failover.schedule.PORT_WATCH = watch
    try:
        with ExitStack() as stack, anyio.fail_after(HANG):
            brokers = [_broker(stack.enter_context(_closed_port())) for _ in range(2)]
            policy = FailoverPolicy(startup_cyclecount=cycles, jitter=0.0)
            watcher = _lenient()
            manager = ConnectionManager(
                StandIn(connector, connector.stood_in.append),
                brokers,
                policy,
                port_probe=lambda: _probe(watcher),
            )
            async with manager:
                with pytest.raises(ConnectionFailedError) as failed:
                    await manager.start()
            assert tcp_refused(failed.value.cause)
            made = manager.statistics().attempts
    finally:
        failover.schedule.PORT_WATCH = saved
        log.removeHandler(handler)
        log.setLevel(level)
    return made, connector, records


async def test_F5_F4_stood_in_attempts_count_and_give_up_as_refused_ones() -> None:
    """The same first connect, watched (attempts stood in for) and not: the same attempts
    counted, the same give-up, the same records; the connector's calls and its stood-in
    attempts add up to the attempts made."""
    made, connector, records = await _give_up(PortWatch(), cycles=4)
    plain_made, plain, plain_records = await _give_up(None, cycles=4)
    assert made == plain_made == 8 == len(plain.calls)
    assert connector.stood_in  # most of them: the ports refused through the waits
    assert len(connector.calls) + len(connector.stood_in) == made
    assert len(records) == len(plain_records) == made
    assert [line.split(":", 1)[0].split(" to ")[0] for line in records] == [
        line.split(":", 1)[0].split(" to ")[0] for line in plain_records
    ]


async def test_F5_F4_stood_in_attempts_log_and_warn_as_refused_ones() -> None:
    """Every record of the attempts, level included (a warning every ``warn_after_attempts``
    failures), is the same whether the attempts were stood in for or made; the same count,
    the same give-up."""

    async def levels(watch: PortWatch | None) -> tuple[int, list[tuple[int, str]]]:
        records: list[tuple[int, str]] = []

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if record.msg.startswith(("attempt %d to connect", "could not connect")):
                    records.append((record.levelno, record.getMessage().split(":", 1)[0]))

        log = logging.getLogger("haclient.failover")
        handler, level = Keep(), log.level
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        saved = failover.schedule.PORT_WATCH
        failover.schedule.PORT_WATCH = watch
        try:
            with ExitStack() as stack, anyio.fail_after(HANG):
                brokers = [_broker(stack.enter_context(_closed_port())) for _ in range(2)]
                policy = FailoverPolicy(startup_cyclecount=6, jitter=0.0, warn_after_attempts=3)
                watcher = _lenient()
                manager = ConnectionManager(
                    StandIn(_Tcp(), lambda _: None),
                    brokers,
                    policy,
                    port_probe=lambda: _probe(watcher),
                )
                async with manager:
                    with pytest.raises(ConnectionFailedError):
                        await manager.start()
                made = manager.statistics().attempts
        finally:
            failover.schedule.PORT_WATCH = saved
            log.removeHandler(handler)
            log.setLevel(level)
        return made, records

    made, records = await levels(PortWatch())
    plain_made, plain_records = await levels(None)
    assert made == plain_made == 12
    assert [lv for lv, _ in records].count(logging.WARNING) == 12 // 3
    normal = [(lv, text.split(" to ")[0]) for lv, text in records]
    assert normal == [(lv, text.split(" to ")[0]) for lv, text in plain_records]


async def test_F5_a_pass_of_stood_in_attempts_is_fed_on_the_walks_own_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stood-in attempt's failure goes to the machine on the walk's step, not through the
    supervisor's stream of events (two task switches an attempt, most of what it cost the
    event loop); the attempts that connected go through the stream as before."""
    reported: list[object] = []
    report = failover.supervisor.Supervisor._report

    def recording(self: failover.supervisor.Supervisor[_Conn], event: m.Event) -> None:
        reported.append(event)
        report(self, event)

    monkeypatch.setattr(failover.supervisor.Supervisor, "_report", recording)
    made, connector, _ = await _give_up(PortWatch(), cycles=4)
    failed = [event for event in reported if isinstance(event, AttemptFailed)]
    assert connector.stood_in and len(connector.calls) + len(connector.stood_in) == made
    # the connects' failures, and the last one, which gave up, again to wake the loop
    assert len(failed) == len(connector.calls) + 1


async def test_F5_a_probes_waits_ring_one_bell_and_a_ring_left_unread_is_not_the_next_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ``TcpProbe`` makes one socket pair for all its waits; a wait interrupted after its
    port accepted, before it read its ring, does not end the next wait early."""
    made: list[tuple[socket.socket, socket.socket]] = []
    socketpair = socket.socketpair

    def counting() -> tuple[socket.socket, socket.socket]:
        pair = socketpair()
        made.append(pair)
        return pair

    class Interrupted(Exception):
        pass

    async def rung_then_interrupted(fd: int, timeout: float) -> None:
        await wait_readable(fd, timeout)
        raise Interrupted

    monkeypatch.setattr(socket, "socketpair", counting)
    watcher = _lenient()
    with _closed_port() as a_sock, _closed_port() as b_sock, anyio.fail_after(HANG):
        a, b = _broker(a_sock), _broker(b_sock)
        probe = TcpProbe(None, wait_readable, watcher)
        try:
            for _ in range(3):
                got = await probe.watch(a, 0.03, interval=0.005, sleep=anyio.sleep)
                assert got is Watched.REFUSED
            assert len(made) == 1
            a_sock.listen()
            cut = TcpProbe(None, rung_then_interrupted, watcher)
            try:
                with pytest.raises(Interrupted):
                    await cut.watch(a, 10.0, interval=0.005, sleep=anyio.sleep)
                assert cut._bell is not None
                cut._bell._wait_readable = wait_readable
                started = time.monotonic()
                got = await cut.watch(b, 0.05, interval=0.005, sleep=anyio.sleep)
                assert got is Watched.REFUSED and time.monotonic() - started >= 0.04
            finally:
                cut.close()
        finally:
            probe.close()
    assert all(sock.fileno() == -1 for pair in made for sock in pair)


async def test_F5_a_probe_dropped_without_close_closes_its_bell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A walk dropped without its end (a task collected mid-walk) leaves no bell open, and
    none to the collector's ResourceWarning."""
    made: list[tuple[socket.socket, socket.socket]] = []
    socketpair = socket.socketpair

    def counting() -> tuple[socket.socket, socket.socket]:
        pair = socketpair()
        made.append(pair)
        return pair

    monkeypatch.setattr(socket, "socketpair", counting)
    with _closed_port() as a_sock, anyio.fail_after(HANG):
        probe = TcpProbe(None, wait_readable, _lenient())
        got = await probe.watch(_broker(a_sock), 0.03, interval=0.005, sleep=anyio.sleep)
        assert got is Watched.REFUSED
        del probe
        gc.collect()
    assert len(made) == 1 and all(sock.fileno() == -1 for sock in made[0])
