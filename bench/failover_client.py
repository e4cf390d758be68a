"""The client under test in the failover benches: a failover listener that notes when each
callback came, a sender of PERSISTENT messages, and the kill loop that runs between them.

``bench.failover`` (downtime and restore on independent brokers) and ``bench.failover_ha`` (the
default URL on a shared-store pair) both build on these, so neither imports the other.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol, TypeVar

import anyio

import haclient.aio as aio
from haclient.destination import Queue
from haclient.message import DeliveryMode, TextMessage
from haclient.modes import AckMode

__all__ = [
    "FAILOVER_TIMEOUT",
    "START_TIMEOUT",
    "STOP_TIMEOUT",
    "Recorder",
    "Sender",
    "kill_in_turn",
]

START_TIMEOUT = 30.0
"""Seconds a broker host may take to start serving."""
STOP_TIMEOUT = 10.0
"""Seconds a broker host may take to stop before it is killed."""
FAILOVER_TIMEOUT = 30.0
"""Seconds a failover may take before the bench calls it failed."""
SETTLE_SENDS = 50
SETTLE_SECONDS = 0.2


class Recorder:
    """A failover listener (F14) that notes when each callback came (``time.monotonic()``)."""

    def __init__(self) -> None:
        self.started: list[float] = []
        self.completed: list[tuple[float, str, float]] = []
        self.completed_cpu: list[float] = []
        """``time.process_time()`` at each failover_completed (this process's CPU)."""
        self.failed: list[str] = []
        self.not_restored: list[str] = []
        self._changed = anyio.Event()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    @property
    def changed(self) -> anyio.Event:
        """Set at the next change: take it before looking at the state, then wait on it."""
        return self._changed

    def failover_started(self, cause: BaseException) -> None:
        self.started.append(time.monotonic())
        self._wake()

    def failover_completed(self, broker: object, downtime: float) -> None:
        self.completed.append((time.monotonic(), str(broker), downtime))
        self.completed_cpu.append(time.process_time())
        self._wake()

    def failover_failed(self, cause: BaseException) -> None:
        self.failed.append(repr(cause))
        self._wake()

    def resource_not_restored(self, resource: object, error: BaseException) -> None:
        self.not_restored.append(f"{resource!r}: {error!r}")


class Sender:
    """Sends PERSISTENT messages in a loop; notes when the first send of each connection epoch
    completed."""

    def __init__(self, conn: aio.Connection, producer: aio.MessageProducer) -> None:
        self.conn = conn
        self.producer = producer
        self.sent = 0
        self.epoch = conn.statistics().epoch
        self.since_epoch = 0
        self.first_done: dict[int, float] = {}
        self.error: BaseException | None = None
        self._changed = anyio.Event()

    @classmethod
    @asynccontextmanager
    async def running(cls, conn: aio.Connection, queue: str) -> AsyncIterator[Sender]:
        """A sender of PERSISTENT messages to ``queue`` (on an AUTO session of ``conn``) that
        sends in a task of its own until the block ends."""
        session = await conn.create_session(AckMode.AUTO)
        producer = await session.create_producer(Queue(queue))
        producer.delivery_mode = DeliveryMode.PERSISTENT
        sender = cls(conn, producer)
        async with anyio.create_task_group() as tg:
            tg.start_soon(sender.run)
            yield sender
            tg.cancel_scope.cancel()

    async def run(self) -> None:
        try:
            while True:
                await self.producer.send(TextMessage(f"m-{self.sent:08d}"))
                done = time.monotonic()
                self.sent += 1
                epoch = self.conn.statistics().epoch
                if epoch != self.epoch:
                    self.epoch = epoch
                    self.since_epoch = 0
                    self.first_done.setdefault(epoch, done)
                    self._changed.set()
                    self._changed = anyio.Event()
                self.since_epoch += 1
        except Exception as exc:
            self.error = exc
            self._changed.set()

    def first_after(self, epoch: int) -> float | None:
        times = [t for e, t in self.first_done.items() if e > epoch]
        return min(times) if times else None

    @property
    def changed(self) -> anyio.Event:
        """Set at the next change: take it before looking at the state, then wait on it."""
        return self._changed

    async def settle(self) -> None:
        """Until the sender has done ``SETTLE_SENDS`` sends on the connection in use, and at
        least ``SETTLE_SECONDS`` passed (between kills: bounded polls are fine here)."""
        await anyio.sleep(SETTLE_SECONDS)
        with anyio.fail_after(FAILOVER_TIMEOUT):
            while self.since_epoch < SETTLE_SENDS and self.error is None:
                await anyio.sleep(0.01)


class _Outcome(Protocol):
    error: str | None


K = TypeVar("K", bound=_Outcome)


async def kill_in_turn(
    sender: Sender,
    kills: int,
    one_kill: Callable[[int], Awaitable[K]],
    done: list[K],
    report: Callable[[int, K], str],
    log: Any,
) -> str | None:
    """Kill ``kills`` times (``one_kill(number)``) while ``sender`` runs, letting its sends
    settle before each kill; each kill goes to ``done`` and its ``report`` line to ``log``.

    Returns why it stopped early (the sender or a kill failed), or None after the last kill.
    """
    for number in range(1, kills + 1):
        await sender.settle()
        if sender.error is not None:
            return f"stopped: the sender failed: {sender.error!r}"
        kill = await one_kill(number)
        done.append(kill)
        print(report(number, kill) + (f" ERROR {kill.error}" if kill.error else ""), file=log)
        if kill.error is not None:
            return f"stopped at kill {number}: {kill.error}"
    return None
