"""The threads behind the blocking API: a connection's event loop and a session's dispatcher.

How this works: ``EventLoop`` runs one asyncio event loop in a thread of its own (an anyio
blocking portal). ``EventLoop.run(fn, ...)`` submits ``fn`` as one task on that loop and blocks
the calling thread until it finished. While it waits, a ``KeyboardInterrupt`` in the caller (Ctrl-C)
cancels the task, waits briefly until the task ended, and is raised again. The main thread waits
in short slices, because an interrupt (``_thread.interrupt_main``, or a SIGINT delivered to
another thread) does not wake a thread blocked on a lock; other threads never get
``KeyboardInterrupt`` and simply block. A call from the loop thread itself raises
``IllegalStateError`` at once (it would wait for itself forever).

``Dispatcher`` is a plain thread fed by a queue: a session's message listeners and completion
callbacks run on it, one at a time, never on the loop thread. It remembers which consumer's
listener it is running, so that a ``close()`` called from inside that listener can tell.
"""

from __future__ import annotations

import concurrent.futures
import functools
import inspect
import itertools
import logging
import queue
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, suppress
from typing import Any, ParamSpec, TypeVar

import anyio
import anyio.to_thread
from anyio.from_thread import BlockingPortal, start_blocking_portal

from haclient.errors import ClosedError, IllegalStateError

__all__ = ["Dispatcher", "EventLoop"]

log = logging.getLogger("haclient.sync")

P = ParamSpec("P")
T = TypeVar("T")

_POLL = 0.05
"""Seconds the main thread waits at a time, so that Ctrl-C is noticed promptly."""
_ABANDON_CHECK = 0.5
"""Seconds between a listener-waiting worker thread's checks that someone still waits."""
_CANCEL_GRACE = 5.0
"""Seconds a Ctrl-C'd call waits for its cancelled task to end before re-raising."""

_loop_numbers = itertools.count(1)


class EventLoop:
    """An asyncio event loop in a thread of its own, and the blocking calls into it.

    Thread-safety: every method may be called from any thread except the loop thread, where
    ``run``/``call`` raise ``IllegalStateError``.
    """

    def __init__(self) -> None:
        self._cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopped = False
        self._contexts: list[AbstractContextManager[Any]] = []

    @classmethod
    def start(cls) -> EventLoop:
        """Start the loop thread and return once its loop runs."""
        loop = cls()
        cm = start_blocking_portal("asyncio", name=f"haclient-loop-{next(_loop_numbers)}")
        loop._portal = cm.__enter__()
        loop._cm = cm
        loop._thread = loop._portal.call(threading.current_thread)
        return loop

    @property
    def thread_id(self) -> int | None:
        """The ident of the loop thread (None once stopped)."""
        return None if self._stopped or self._thread is None else self._thread.ident

    @property
    def stopped(self) -> bool:
        """True once ``stop()`` was called."""
        return self._stopped

    def in_loop_thread(self) -> bool:
        """True when called from the loop thread (compared by thread object: the OS reuses
        the ident of a thread that ended for a new one)."""
        return threading.current_thread() is self._thread

    def _check_caller(self) -> BlockingPortal:
        if self._stopped:  # first: a closed connection is closed, whichever thread asks
            raise ClosedError("the connection is closed")
        if self.in_loop_thread():
            raise IllegalStateError(
                "a blocking haclient call was made from the connection's own event-loop thread, "
                "where it would wait for itself forever: use haclient.aio on the loop, or make "
                "the call from another thread"
            )
        portal = self._portal
        if self._stopped or portal is None:
            raise ClosedError("the connection is closed")
        return portal

    def run(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run the coroutine function ``fn(*args, **kwargs)`` on the loop; block until it ends.

        Raises:
            IllegalStateError: called from the loop thread.
            ClosedError: the loop was stopped (the connection is closed), before or during
                the call.
            KeyboardInterrupt: Ctrl-C while waiting; the task was cancelled first.
            Whatever ``fn`` raised.
        """
        portal = self._check_caller()
        finished = threading.Event()

        async def task() -> T:
            try:
                return await fn(*args, **kwargs)
            finally:
                finished.set()

        try:
            future = portal.start_task_soon(task)
        except RuntimeError:  # the portal stopped meanwhile
            raise ClosedError("the connection is closed") from None
        return self._wait(future, finished)

    def run_close(
        self, fn: Callable[P, Awaitable[None]], /, *args: P.args, **kwargs: P.kwargs
    ) -> None:
        """``run`` for a ``close()``: nothing to do (no error) once the loop stopped, before or
        during the call, because the connection closed everything with it."""
        if self._stopped:
            return
        try:
            self.run(fn, *args, **kwargs)
        except ClosedError:
            if not self._stopped:
                raise

    def enter(self, context: AbstractAsyncContextManager[T]) -> T:
        """Enter the async context manager ``context`` in a task of the loop that keeps it
        open until ``stop()`` exits it (``BlockingPortal.wrap_async_context_manager``), so
        that what it starts (a connection's task group) is owned by that task.

        Raises:
            As ``run``; a Ctrl-C while entering is raised, and ``stop()`` cancels the entry.
        """
        portal = self._check_caller()
        wrapped = portal.wrap_async_context_manager(context)
        try:
            value = wrapped.__enter__()
        except RuntimeError as exc:
            if self._stopped:  # the portal stopped meanwhile
                raise ClosedError("the connection is closed") from exc
            raise
        with self._lock:
            self._contexts.append(wrapped)
        return value

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run the plain function ``fn(*args, **kwargs)`` on the loop thread; return its result.

        Raises:
            As ``run``.
        """

        async def task() -> T:
            return fn(*args, **kwargs)

        return self.run(task)

    def call_or_direct(self, fn: Callable[[], T]) -> T:
        """``call(fn)`` while the loop runs; ``fn()`` in this thread once it stopped (nothing
        runs on the loop any more) or when this is the loop thread."""
        if self._stopped or self.in_loop_thread():
            return fn()
        try:
            return self.call(fn)
        except ClosedError:
            if self._stopped:
                return fn()
            raise

    def _wait(self, future: concurrent.futures.Future[T], finished: threading.Event) -> T:
        try:
            if threading.current_thread() is threading.main_thread():
                while not future.done():
                    concurrent.futures.wait([future], timeout=_POLL)
            return future.result()
        except KeyboardInterrupt:
            if future.cancel():  # cancels the task on the loop (anyio's portal does)
                finished.wait(_CANCEL_GRACE)
            raise
        except concurrent.futures.CancelledError:
            raise ClosedError("the connection was closed while the call was waiting") from None

    def stop(self) -> None:
        """Exit the contexts ``enter`` entered (newest first), cancel what still runs on the
        loop, end the loop and join its thread. Idempotent.

        Raises:
            IllegalStateError: called from the loop thread.
        """
        self._check_caller_for_stop()
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        with self._lock:
            contexts, self._contexts = self._contexts, []
        for context in reversed(contexts):  # their tasks end before the loop does
            try:
                context.__exit__(None, None, None)
            except Exception:
                log.debug("leaving a context on the loop failed", exc_info=True)
        cm, portal = self._cm, self._portal
        self._cm = self._portal = None
        if portal is not None:
            with suppress(RuntimeError):  # already stopped
                portal.call(portal.stop, True)
        if cm is not None:
            cm.__exit__(None, None, None)  # joins the thread

    def _check_caller_for_stop(self) -> None:
        if self.in_loop_thread() and not self._stopped:
            raise IllegalStateError(
                "the connection cannot be closed from its own event-loop thread"
            )


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
        """The consumer whose listener the dispatcher thread runs now (read it only from
        that thread: see ``running``)."""

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
    dispatcher: Dispatcher,
    owner: object,
    fn: Callable[..., object],
    *args: Any,
) -> concurrent.futures.Future[None]:
    """Submit ``fn(*args)`` to ``dispatcher`` as the listener of ``owner``; the future completes
    when it returned (or raised). A job whose future was cancelled before it started is skipped."""
    future: concurrent.futures.Future[None] = concurrent.futures.Future()

    def job() -> None:
        if not future.set_running_or_notify_cancel():
            return
        dispatcher.current = owner
        try:
            result = fn(*args)
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
        Whatever the job raised.
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


def partial_run(loop: EventLoop, fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """A blocking callable that runs the coroutine function ``fn`` through ``loop`` (keyword
    arguments, such as ``timeout``, are passed on)."""
    return functools.partial(loop.run, fn)
