"""One blocking connection's way into its event loop: calls, the held connection, and stop.

How this works: ``EventLoop`` is a connection's handle on a ``LoopThread`` (the process's shared
one, or a private one). ``run(fn, ...)`` makes the coroutine ``fn(...)`` one plain asyncio task
of that loop (made in the calling thread, which then wakes the loop: ``LoopThread.start_task``),
which stores its outcome and releases a lock the calling thread waits on. No portal task group,
cancel scope, ``concurrent.futures.Future`` or ``Condition`` per call: a blocking call costs one
wake-up of the loop and one of the caller.

While it waits, a ``KeyboardInterrupt`` in the caller (Ctrl-C) cancels the task, waits briefly
until it ended, and is raised again; one that comes while the task is being started cancels it
too (it never runs on as an orphan). The main thread waits in short slices, because an
interrupt (``_thread.interrupt_main``, or a SIGINT delivered to another thread) does not wake a
thread blocked on a lock; other threads never get ``KeyboardInterrupt`` and simply block. What
a SIGINT does is the process's SIGINT handler's choice: Python's default raises
``KeyboardInterrupt`` in the main thread, but a handler installed by someone else may take it
(trio's, while a trio run or guest run is alive, hands it to that run: the blocking call never
sees it). A
call from the loop thread itself raises ``IllegalStateError`` at once (it would wait for itself
forever).

``spawn(fn)`` starts a task of the connection's calls the same way without waiting for it (a
producer's outbox drain, ``haclient.sync._outbox``); ``stop()`` cancels it like a call's.

``open(open_in, close)`` opens what a connection holds (its ``aio`` connection) with its tasks
in the loop thread's host task group, so that none is free-standing, and keeps ``close`` for
``stop()``. ``stop()`` closes it, cancels this connection's calls still running (they raise
``ClosedError``) and, for a private loop, ends the loop thread.

In a process forked from the one that opened the connection, its loop thread does not run
(``LoopThread.forked``): every call raises ``IllegalStateError`` naming the fork, and
``stop()`` only marks it stopped, touching nothing the parent still uses.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from _thread import allocate_lock, get_ident
from collections.abc import Awaitable, Callable, Coroutine
from types import CoroutineType
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, cast

from anyio.abc import TaskGroup

from haclient.errors import ClosedError, HAClientError, IllegalStateError
from haclient.sync._runtime import LoopThread, log, shared_loop

if TYPE_CHECKING:
    from haclient.aio.tracing import Tracing

__all__ = ["EventLoop", "partial_run"]

P = ParamSpec("P")
T = TypeVar("T")

_POLL = 0.05
"""Seconds the main thread waits at a time, so that Ctrl-C is noticed promptly."""
_CANCEL_GRACE = 5.0
"""Seconds a Ctrl-C'd call waits for its cancelled task to end before re-raising."""
_MAIN_THREAD_IDENT = threading.main_thread().ident


class _Call(Generic[T]):
    """One blocking call: a coroutine run as a task on the loop, its outcome, and the lock
    the caller waits on (released once the outcome is stored)."""

    __slots__ = ("_cancelled", "_coro", "_done", "_error", "_owner", "_task", "_value")

    def __init__(self, owner: EventLoop, coro: Coroutine[Any, Any, T]) -> None:
        self._owner = owner
        self._coro = coro
        self._done = done = allocate_lock()
        done.acquire()
        self._value: T | None = None
        self._error: BaseException | None = None
        self._task: asyncio.Task[Any] | None = None
        self._cancelled = False

    def start(self) -> None:
        """On the loop: run the coroutine as a task of its own."""
        asyncio.get_running_loop().create_task(self._run())

    def start_from_caller(self, loop_thread: LoopThread) -> bool:
        """In the caller's thread: run the coroutine as a task made here (see
        ``LoopThread.start_task``); False, with nothing done, when ``start`` must do it.

        Raises:
            RuntimeError: the loop has stopped.
        """
        return loop_thread.start_task(self._run) is not None

    async def _run(self) -> None:
        """The task (its first step runs on the loop, like all of it: ``_tasks`` and
        ``_task`` are the loop's alone)."""
        tasks = self._owner._tasks
        self._task = task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            if self._cancelled or (self._owner._stopped and self._owner._refuse_calls):
                self._coro.close()
                raise asyncio.CancelledError
            self._value = await self._coro
        except BaseException as exc:
            self._error = exc
        finally:
            tasks.discard(task)
            self._done.release()

    def cancel(self) -> None:
        """On the loop: cancel the task (or, not started yet, never start it)."""
        self._cancelled = True
        if self._task is not None:
            self._task.cancel()

    def wait(self) -> None:
        """In the caller's thread: block until the outcome is stored."""
        if get_ident() == _MAIN_THREAD_IDENT:
            while not self._done.acquire(timeout=_POLL):
                pass
        else:
            self._done.acquire()

    def wait_briefly(self, seconds: float) -> bool:
        """Block at most ``seconds`` for the outcome; True when it is stored."""
        return self._done.acquire(timeout=seconds)

    def outcome(self) -> tuple[T | None, BaseException | None]:
        """The coroutine's result and None, or None and the error the caller raises: what it
        raised (``ClosedError`` for a call that the connection's close cancelled). An
        ``HAClientError`` comes without the loop thread's frames: it says what failed, and
        the async core's frames would only bury that in what the application prints (the
        caller raises it, so its traceback starts again there); anything else (a bug) keeps
        them."""
        error = self._error
        if error is None:
            return self._value, None
        self._error = None  # no cycle through the traceback
        if isinstance(error, asyncio.CancelledError):
            return None, ClosedError("the connection was closed while the call was waiting")
        if isinstance(error, HAClientError):
            return None, error.with_traceback(None)
        return None, error


class EventLoop:
    """A connection's handle on an event-loop thread, and the blocking calls into it.

    Thread-safety: every method may be called from any thread except the loop thread, where
    ``run``/``call``/``open`` raise ``IllegalStateError``.
    """

    def __init__(self, loop_thread: LoopThread, *, private: bool) -> None:
        self._thread = loop_thread
        self._private = private
        self._lock = threading.Lock()
        self._stopped = False
        self._refuse_calls = False
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        """This connection's call tasks running now; only the loop thread touches it."""
        self.tracing: Tracing | None = None
        """The connection's tracing, when it traces: each call runs in its caller's trace
        context, and a listener in its ``process`` span (haclient.aio.tracing)."""

    @classmethod
    def start(cls, *, private: bool = False) -> EventLoop:
        """A handle on the process's shared loop thread (started on first use), or on a loop
        thread of its own with ``private=True`` (started now, ended by ``stop()``)."""
        if private:
            return cls(LoopThread.start(), private=True)
        return cls(shared_loop(), private=False)

    @property
    def private(self) -> bool:
        """True when this connection has its loop thread to itself."""
        return self._private

    @property
    def thread_id(self) -> int | None:
        """The ident of the loop thread (None once stopped)."""
        return None if self._stopped else self._thread.thread.ident

    @property
    def stopped(self) -> bool:
        """True once ``stop()`` was called."""
        return self._stopped

    def in_loop_thread(self) -> bool:
        """True when called from the loop thread (compared by thread object: the OS reuses
        the ident of a thread that ended for a new one)."""
        return self._thread.in_thread()

    def check_caller(self) -> None:
        """Raise unless a blocking call may be made from this thread now.

        Raises:
            ClosedError: the connection is closed.
            IllegalStateError: this is the loop thread, or a process forked after the
                connection was opened.
        """
        if self._thread.forked:  # first: closed or not, it is the parent's
            raise IllegalStateError(
                "this connection was opened before the process forked: its event-loop thread "
                "and its sockets belong to the parent process; open a new connection in the "
                "child (multiprocessing: in each worker, or use the 'spawn' start method)"
            )
        if self._stopped:  # a closed connection is closed, whichever thread asks
            raise ClosedError("the connection is closed")
        if self._thread.in_thread():
            raise IllegalStateError(
                "a blocking haclient call was made from the connection's own event-loop thread, "
                "where it would wait for itself forever: use haclient.aio on the loop, or make "
                "the call from another thread"
            )

    def run(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run the coroutine function ``fn(*args, **kwargs)`` on the loop; block until it ends.

        Raises:
            IllegalStateError: called from the loop thread.
            ClosedError: the connection is closed, before or during the call.
            KeyboardInterrupt: Ctrl-C while waiting; the task was cancelled first.
            Exception: whatever ``fn`` raised.
        """
        self.check_caller()
        coro = _as_coroutine(fn(*args, **kwargs))
        return self._run(coro if self.tracing is None else self.tracing.carried(coro))

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        call = _Call(self, coro)
        try:  # an interrupt from here on cancels the call, started or not (never an orphan)
            try:
                if not call.start_from_caller(self._thread):
                    self._thread.submit(call.start)
            except RuntimeError:  # the loop stopped meanwhile
                coro.close()
                raise ClosedError("the connection is closed") from None
            call.wait()
        except KeyboardInterrupt:
            try:
                self._thread.submit(call.cancel)
            except RuntimeError:
                pass
            else:
                call.wait_briefly(_CANCEL_GRACE)
            raise
        value, error = call.outcome()
        if error is not None:  # raised here: one frame fewer in the caller's traceback
            raise error
        return value  # type: ignore[return-value]

    def run_close(
        self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T | None:
        """``run`` for a ``close()`` (what ``fn`` returns, or None): nothing to do (no error)
        once the connection is closed,
        before or during the call, because it closed everything with it; nothing either in a
        process forked after the connection was opened (the parent's to close)."""
        if self._stopped or self._thread.forked:
            return None
        try:
            return self.run(fn, *args, **kwargs)
        except ClosedError:
            if not self._stopped:
                raise
            return None

    def call(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run the plain function ``fn(*args, **kwargs)`` on the loop thread; return its result.

        Raises:
            IllegalStateError: called from the loop thread (as ``run``).
            ClosedError: the connection is closed, before or during the call.
            KeyboardInterrupt: Ctrl-C while waiting; the task was cancelled first.
            Exception: whatever ``fn`` raised.
        """

        async def task() -> T:
            return fn(*args, **kwargs)

        return self.run(task)

    def spawn(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """From any thread but the loop's: run ``fn()`` as a task of this connection's calls
        (``stop()`` cancels it, as it cancels a blocking call's), made in the calling thread
        so that it runs in the loop's next turn (``LoopThread.start_task``: one wake-up).

        Raises:
            ClosedError: the connection is closed.
        """
        if self._stopped:
            raise ClosedError("the connection is closed")
        try:
            if self._thread.start_task(functools.partial(self._tracked, fn)) is None:
                self._thread.submit(self._spawn_here, fn)  # asyncio's debug mode
        except RuntimeError:
            raise ClosedError("the connection is closed") from None

    def _spawn_here(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        asyncio.get_running_loop().create_task(self._tracked(fn))

    async def _tracked(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await fn()
        finally:
            self._tasks.discard(task)

    def call_soon(self, callback: Callable[[], object]) -> None:
        """Run the plain function ``callback()`` on the loop thread soon; never waits.

        Raises:
            ClosedError: the connection is closed.
        """
        if self._stopped:
            raise ClosedError("the connection is closed")
        try:
            self._thread.submit(callback)
        except RuntimeError:
            raise ClosedError("the connection is closed") from None

    def call_or_direct(self, fn: Callable[[], T]) -> T:
        """``call(fn)`` while the connection is open; ``fn()`` in this thread once it is closed
        (nothing of it runs on the loop any more) or when this is the loop thread."""
        if self._stopped or self._thread.in_thread():
            return fn()
        self.check_caller()  # a forked child's inherited connection
        try:
            return self.call(fn)
        except ClosedError:
            if self._stopped:
                return fn()
            raise

    def open(
        self,
        open_in: Callable[[TaskGroup], Awaitable[T]],
        close: Callable[[T], Awaitable[None]],
    ) -> T:
        """Run ``open_in(host)`` on the loop, ``host`` being the loop thread's host task group,
        in which what it opens keeps its tasks (none is free-standing); return what it opened,
        which ``stop()`` closes with ``close(value)``.

        Raises:
            IllegalStateError: called from the loop thread (as ``run``).
            ClosedError: the connection is closed, before or during the call.
            KeyboardInterrupt: Ctrl-C while opening; the opening is cancelled first.
        """
        self.check_caller()
        return self._run(self._open(open_in, close))

    async def _open(
        self,
        open_in: Callable[[TaskGroup], Awaitable[T]],
        close: Callable[[T], Awaitable[None]],
    ) -> T:
        value = await open_in(self._thread.host_group)
        with self._lock:
            stopped = self._stopped
            if not stopped:
                self._closers.append(functools.partial(close, value))
        if stopped:  # stop() came while it opened: it closed what it knew of, not this
            await close(value)
            raise ClosedError("the connection was closed while it opened")
        return value

    def stop(self, timeout: float | None = None) -> None:
        """Close what ``open`` opened (newest first), cancel this connection's calls still
        running on the loop and, for a private loop, end its thread. Idempotent. With
        ``timeout``, waits at most that long for the closing, then drops what is left.

        Raises:
            IllegalStateError: called from the loop thread.
        """
        if self._thread.in_thread() and not self._stopped:
            raise IllegalStateError(
                "the connection cannot be closed from its own event-loop thread"
            )
        if not self._begin_stop() or self._thread.forked:
            return
        call = _Call(self, self._shut_down())
        try:
            self._thread.submit(call.start)
        except RuntimeError:  # the loop thread ended already
            call._coro.close()
            return
        if timeout is None:
            call.wait()
        elif not call.wait_briefly(timeout):
            log.warning("closing the connection took longer than %.1f s: dropped it", timeout)
        if self._private:
            self._thread.stop()

    def stop_soon(self) -> None:
        """``stop()`` without waiting, from any thread (the garbage collector's ``__del__``)."""
        if not self._begin_stop() or self._thread.forked:
            return
        call = _Call(self, self._shut_down(end_private_loop=True))
        try:
            self._thread.submit(call.start)
        except RuntimeError:
            call._coro.close()

    def _begin_stop(self) -> bool:
        with self._lock:
            if self._stopped:
                return False
            self._stopped = True
            return True

    async def _shut_down(self, *, end_private_loop: bool = False) -> None:
        with self._lock:
            closers, self._closers = self._closers, []
        for close in reversed(closers):  # their tasks end before the calls are cancelled
            try:
                await close()
            except Exception:
                log.debug("closing on the loop failed", exc_info=True)
        self._refuse_calls = True
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        if end_private_loop and self._private:
            self._thread.stop()


def _as_coroutine(awaitable: Awaitable[T]) -> Coroutine[Any, Any, T]:
    if type(awaitable) is CoroutineType or isinstance(awaitable, Coroutine):  # the first: fast
        return cast(Coroutine[Any, Any, T], awaitable)

    async def wrapper() -> T:
        return await awaitable

    return wrapper()


def partial_run(loop: EventLoop, fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """A blocking callable that runs the coroutine function ``fn`` through ``loop`` (keyword
    arguments, such as ``timeout``, are passed on)."""
    return functools.partial(loop.run, fn)
