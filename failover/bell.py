"""The bell of a port probe's waits: how the port watcher's thread wakes the task that waits.

How this works: a ``Bell`` is a socket pair. The thread rings ``theirs`` with one byte per wait
(``failover.ports``: accepted, refused or ran out); the wait reads its ring from ``ours``. A
probe keeps one bell for all its waits, one wait at a time, until ``close``.

Two ways to wait for the ring, the same outcome:

- given the event loop (asyncio's, ``reader_loop``), the loop watches ``ours`` from the first
  wait to ``close`` with one reader callback, which reads each ring as it comes and hands it to
  the wait under way (none: the ring is dropped, as a wait that ended before reading it would
  have left it). A wait is then one future: no registration with the loop's selector and none
  of anyio's wait set-up per wait (two ``epoll_ctl`` calls and ~40-70 us of the loop's CPU a
  wait on a 2-CPU VM, measured: bench/README.md, issue 39 item 14);
- otherwise (trio, or a caller's own ``wait_readable``), each wait waits with ``wait_readable``
  (which also ends at the wait's timeout) and then reads.

A ring that a wait did not read (it ended first: cancelled, or its port's ring came late) is
drained by the next wait before it starts (``drain_if_unread``), so that a wait reads only its
own ring: the thread rings a wait only until the watcher's ``remove`` returned.

Thread-safety: everything here runs on the event loop's thread, but ``close_soon`` (a
finalizer's, for a probe dropped without ``close``): it leaves the reader's removal and the
sockets' close to the loop (``call_soon_threadsafe``), whose selector must not be changed from
another thread or from within a collection.
"""

from __future__ import annotations

import asyncio
import math
import socket
from collections.abc import Awaitable, Callable

__all__ = ["Bell", "WaitReadable"]

#: Waits until a socket, given by its file descriptor, has bytes to read, or the given number of
#: seconds passed (``failover.supervisor.wait_readable``: anyio's ``wait_readable`` in a timeout).
WaitReadable = Callable[[int, float], Awaitable[None]]


class Bell:
    """One probe's bell (see the module docstring): ``theirs`` is the thread's end; ``wait``
    returns one wait's ring (``b""``: woken without one). On ``reader_loop`` (asyncio), the
    loop reads the rings; else ``wait_readable`` waits for each. ``close`` is idempotent."""

    def __init__(
        self,
        wait_readable: WaitReadable,
        reader_loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.ours, self.theirs = socket.socketpair()
        self.ours.setblocking(False)
        self.theirs.setblocking(False)
        self._wait_readable = wait_readable
        self._loop = reader_loop
        self._waiting: asyncio.Future[bytes] | None = None  # the wait under way (reader_loop)
        self._unread = False  # a wait ended before it read its ring
        self._closed = False
        if reader_loop is not None:
            try:
                reader_loop.add_reader(self.ours.fileno(), self._on_readable)
            except NotImplementedError:  # a loop without readers (Windows' proactor)
                self._loop = None

    async def wait(self, timeout: float = math.inf) -> bytes:
        """This wait's ring (one wait at a time); ``b""`` once ``timeout`` seconds passed
        without one. Interrupted (cancelled, or timed out), its ring, should the thread still
        ring it, is dropped or drained by the next wait."""
        if self._unread:
            self._drain()  # a ring the last wait, interrupted, left unread
        self._unread = True
        loop = self._loop
        if loop is None:
            await self._wait_readable(self.ours.fileno(), timeout)  # a number: the fast path
            try:
                rung = self.ours.recv(64)
            except (BlockingIOError, InterruptedError):  # timed out (or woken without a ring)
                return b""  # a ring that comes now is drained by the next wait
            self._unread = False
            return rung
        waiting: asyncio.Future[bytes] = loop.create_future()
        self._waiting = waiting
        timer = None if timeout == math.inf else loop.call_later(timeout, _time_out, waiting)
        try:
            rung = await waiting
        finally:
            self._waiting = None
            if timer is not None:
                timer.cancel()
        # read by the reader callback, or timed out: a ring that comes after the timeout (the
        # port accepted as the wait ended, before its remove() returned) is read there too,
        # and ends the next wait at once if it has begun (its attempt then goes at once, as it
        # should), or is dropped
        self._unread = False
        return rung

    def _on_readable(self) -> None:
        """The loop's reader callback: read a ring, hand it to the wait under way."""
        try:
            rung = self.ours.recv(64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # closed under it: close() removes the reader
            return
        waiting = self._waiting
        if waiting is not None and not waiting.done():
            waiting.set_result(rung)

    def _drain(self) -> None:
        while True:
            try:
                if not self.ours.recv(64):
                    return
            except (BlockingIOError, InterruptedError):
                return

    def close(self) -> None:
        """Stop the loop's reader and close both ends (idempotent; on the loop's thread)."""
        if self._closed:
            return
        self._closed = True
        if self._loop is not None:
            self._loop.remove_reader(self.ours.fileno())
        self._close_sockets()

    def close_soon(self) -> None:
        """``close``, from any thread (a finalizer): the loop's selector is changed on the
        loop, by a callback; a closed loop has no selector left, so then only the sockets."""
        if self._closed or self._loop is None:
            self.close()
            return
        try:
            self._loop.call_soon_threadsafe(self.close)
        except RuntimeError:  # the loop is closed, and its selector with it
            self._closed = True
            self._close_sockets()

    def _close_sockets(self) -> None:
        self.ours.close()
        self.theirs.close()


def _time_out(waiting: asyncio.Future[bytes]) -> None:
    """A timed wait's timer: it ends without a ring."""
    if not waiting.done():
        waiting.set_result(b"")
