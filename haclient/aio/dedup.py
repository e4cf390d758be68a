"""``DuplicateWindow``: the message ids a session consumed lately, to suppress their duplicates.

How this works: a failover can make a message arrive twice. A PERSISTENT send cut off before
the broker's answer is sent again with the same id (F11), and the first copy may have been
stored after all. An acknowledgement cut off in flight may not have been applied, so the next
broker delivers the message again. The session remembers the ids of the messages it consumed
(handed out and acknowledged or committed, or whose acknowledgement is in doubt) for a while; a
consumer that meets one of them again acknowledges it and does not hand it out.

What it cannot catch, by design:
- a duplicate that arrives after its id left the window (more than ``size`` newer ids, or
  older than ``age`` seconds): size the window for the messages a session consumes in the
  longest failover plus the broker's redelivery delay;
- a duplicate consumed by another session, connection or process (the window is per session
  and in memory: a restarted process starts empty);
- messages without an id (a non-JMS sender's): they are always handed out.

A message that was handed out but not consumed (CLIENT mode before ``acknowledge()``, a rolled
back transaction) is not in the window: its redelivery must be handed out again. ``HandedOut``
keeps those instead, so that one that comes again after a failover is marked redelivered (F8).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

__all__ = ["DuplicateWindow", "HandedOut"]


class DuplicateWindow:
    """The ids of recently consumed messages, at most ``size`` and at most ``age`` seconds old."""

    def __init__(
        self, size: int, age: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._size = size
        self._age = age
        self._clock = clock
        self._ids: OrderedDict[str, float] = OrderedDict()

    def add(self, message_ids: Iterable[str | None]) -> None:
        """Remember ``message_ids`` (None: a message without an id, ignored) as consumed now."""
        now = self._clock()
        ids = self._ids
        for message_id in message_ids:
            if message_id is not None:
                ids[message_id] = now
                ids.move_to_end(message_id)
        while len(ids) > self._size:
            ids.popitem(last=False)

    def __contains__(self, message_id: object) -> bool:
        """Whether ``message_id`` was consumed within the window."""
        if message_id is None:
            return False
        self._expire()
        return message_id in self._ids

    def __len__(self) -> int:
        self._expire()
        return len(self._ids)

    def _expire(self) -> None:
        oldest = self._clock() - self._age
        ids = self._ids
        while ids:
            first = next(iter(ids))
            if ids[first] >= oldest:
                break
            del ids[first]


class HandedOut:
    """The keys of the messages a session handed out and has not seen consumed, each with the
    connection (epoch) that first delivered it and how often it was handed out: at most
    ``size``, the oldest forgotten first.

    A message that comes again on a later connection than the one that first delivered it was
    delivered before (F8), whatever the broker says: a new master of a shared-store pair, or
    RabbitMQ requeueing what a lost connection held, delivers it with a count of its own (not
    persisted, as in ActiveMQ 5.17 by default). Within one connection the broker's word stands
    (E4). Pure bookkeeping: the consumer marks the message (``deliveries_before``).
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._keys: OrderedDict[str, tuple[int, int]] = OrderedDict()  # key -> (epoch, times)

    def add(self, key: str | None, epoch: int) -> None:
        """The message of ``key`` (None: no id, ignored) is being handed out on ``epoch``."""
        if key is None:
            return
        first, times = self._keys.pop(key, (epoch, 0))
        self._keys[key] = (first, times + 1)
        while len(self._keys) > self._size:
            self._keys.popitem(last=False)

    def discard(self, keys: Iterable[str | None]) -> None:
        """These messages were consumed (acknowledged, committed): not outstanding any more."""
        for key in keys:
            if key is not None:
                self._keys.pop(key, None)

    def deliveries_before(self, key: str | None, epoch: int) -> int:
        """How often the message of ``key``, arriving on ``epoch``, was handed out since a
        connection before ``epoch`` first delivered it (0: it was not, or only on ``epoch``)."""
        entry = None if key is None else self._keys.get(key)
        if entry is None or entry[0] >= epoch:
            return 0
        return entry[1]

    def __len__(self) -> int:
        return len(self._keys)
