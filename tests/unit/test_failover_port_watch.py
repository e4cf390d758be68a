"""F5: in the fast phase, a broker whose port refused the last attempt is watched while the
plan waits before its next attempt (``failover.ports``): the wait ends as soon as its port
accepts, so the attempt comes within a probe interval of the port opening, not up to a fast
delay and its jitter (25-50 ms) later. Other waits, and the waits outside the fast phase or of
a wait given to ``connect()``, are only slept."""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
import tenacity
from unitkit import A, B

import failover.ports
import failover.schedule
from failover.errors import ConnectionLostError
from failover.policy import FailoverPolicy
from failover.ports import PortWatch, PortWatcher, TcpProbe, Watched, tcp_refused, watch
from failover.schedule import PORT_WATCH, ReconnectPlan
from failover.supervisor import port_probe, wait_readable
from failover.url import BrokerURL
from haclient.errors import BrokerNotReadyError

pytestmark = pytest.mark.anyio

HANG = 30.0  # seconds: a hang bound, not a measure


def _refused() -> ConnectionLostError:
    """What a connector raises when nothing listens: a loss caused by the refusal."""
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except ConnectionRefusedError as exc:
            raise ConnectionLostError("cannot connect to a:5672: refused") from exc
    except ConnectionLostError as exc:
        return exc


def _plan(**options: object) -> ReconnectPlan:
    return ReconnectPlan(
        FailoverPolicy(), [A, B], A, startup=False, began=0.0, rng=random.Random(1), **options
    )  # type: ignore[arg-type]


def test_F5_the_wait_before_a_refused_brokers_next_attempt_is_watched() -> None:
    plan = _plan()
    b, a = plan.next(0.0), plan.next(0.0, _refused())
    assert b is not None and a is not None and (b.broker, a.broker) == (B, A)
    assert plan.watched(b) is None and plan.watched(a) is None  # at once: nothing to wait
    again = plan.next(0.001, _refused())  # the next pass: B after the fast delay
    assert again is not None and again.broker == B and 0.025 <= again.delay <= 0.050
    assert plan.watched(again) == PORT_WATCH == PortWatch(0.005)


def test_F5_other_failures_a_given_wait_and_the_end_of_the_fast_phase_are_not_watched() -> None:
    for failure in (OSError("timed out"), BrokerNotReadyError("dropped"), ConnectionLostError()):
        plan = _plan()
        plan.next(0.0)
        plan.next(0.0, failure)  # b failed so
        again = plan.next(0.001, _refused())  # a refused: b next, its last failure not one
        assert again is not None and plan.watched(again) is None, failure
    given = _plan(wait=tenacity.wait_fixed(0.03))
    given.next(0.0)
    given.next(0.0, _refused())
    again = given.next(0.001, _refused())
    assert again is not None and given.watched(again) is None
    plan = _plan()
    attempt = plan.next(0.0)
    now = 0.0
    while attempt is not None and attempt.number <= 2 * (FailoverPolicy().fast_passes + 1):
        now += attempt.delay
        attempt = plan.next(now, _refused())
    assert attempt is not None and attempt.delay >= 0.1  # the back-off: after the fast phase
    assert plan.watched(attempt) is None


def test_F5_the_watch_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(failover.schedule, "PORT_WATCH", None)
    plan = _plan()
    plan.next(0.0)
    plan.next(0.0, _refused())
    again = plan.next(0.001, _refused())
    assert again is not None and plan.watched(again) is None


def test_a_refusal_is_found_among_the_causes() -> None:
    assert tcp_refused(_refused()) and tcp_refused(ConnectionRefusedError())
    assert not tcp_refused(ConnectionLostError("reset")) and not tcp_refused(None)
    assert not tcp_refused(OSError("refused"))  # words are not a refusal


async def test_the_watch_ends_once_the_port_accepts_or_when_the_wait_runs_out() -> None:
    now = [0.0]
    probes: list[float] = []

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    async def opens_at_0_012(broker: BrokerURL) -> bool:
        probes.append(now[0])
        return now[0] >= 0.012

    got = await watch(opens_at_0_012, B, 0.040, interval=0.005, clock=lambda: now[0], sleep=sleep)
    assert got and probes == pytest.approx([0.005, 0.010, 0.015])  # then the attempt, at once
    now[0], probes[:] = 0.0, []
    never = await watch(opens_at_0_012, B, 0.008, interval=0.005, clock=lambda: now[0], sleep=sleep)
    assert not never and now[0] == pytest.approx(0.008)  # the wait, no longer


async def test_the_tcp_probe_tells_a_refused_port_from_one_that_accepts() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    probe = port_probe()  # the supervisor's: host names resolved with anyio
    try:
        assert await probe(BrokerURL("amqp", "127.0.0.1", port))
        with socket.socket() as spare:  # a port that nothing listens on
            spare.bind(("127.0.0.1", 0))
            closed = spare.getsockname()[1]
            assert not await probe(BrokerURL("amqp", "127.0.0.1", closed))
        assert not await probe(BrokerURL("amqp", "no-such-host.invalid", port))
        assert await probe(BrokerURL("amqp", "localhost", port)) in (True, False)  # resolved
        assert not await TcpProbe()(BrokerURL("amqp", "localhost", port))  # no resolver
    finally:
        close = getattr(probe, "close", None)
        if close is not None:
            close()
        listener.close()


@contextmanager
def _closed_port() -> Iterator[BrokerURL]:
    """A loopback broker that nothing listens on (its port bound, not listening: no one else
    takes it meanwhile)."""
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        yield BrokerURL("amqp", "127.0.0.1", spare.getsockname()[1])


async def test_F5_the_port_watchers_thread_ends_a_wait_once_the_port_accepts() -> None:
    """The supervisor's probe hands its waits to one thread of the process: a wait on a port
    that starts listening during it ends early, True; on a port that keeps refusing it runs
    out, False. Two connections watching the same port share its probes."""
    watcher = PortWatcher()
    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    port = spare.getsockname()[1]
    broker = BrokerURL("amqp", "127.0.0.1", port)
    probes = [TcpProbe(None, wait_readable, watcher) for _ in range(2)]
    assert all(probe.watches for probe in probes)
    results: list[bool] = []

    async def wait_on(probe: TcpProbe) -> None:
        results.append(await watch(probe, broker, 30.0, interval=0.005, clock=_no, sleep=_no))

    started = time.monotonic()
    try:
        async with anyio.create_task_group() as tasks:
            for probe in probes:
                tasks.start_soon(wait_on, probe)
            await anyio.sleep(0.05)
            spare.listen()  # the port opens: both waits end, long before their 30 s
        assert results == [True, True]
        assert time.monotonic() - started < 20  # a hang bound, not a measure
        with _closed_port() as closed:
            assert not await watch(probes[0], closed, 0.05, interval=0.005, clock=_no, sleep=_no)
    finally:
        spare.close()
        for probe in probes:
            probe.close()


async def test_F5_many_waits_on_one_port_share_its_probes_and_end_by_their_own_timers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A hundred connections failing over together watch the same refused port: the thread
    probes it once per tick whatever the number of waits; each wait runs its own time, never
    less, and ends refused (the probes say so). When the port opens, every wait still under
    way is rung and ends at once."""
    probed: list[float] = []
    real_probe = failover.ports._Port.probe

    def counting(port: Any, now: float) -> bool:
        probed.append(now)
        return real_probe(port, now)

    monkeypatch.setattr(failover.ports._Port, "probe", counting)
    watcher = PortWatcher(slack=30.0)  # a late tick on a busy machine still counts as fresh
    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    broker = BrokerURL("amqp", "127.0.0.1", spare.getsockname()[1])
    probes = [TcpProbe(None, wait_readable, watcher) for _ in range(100)]
    got: list[Watched] = []

    async def wait_on(probe: TcpProbe, seconds: float) -> None:
        started = time.monotonic()
        got.append(await probe.watch(broker, seconds, interval=0.005, sleep=_no))
        if got[-1] is not Watched.ACCEPTED:
            assert time.monotonic() - started >= seconds * 0.99  # never shorter than asked

    try:
        with anyio.fail_after(HANG):
            async with anyio.create_task_group() as tasks:
                for n, probe in enumerate(probes):
                    tasks.start_soon(wait_on, probe, 0.02 + 0.0005 * n)
            assert got == [Watched.REFUSED] * 100
            ticks = len(set(probed))
            assert len(probed) == ticks  # one probe of the port per tick, not one per wait
            got.clear()
            async with anyio.create_task_group() as tasks:
                for probe in probes:
                    tasks.start_soon(wait_on, probe, HANG)
                await anyio.sleep(0.05)
                spare.listen()  # the port opens: every wait ends, long before HANG
        assert got == [Watched.ACCEPTED] * 100
    finally:
        spare.close()
        for probe in probes:
            probe.close()


async def test_F5_a_wait_ends_by_its_own_timer_even_while_the_thread_is_stuck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The thread keeps no wait's time: a wait ends when its time is up even if the thread is
    held up (here: a probe that does not return), so a stalled thread never lengthens a
    failover's waits, and it rings nothing for a wait that runs out (what it does per tick
    does not grow with the waits). With no probe of the port seen, the wait ran out."""
    release = threading.Event()

    def stuck(port: Any, now: float) -> bool:
        release.wait(HANG)
        return False

    monkeypatch.setattr(failover.ports._Port, "probe", stuck)
    probe = TcpProbe(None, wait_readable, PortWatcher())
    try:
        with _closed_port() as closed, anyio.fail_after(HANG / 2):  # a hang bound
            got = await probe.watch(closed, 0.05, interval=0.005, sleep=_no)
        assert got is Watched.RAN_OUT
    finally:
        release.set()
        probe.close()


async def test_a_wait_the_thread_cannot_probe_is_slept_with_the_walks_sleep() -> None:
    """An unresolvable name (no resolver) and a wait no longer than the interval are only
    slept, with the sleep the walk gives (a virtual clock's, in unit tests)."""
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    probe = TcpProbe(None, wait_readable, PortWatcher())
    try:
        name = BrokerURL("amqp", "localhost", 5672)
        assert not await watch(probe, name, 0.04, interval=0.005, clock=_no, sleep=sleep)
        with _closed_port() as local:
            assert not await watch(probe, local, 0.004, interval=0.005, clock=_no, sleep=sleep)
        assert slept == [0.04, 0.004]
    finally:
        probe.close()


async def test_the_port_watchers_thread_ends_when_nothing_is_watched() -> None:
    watcher = PortWatcher()
    probe = TcpProbe(None, wait_readable, watcher)
    try:
        with _closed_port() as local:
            assert not await watch(probe, local, 0.02, interval=0.005, clock=_no, sleep=_no)
        assert [t for t in threading.enumerate() if t.name == "haclient-port-watch"]
        with anyio.fail_after(20):  # a hang bound: it ends about a second after its last wait
            while watcher.running:
                await anyio.sleep(0.05)
    finally:
        probe.close()


def _no(*args: object) -> Any:
    raise AssertionError("the port watcher's thread keeps the time of a wait it watches")
