"""Timers and the broker-wide settings of its queues (expiry, delays, redelivery limit).

How this works: a ``Scheduler`` runs as one task in the broker's task group (it dies with the
listener on ``stop()``/``kill()``). ``call_at(when, callback)`` files a callback under a wall-clock
time in milliseconds since the epoch (the unit of ``x-opt-delivery-time`` and
``absolute-expiry-time``); the task sleeps until the earliest one is due (an earlier new timer
wakes it), then runs every due callback. No polling: between timers it only waits.

A ``NodePolicy`` holds what every queue of one broker shares: the scheduler, the clock, where
expired messages go and the redelivery limits. The broker makes one at every start
(``broker_policy``) and hands it to its router, which passes it explicitly to every queue it
creates; a queue made without one (unit tests) takes a default one: no timers (delayed messages
then become visible at the next dispatch after their time), no expiry address, no redelivery
limit.

Rule: callbacks run on the broker's event loop, one at a time, and must not await or block.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    from chaos.broker.stored import StoredMessage

__all__ = [
    "NodePolicy",
    "Scheduler",
    "broker_policy",
    "wall_clock_ms",
]

log = logging.getLogger("chaos.broker")


def wall_clock_ms() -> float:
    """Now, in milliseconds since the epoch."""
    return time.time() * 1000.0


class Scheduler:
    """Callbacks at wall-clock times, run by ``run()`` (one task of the broker)."""

    def __init__(self, clock: Callable[[], float] = wall_clock_ms) -> None:
        self.clock = clock
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._ids = itertools.count()
        self._wake: anyio.Event | None = None

    def __len__(self) -> int:
        return len(self._timers)

    def call_at(self, when: float, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once at ``when`` (ms since the epoch; at once if past)."""
        timers = self._timers
        heapq.heappush(timers, (when, next(self._ids), callback))
        if timers[0][2] is callback and self._wake is not None:
            self._wake.set()  # a new earliest timer: the sleeping task must wake sooner

    def run_due(self) -> None:
        """Run every callback that is due now."""
        timers = self._timers
        now = self.clock()
        while timers and timers[0][0] <= now:
            _when, _id, callback = heapq.heappop(timers)
            try:
                callback()
            except Exception:  # a broken timer must not stop the others
                log.exception("a broker timer failed")

    async def run(self) -> None:
        """Run callbacks as they come due, forever (cancel the task to stop)."""
        while True:
            self.run_due()
            self._wake = wake = anyio.Event()
            timers = self._timers
            delay = (timers[0][0] - self.clock()) / 1000.0 if timers else math.inf
            with anyio.move_on_after(max(delay, 0.0)):
                await wake.wait()


@dataclass(slots=True)
class NodePolicy:
    """What all queues of one broker share.

    Args:
        scheduler: Timers for delayed messages (None: checked at dispatch only).
        clock: Wall-clock milliseconds since the epoch.
        expire: Takes a copy of each expired message (to the expiry address); None drops them.
        expiry_address: The name of the node ``expire`` sends to (its own messages never
            expire again).
        dead_letter_queue: The dead-letter queue's name (no redelivery limit of its own unless
            ``queue_policies`` names it).
        max_delivery_count: Default redelivery limit (None: unlimited); see ``max_deliveries``.
        queue_policies: Per-queue limits, by queue name, overriding ``max_delivery_count``.
        poison_undeliverable: A ``modified`` outcome with undeliverable-here dead-letters the
            message, as ActiveMQ 5.x takes it (a poison ack); otherwise the message stays,
            never again for that consumer.
    """

    scheduler: Scheduler | None = None
    clock: Callable[[], float] = wall_clock_ms
    expire: Callable[[StoredMessage], None] | None = None
    expiry_address: str | None = None
    dead_letter_queue: str | None = None
    max_delivery_count: int | None = None
    queue_policies: Mapping[str, int | None] = field(default_factory=dict)
    poison_undeliverable: bool = False

    def max_deliveries(self, queue: str) -> int | None:
        """The redelivery limit of ``queue``: a message whose delivery failed is dead-lettered
        instead of coming back once its delivery-count, after the failure's increment, reaches
        it (so it was delivered that many times). None: unlimited."""
        if queue in self.queue_policies:
            return self.queue_policies[queue]
        if queue == self.dead_letter_queue:
            return None
        return self.max_delivery_count


def broker_policy(
    *,
    dead_letter_queue: str,
    expiry_address: str | None = None,
    max_delivery_count: int | None = None,
    queue_policies: Mapping[str, int | None] | None = None,
    poison_undeliverable: bool = False,
) -> NodePolicy:
    """A new policy with its own scheduler, for a new router (the broker calls it at every start,
    before its router exists, and passes it as ``Router(policy=...)``; set ``expire`` with
    ``chaos.broker.router.expire_to`` once the router is made).

    Raises:
        ValueError: a redelivery limit below 1.
    """
    for limit in [max_delivery_count, *(queue_policies or {}).values()]:
        if limit is not None and limit < 1:
            raise ValueError(f"a redelivery limit must be at least 1, not {limit}")
    expiry_node = expiry_address
    for prefix in ("queue://", "topic://"):  # the node's name, as the router's kind_of has it
        if expiry_node is not None and expiry_node.startswith(prefix):
            expiry_node = expiry_node[len(prefix) :]
    policy = NodePolicy(
        scheduler=Scheduler(),
        expiry_address=expiry_node,
        dead_letter_queue=dead_letter_queue,
        max_delivery_count=max_delivery_count,
        queue_policies=dict(queue_policies or {}),
        poison_undeliverable=poison_undeliverable,
    )
    return policy
