"""The worker thread of an async outbox or inbox: its database calls, one at a time, off the
event loop, at the cost of one thread hand-off each way.

How this works: ``DatabaseWorker.call(fn, *args)`` puts the call on a queue that one thread of
the worker's own takes calls from, in order; on asyncio the thread hands the outcome back with
``loop.call_soon_threadsafe`` to a future the caller awaits (about 25 us a call where
``anyio.to_thread.run_sync`` with a limiter takes about 100 us: measured by bench/outbox.py,
the inbox's per-message path); on trio it is ``anyio.to_thread.run_sync`` with a limiter of
one. The thread starts with the first call and ends after ``IDLE`` seconds without one.

A cancelled caller does not stop a call half way: the call ends in the thread (a transaction
commits or rolls back) and the cancellation is raised then, as ``anyio.to_thread.run_sync``
does it.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar

import anyio
import anyio.to_thread

__all__ = ["DatabaseWorker"]

T = TypeVar("T")

IDLE: Final = 10.0
"""Seconds the thread waits for a call before it ends (the next call starts another)."""

_Job = tuple[Callable[..., Any], tuple[Any, ...], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class DatabaseWorker:
    """Runs database calls in a thread of its own, one at a time, in the order of the calls."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._limiter: anyio.CapacityLimiter | None = None  # trio's path

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the worker's thread; its value, or what it raised."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio): anyio's own threads
            if self._limiter is None:
                self._limiter = anyio.CapacityLimiter(1)
            return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put((fn, args, loop, future))
        self._ensure_thread()
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if not future.done():  # the call goes on in the thread: wait for its end first
                with anyio.CancelScope(shield=True):
                    await asyncio.wait([future])
            raise

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"haclient-{self._name}", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                fn, args, loop, future = self._jobs.get(timeout=IDLE)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():  # a call put after the timeout finds a new thread
                        self._thread = None
                        return
                continue
            try:
                value = fn(*args)
            except BaseException as exc:  # handed to the caller
                _hand_back(loop, future, None, exc)
            else:
                _hand_back(loop, future, value, None)


def _hand_back(
    loop: asyncio.AbstractEventLoop,
    future: asyncio.Future[Any],
    value: Any,
    error: BaseException | None,
) -> None:
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
        loop.call_soon_threadsafe(_settle, future, value, error)


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
