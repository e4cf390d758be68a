"""The soak: a PERSISTENT producer and an AUTO or a CLIENT consumer through 20 hard kills of the
serving broker of a shared-store HA pair, on the default URL (no failover option), then an
audit (rules F2, F3, F8, F9, F11, A1, A2 and the duplicate window).

What must hold: every message the broker accepted is received; no message is handed out again
after it was consumed (acknowledged, or its acknowledgement in doubt): the session's duplicate
window suppresses redeliveries and F11 re-sends; a CLIENT message whose acknowledge raised
F8's error (not in doubt) does come again, as it must; no send or receive blocked longer than
the failover it waited for (plus a margin for the loop). Bounded: about 10 s each on two cores.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import anyio
import pytest
from anyio.abc import TaskGroup, TaskStatus

import haclient.aio as aio
from chaos.broker import Broker
from chaos.net import free_port
from haclient.destination import Queue
from haclient.errors import AcknowledgeFailedError
from haclient.message import Message, TextMessage
from haclient.modes import AckMode

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

KILLS = 20
MESSAGES = 2000
MARGIN = 1.0  # seconds a blocked call may take beyond the failover it waited for


class Failovers:
    """A failover listener keeping each failover's window (monotonic start and end)."""

    def __init__(self) -> None:
        self.started: list[float] = []
        self.completed: list[float] = []

    def failover_started(self, cause: BaseException) -> None:
        self.started.append(time.monotonic())

    def failover_completed(self, broker: object, downtime: float) -> None:
        self.completed.append(time.monotonic())

    def failover_failed(self, cause: BaseException) -> None:
        raise AssertionError(f"failover gave up: {cause}")

    def resource_not_restored(self, resource: object, error: BaseException) -> None:
        raise AssertionError(f"{resource} not restored: {error}")

    def windows(self) -> list[tuple[float, float]]:
        return list(zip(self.started, self.completed, strict=False))


async def _serve(broker: Broker, *, task_status: TaskStatus[None]) -> None:
    task_status.started()
    async with broker:  # as standby it waits for the store's lock here
        await anyio.sleep_forever()


async def _kill_master(brokers: list[Broker], group: TaskGroup) -> None:
    master = next(b for b in brokers if b.running)
    await master.kill()
    standby = next(b for b in brokers if b is not master)
    with anyio.fail_after(10):
        while not standby.running:
            await anyio.sleep(0.005)
    group.start_soon(master.start)  # back as the new standby


def _overlap(call: tuple[float, float], window: tuple[float, float]) -> float:
    return max(0.0, min(call[1], window[1]) - max(call[0], window[0]))


class Consumed:
    """What the application saw: every hand-out, and the ids it consumed."""

    def __init__(self) -> None:
        self.handed: list[str] = []
        self.consumed: set[str] = set()
        self.again: list[str] = []  # handed out after it was consumed: a duplicate

    def hand_out(self, message: Message) -> str:
        message_id = str(message.message_id)
        if message_id in self.consumed:
            self.again.append(message_id)
        self.handed.append(message_id)
        return message_id


async def _consume_one(mode: AckMode, message: Message, seen: Consumed) -> None:
    message_id = seen.hand_out(message)
    if mode is AckMode.AUTO:
        seen.consumed.add(message_id)  # acknowledged (or in doubt) before receive returned
        return
    try:
        await message.acknowledge()
        seen.consumed.add(message_id)
    except AcknowledgeFailedError as error:  # F8: told; it comes again unless in doubt
        if error.in_doubt:
            seen.consumed.add(message_id)


@pytest.mark.parametrize("mode", [AckMode.AUTO, AckMode.CLIENT], ids=["auto", "client"])
async def test_twenty_kills_lose_nothing_hand_out_nothing_twice_and_block_no_longer_than_failover(
    tmp_path: Path, mode: AckMode
) -> None:
    store = tmp_path / "ha.sqlite"
    ports = (free_port(), free_port())
    brokers = [Broker(port=port, store=store, ha_poll_interval=0.02) for port in ports]
    url = f"failover:(amqp://127.0.0.1:{ports[0]},amqp://127.0.0.1:{ports[1]})"  # the defaults
    accepted: list[str] = []
    seen = Consumed()
    calls: list[tuple[float, float]] = []
    failovers = Failovers()
    kill_at = {MESSAGES * k // (KILLS + 1) for k in range(1, KILLS + 1)}  # evenly spread
    async with anyio.create_task_group() as brokers_group:
        await brokers_group.start(_serve, brokers[0])
        with anyio.fail_after(10):
            while not brokers[0].running:
                await anyio.sleep(0.01)
        await brokers_group.start(_serve, brokers[1])
        async with await aio.connect(url, client_id="soak") as connection:
            connection.add_listener(failovers)
            await connection.start()
            session = await connection.create_session()
            producer = await session.create_producer(Queue("soak"))
            consumer_session = await connection.create_session(mode)
            consumer = await consumer_session.create_consumer(Queue("soak"))

            async def consume() -> None:
                while len(seen.consumed) < MESSAGES:
                    began = time.monotonic()
                    message = await consumer.receive(timeout=30)
                    assert message is not None, f"no message after {len(seen.consumed)}"
                    await _consume_one(mode, message, seen)
                    calls.append((began, time.monotonic()))

            with anyio.fail_after(100):
                async with anyio.create_task_group() as work:
                    work.start_soon(consume)
                    for n in range(MESSAGES):
                        if n in kill_at:
                            await _kill_master(brokers, brokers_group)
                        message = TextMessage(f"soak {n}")
                        began = time.monotonic()
                        await producer.send(message)  # PERSISTENT: accepted when it returns
                        calls.append((began, time.monotonic()))
                        accepted.append(str(message.message_id))
        brokers_group.cancel_scope.cancel()

    counts = Counter(seen.handed)
    lost = [m for m in accepted if m not in seen.consumed]
    windows = failovers.windows()
    downtimes = sorted(end - start for start, end in windows)
    statistics = connection.statistics()
    print(
        f"\nsoak ({mode.name}): {len(accepted)} accepted, {len(seen.handed)} handed out "
        f"({len(counts)} distinct), {len(lost)} lost, {len(seen.again)} handed out again after "
        f"being consumed, {statistics.duplicates_suppressed} duplicates suppressed, "
        f"{len(windows)} failovers, downtime median "
        f"{1000 * downtimes[len(downtimes) // 2]:.0f} ms max {1000 * downtimes[-1]:.0f} ms"
    )
    assert lost == []
    assert seen.again == []  # the duplicate window kept every copy of a consumed message
    assert len(windows) == KILLS
    assert set(counts) <= set(accepted)  # nothing received that was not sent
    for call in calls:
        took = call[1] - call[0]
        if took > MARGIN:
            waited = sum(_overlap(call, window) for window in windows)
            assert waited > 0, f"a call blocked {took:.2f} s outside any failover"
            assert took <= waited + MARGIN, f"a call blocked {took:.2f} s for {waited:.2f} s"
