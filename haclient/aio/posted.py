"""Sends posted from another thread: queued without waiting, sent on the loop in order.

How this works: a NON_PERSISTENT send outside a transaction returns once the message is
queued (it is pipelined: a refusal is reported by a later call of the producer). From a thread
that is not the event loop's (the blocking API) waiting for the loop to queue it would cost a
thread hop per message and send every message alone. ``PostedSends.post`` (any thread) instead
appends the stamped message to a queue and, when no drain is under way, schedules one on the
loop. The drain hands each message to the producer's pipelined path at once and, when that
cannot be done (no credit, failing over), sends the head the general way in a task, then goes
on. So a thread sending many messages fills the queue while the loop sends them, in batches,
as the async API does. ``wait_drained`` lets the producer's other calls, and its close, go
after the posted sends.

Thread-safety: ``post``, ``raise_failure`` and ``__len__`` from any thread; the rest on the
loop. One lock guards the queue's "is a drain scheduled" flag against the drain ending.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio

from haclient.destination import Destination
from haclient.errors import ClosedError
from haclient.message import Message

__all__ = ["PostedSends"]

Schedule = Callable[[Callable[[], None]], None]
"""Runs a plain function on the event loop soon (``loop.call_soon_threadsafe``); raises
``ClosedError`` when the loop is gone."""


class PostedSends:
    """The queue of one producer's posted sends and its drain.

    Args:
        send_now: On the loop: queue one message for the socket without waiting; False when
            that cannot be done now.
        send_waiting: On the loop: send one message the general way (waits out failover).
        start_task: Start a coroutine function as a background task of the connection.
        closed: True once the producer is closed (what is still queued then is dropped, and
            the next call says so).
    """

    def __init__(
        self,
        send_now: Callable[[Destination, Message], bool],
        send_waiting: Callable[[Destination, Message], Awaitable[None]],
        start_task: Callable[[Callable[[], Coroutine[Any, Any, None]]], None],
        closed: Callable[[], bool],
    ) -> None:
        self._send_now = send_now
        self._send_waiting = send_waiting
        self._start_task = start_task
        self._closed = closed
        self._queue: deque[tuple[Destination, Message]] = deque()
        self._lock = threading.Lock()
        self._scheduled = False
        self._failures: deque[BaseException] = deque()
        self._drained: anyio.Event | None = None

    def __len__(self) -> int:
        """Messages posted and not yet handed to the connection."""
        return len(self._queue)

    def post(self, destination: Destination, message: Message, schedule: Schedule) -> None:
        """Queue ``message`` (stamped) for ``destination``; any thread, never waits.

        Raises:
            ClosedError: the event loop is gone (nothing was queued).
        """
        with self._lock:
            self._queue.append((destination, message))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            schedule(self._drain)
        except BaseException:
            with self._lock:
                self._queue.pop()
                self._scheduled = False
            raise

    def note_failure(self, error: BaseException) -> None:
        """On the loop: have the producer's next call raise ``error``."""
        self._failures.append(error)

    def raise_failure(self) -> None:
        """Raise the first failure of a posted send that was not reported yet; any thread."""
        if self._failures:
            raise self._failures.popleft()

    def _drain(self) -> None:
        """On the loop: hand the queued messages over, in order, as long as that needs no
        wait; the first that does continues in ``_drain_waiting``."""
        while True:
            with self._lock:
                if not self._queue:
                    self._scheduled = False
                    self._wake_waiters()
                    return
                destination, message = self._queue[0]
            if self._closed():
                self._drop_all(ClosedError("the producer was closed before the send went out"))
                return
            try:
                if not self._send_now(destination, message):
                    self._start_task(self._drain_waiting)
                    return
            except Exception as exc:
                self._failures.append(exc)
            self._queue.popleft()

    async def _drain_waiting(self) -> None:
        destination, message = self._queue[0]
        try:
            await self._send_waiting(destination, message)
        except Exception as exc:
            self._failures.append(exc)
        except BaseException:  # cancelled: the connection is going away
            self._drop_all(ClosedError("the connection closed before the send went out"))
            raise
        self._queue.popleft()
        self._drain()

    def _drop_all(self, error: ClosedError) -> None:
        with self._lock:
            dropped = len(self._queue)
            self._queue.clear()
            self._scheduled = False
        if dropped:
            self._failures.append(error)
        self._wake_waiters()

    def _wake_waiters(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None:
            drained.set()

    async def wait_drained(self) -> None:
        """On the loop: return once every message posted so far was handed over (or failed)."""
        while self._scheduled:
            if self._drained is None:
                self._drained = anyio.Event()
            await self._drained.wait()
