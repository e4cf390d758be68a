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
back transaction) is not in the window: its redelivery must be handed out again.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

__all__ = ["DuplicateWindow"]


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
