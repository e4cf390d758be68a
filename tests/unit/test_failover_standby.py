"""Ready connections of the failover manager: the return to a preferred broker (F16), the warm
spare (F17), and the broker list an Open announces (F12, ``failover.amqpOpenServerListAction``).

The decisions are pure functions of ``failover.states``, tested case by case; the manager is
driven with the in-memory connections and connector of ``test_failover_manager`` on its
virtual clock.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import anyio
import pytest
from test_failover_manager import (
    HANG,
    FakeConnection,
    Manager,
    Network,
    Recorder,
    Res,
    make,
    until,
)
from unitkit import A, B, C, S

from failover.errors import (
    AuthenticationError,
    ConfigurationError,
    ConnectionLostError,
    HAClientError,
    PreferredBrokerAvailable,
)
from failover.policy import FailoverMethod, FailoverPolicy
from failover.states import (
    announced_list,
    preferred_brokers,
    return_due,
    spare_target,
)
from failover.url import BrokerURL, parse_url
from haclient.options import CLIENT_OPTIONS

SECURE_A = BrokerURL("amqps", "a")


class Fatal(HAClientError):
    """A loss no reconnect fixes (the tests' ``retriable`` says so)."""


# --- Decisions ---------------------------------------------------------------------------------


def test_F16_the_preferred_brokers_are_the_first_or_those_named() -> None:
    assert preferred_brokers(FailoverPolicy(), [A, B, C]) == (A,)
    named = FailoverPolicy(priority_uris=("amqp://c:5672", "tcp://b:5672"))
    assert preferred_brokers(named, [A, B, C]) == (C, B)
    assert preferred_brokers(FailoverPolicy(priority_uris=("b",)), [A, B, C]) == (B,)
    with pytest.raises(ConfigurationError, match="priorityURIs"):
        preferred_brokers(FailoverPolicy(priority_uris=("amqp://d:5672",)), [A, B, C])


def test_F16_a_return_is_due_only_when_connected_to_a_broker_that_is_not_preferred() -> None:
    on = FailoverPolicy(priority_backup=True)
    assert return_due(on, S.CONNECTED, B, (A,))
    assert not return_due(on, S.CONNECTED, A, (A,))
    for state in (S.CONNECTING, S.FAILING_OVER, S.RESTORING, S.FAILED, S.CLOSED):
        assert not return_due(on, state, B, (A,))
    assert not return_due(FailoverPolicy(), S.CONNECTED, B, (A,))
    off = FailoverPolicy(priority_backup=True, method=FailoverMethod.NOFAILOVER)
    assert not return_due(off, S.CONNECTED, B, (A,))  # a return would end the connection


def test_F17_the_spare_goes_to_the_next_broker_of_the_plan() -> None:
    on = FailoverPolicy(backup=True)
    assert spare_target(on, [A, B, C], A) == B
    assert spare_target(on, [A, B, C], C) == A
    assert spare_target(on, [A, B, C], B, exclude=(C,)) == A
    assert spare_target(on, [A, B], B, exclude=(A,)) is None  # the probe is for A
    assert spare_target(on, [A], A) is None
    assert spare_target(FailoverPolicy(), [A, B], A) is None
    single = FailoverPolicy(backup=True, method=FailoverMethod.SINGLEBROKER)
    assert spare_target(single, [A], A) is None


def test_F12_an_announced_list_follows_amqp_open_server_list_action() -> None:
    def walk(action: str | None, method: FailoverMethod = FailoverMethod.ROUNDROBIN) -> object:
        policy = FailoverPolicy(method=method, open_server_list_action=action)
        return announced_list(policy, brokers=(A, B), seed=(A, B), announced=(C, B), source=A)

    assert walk(None) is None  # today's default: only exchange follows it
    assert walk(None, FailoverMethod.EXCHANGE) == (C, B, A)
    assert walk("ignore", FailoverMethod.EXCHANGE) is None
    assert walk("add") == (A, B, C)
    assert walk("replace") == (A, C, B)
    policy = FailoverPolicy(open_server_list_action="add")
    assert announced_list(policy, brokers=(A,), seed=(A,), announced=(), source=A) is None
    plain = BrokerURL("amqp", "d")
    secure = announced_list(
        FailoverPolicy(open_server_list_action="add"),
        brokers=(SECURE_A,),
        seed=(SECURE_A,),
        announced=(plain,),
        source=SECURE_A,
    )
    assert secure == (SECURE_A,)  # no downgrade to plain TCP


def test_the_new_options_read_from_a_url_and_print_back() -> None:
    url = parse_url(
        "failover:(amqp://a:5672,amqp://b:5672)?failover.priorityBackup=true"
        "&failover.priorityURIs=amqp://b:5672&failover.priorityBackupInterval=250"
        "&failover.backup=true&failover.amqpOpenServerListAction=REPLACE",
        options=CLIENT_OPTIONS,
    )
    policy = url.policy
    assert (policy.priority_backup, policy.backup) == (True, True)
    assert policy.priority_uris == ("amqp://b:5672",)
    assert policy.priority_backup_interval == 0.25
    assert policy.open_server_list_action == "replace"
    assert FailoverPolicy.from_options(policy.to_options()) == policy


# --- The manager -------------------------------------------------------------------------------

RETURNING = FailoverPolicy(connect_delay=0.0, priority_backup=True, priority_backup_interval=0.5)
SPARING = FailoverPolicy(connect_delay=0.0, backup=True)


@pytest.mark.anyio
async def test_F16_the_connection_returns_to_the_preferred_broker_as_a_planned_failover() -> None:
    network = Network(down={"a"})
    events: list[tuple[object, ...]] = []
    manager = make(network, [A, B], RETURNING)
    with anyio.fail_after(HANG):
        async with manager:
            manager.add_listener(Recorder(events))
            await manager.start()
            manager.register(Res("session", 1, events))
            assert manager.broker == B
            attempts = manager.statistics().attempts
            await until(lambda: network.calls.count("a") >= 3)  # probed, quietly
            assert events == []
            assert manager.statistics().attempts == attempts  # probes are no attempts
            network.down.clear()
            await until(lambda: manager.broker == A and manager.state is S.CONNECTED)
            stats = manager.statistics()
            assert (stats.failovers, stats.returns, stats.epoch) == (1, 1, 1)
            assert stats.attempts == attempts  # the probe's connection was taken
    started = [e for e in events if e[0] == "started"]
    assert len(started) == 1 and isinstance(started[0][1], PreferredBrokerAvailable)
    assert isinstance(started[0][1], ConnectionLostError)  # resources treat it as a loss
    assert ("lost", "session", 0) in events
    assert ("restore", "session", "a", 1) in events
    assert events[-1][:2] == ("completed", A)


@pytest.mark.anyio
async def test_F16_on_the_preferred_broker_nothing_is_probed() -> None:
    network = Network()
    manager = make(network, [A, B], RETURNING)
    with anyio.fail_after(HANG):
        async with manager:
            await manager.start()
            for _ in range(50):
                await anyio.sleep(0)
            assert network.calls == ["a"]


@pytest.mark.anyio
async def test_F17_a_failover_takes_the_spare_first_and_a_new_spare_follows() -> None:
    network = Network()
    manager = make(network, [A, B, C], SPARING)
    with anyio.fail_after(HANG):
        async with manager:
            await manager.start()
            await until(lambda: manager.statistics().standby == B)
            spare = network.last
            attempts = manager.statistics().attempts
            first, _ = await manager.wait_connected()
            first.drop()
            await until(lambda: manager.epoch == 1)
            connection, epoch = await manager.wait_connected()
            assert (connection, epoch) == (spare, 1)  # no attempt: the spare itself
            assert manager.statistics().attempts == attempts
            await until(lambda: manager.statistics().standby == C)


@pytest.mark.anyio
async def test_F17_a_list_announced_while_a_connection_is_adopted_moves_the_spare_at_once() -> None:
    # adopt runs while the supervisor carries out the actions of the connect, and returns the
    # broker's list: the supervisor feeds it to the machine after those actions, and the
    # spare follows it
    network = Network()
    policy = FailoverPolicy(
        backup=True, open_server_list_action="replace", jitter=0.0, fast_period=0.0
    )

    def adopt(connection: FakeConnection) -> list[BrokerURL]:
        return [C]

    manager = Manager(
        network.connect,
        [A, B],
        policy,
        clock=network.clock,
        sleep=network.clock.sleep,
        adopt=adopt,
    )
    with anyio.fail_after(HANG):
        async with manager:
            await manager.start()
            assert manager.brokers == (A, C)
            await until(lambda: manager.statistics().standby == C)
            # nothing else left open: the one in use (to A) and the spare (to C)
            await until(lambda: [c.broker for c in network.opened if not c.closed] == [A, C])


@pytest.mark.anyio
async def test_F17_a_spare_that_dies_starts_no_failover_and_is_opened_again() -> None:
    network = Network()
    events: list[tuple[object, ...]] = []
    manager = make(network, [A, B], SPARING)
    with anyio.fail_after(HANG):
        async with manager:
            manager.add_listener(Recorder(events))
            await manager.start()
            await until(lambda: manager.statistics().standby == B)
            spare = network.last
            network.down.add("b")
            spare.drop()
            await until(lambda: network.calls.count("b") >= 3)  # retried quietly
            network.down.clear()
            await until(lambda: manager.statistics().standby == B and network.last is not spare)
            assert manager.epoch == 0 and manager.state is S.CONNECTED
    assert events == []


@pytest.mark.anyio
async def test_F17_a_dead_spare_is_skipped_and_the_plan_walked() -> None:
    network = Network()
    manager = make(network, [A, B, C], SPARING)
    with anyio.fail_after(HANG):
        async with manager:
            await manager.start()
            await until(lambda: manager.statistics().standby == B)
            network.last.drop()  # the spare dies...
            first, _ = await manager.wait_connected()
            first.drop()  # ...and the connection in use with it, before it was opened again
            await until(lambda: manager.epoch == 1 and manager.state is S.CONNECTED)
            assert manager.broker in (B, C)


def _manager(network: Network, policy: FailoverPolicy, **hooks: Any) -> Manager:
    """A manager of [A, B] over ``network`` on its virtual clock, with ``hooks``."""
    clock = network.clock
    return Manager(network.connect, [A, B], policy, clock=clock, sleep=clock.sleep, **hooks)


@pytest.mark.anyio
async def test_F16_a_return_never_starts_while_a_commit_is_on_its_way() -> None:
    network = Network(down={"a"})
    committing = [True]
    manager = _manager(network, RETURNING, may_return=lambda: not committing[0])
    with anyio.fail_after(HANG):
        async with manager:
            await manager.start()
            network.down.clear()
            await until(lambda: len([c for c in network.opened if c.broker == A]) >= 3)
            assert manager.broker == B and manager.epoch == 0  # probes made, none switched
            probes = [c for c in network.opened if c.broker == A]
            await until(lambda: all(c.closed for c in probes[:-1]))  # each one closed
            committing[0] = False  # the commit's outcome came
            await until(lambda: manager.broker == A and manager.state is S.CONNECTED)
            assert manager.statistics().returns == 1


@pytest.mark.anyio
async def test_F17_the_spare_is_closed_when_failover_gives_up() -> None:
    network = Network()
    manager = _manager(network, SPARING, retriable=lambda exc: not isinstance(exc, Fatal))
    with anyio.fail_after(HANG):
        async with manager:
            await manager.start()
            await until(lambda: manager.statistics().standby == B)
            spare = network.last
            first, _ = await manager.wait_connected()
            first.drop(Fatal("no reconnect fixes this"))
            await until(lambda: manager.state is S.FAILED)
            await until(lambda: spare.closed)
            assert manager.statistics().standby is None


class _SlowClose(FakeConnection):
    """A connection whose close waits until every one of them is closing (``closing``)."""

    closing: ClassVar[list[FakeConnection]]
    all_closing: ClassVar[anyio.Event]

    async def close(self) -> None:
        self.closing.append(self)
        if len(self.closing) == 2:
            self.all_closing.set()
        await self.all_closing.wait()
        await super().close()


@pytest.mark.anyio
async def test_F17_close_closes_the_spare_and_the_connection_in_use_together() -> None:
    _SlowClose.closing, _SlowClose.all_closing = [], anyio.Event()
    network = Network()

    async def connect(broker: BrokerURL) -> FakeConnection:
        plain = await network.connect(broker)
        network.opened[-1] = slow = _SlowClose(plain.broker)
        return slow

    clock = network.clock
    manager = Manager(connect, [A, B], SPARING, clock=clock, sleep=clock.sleep)
    with anyio.fail_after(HANG):  # one after the other, the first close would wait 5 s
        async with manager:
            await manager.start()
            await until(lambda: manager.statistics().standby == B)
        assert [c.broker for c in _SlowClose.closing] == [A, B]
        assert all(c.closed for c in network.opened)


@pytest.mark.anyio
async def test_F16_a_probe_waiting_for_a_commit_is_closed_when_the_connection_closes() -> None:
    network = Network(down={"a"})
    manager = _manager(network, RETURNING, may_return=lambda: False)
    with anyio.fail_after(HANG):
        async with manager:
            await manager.start()
            network.down.clear()
            await until(lambda: any(c.broker == A for c in network.opened))
        assert all(c.closed for c in network.opened)  # the probe too, cut off as it waited


@pytest.mark.anyio
async def test_F16_a_preferred_broker_that_refuses_trust_is_a_warning_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    network = Network(down={"a"})
    manager = _manager(network, RETURNING)
    with anyio.fail_after(HANG):
        async with manager:
            await manager.start()
            network.down.clear()
            network.errors["a"] = AuthenticationError("the broker refused the login")
            with caplog.at_level(logging.DEBUG, logger="haclient.failover"):
                await until(lambda: network.calls.count("a") >= 4)
            assert manager.broker == B and manager.statistics().returns == 0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # once, not at every probe
    assert "preferred broker amqp://a:5672 refused" in warnings[0].getMessage()
