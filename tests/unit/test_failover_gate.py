"""The gate of the logical connection on its own (failover.gate): state changes reported, the
connection handed out exactly while CONNECTED, waiters woken, and the errors they raise. Time
is virtual: a timeout costs no real time.
"""

from __future__ import annotations

import anyio
import pytest
from unitkit import A, E, S

from failover.gate import ConnectionGate
from failover.listeners import Listeners
from failover.policy import Attempt
from haclient.errors import (
    ClosedError,
    ConnectionFailedError,
    FailoverTimeoutError,
    IllegalStateError,
)

HANG = 5.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds
        await anyio.lowlevel.checkpoint()


class Changes(list[S]):
    """A listener that keeps every state the gate reports."""

    def state_changed(self, state: S) -> None:
        self.append(state)


def make() -> tuple[ConnectionGate[object], list[S]]:
    changes = Changes()
    listeners = Listeners()
    listeners.add(changes)
    clock = Clock()
    gate: ConnectionGate[object] = ConnectionGate(
        clock=clock, sleep=clock.sleep, listeners=listeners
    )
    return gate, changes


def test_open_exactly_while_connected_and_every_change_is_reported() -> None:
    gate, changes = make()
    connection = object()
    assert gate.connected_nowait() is None
    gate.open(connection, 0)
    assert gate.connected_nowait() == (connection, 0)
    gate.drop()
    gate.apply(E.LOST)
    assert gate.connected_nowait() is None
    gate.open(connection, 1)  # RESTORING: still closed to callers
    assert gate.connected_nowait() is None
    gate.apply(E.RESTORED)
    assert gate.connected_nowait() == (connection, 1)
    assert changes == [S.CONNECTED, S.FAILING_OVER, S.RESTORING, S.CONNECTED]


def test_closed_absorbs_what_comes_after_and_reports_nothing_more() -> None:
    gate, changes = make()
    gate.apply(E.CLOSE)
    gate.open(object(), 0)
    gate.apply(E.CLOSE)
    assert gate.state is S.CLOSED
    assert changes == [S.CLOSED]


@pytest.mark.anyio
async def test_waiters_are_woken_with_the_connection_or_the_error() -> None:
    gate, _ = make()
    gate.activate()
    connection = object()
    got: list[object] = []

    async def waiter() -> None:
        got.append(await gate.wait(None))

    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()
            gate.open(connection, 0)
    assert got == [(connection, 0)]
    gate.drop()
    gate.fail(OSError("refused"), {"amqp://a": OSError("refused")})
    with pytest.raises(ConnectionFailedError) as info:
        await gate.wait(None)
    assert str(info.value.cause) == "refused"
    gate.apply(E.CLOSE)
    with pytest.raises(ClosedError):
        await gate.wait(None)


@pytest.mark.anyio
async def test_a_timeout_names_the_attempt_under_way() -> None:
    gate, _ = make()
    gate.activate()
    gate.attempting(Attempt(0, A, 0.0, 3))
    with anyio.fail_after(HANG), pytest.raises(FailoverTimeoutError) as info:
        await gate.wait(2.0)
    assert "amqp://a" in str(info.value) and gate.state is S.CONNECTING


@pytest.mark.anyio
async def test_waiting_before_activate_is_a_usage_error() -> None:
    gate, _ = make()
    with pytest.raises(IllegalStateError, match="async with"):
        await gate.wait(None)
