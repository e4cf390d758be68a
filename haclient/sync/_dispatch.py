"""A session's dispatcher thread, on which its listeners and completion callbacks run.

``Dispatcher`` is a plain thread fed by a queue: a session's message listeners and completion
callbacks run on it, one at a time, never on the loop thread. The application's functions stay
on this side: the blocking facade registers them here (``listeners`` by consumer handle,
``completions`` by send number, ``observers`` for a connection's failover events), and the
event loop tells the dispatcher only values: a message for a consumer's handle (``deliver``),
a send's number and error (``completed``), an event's name and arguments (``announce``). It
remembers which consumer's listener it is running, so that a ``close()`` called from inside
that listener can tell. ``wait_for_job`` lets the loop wait for such a job without blocking.
"""

from __future__ import annotations

import concurrent.futures
import functools
import inspect
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread

__all__ = ["Dispatcher", "run_listener_job", "wait_for_job"]

log = logging.getLogger("haclient.sync")

T = TypeVar("T")

_ABANDON_CHECK = 0.5
"""Seconds between a listener-waiting worker thread's checks that someone still waits."""


class Dispatcher:
    """One thread that runs submitted jobs in order (a session's thread of control).

    Started on the first ``submit``; ``stop()`` ends it after the jobs already queued.
    Thread-safety: every method may be called from any thread.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._queue: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopped = False
        self.current: object | None = None
        """The handle of the consumer whose listener the dispatcher thread runs now (read it
        only from that thread: see ``running``)."""
        self.listeners: dict[int, Callable[[Any], object]] = {}
        """Message listeners by consumer handle (set by the blocking consumer)."""
        self.completions: dict[int, Callable[[BaseException | None], None]] = {}
        """``send_async`` outcomes owed, by send number (set by the blocking producer)."""
        self.observers: list[Any] = []
        """A connection's failover listeners (the notifier's; set by the blocking connection)."""
        self.tracing: Any = None
        """The connection's tracing, when it traces: a listener runs in its ``process`` span."""

    @property
    def thread(self) -> threading.Thread | None:
        """The dispatcher thread, None until the first job."""
        return self._thread

    def is_current_thread(self) -> bool:
        """True when called from the dispatcher thread."""
        thread = self._thread
        return thread is not None and thread.ident == threading.get_ident()

    def running(self) -> object | None:
        """The consumer whose listener runs in the calling thread (None when the caller is
        not the dispatcher thread, or it runs no listener)."""
        return self.current if self.is_current_thread() else None

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on the dispatcher thread after the jobs queued before it. After ``stop``,
        the job runs on a thread of its own (a completion callback is still owed)."""
        with self._lock:
            if self._stopped:
                threading.Thread(target=self._guard, args=(job,), daemon=True).start()
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
                self._thread.start()
            self._queue.put(job)

    def deliver(
        self, handle: int, message: Any, trace: object = None
    ) -> concurrent.futures.Future[None]:
        """From the loop: run the listener of consumer ``handle`` with ``message`` (in the
        trace context ``trace``); the future completes when it returned (or raised)."""
        return run_listener_job(self, handle, message, trace)

    def completed(self, number: int, error: BaseException | None) -> None:
        """From the loop: the outcome of ``send_async`` number ``number``."""
        self.submit(functools.partial(self._complete, number, error))

    def _complete(self, number: int, error: BaseException | None) -> None:
        complete = self.completions.pop(number, None)
        if complete is not None:
            complete(error)

    def announce(self, name: str, args: tuple[Any, ...]) -> None:
        """From the loop: tell every observer that has ``name`` (a failover event). With none,
        nothing is queued (and no thread started): a connection without failover listeners
        has no notifier thread."""
        if self.observers:
            self.submit(functools.partial(self._announce, name, args))

    def _announce(self, name: str, args: tuple[Any, ...]) -> None:
        for observer in list(self.observers):
            method = getattr(observer, name, None)
            if method is not None:
                self._guard(functools.partial(method, *args))

    def _serve(self) -> None:
        while (job := self._queue.get()) is not None:
            self._guard(job)

    @staticmethod
    def _guard(job: Callable[[], None]) -> None:
        try:
            job()
        except Exception:
            log.exception("a callback run by the session's dispatcher thread raised")

    def stop(self) -> None:
        """Stop after the queued jobs; wait for that unless called from the dispatcher thread
        itself. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            thread = self._thread
            if thread is not None:
                self._queue.put(None)
        if thread is not None and thread.ident != threading.get_ident():
            thread.join()


def run_listener_job(
    dispatcher: Dispatcher, handle: int, message: Any, trace: object = None
) -> concurrent.futures.Future[None]:
    """Submit the listener of consumer ``handle`` with ``message`` to ``dispatcher``; the
    future completes when it returned (or raised). A job whose future was cancelled before it
    started is skipped; one whose consumer has no listener any more returns."""
    future: concurrent.futures.Future[None] = concurrent.futures.Future()

    def job() -> None:
        if not future.set_running_or_notify_cancel():
            return
        fn = dispatcher.listeners.get(handle)
        if fn is None:
            future.set_result(None)
            return
        tracing = dispatcher.tracing
        if tracing is not None and trace is not None:
            fn = tracing.bound_to(trace, fn)
        dispatcher.current = handle
        try:
            result = fn(message)
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                raise TypeError(
                    "a blocking message listener must be a plain function, not a coroutine "
                    "function (use haclient.aio for async listeners)"
                )
        except Exception as exc:
            future.set_exception(exc)
        except BaseException as exc:  # SystemExit & co: report, do not kill the dispatcher
            future.set_exception(RuntimeError(f"the listener raised {exc!r}"))
        else:
            future.set_result(None)
        finally:
            dispatcher.current = None

    dispatcher.submit(job)
    return future


async def wait_for_job(
    future: concurrent.futures.Future[T], limiter: anyio.CapacityLimiter | None = None
) -> T:
    """On the loop, wait for ``future`` (completed by another thread, e.g. a dispatcher job)
    without blocking the loop, on any anyio backend: a worker thread of ``limiter`` waits for
    it. Cancelling the wait cancels the future, so a job that has not started is skipped, and
    lets the worker go within a second even if the job never ends (worker threads are not
    daemons: one stuck on a hung listener would keep the process from exiting).

    Raises:
        Exception: whatever the job raised.
    """
    abandoned = threading.Event()

    def wait() -> T:
        while True:
            try:
                return future.result(timeout=_ABANDON_CHECK)
            except TimeoutError:
                if future.done():
                    raise  # the job's own TimeoutError
                if abandoned.is_set():
                    raise concurrent.futures.CancelledError from None

    try:
        return await anyio.to_thread.run_sync(wait, abandon_on_cancel=True, limiter=limiter)
    except anyio.get_cancelled_exc_class():
        abandoned.set()
        future.cancel()
        raise
