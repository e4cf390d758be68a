"""The failover connection manager: states, the gate, epochs, restore, listeners (F1-F5, F12, F14).

The manager knows nothing of AMQP, so these tests give it an in-memory physical connection
(``FakeConnection``: an anyio Event that ``drop`` sets) and a connector (``Network``) that
refuses the brokers a test names. Delays are 0 unless a test is about delays, and time is
virtual (``VirtualClock``, injected as the manager's ``clock`` and ``sleep``): a delay or a
timeout costs no real time, and the times it leads to are exact.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import tenacity
from unitkit import A, B, C, S

import failover.manager
import failover.protocols
import failover.states
from failover.manager import (
    ConnectionManager,
    ConnectionState,
    FailoverListener,
    Resource,
    RestoreOrder,
)
from failover.policy import FailoverMethod, FailoverPolicy
from failover.url import BrokerURL, parse_url
from haclient.errors import (
    AttachTimeoutError,
    AuthenticationError,
    BrokerNotReadyError,
    ClosedError,
    ConfigurationError,
    ConnectionFailedError,
    ConnectionLostError,
    FailoverTimeoutError,
    IllegalStateError,
    OpenTimeoutError,
    ResourceLockedError,
)
from haclient.options import CLIENT_OPTIONS

X, Y = BrokerURL("amqp", "x"), BrokerURL("amqp", "y")
FAST = FailoverPolicy(connect_delay=0.0)
HANG = 5.0  # real seconds: only to turn a hang into a failure, never a timing assertion


# --- Fakes -------------------------------------------------------------------------------------


class VirtualClock:
    """The manager's clock and sleep, in virtual time: ``sleep(d)`` records ``d``, moves the
    clock on by ``d`` at once and yields once (a checkpoint, so it can be cancelled like any
    sleep). Sleeps in different tasks are not ordered by their deadlines: a test lets a delay
    or a timeout run out only where nothing else is due to happen meanwhile."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await anyio.lowlevel.checkpoint()


class FakeConnection:
    """A physical connection in memory: ``drop`` ends it as a dying socket would."""

    def __init__(self, broker: BrokerURL) -> None:
        self.broker = broker
        self.closed = False
        self._ended = anyio.Event()
        self._cause: BaseException | None = None

    @property
    def is_open(self) -> bool:
        return not self._ended.is_set()

    async def wait_closed(self) -> BaseException | None:
        await self._ended.wait()
        return self._cause

    async def close(self) -> None:
        self.closed = True
        self._ended.set()

    def drop(self, cause: BaseException | None = None, *, orderly: bool = False) -> None:
        self._cause = None if orderly else cause or ConnectionLostError(f"{self.broker.host} died")
        self._ended.set()


class Network:
    """The connector: brokers in ``down`` refuse, ``errors`` raise their error, ``refusals``
    refuse that many times first; while ``hold`` is set, connects wait for it."""

    def __init__(self, *, down: set[str] | None = None) -> None:
        self.down = down or set()
        self.errors: dict[str, Exception] = {}
        self.refusals: dict[str, int] = {}
        self.hold: anyio.Event | None = None
        self.calls: list[str] = []
        self.clock = VirtualClock()
        self.times: list[float] = []  # of ``clock``, one per call
        self.opened: list[FakeConnection] = []
        self.running = 0

    async def connect(self, broker: BrokerURL) -> FakeConnection:
        self.calls.append(broker.host)
        self.times.append(self.clock())
        self.running += 1
        try:
            if self.hold is not None:
                await self.hold.wait()
            await anyio.lowlevel.checkpoint()
        finally:
            self.running -= 1
        if broker.host in self.errors:
            raise self.errors[broker.host]
        if self.refusals.get(broker.host, 0) > 0:
            self.refusals[broker.host] -= 1
            raise OSError(f"connection refused by {broker.host} (refusal)")
        if broker.host in self.down:
            raise OSError(f"connection refused by {broker.host}")
        connection = FakeConnection(broker)
        self.opened.append(connection)
        return connection

    @property
    def last(self) -> FakeConnection:
        return self.opened[-1]


Manager = ConnectionManager[FakeConnection]


class Recorder(FailoverListener):
    """Records every listener call as a tuple."""

    def __init__(self, log: list[tuple[object, ...]] | None = None, name: str = "") -> None:
        self.events: list[tuple[object, ...]] = [] if log is None else log
        self.name = name

    def _add(self, *event: object) -> None:
        self.events.append((self.name, *event) if self.name else event)

    def failover_started(self, cause: BaseException) -> None:
        self._add("started", cause)

    def failover_completed(self, broker: BrokerURL, downtime: float) -> None:
        self._add("completed", broker, downtime)

    def failover_failed(self, cause: BaseException) -> None:
        self._add("failed", cause)

    def resource_not_restored(self, resource: object, error: BaseException) -> None:
        self._add("not_restored", resource, error)


class Boom(FailoverListener):
    """A listener that raises from every callback."""

    def failover_started(self, cause: BaseException) -> None:
        raise RuntimeError("listener bug: started")

    def failover_completed(self, broker: BrokerURL, downtime: float) -> None:
        raise RuntimeError("listener bug: completed")

    def failover_failed(self, cause: BaseException) -> None:
        raise RuntimeError("listener bug: failed")


Restore = Callable[[FakeConnection, int], Awaitable[None]]


class Res(Resource[FakeConnection]):
    """A resource that logs ``connection_lost`` and ``restore`` calls into a shared list."""

    def __init__(
        self, name: str, order: int, log: list[tuple[object, ...]], action: Restore | None = None
    ) -> None:
        self.name = name
        self.restore_order = order
        self.log = log
        self.action = action

    def connection_lost(self, epoch: int, cause: BaseException) -> None:
        self.log.append(("lost", self.name, epoch))

    async def restore(self, connection: FakeConnection, epoch: int) -> None:
        self.log.append(("restore", self.name, connection.broker.host, epoch))
        if self.action is not None:
            await self.action(connection, epoch)

    def __repr__(self) -> str:
        return f"Res({self.name})"


def failing(error: BaseException) -> Restore:
    """A restore action that raises ``error``."""

    async def fail(connection: FakeConnection, epoch: int) -> None:
        raise error

    return fail


def make(
    network: Network,
    brokers: list[BrokerURL],
    policy: FailoverPolicy | None = None,
    *,
    connect: Callable[[BrokerURL], Awaitable[FakeConnection]] | None = None,
    rng: random.Random | None = None,
) -> Manager:
    """A manager over ``network`` (or ``connect``), on the network's virtual clock."""
    clock = network.clock
    return Manager(
        connect or network.connect, brokers, policy, rng=rng, clock=clock, sleep=clock.sleep
    )


@asynccontextmanager
async def running(
    network: Network, brokers: list[BrokerURL] | None = None, policy: FailoverPolicy = FAST
) -> AsyncIterator[Manager]:
    """A started manager (the first connect succeeded), closed on exit; guards against hangs."""
    with anyio.fail_after(HANG):
        manager = make(network, brokers or [A, B, C], policy)
        async with manager:
            await manager.start()
            yield manager


async def until(predicate: Callable[[], bool]) -> None:
    """Let other tasks run until ``predicate()`` holds."""
    with anyio.fail_after(HANG):
        while not predicate():
            await anyio.sleep(0)


async def drop_and_reconnect(
    manager: Manager, cause: BaseException | None = None
) -> tuple[FakeConnection, int]:
    """Drop the current connection and wait until failover has completed."""
    connection, epoch = await manager.wait_connected()
    connection.drop(cause)
    await until(lambda: manager.epoch > epoch)
    with anyio.fail_after(HANG):
        return await manager.wait_connected()


# --- The module ---------------------------------------------------------------------------------


def test_public_names_are_pinned() -> None:
    assert sorted(failover.manager.__all__) == sorted(
        [
            "TRANSITIONS",
            "ConnectionManager",
            "ConnectionState",
            "Connector",
            "FailoverListener",
            "ManagerEvent",
            "ManagerStatistics",
            "ManagedConnection",
            "Resource",
            "RestoreOrder",
            "StagedResource",
            "is_retriable_failure",
            "next_state",
        ]
    )


def test_the_manager_re_exports_the_states_and_protocols() -> None:
    assert failover.manager.ConnectionState is failover.states.ConnectionState
    assert failover.manager.TRANSITIONS is failover.states.TRANSITIONS
    assert failover.manager.next_state is failover.states.next_state
    assert failover.manager.is_retriable_failure is failover.states.is_retriable_failure
    assert failover.manager.RestoreOrder is failover.protocols.RestoreOrder
    assert failover.manager.Resource is failover.protocols.Resource
    assert not hasattr(failover.manager, "PhysicalConnection")  # one name per concept


# --- Construction and lifetime -----------------------------------------------------------------


def test_from_url_takes_the_brokers_and_the_policy() -> None:
    url = parse_url("failover:(amqp://a,amqp://b)?failover.retries=3", options=CLIENT_OPTIONS)
    manager = Manager.from_url(Network().connect, url)
    assert manager.brokers == (BrokerURL("amqp", "a"), BrokerURL("amqp", "b"))
    assert manager.policy == url.policy
    assert manager.state is S.CONNECTING
    assert manager.epoch == 0
    assert manager.broker is None


def test_the_broker_list_and_policy_are_validated() -> None:
    with pytest.raises(ConfigurationError):
        Manager(Network().connect, [])
    with pytest.raises(ConfigurationError, match="singlebroker"):
        Manager(Network().connect, [A, B], FailoverPolicy(method=FailoverMethod.SINGLEBROKER))


@pytest.mark.anyio
async def test_calls_outside_async_with_raise_illegal_state() -> None:
    manager = Manager(Network().connect, [A])
    with pytest.raises(IllegalStateError, match="async with"):
        await manager.start()
    with pytest.raises(IllegalStateError, match="async with"):
        await manager.wait_connected()


@pytest.mark.anyio
async def test_start_twice_and_enter_twice_raise_illegal_state() -> None:
    async with running(Network()) as manager:
        with pytest.raises(IllegalStateError, match="already"):
            await manager.start()
        with pytest.raises(IllegalStateError, match="once"):
            await manager.__aenter__()


@pytest.mark.anyio
async def test_start_in_runs_the_supervisor_in_the_owners_task_group_until_close() -> None:
    """The form for an owner that has a task group already: no ``async with``, and after
    ``close()`` nothing of the manager runs in the owner's group."""
    network = Network()
    manager = Manager(network.connect, [A, B])
    async with anyio.create_task_group() as owner:
        await manager.start_in(owner)
        connection, epoch = await manager.wait_connected()
        assert (connection, epoch, manager.state) == (network.last, 0, S.CONNECTED)
        network.last.drop()  # failover works as under async with
        await until(lambda: manager.epoch == 1)
        second, epoch = await manager.wait_connected()
        assert (second.broker, epoch) == (B, 1)
        with pytest.raises(IllegalStateError, match="once"):
            await manager.start_in(owner)
        with pytest.raises(IllegalStateError, match="once"):
            await manager.__aenter__()
        await manager.close()
        assert second.closed and manager.state is S.CLOSED
    # the owner's task group ended by itself: the supervisor's task had ended with close()


# --- The first connect -------------------------------------------------------------------------


@pytest.mark.anyio
async def test_start_connects_to_the_first_broker() -> None:
    network = Network()
    async with running(network) as manager:
        connection, epoch = await manager.wait_connected()
        assert connection is network.last
        assert (connection.broker, epoch, manager.broker) == (A, 0, A)
        assert manager.state is S.CONNECTED
        assert network.calls == ["a"]


@pytest.mark.anyio
async def test_start_walks_on_to_a_broker_that_answers() -> None:
    network = Network(down={"a"})
    async with running(network) as manager:
        assert manager.broker == B
        assert network.calls == ["a", "b"]


@pytest.mark.anyio
async def test_F4_start_gives_up_after_the_startup_budget_with_the_last_cause() -> None:
    network = Network(down={"a", "b"})
    policy = FailoverPolicy(cyclecount=5, startup_cyclecount=2, connect_delay=0.0)
    with anyio.fail_after(HANG):
        async with make(network, [A, B], policy) as manager:
            with pytest.raises(ConnectionFailedError) as info:
                await manager.start()
            assert network.calls == ["a", "b", "a", "b"]
            cause = info.value.cause
            assert isinstance(cause, OSError) and "refused by b" in str(cause)
            assert info.value.__cause__ is cause
            assert manager.state is S.FAILED
            with pytest.raises(ConnectionFailedError) as later:
                await manager.wait_connected()
            assert later.value.cause is cause


@pytest.mark.anyio
async def test_F4_waiters_blocked_during_a_failing_start_get_connection_failed() -> None:
    network = Network(down={"a"})
    errors: list[BaseException] = []

    async def waiter(manager: Manager) -> None:
        try:
            await manager.wait_connected()
        except ConnectionFailedError as exc:
            errors.append(exc)

    manager = make(network, [A], FailoverPolicy(cyclecount=1, connect_delay=0.0))
    with anyio.fail_after(HANG):
        async with manager, anyio.create_task_group() as tg:
            tg.start_soon(waiter, manager)
            tg.start_soon(waiter, manager)
            await anyio.wait_all_tasks_blocked()
            assert errors == []
            with pytest.raises(ConnectionFailedError):
                await manager.start()
    assert len(errors) == 2
    assert all(isinstance(e, ConnectionFailedError) for e in errors)


@pytest.mark.anyio
async def test_a_failure_no_reconnect_can_fix_stops_the_start_at_once() -> None:
    network = Network()
    # The same everywhere (unlike a broker's refusal of trust, F15): no other broker is tried.
    network.errors["a"] = ConfigurationError("the key file cannot be read")
    with anyio.fail_after(HANG):
        async with make(network, [A, B]) as manager:
            with pytest.raises(ConnectionFailedError) as info:
                await manager.start()
    assert network.calls == ["a"]
    assert isinstance(info.value.cause, ConfigurationError)


@pytest.mark.anyio
async def test_a_failed_attempt_is_kept_with_its_traceback_but_not_what_its_frames_held() -> None:
    held = ["what the attempt built"]

    async def connect(broker: BrokerURL) -> FakeConnection:
        built = held  # a local of a frame the failure's traceback holds
        raise RuntimeError(f"a bug behind {broker.host} ({len(built)})")

    with anyio.fail_after(HANG):
        async with make(Network(), [A], connect=connect) as manager:
            with pytest.raises(ConnectionFailedError) as info:
                await manager.start()
    cause = info.value.cause
    assert isinstance(cause, RuntimeError) and cause.__traceback__ is not None
    frames = [tb.tb_frame for tb in _tracebacks(cause)]
    assert frames and all("built" not in frame.f_locals for frame in frames)


@pytest.mark.anyio
async def test_F4_a_cause_of_the_tree_is_kept_with_its_words_not_its_frames() -> None:
    """The failure ``ConnectionFailedError`` is raised from says what failed (a translated one
    quotes what it was raised from): its frames, deep in the client, would only bury that in
    what an application prints."""

    async def connect(broker: BrokerURL) -> FakeConnection:
        try:
            raise OSError(f"connection refused by {broker.host}")
        except OSError as exc:
            raise ConnectionLostError(f"cannot connect: {exc}") from exc

    with anyio.fail_after(HANG):
        async with make(Network(), [A], connect=connect) as manager:
            with pytest.raises(ConnectionFailedError) as info:
                await manager.start()
    error = info.value
    cause = error.cause
    assert isinstance(cause, ConnectionLostError) and error.__cause__ is cause
    assert isinstance(cause.__cause__, OSError)
    assert cause.__traceback__ is None and cause.__cause__.__traceback__ is None
    assert (
        str(error) == "could not connect to amqp://a:5672: cannot connect: connection refused by a"
    )
    assert error.first_connect


def _tracebacks(error: BaseException | None) -> list[Any]:
    tb, found = (error.__traceback__ if error is not None else None), []
    while tb is not None:
        found.append(tb)
        tb = tb.tb_next
    return found


@pytest.mark.anyio
async def test_F1_nofailover_still_connects_once() -> None:
    policy = FailoverPolicy(method=FailoverMethod.NOFAILOVER)
    async with running(Network(), [A, B], policy) as manager:
        assert manager.broker == A
    network = Network(down={"a"})
    with anyio.fail_after(HANG):
        async with make(network, [A, B], policy) as manager:
            with pytest.raises(ConnectionFailedError):
                await manager.start()
    assert network.calls == ["a"]


@pytest.mark.anyio
async def test_F2_a_waiter_before_start_gets_the_first_connection() -> None:
    network = Network()
    got: list[tuple[FakeConnection, int]] = []
    manager = make(network, [A])

    async def waiter() -> None:
        got.append(await manager.wait_connected())

    with anyio.fail_after(HANG):
        async with manager, anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            assert got == []
            await manager.start()
    assert got == [(network.opened[0], 0)]


@pytest.mark.anyio
async def test_the_connected_fast_path_has_no_checkpoint() -> None:
    """When connected, the gate returns without yielding: even a cancelled scope lets it by."""
    async with running(Network()) as manager:
        got = None
        with anyio.CancelScope() as scope:
            scope.cancel()
            got = await manager.wait_connected(timeout=0.001)
        assert got is not None and got[1] == 0


# --- Failover: methods (F5) --------------------------------------------------------------------


@pytest.mark.anyio
async def test_F5_roundrobin_walks_the_list_in_order_and_wraps() -> None:
    network = Network()
    async with running(network) as manager:
        hosts = []
        for expected_epoch in (1, 2, 3):
            connection, epoch = await drop_and_reconnect(manager)
            assert epoch == expected_epoch == manager.epoch
            assert connection is network.last
            hosts.append(connection.broker.host)
        assert hosts == ["b", "c", "a"]
        assert network.calls == ["a", "b", "c", "a"]


@pytest.mark.anyio
async def test_F5_roundrobin_skips_a_broker_that_refuses() -> None:
    network = Network()
    async with running(network) as manager:
        network.down = {"b"}
        connection, epoch = await drop_and_reconnect(manager)
        assert (connection.broker, epoch) == (C, 1)
        assert network.calls == ["a", "b", "c"]


@pytest.mark.anyio
async def test_F5_roundrobin_retries_each_broker_then_cycles_then_gives_up() -> None:
    network = Network()
    policy = FailoverPolicy(retries=2, cyclecount=2, connect_delay=0.0)
    recorder = Recorder()
    async with running(network, [A, B], policy) as manager:
        manager.add_listener(recorder)
        network.down = {"a", "b"}
        network.last.drop()
        await until(lambda: manager.state is S.FAILED)
        assert network.calls == ["a", "b", "b", "a", "a", "b", "b", "a", "a"]
        assert [e[0] for e in recorder.events] == ["started", "failed"]


@pytest.mark.anyio
async def test_F5_singlebroker_retries_the_one_broker() -> None:
    network = Network()
    policy = FailoverPolicy(method=FailoverMethod.SINGLEBROKER, retries=3, connect_delay=0.0)
    async with running(network, [A], policy) as manager:
        network.refusals["a"] = 2
        connection, epoch = await drop_and_reconnect(manager)
        assert (connection.broker, epoch) == (A, 1)
        assert network.calls == ["a", "a", "a", "a"]

        network.down = {"a"}
        network.last.drop()
        await until(lambda: manager.state is S.FAILED)
        assert network.calls == ["a"] * 7
        with pytest.raises(ConnectionFailedError) as info:
            await manager.wait_connected()
        assert isinstance(info.value.cause, OSError)


@pytest.mark.anyio
async def test_F5_nofailover_reports_the_loss_at_once() -> None:
    network = Network()
    recorder = Recorder()
    policy = FailoverPolicy(method=FailoverMethod.NOFAILOVER)
    async with running(network, [A, B], policy) as manager:
        manager.add_listener(recorder)
        cause = ConnectionLostError("gone")
        assert manager.report_lost(0, cause)
        assert manager.state is S.FAILED  # at once: no task had to run
        with pytest.raises(ConnectionFailedError) as info:
            await manager.wait_connected()
        assert info.value.cause is cause
        assert recorder.events == [("failed", cause)]
        await until(lambda: network.opened[0].closed)
        assert network.calls == ["a"]


@pytest.mark.anyio
async def test_a_loss_no_reconnect_can_fix_fails_at_once() -> None:
    network = Network()
    async with running(network) as manager:
        cause = ResourceLockedError("another connection took the client id")
        network.last.drop(cause)
        await until(lambda: manager.state is S.FAILED)
        assert network.calls == ["a"]
        with pytest.raises(ConnectionFailedError) as info:
            await manager.wait_connected()
        assert info.value.cause is cause


@pytest.mark.anyio
async def test_F4_a_connect_failure_no_reconnect_can_fix_ends_failover() -> None:
    network = Network()
    async with running(network) as manager:
        network.errors["b"] = ConfigurationError("the key file cannot be read")
        network.last.drop()
        await until(lambda: manager.state is S.FAILED)
        assert network.calls == ["a", "b"]  # c is not tried
        with pytest.raises(ConnectionFailedError) as info:
            await manager.wait_connected()
        assert isinstance(info.value.cause, ConfigurationError)


@pytest.mark.anyio
async def test_an_orderly_end_by_the_peer_is_a_loss_too() -> None:
    network = Network()
    recorder = Recorder()
    async with running(network) as manager:
        manager.add_listener(recorder)
        network.last.drop(orderly=True)
        await until(lambda: manager.epoch == 1)
        (_, cause), *_ = recorder.events
        assert isinstance(cause, ConnectionLostError)
        connection, _ = await manager.wait_connected()
        assert connection.broker == B


class RaisingWait(FakeConnection):
    async def wait_closed(self) -> BaseException | None:
        await super().wait_closed()
        raise RuntimeError("the reader task crashed")


@pytest.mark.anyio
async def test_wait_closed_raising_is_a_loss_with_that_cause() -> None:
    network = Network()
    first = RaisingWait(A)
    recorder = Recorder()

    async def connect(broker: BrokerURL) -> FakeConnection:
        return first if broker == A else await network.connect(broker)

    with anyio.fail_after(HANG):
        async with make(network, [A, B], FAST, connect=connect) as manager:
            manager.add_listener(recorder)
            await manager.start()
            first.drop()
            await until(lambda: manager.epoch == 1)
            connection, _ = await manager.wait_connected()
    assert connection.broker == B
    assert isinstance(recorder.events[0][1], RuntimeError)


@pytest.mark.anyio
async def test_the_lost_connection_is_closed() -> None:
    network = Network()
    async with running(network) as manager:
        first = network.last
        assert manager.report_lost(0, ConnectionLostError("heartbeat missed"))
        await until(lambda: first.closed)
        await manager.wait_connected()


# --- The gate (F2, F3, F4) ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_F2_F3_calls_block_during_failover_and_get_the_new_connection() -> None:
    network = Network()
    got: list[tuple[FakeConnection, int]] = []
    async with running(network) as manager:
        network.hold = anyio.Event()
        manager.report_lost(0, ConnectionLostError("dropped"))
        assert manager.state is S.FAILING_OVER

        async def waiter() -> None:
            got.append(await manager.wait_connected())

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            assert got == []
            assert manager.state is S.FAILING_OVER
            network.hold.set()
    new = network.last
    assert new.broker == B
    assert got == [(new, 1)] * 3


@pytest.mark.anyio
async def test_F4_giving_up_releases_every_waiter_with_the_cause() -> None:
    network = Network()
    errors: list[ConnectionFailedError] = []
    async with running(network, [A, B], FailoverPolicy(cyclecount=1, connect_delay=0.0)) as manager:
        network.hold = anyio.Event()
        network.down = {"a", "b"}
        network.last.drop()
        await until(lambda: manager.state is S.FAILING_OVER)

        async def waiter() -> None:
            try:
                await manager.wait_connected()
            except ConnectionFailedError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            for _ in range(2):
                tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            assert errors == []
            network.hold.set()
        assert manager.state is S.FAILED
        assert len(errors) == 2
        assert all(isinstance(e.cause, OSError) and "by a" in str(e.cause) for e in errors)
        with pytest.raises(ConnectionFailedError) as later:
            await manager.wait_connected(timeout=1.0)
        assert later.value.cause is errors[0].cause


@pytest.mark.anyio
async def test_F4_policy_timeout_raises_while_failover_goes_on_and_later_succeeds() -> None:
    network = Network()
    policy = FailoverPolicy(connect_delay=0.0, timeout=0.02)
    async with running(network, [A, B], policy) as manager:
        network.hold = anyio.Event()
        manager.report_lost(0, ConnectionLostError("dropped"))
        with pytest.raises(FailoverTimeoutError) as info:
            await manager.wait_connected()
        assert info.value.timeout == 0.02
        assert isinstance(info.value, TimeoutError)
        assert (network.clock.sleeps, network.clock.now) == ([0.02], 0.02)
        assert manager.state is S.FAILING_OVER
        assert network.running == 1  # the connect is still under way
        network.hold.set()
        await until(lambda: manager.state is S.CONNECTED)
        connection, epoch = await manager.wait_connected()
        assert (connection.broker, epoch) == (B, 1)


@pytest.mark.anyio
async def test_F4_a_per_call_timeout_and_the_shorter_limit_wins() -> None:
    network = Network()
    policy = FailoverPolicy(connect_delay=0.0, timeout=60.0)
    async with running(network, [A, B], policy) as manager:
        network.hold = anyio.Event()
        manager.report_lost(0, ConnectionLostError("dropped"))
        with pytest.raises(FailoverTimeoutError) as info:
            await manager.wait_connected(timeout=0.01)
        assert info.value.timeout == 0.01
        assert network.clock.sleeps == [0.01]
        network.hold.set()
        await until(lambda: manager.state is S.CONNECTED)
        connection, epoch = await manager.wait_connected()
        assert (connection.broker, epoch) == (B, 1)


@pytest.mark.anyio
async def test_F4_a_per_call_timeout_without_a_policy_timeout() -> None:
    network = Network()
    async with running(network) as manager:
        network.hold = anyio.Event()
        manager.report_lost(0, ConnectionLostError("dropped"))
        with pytest.raises(FailoverTimeoutError) as info:
            await manager.wait_connected(timeout=0.01)
        assert info.value.timeout == 0.01
        assert network.clock.sleeps == [0.01]
        network.hold.set()


@pytest.mark.anyio
async def test_F4_the_timeout_names_the_broker_being_tried_and_the_attempt() -> None:
    network = Network()
    held, release = anyio.Event(), anyio.Event()

    async def connect(broker: BrokerURL) -> FakeConnection:
        if len(network.calls) >= 4:  # the first connect, then failover attempts 1-3 refused
            held.set()
            await release.wait()
        return await network.connect(broker)

    with anyio.fail_after(HANG):
        async with make(network, [A, B, C], FAST, connect=connect) as manager:
            await manager.start()
            network.down = {"a", "b", "c"}
            manager.report_lost(0, ConnectionLostError("dropped"))
            await held.wait()
            with pytest.raises(FailoverTimeoutError) as info:
                await manager.wait_connected(timeout=2.0)
            assert (info.value.broker, info.value.attempts) == ("amqp://b:5672", 4)
            assert str(info.value) == (
                "still failing over after 2 s (attempt 4, trying amqp://b:5672)"
            )
            network.down = set()
            release.set()
            connection, epoch = await manager.wait_connected()
            assert (connection.broker, epoch) == (B, 1)


@pytest.mark.anyio
async def test_F4_failover_gives_up_exactly_when_the_time_budget_is_spent() -> None:
    network = Network()
    recorder = Recorder()
    policy = FailoverPolicy(jitter=0.0)  # the default schedule, without jitter
    async with running(network, [A, B], policy) as manager:
        manager.add_listener(recorder)
        network.down = {"a", "b"}
        network.clock.now = 1000.0
        network.times.clear()
        manager.report_lost(0, ConnectionLostError("dropped"))
        await until(lambda: manager.state is S.FAILED)
    # 121 passes over the list (b, then a at once) every 25 ms for 3 s, back-off 100 ms..3.2 s
    # (6), 5 s (22: up to 119.3 s), then the next one, due at 124.3 s, at the end of the
    # budget instead.
    assert len(network.times) == 242 + 6 + 22 + 1
    assert network.times[:3] == [1000.0, 1000.0, 1000.025]
    assert network.times[241] == pytest.approx(1003.0)
    assert network.times[-2] == pytest.approx(1119.3)
    assert network.times[-1] == pytest.approx(1120.0)
    assert network.clock.now == pytest.approx(1120.0)
    assert [e[0] for e in recorder.events] == ["started", "failed"]


@pytest.mark.anyio
async def test_F4_the_first_connect_has_the_time_budget_too() -> None:
    network = Network(down={"a"})
    policy = FailoverPolicy(startup_cyclecount=None, give_up_after=10.0, jitter=0.0)
    with anyio.fail_after(HANG):
        async with make(network, [A], policy) as manager:
            with pytest.raises(ConnectionFailedError):
                await manager.start()
    assert network.times[-1] == pytest.approx(10.0)
    assert len(network.times) == 1 + 120 + 6 + 1  # the last one at 10 s, not at 14.3 s


@pytest.mark.anyio
async def test_F1_a_dead_url_fails_fast_at_the_first_connect() -> None:
    network = Network(down={"a", "b"})
    with anyio.fail_after(HANG):
        async with make(network, [A, B], FailoverPolicy()) as manager:
            with pytest.raises(ConnectionFailedError):
                await manager.start()
    assert network.calls == ["a", "b"]  # one pass over the list, at once
    assert network.clock.now == 0.0


# --- Epochs and report_lost --------------------------------------------------------------------


@pytest.mark.anyio
async def test_stale_report_lost_is_ignored_and_a_repeat_is_idempotent() -> None:
    network = Network()
    async with running(network) as manager:
        await drop_and_reconnect(manager)
        assert manager.epoch == 1
        assert not manager.report_lost(0, ConnectionLostError("old news"))
        assert manager.state is S.CONNECTED
        assert manager.report_lost(1, ConnectionLostError("dead"))
        assert not manager.report_lost(1, ConnectionLostError("dead again"))
        assert manager.epoch == 2
        connection, epoch = await manager.wait_connected()
        assert (connection.broker, epoch) == (C, 2)
        assert network.calls == ["a", "b", "c"]


@pytest.mark.anyio
async def test_report_lost_of_a_future_epoch_is_ignored() -> None:
    async with running(Network()) as manager:
        assert not manager.report_lost(5)
        assert (manager.state, manager.epoch) == (S.CONNECTED, 0)


# --- Restore (F3, F6-F9, F14) ------------------------------------------------------------------


@pytest.mark.anyio
async def test_resources_are_told_of_the_loss_then_restored_in_order() -> None:
    network = Network()
    log: list[tuple[object, ...]] = []
    states: list[ConnectionState] = []

    async def check_gate(connection: FakeConnection, epoch: int) -> None:
        states.append(manager.state)
        with pytest.raises(FailoverTimeoutError):  # the gate stays closed to everyone else
            await manager.wait_connected(timeout=0.001)

    orders = [
        ("consumer", RestoreOrder.CONSUMER),
        ("session1", RestoreOrder.SESSION),
        ("temp", RestoreOrder.TEMPORARY_DESTINATION),
        ("producer", RestoreOrder.PRODUCER),
        ("session2", RestoreOrder.SESSION),
        ("browser", RestoreOrder.BROWSER),
    ]
    async with running(network) as manager:
        for name, order in orders:
            manager.register(Res(name, order, log, check_gate if name == "browser" else None))
        await drop_and_reconnect(manager)
    names = ["temp", "session1", "session2", "producer", "consumer", "browser"]
    assert log[:6] == [("lost", name, 0) for name in names]
    assert log[6:] == [("restore", name, "b", 1) for name in names]
    assert states == [S.RESTORING]


@pytest.mark.anyio
async def test_unregistered_resources_are_not_restored_and_register_is_idempotent() -> None:
    log: list[tuple[object, ...]] = []
    async with running(Network()) as manager:
        kept, gone = Res("kept", 1, log), Res("gone", 1, log)
        manager.register(kept)
        manager.register(kept)
        manager.register(gone)
        manager.unregister(gone)
        manager.unregister(gone)
        await drop_and_reconnect(manager)
    assert log == [("lost", "kept", 0), ("restore", "kept", "b", 1)]


@pytest.mark.anyio
async def test_a_resource_unregistered_during_restore_is_skipped() -> None:
    log: list[tuple[object, ...]] = []

    async def drop_the_consumer(connection: FakeConnection, epoch: int) -> None:
        manager.unregister(consumer)

    consumer = Res("consumer", 3, log)
    async with running(Network()) as manager:
        manager.register(Res("session", 1, log, drop_the_consumer))
        manager.register(consumer)
        await drop_and_reconnect(manager)
    assert [entry for entry in log if entry[0] == "restore"] == [("restore", "session", "b", 1)]


@pytest.mark.anyio
async def test_F14_a_resource_that_fails_to_restore_is_reported_and_the_others_go_on() -> None:
    log: list[tuple[object, ...]] = []
    error = ValueError("the queue is gone")
    recorder = Recorder()
    async with running(Network()) as manager:
        manager.add_listener(recorder)
        bad = Res("bad", 1, log, failing(error))
        for resource in (Res("first", 0, log), bad, Res("last", 2, log)):
            manager.register(resource)
        await drop_and_reconnect(manager)
        assert manager.state is S.CONNECTED
    restored = [entry[1] for entry in log if entry[0] == "restore"]
    assert restored == ["first", "bad", "last"]
    assert [e[0] for e in recorder.events] == ["started", "not_restored", "completed"]
    assert recorder.events[1] == ("not_restored", bad, error)


@pytest.mark.anyio
async def test_F14_a_timeout_no_reconnect_can_fix_is_reported_not_retried() -> None:
    log: list[tuple[object, ...]] = []
    error = AttachTimeoutError("a feature the broker leaves unanswered")  # not retriable

    async def time_out(connection: FakeConnection, epoch: int) -> None:
        raise error

    recorder = Recorder()
    async with running(Network()) as manager:
        manager.add_listener(recorder)
        bad = Res("bad", RestoreOrder.CONSUMER, log, time_out)
        manager.register(bad)
        connection, epoch = await drop_and_reconnect(manager)
        assert (connection.broker, epoch) == (B, 1)  # no further attempt
    assert [e[0] for e in recorder.events] == ["started", "not_restored", "completed"]
    assert recorder.events[1] == ("not_restored", bad, error)


@pytest.mark.anyio
async def test_a_tier_restores_concurrently_and_the_next_tier_waits_for_all_of_it() -> None:
    log: list[tuple[object, ...]] = []
    first, second = anyio.Event(), anyio.Event()

    def meet(name: str, mine: anyio.Event, other: anyio.Event) -> Restore:
        async def restore(connection: FakeConnection, epoch: int) -> None:
            mine.set()
            await other.wait()  # restored one after the other, neither would ever return
            log.append(("done", name))

        return restore

    async with running(Network()) as manager:
        manager.register(Res("consumer", RestoreOrder.CONSUMER, log))
        manager.register(Res("s1", RestoreOrder.SESSION, log, meet("s1", first, second)))
        manager.register(Res("s2", RestoreOrder.SESSION, log, meet("s2", second, first)))
        await drop_and_reconnect(manager)
    restored = [entry for entry in log if entry[0] != "lost"]
    assert restored[:2] == [("restore", "s1", "b", 1), ("restore", "s2", "b", 1)]
    assert sorted(restored[2:4]) == [("done", "s1"), ("done", "s2")]
    assert restored[4:] == [("restore", "consumer", "b", 1)]  # after the whole tier


@pytest.mark.anyio
async def test_F14_a_resource_that_fails_does_not_stop_its_tier() -> None:
    log: list[tuple[object, ...]] = []
    error = ValueError("the queue is gone")

    async def slow(connection: FakeConnection, epoch: int) -> None:
        await anyio.lowlevel.checkpoint()  # still running when its neighbour fails
        log.append(("done", "slow"))

    recorder = Recorder()
    async with running(Network()) as manager:
        manager.add_listener(recorder)
        bad = Res("bad", RestoreOrder.CONSUMER, log, failing(error))
        manager.register(bad)
        manager.register(Res("slow", RestoreOrder.CONSUMER, log, slow))
        manager.register(Res("browser", RestoreOrder.BROWSER, log))
        await drop_and_reconnect(manager)
        assert manager.state is S.CONNECTED
    assert [entry[:2] for entry in log if entry[0] != "lost"] == [
        ("restore", "bad"),
        ("restore", "slow"),
        ("done", "slow"),
        ("restore", "browser"),
    ]
    assert recorder.events == [recorder.events[0], ("not_restored", bad, error), recorder.events[2]]
    assert [e[0] for e in recorder.events] == ["started", "not_restored", "completed"]


@pytest.mark.anyio
async def test_a_loss_during_a_tier_cancels_the_rest_and_the_next_attempt_restores_all() -> None:
    log: list[tuple[object, ...]] = []

    async def wait_for_ever_on_b(connection: FakeConnection, epoch: int) -> None:
        if epoch == 1:
            try:
                await anyio.sleep_forever()
            finally:
                log.append(("cancelled", "waiting"))

    async def lose_b(connection: FakeConnection, epoch: int) -> None:
        if epoch == 1:
            await anyio.lowlevel.checkpoint()  # its neighbour is waiting by now
            raise ConnectionLostError("died under the restore")

    recorder = Recorder()
    async with running(Network()) as manager:
        manager.add_listener(recorder)
        manager.register(Res("waiting", RestoreOrder.CONSUMER, log, wait_for_ever_on_b))
        manager.register(Res("losing", RestoreOrder.CONSUMER, log, lose_b))
        manager.register(Res("browser", RestoreOrder.BROWSER, log))
        connection, epoch = await drop_and_reconnect(manager)
        assert (connection.broker, epoch) == (C, 2)
    assert [entry for entry in log if entry[0] != "lost"] == [
        ("restore", "waiting", "b", 1),
        ("restore", "losing", "b", 1),
        ("cancelled", "waiting"),
        ("restore", "waiting", "c", 2),
        ("restore", "losing", "c", 2),
        ("restore", "browser", "c", 2),
    ]
    assert [e[0] for e in recorder.events] == ["started", "completed"]


class Staged(Res):
    """A ``StagedResource``: ``begin_restore`` logs "begin" (raising ``begin_error`` if set)
    and returns a finish that logs "finish" and then runs the action."""

    begin_error: BaseException | None = None

    def begin_restore(
        self, connection: FakeConnection, epoch: int
    ) -> Callable[[], Awaitable[None]] | None:
        self.log.append(("begin", self.name, epoch))
        if self.begin_error is not None:
            raise self.begin_error

        async def finish() -> None:
            self.log.append(("finish", self.name, epoch))
            if self.action is not None:
                await self.action(connection, epoch)

        return finish


@pytest.mark.anyio
async def test_staged_resources_of_a_tier_all_begin_before_any_finishes_in_one_task() -> None:
    log: list[tuple[object, ...]] = []
    tasks: set[object] = set()

    async def note_task(connection: FakeConnection, epoch: int) -> None:
        tasks.add(anyio.get_current_task().id)

    async with running(Network()) as manager:
        for name in ("c1", "c2", "c3"):
            manager.register(Staged(name, RestoreOrder.CONSUMER, log, note_task))
        manager.register(Res("plain", RestoreOrder.CONSUMER, log))
        manager.register(Staged("browser", RestoreOrder.BROWSER, log))
        await drop_and_reconnect(manager)
    staged = [entry[:2] for entry in log if entry[0] in ("begin", "finish")]
    assert staged == [
        ("begin", "c1"),
        ("begin", "c2"),
        ("begin", "c3"),
        ("finish", "c1"),
        ("finish", "c2"),
        ("finish", "c3"),
        ("begin", "browser"),  # the next tier waits for the whole of this one
        ("finish", "browser"),
    ]
    assert ("restore", "plain", "b", 1) in log  # a plain resource restores as before
    assert all(entry[0] != "restore" or entry[1] == "plain" for entry in log)
    assert len(tasks) == 1


@pytest.mark.anyio
async def test_F14_a_staged_resource_that_fails_to_begin_or_finish_is_reported() -> None:
    log: list[tuple[object, ...]] = []
    error, refused = ValueError("no such queue"), ValueError("refused")
    recorder = Recorder()
    async with running(Network()) as manager:
        manager.add_listener(recorder)
        bad_begin = Staged("bad-begin", RestoreOrder.CONSUMER, log)
        bad_begin.begin_error = error
        bad_finish = Staged("bad-finish", RestoreOrder.CONSUMER, log, failing(refused))
        for resource in (bad_begin, bad_finish, Staged("good", RestoreOrder.CONSUMER, log)):
            manager.register(resource)
        await drop_and_reconnect(manager)
        assert manager.state is S.CONNECTED
    assert ("finish", "good", 1) in log
    assert recorder.events[1:3] == [
        ("not_restored", bad_begin, error),
        ("not_restored", bad_finish, refused),
    ]
    assert [e[0] for e in recorder.events] == [
        "started",
        "not_restored",
        "not_restored",
        "completed",
    ]


@pytest.mark.anyio
async def test_a_loss_while_staged_resources_finish_skips_the_rest_and_restores_all_again() -> None:
    log: list[tuple[object, ...]] = []

    async def lose_b(connection: FakeConnection, epoch: int) -> None:
        if epoch == 1:
            raise ConnectionLostError("died under the restore")

    async with running(Network()) as manager:
        manager.register(Staged("losing", RestoreOrder.CONSUMER, log, lose_b))
        manager.register(Staged("next", RestoreOrder.CONSUMER, log))
        connection, epoch = await drop_and_reconnect(manager)
        assert (connection.broker, epoch) == (C, 2)
    assert [entry for entry in log if entry[0] != "lost"] == [
        ("begin", "losing", 1),
        ("begin", "next", 1),
        ("finish", "losing", 1),  # "next" is not finished on the dead connection
        ("begin", "losing", 2),
        ("begin", "next", 2),
        ("finish", "losing", 2),
        ("finish", "next", 2),
    ]


async def _hang(connection: FakeConnection, epoch: int) -> None:
    await anyio.sleep_forever()


@pytest.mark.parametrize("how", ["drop", "raise", "report", "unanswered", "closed_by_peer"])
@pytest.mark.anyio
async def test_a_loss_during_restore_moves_on_to_the_next_attempt(how: str) -> None:
    network = Network()
    log: list[tuple[object, ...]] = []
    recorder = Recorder()

    async def lose_first_time(connection: FakeConnection, epoch: int) -> None:
        if epoch != 1:
            return
        if how == "drop":
            connection.drop()
            await anyio.sleep_forever()  # the manager cancels the restore
        elif how == "raise":
            raise ConnectionLostError("died under the restore")
        elif how == "unanswered":  # a paused broker: the Begin is never answered
            raise OpenTimeoutError("the broker did not answer the Begin")
        elif how == "closed_by_peer":  # what it cut off is raised before the watcher reports
            connection.drop(ConnectionLostError("closed by the broker"))
            raise AttachTimeoutError("cut off by the end")  # alone, not retriable (F14 above)
        else:
            manager.report_lost(epoch, ConnectionLostError("died"))
            await anyio.sleep_forever()

    async with running(network) as manager:
        manager.add_listener(recorder)
        manager.register(Res("session", 1, log))
        manager.register(Res("consumer", 3, log, lose_first_time))
        manager.register(Res("browser", 4, log))
        connection, epoch = await drop_and_reconnect(manager)
        assert (connection.broker, epoch) == (C, 2)
        assert network.opened[1].closed  # the connection lost during restore was closed
        stats = manager.statistics()
    assert log == [
        ("lost", "session", 0),
        ("lost", "consumer", 0),
        ("lost", "browser", 0),
        ("restore", "session", "b", 1),
        ("restore", "consumer", "b", 1),
        ("lost", "session", 1),
        ("lost", "consumer", 1),
        ("lost", "browser", 1),
        ("restore", "session", "c", 2),
        ("restore", "consumer", "c", 2),
        ("restore", "browser", "c", 2),
    ]
    assert [e[0] for e in recorder.events] == ["started", "completed"]
    assert recorder.events[1][1] == C
    assert stats.failovers == 1


@pytest.mark.anyio
async def test_a_loss_during_restore_with_no_attempt_left_gives_up() -> None:
    network = Network()
    recorder = Recorder()

    async def lose(connection: FakeConnection, epoch: int) -> None:
        raise ConnectionLostError("died under the restore")

    async with running(network, [A, B], FailoverPolicy(cyclecount=1, connect_delay=0.0)) as manager:
        manager.add_listener(recorder)
        manager.register(Res("consumer", 3, [], lose))
        network.down = {"a"}
        network.last.drop()
        await until(lambda: manager.state is S.FAILED)
        assert network.calls == ["a", "b", "a"]
        with pytest.raises(ConnectionFailedError) as info:
            await manager.wait_connected()
        assert isinstance(info.value.cause, OSError)
    assert [e[0] for e in recorder.events] == ["started", "failed"]


@pytest.mark.anyio
async def test_a_raising_connection_lost_hook_does_not_stop_failover(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Clumsy(Res):
        def connection_lost(self, epoch: int, cause: BaseException) -> None:
            raise RuntimeError("hook bug")

    log: list[tuple[object, ...]] = []
    async with running(Network()) as manager:
        manager.register(Clumsy("clumsy", 1, log))
        await drop_and_reconnect(manager)
    assert log == [("restore", "clumsy", "b", 1)]
    assert "hook bug" in caplog.text


# --- Listeners (F14) ---------------------------------------------------------------------------


@pytest.mark.anyio
async def test_F14_listeners_are_called_in_order_with_the_right_arguments() -> None:
    network = Network()
    log: list[tuple[object, ...]] = []
    first, second = Recorder(log, "first"), Recorder(log, "second")
    cause = ConnectionLostError("dropped")
    async with running(network) as manager:
        manager.add_listener(first)
        manager.add_listener(second)
        connection, _ = await drop_and_reconnect(manager, cause)
        stats = manager.statistics()
    assert [entry[:2] for entry in log] == [
        ("first", "started"),
        ("second", "started"),
        ("first", "completed"),
        ("second", "completed"),
    ]
    assert log[0][2] is cause
    _, _, broker, downtime = log[2]
    assert broker == connection.broker == B
    assert downtime == stats.last_downtime == 0.0  # virtual time: nothing was slept


@pytest.mark.anyio
async def test_F14_downtime_is_the_clock_time_from_the_loss_to_the_restored_connection() -> None:
    network = Network()
    recorder = Recorder()

    async def take_a_second(connection: FakeConnection, epoch: int) -> None:
        await network.clock.sleep(1.0)

    policy = FailoverPolicy(
        initial_delay=0.25, connect_delay=0.5, fast_period=0.0, backoff=1.0, jitter=0.0
    )
    async with running(network, [A, B, C], policy) as manager:  # the first connect waits too
        manager.add_listener(recorder)
        manager.register(Res("slow", RestoreOrder.SESSION, [], take_a_second))
        network.down = {"b"}
        await drop_and_reconnect(manager)
        stats = manager.statistics()
    # 0.25 before a; then 0.25 before b (refused), 0.5 before c, and 1.0 to restore.
    assert network.clock.sleeps == [0.25, 0.25, 0.5, 1.0]
    assert network.times == [0.25, 0.5, 1.0]
    assert recorder.events[1] == ("completed", C, 1.75)
    assert stats.last_downtime == 1.75


@pytest.mark.anyio
async def test_F14_failed_is_called_with_the_last_cause() -> None:
    network = Network()
    recorder = Recorder()
    async with running(network, [A, B], FailoverPolicy(cyclecount=1, connect_delay=0.0)) as manager:
        manager.add_listener(recorder)
        network.errors["a"] = OSError("last one")
        network.down = {"b"}
        network.last.drop()
        await until(lambda: manager.state is S.FAILED)
    assert [e[0] for e in recorder.events] == ["started", "failed"]
    assert str(recorder.events[1][1]) == "last one"


@pytest.mark.anyio
async def test_F14_a_raising_listener_is_logged_and_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = Recorder()
    async with running(Network()) as manager:
        manager.add_listener(Boom())
        manager.add_listener(recorder)
        await drop_and_reconnect(manager)
        assert manager.state is S.CONNECTED
    assert [e[0] for e in recorder.events] == ["started", "completed"]
    assert "listener bug: started" in caplog.text
    assert "listener bug: completed" in caplog.text


@pytest.mark.anyio
async def test_F14_a_listener_may_implement_only_some_callbacks() -> None:
    completed: list[BrokerURL] = []

    class OnlyCompleted:
        def failover_completed(self, broker: BrokerURL, downtime: float) -> None:
            completed.append(broker)

    async with running(Network()) as manager:
        manager.add_listener(OnlyCompleted())  # type: ignore[arg-type]
        await drop_and_reconnect(manager)
    assert completed == [B]


@pytest.mark.anyio
async def test_F14_a_removed_listener_is_not_called() -> None:
    recorder = Recorder()
    async with running(Network()) as manager:
        manager.add_listener(recorder)
        manager.remove_listener(recorder)
        manager.remove_listener(recorder)
        await drop_and_reconnect(manager)
    assert recorder.events == []


# --- Exchange (F12) ----------------------------------------------------------------------------

EXCHANGE = FailoverPolicy(method=FailoverMethod.EXCHANGE, connect_delay=0.0)


@pytest.mark.anyio
async def test_F12_exchange_uses_the_learned_list_on_the_next_failover() -> None:
    network = Network()
    async with running(network, [A], EXCHANGE) as manager:
        assert manager.learn_brokers([X, Y]) == (X, Y, A)
        assert manager.brokers == (X, Y, A)
        connection, _ = await drop_and_reconnect(manager)
        assert connection.broker == X
        # The lost broker is x: the walk starts after it.
        connection, _ = await drop_and_reconnect(manager)
        assert connection.broker == Y
        assert network.calls == ["a", "x", "y"]


@pytest.mark.anyio
async def test_F12_the_newest_list_wins() -> None:
    network = Network()
    async with running(network, [A], EXCHANGE) as manager:
        manager.learn_brokers([X])
        manager.learn_brokers([Y])
        assert manager.brokers == (Y, A)
        connection, _ = await drop_and_reconnect(manager)
        assert connection.broker == Y
        assert manager.statistics().brokers == (Y, A)


@pytest.mark.anyio
async def test_F12_no_downgrade_from_amqps_to_amqp() -> None:
    secure_a, plain_x, secure_y = BrokerURL("amqps", "a"), X, BrokerURL("amqps", "y")
    async with running(Network(), [secure_a], EXCHANGE) as manager:
        assert manager.learn_brokers([plain_x, secure_y]) == (secure_y, secure_a)
        # A list a plain amqp broker advertised keeps its plain entries.
        assert manager.learn_brokers([plain_x], source=A) == (plain_x, secure_a)


@pytest.mark.anyio
async def test_F12_a_list_learned_while_connecting_names_its_source() -> None:
    network = Network()
    manager: Manager

    async def connect(broker: BrokerURL) -> FakeConnection:
        connection = await network.connect(broker)
        manager.learn_brokers([BrokerURL("amqp", "x"), BrokerURL("amqps", "y")], source=broker)
        return connection

    with anyio.fail_after(HANG):
        async with make(network, [BrokerURL("amqps", "a")], EXCHANGE, connect=connect) as manager:
            assert manager.broker is None
            await manager.start()
            assert [b.host for b in manager.brokers] == ["y", "a"]


@pytest.mark.anyio
async def test_F12_other_methods_ignore_advertised_lists() -> None:
    network = Network()
    async with running(network, [A, B]) as manager:
        assert manager.learn_brokers([X]) == (A, B)
        connection, _ = await drop_and_reconnect(manager)
        assert connection.broker == B


@pytest.mark.anyio
async def test_F12_no_list_is_taken_once_the_connection_failed_or_closed() -> None:
    """No failover follows FAILED or CLOSED: a list learned or announced then is ignored, and
    ``brokers`` stays the list the last failover walked."""
    network = Network()
    async with running(network, [A], EXCHANGE) as manager:
        assert manager.learn_brokers([X]) == (X, A)
        network.last.drop(ResourceLockedError("another connection took the client id"))
        await until(lambda: manager.state is S.FAILED)
        assert manager.learn_brokers([Y]) == (X, A)
        assert manager.announce_brokers([Y], source=X) == (X, A)
        assert manager.brokers == (X, A)
    async with running(Network(), [A], EXCHANGE) as closing:
        assert closing.learn_brokers([X]) == (X, A)
    assert closing.state is S.CLOSED
    assert closing.learn_brokers([Y]) == (X, A)
    assert closing.announce_brokers([Y], source=X) == (X, A)
    assert closing.brokers == (X, A)


# --- Close -------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_close_during_failover_releases_waiters_and_cancels_the_connect() -> None:
    network = Network()
    recorder = Recorder()
    errors: list[BaseException] = []
    async with running(network) as manager:
        manager.add_listener(recorder)
        network.hold = anyio.Event()
        network.last.drop()
        await until(lambda: network.running == 1)

        async def waiter() -> None:
            try:
                await manager.wait_connected()
            except ClosedError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            await manager.close()
        assert manager.state is S.CLOSED
        await until(lambda: network.running == 0)  # the connect was cancelled
        assert len(errors) == 2
        await manager.close()  # idempotent
        with pytest.raises(ClosedError):
            await manager.wait_connected()
        with pytest.raises(ClosedError):
            manager.register(Res("late", 1, []))
    assert network.calls == ["a", "b"]
    assert [e[0] for e in recorder.events] == ["started"]


@pytest.mark.anyio
async def test_a_connection_opened_as_the_manager_closes_is_closed() -> None:
    """close() while the connector is finishing: the connection it returns is not leaked,
    and no listener hears of a failed failover."""
    network = Network()
    recorder = Recorder()
    late: list[FakeConnection] = []

    async def connect(broker: BrokerURL) -> FakeConnection:
        connection = await network.connect(broker)
        if broker == B:
            await manager.close()  # no checkpoint after this: the race, made exact
            late.append(connection)
        return connection

    with anyio.fail_after(HANG):
        async with make(network, [A, B], FAST, connect=connect) as manager:
            manager.add_listener(recorder)
            await manager.start()
            network.last.drop()
            await until(lambda: bool(late) and late[0].closed)
            await anyio.wait_all_tasks_blocked()
            assert manager.state is S.CLOSED
            assert manager.broker is None
    assert [e[0] for e in recorder.events] == ["started"]


@pytest.mark.anyio
async def test_close_while_connected_closes_the_connection_and_starts_no_failover() -> None:
    network = Network()
    recorder = Recorder()
    async with running(network) as manager:
        manager.add_listener(recorder)
        await manager.close()
        assert network.last.closed
        await anyio.wait_all_tasks_blocked()
        assert manager.state is S.CLOSED
        assert manager.statistics().broker is None
    assert network.calls == ["a"]
    assert recorder.events == []


@pytest.mark.anyio
async def test_close_during_restore_closes_the_new_connection() -> None:
    network = Network()
    async with running(network) as manager:
        manager.register(Res("stuck", 1, [], _hang))
        network.last.drop()
        await until(lambda: manager.state is S.RESTORING)
        await manager.close()
        assert network.last.broker == B and network.last.closed
        assert manager.state is S.CLOSED


@pytest.mark.anyio
async def test_leaving_async_with_closes() -> None:
    network = Network()
    async with running(network) as manager:
        pass
    assert manager.state is S.CLOSED
    assert network.last.closed


@pytest.mark.anyio
async def test_close_before_start() -> None:
    network = Network()
    with anyio.fail_after(HANG):
        async with make(network, [A]) as manager:
            await manager.close()
            with pytest.raises(ClosedError):
                await manager.start()
    assert network.calls == []


# --- Delays, statistics, logging ---------------------------------------------------------------


@pytest.mark.anyio
async def test_F5_the_plan_delays_are_slept() -> None:
    policy = FailoverPolicy(
        initial_delay=0.01,
        connect_delay=0.01,
        backoff=2.0,
        jitter=0.005,
        startup_cyclecount=2,
        fast_period=0.0,  # every attempt waits: no broker goes at once
    )
    expected = [a.delay for a in policy.attempts([A, B], startup=True, rng=random.Random(7))]
    network = Network(down={"a", "b"})
    with anyio.fail_after(HANG):
        async with make(network, [A, B], policy, rng=random.Random(7)) as manager:
            with pytest.raises(ConnectionFailedError):
                await manager.start()
    assert len(expected) == 4
    assert expected[2] > expected[1]  # the back-off grows
    assert network.clock.sleeps == expected  # each delay slept, exactly, in order
    assert network.times == list(itertools.accumulate(expected))  # each attempt right after


@pytest.mark.anyio
async def test_statistics_snapshot() -> None:
    network = Network(down={"a"})
    async with running(network) as manager:
        stats = manager.statistics()
        assert (stats.state, stats.broker, stats.epoch, stats.failovers) == (S.CONNECTED, B, 0, 0)
        assert (stats.last_downtime, stats.attempts, stats.brokers) == (None, 2, (A, B, C))
        await drop_and_reconnect(manager)
        after = manager.statistics()
        assert (after.state, after.broker, after.epoch, after.failovers) == (S.CONNECTED, C, 1, 1)
        assert after.attempts == 3
        assert after.last_downtime == 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.epoch = 3  # type: ignore[misc]


@pytest.mark.anyio
async def test_logs_never_show_passwords_and_warn_every_n_attempts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="haclient.failover")
    secret = BrokerURL("amqp", "a", username="u", password="s3cret-pw")
    policy = FailoverPolicy(connect_delay=0.0, retries=5, cyclecount=1, warn_after_attempts=2)
    network = Network(down={"a"})
    with anyio.fail_after(HANG):
        async with make(network, [secret], policy) as manager:
            with pytest.raises(ConnectionFailedError):
                await manager.start()
    assert "s3cret-pw" not in caplog.text
    assert "u:******@a" in caplog.text
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage().split(" failed (")[1][:1] for r in warnings] == ["2", "4"]
    assert all(r.name == "haclient.failover" for r in caplog.records)


class StateRecorder:
    """A listener with ``state_changed`` only (it is outside the protocol)."""

    def __init__(self) -> None:
        self.states: list[S] = []

    def state_changed(self, state: S) -> None:
        self.states.append(state)


@pytest.mark.anyio
async def test_item17_state_changed_tells_every_change_of_state_closing_included() -> None:
    """What the metrics' last-state-change time is made of: a failover between two scrapes
    still moves it."""
    network = Network()
    recorder = StateRecorder()
    manager = make(network, [A, B], FAST)
    manager.add_listener(recorder)
    with anyio.fail_after(HANG):
        async with manager:
            await manager.start()
            await drop_and_reconnect(manager)
            await manager.close()
    assert recorder.states == [S.CONNECTED, S.FAILING_OVER, S.RESTORING, S.CONNECTED, S.CLOSED]


# --- The reconnect schedule given as tenacity strategies -----------------------------------------


@pytest.mark.anyio
async def test_F5_a_tenacity_wait_and_stop_given_by_keyword_change_the_plan() -> None:
    network = Network(down={"a", "b", "c"})
    clock = network.clock
    manager = Manager(
        network.connect,
        [A, B, C],
        FailoverPolicy(),  # its own schedule would try for 3 s at 25 ms, then back off
        clock=clock,
        sleep=clock.sleep,
        reconnect_wait=tenacity.wait_exponential(multiplier=1, max=4),
        reconnect_stop=tenacity.stop_after_attempt(6),
    )
    with anyio.fail_after(HANG):
        async with manager:
            with pytest.raises(ConnectionFailedError):
                await manager.start()
    # One attempt is one broker, in the policy's order, pass after pass; the wait is asked
    # after each failed attempt (1, 2, 4, then capped), the stop after six.
    assert network.calls == ["a", "b", "c", "a", "b", "c"]
    assert clock.sleeps == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert network.times == [0.0, 1.0, 3.0, 7.0, 11.0, 15.0]


@pytest.mark.anyio
async def test_F5_a_tenacity_stop_ends_a_failover_on_the_virtual_clock() -> None:
    network = Network()
    clock = network.clock
    manager = Manager(
        network.connect,
        [A, B],
        FAST,
        clock=clock,
        sleep=clock.sleep,
        reconnect_wait=tenacity.wait_fixed(3),
        reconnect_stop=tenacity.stop_after_delay(10),
    )
    recorder = Recorder()
    manager.add_listener(recorder)
    with anyio.fail_after(HANG):
        async with manager:
            await manager.start()
            network.down = {"a", "b"}
            started = clock()
            network.last.drop()
            await until(lambda: manager.state is not S.CONNECTED)
            with pytest.raises(ConnectionFailedError):
                await manager.wait_connected()
    # tenacity's stop_after_delay: asked after each failure; the attempt at 9 s is not cut.
    times = [t - started for t in network.times[1:]]
    assert times == [0.0, 3.0, 6.0, 9.0, 12.0]
    assert [event[0] for event in recorder.events] == ["started", "failed"]


@pytest.mark.anyio
async def test_a_tenacity_wait_sees_the_retry_state_of_the_manager() -> None:
    seen: list[tuple[int, float | None, float, str]] = []

    def wait(state: tenacity.RetryCallState) -> float:
        assert state.outcome is not None
        error = state.outcome.exception()
        seen.append((state.attempt_number, state.seconds_since_start, state.idle_for, str(error)))
        return 0.5

    network = Network(down={"a", "b"})
    clock = network.clock
    manager = Manager(
        network.connect,
        [A, B],
        FAST,
        clock=clock,
        sleep=clock.sleep,
        reconnect_wait=wait,
        reconnect_stop=tenacity.stop_after_attempt(3),
    )
    with anyio.fail_after(HANG):
        async with manager:
            with pytest.raises(ConnectionFailedError):
                await manager.start()
    assert seen == [
        (1, 0.0, 0.0, "connection refused by a"),
        (2, 0.5, 0.5, "connection refused by b"),
        (3, 1.0, 1.0, "connection refused by a"),
    ]


def test_reconnect_strategies_must_be_callable() -> None:
    with pytest.raises(ConfigurationError, match="reconnect_wait must be a tenacity wait"):
        Manager(Network().connect, [A], reconnect_wait=5)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="reconnect_stop must be a tenacity stop"):
        Manager(Network().connect, [A], reconnect_stop=60)  # type: ignore[arg-type]


# --- Refusals of trust (F15) --------------------------------------------------------------------


def refuse(network: Network, *hosts: str) -> None:
    """Make each of ``hosts`` refuse the connection as a broker refuses our login or our TLS
    handshake: ``AuthenticationError``, naming the broker and the reason."""
    for host in hosts:
        network.errors[host] = AuthenticationError(f"{host} refused: unknown CA ({host})")


UNTIL_THE_BUDGET = FailoverPolicy(startup_cyclecount=None, give_up_after=10.0, jitter=0.0)


@pytest.mark.anyio
async def test_F15_a_broker_that_refuses_is_skipped_and_the_next_one_connects() -> None:
    network = Network()
    refuse(network, "a")
    async with running(network, [A, B, C]) as manager:
        assert manager.broker == B
        assert network.calls == ["a", "b"]
        assert network.clock.now == 0.0


@pytest.mark.anyio
async def test_F15_when_every_broker_refuses_the_connect_gives_up_at_once_naming_each() -> None:
    network = Network()
    refuse(network, "a", "b", "c")
    # Without F15 this plan would walk the list for the whole time budget (10 s).
    with anyio.fail_after(HANG):
        async with make(network, [A, B, C], UNTIL_THE_BUDGET) as manager:
            with pytest.raises(ConnectionFailedError) as info:
                await manager.start()
            assert manager.state is S.FAILED
    assert network.calls == ["a", "b", "c"]  # one pass, at once
    assert network.clock.now == 0.0
    cause = info.value.cause
    assert isinstance(cause, AuthenticationError) and not cause.retriable
    assert str(cause) == (
        "every broker refused the connection: amqp://a:5672: a refused: unknown CA (a); "
        "amqp://b:5672: b refused: unknown CA (b); amqp://c:5672: c refused: unknown CA (c)"
    )
    assert cause.__cause__ is network.errors["c"]  # chained from the last refusal
    assert info.value.__cause__ is cause
    assert set(info.value.failures) == {"amqp://a:5672", "amqp://b:5672", "amqp://c:5672"}
    # The message of the final error names each broker once, not the summary again.
    assert str(info.value).count("unknown CA (a)") == 1


@pytest.mark.anyio
async def test_F15_one_broker_that_refuses_gives_up_at_once_with_its_own_error() -> None:
    network = Network()
    refuse(network, "a")
    with anyio.fail_after(HANG):
        async with make(network, [A], UNTIL_THE_BUDGET) as manager:
            with pytest.raises(ConnectionFailedError) as info:
                await manager.start()
    assert network.calls == ["a"]
    assert info.value.cause is network.errors["a"]


@pytest.mark.anyio
async def test_F15_a_refusal_and_an_unreachable_broker_go_on_by_the_plan() -> None:
    network = Network(down={"b"})
    refuse(network, "a")
    with anyio.fail_after(HANG):
        async with make(network, [A, B], UNTIL_THE_BUDGET) as manager:
            with pytest.raises(ConnectionFailedError) as info:
                await manager.start()
    # Not every broker refused: the plan runs to the end of its time budget.
    assert network.clock.now == pytest.approx(10.0)
    assert len(network.calls) > 100 and set(network.calls) == {"a", "b"}
    # The last failure is the cause (F4), and the message names each broker's.
    assert info.value.cause is info.value.failures[f"amqp://{network.calls[-1]}:5672"]
    assert isinstance(info.value.failures["amqp://a:5672"], AuthenticationError)
    assert isinstance(info.value.failures["amqp://b:5672"], OSError)
    assert "unknown CA (a)" in str(info.value) and "refused by b" in str(info.value)


@pytest.mark.anyio
async def test_F15_a_broker_that_comes_back_after_refusals_elsewhere_is_connected() -> None:
    network = Network()
    refuse(network, "a")
    network.refusals["b"] = 3  # b is down for three attempts, then answers
    with anyio.fail_after(HANG):
        async with make(network, [A, B], UNTIL_THE_BUDGET) as manager:
            await manager.start()
            assert manager.broker == B
    assert network.calls == ["a", "b"] * 4


@pytest.mark.anyio
async def test_F15_after_a_refusal_the_next_broker_is_tried_without_the_wait() -> None:
    network = Network(down={"b"})
    refuse(network, "a")
    # Every attempt waits 1 s (no fast phase), except the one right after a refusal.
    policy = FailoverPolicy(
        startup_cyclecount=3, connect_delay=1.0, backoff=1.0, fast_period=0.0, jitter=0.0
    )
    with anyio.fail_after(HANG):
        async with make(network, [A, B], policy) as manager:
            with pytest.raises(ConnectionFailedError):
                await manager.start()
    assert network.calls == ["a", "b"] * 3
    assert network.times == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]


@pytest.mark.anyio
async def test_F15_during_a_failover_a_refusing_broker_is_skipped() -> None:
    network = Network()
    recorder = Recorder()
    async with running(network, [A, B, C]) as manager:
        manager.add_listener(recorder)
        refuse(network, "b")
        connection, epoch = await drop_and_reconnect(manager)
        assert (connection.broker, epoch) == (C, 1)
        assert network.calls == ["a", "b", "c"]
    assert [e[0] for e in recorder.events] == ["started", "completed"]


@pytest.mark.anyio
async def test_F15_during_a_failover_every_broker_refusing_gives_up_at_once() -> None:
    network = Network()
    recorder = Recorder()
    errors: list[ConnectionFailedError] = []
    async with running(network, [A, B, C], FailoverPolicy(jitter=0.0)) as manager:
        manager.add_listener(recorder)
        network.hold = anyio.Event()
        refuse(network, "a", "b", "c")
        network.clock.now = 1000.0
        network.last.drop()
        await until(lambda: manager.state is S.FAILING_OVER)

        async def waiter() -> None:
            try:
                await manager.wait_connected()
            except ConnectionFailedError as exc:
                errors.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            network.hold.set()
        assert manager.state is S.FAILED
    assert network.calls == ["a", "b", "c", "a"]  # the one pass after the loss of a
    assert network.clock.now == 1000.0  # at once, not after the two-minute budget
    (error,) = errors
    cause = error.cause
    assert isinstance(cause, AuthenticationError)
    assert str(cause).startswith("every broker refused the connection: amqp://b:5672: b refused")
    assert cause.__cause__ is network.errors["a"]
    assert [e[0] for e in recorder.events] == ["started", "failed"]
    assert recorder.events[1][1] is cause


@pytest.mark.anyio
async def test_F15_during_a_failover_refusals_and_a_dead_broker_go_on_until_the_budget() -> None:
    network = Network()
    policy = FailoverPolicy(give_up_after=5.0, jitter=0.0)
    async with running(network, [A, B, C], policy) as manager:
        refuse(network, "b", "c")
        network.down = {"a"}  # the broker just lost does not answer: not a refusal
        network.last.drop()
        await until(lambda: manager.state is S.FAILED)
        assert network.clock.now == pytest.approx(5.0)
        with pytest.raises(ConnectionFailedError) as info:
            await manager.wait_connected()
    assert isinstance(info.value.cause, OSError | AuthenticationError)
    assert len(network.calls) > 100


@pytest.mark.anyio
async def test_F15_a_refusal_that_retriable_calls_retriable_is_retried_as_any_failure() -> None:
    network = Network()
    refuse(network, "a", "b")
    clock = network.clock
    manager = Manager(
        network.connect,
        [A, B],
        UNTIL_THE_BUDGET,
        retriable=lambda error: True,
        clock=clock,
        sleep=clock.sleep,
    )
    with anyio.fail_after(HANG):
        async with manager:
            with pytest.raises(ConnectionFailedError):
                await manager.start()
    assert clock.now == pytest.approx(10.0)


@pytest.mark.anyio
async def test_F15_each_brokers_first_refusal_is_a_warning_with_the_broker_and_the_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="haclient.failover")
    network = Network(down={"b"})
    refuse(network, "a")
    policy = FailoverPolicy(startup_cyclecount=3, connect_delay=0.0, warn_after_attempts=0)
    with anyio.fail_after(HANG):
        async with make(network, [A, B], policy) as manager:
            with pytest.raises(ConnectionFailedError):
                await manager.start()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "attempt 1 to connect to amqp://a:5672 failed (1 failed so far): a refused: unknown CA (a)"
    ]


@pytest.mark.anyio
@pytest.mark.parametrize(("error", "warned"), [("not ready", False), ("refused", True)])
async def test_F5_a_broker_starting_up_is_no_warning_where_a_refusing_one_is(
    caplog: pytest.LogCaptureFixture, error: str, warned: bool
) -> None:
    """Twelve attempts on the restarted broker fail before it serves: dropped before any answer
    (``BrokerNotReadyError``, retried quickly for half a second) they are a broker starting up
    and count toward no ``warn_after_attempts`` warning; refused, they do."""
    network = Network()
    failing = {"left": 0}

    async def connect(broker: BrokerURL) -> FakeConnection:
        if broker.host == "b" and failing["left"] > 0:
            failing["left"] -= 1
            await anyio.lowlevel.checkpoint()
            if error == "not ready":
                raise BrokerNotReadyError("accepted, then closed before answering")
            raise OSError("connection refused by b")
        return await network.connect(broker)

    policy = FailoverPolicy(method=FailoverMethod.SINGLEBROKER, warn_after_attempts=10)
    with anyio.fail_after(HANG):
        async with make(network, [B], policy, connect=connect) as manager:
            await manager.start()
            failing["left"] = 12
            caplog.set_level(logging.INFO, logger="haclient.failover")
            connection, _ = await drop_and_reconnect(manager)
    assert connection.broker.host == "b"
    failed = [r for r in caplog.records if "to connect to" in r.getMessage()]
    assert len(failed) == 12
    warnings = [r for r in failed if r.levelno == logging.WARNING]
    assert bool(warnings) is warned
