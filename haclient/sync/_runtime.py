"""The event-loop threads behind the blocking API, and what happens to them at exit.

How this works: a ``LoopThread`` runs one asyncio event loop (under ``anyio.run``) in a daemon
thread. Its main task holds a task group, the *host*, in which long-lived tasks are started
(each blocking connection's background tasks), so that none is free-standing. By default every
blocking connection of the process lives on one shared ``LoopThread`` (``shared_loop()``,
started on first use); a connection opened with ``private_loop=True`` gets one of its own,
stopped when it closes.

At interpreter exit the connections an application never closed must not keep the process
alive. The loop threads are daemons, so they never hold up the exit themselves, and an exit
hook (``threading._register_atexit``: it runs before the interpreter waits for non-daemon
threads, so a thread blocked in ``receive()`` is released too) closes every connection still
open, each bounded by its ``close_timeout``, with a ``ResourceWarning`` naming it, as unclosed
files and sockets get.

A connection opened with ``jms.useDaemonThread=false`` (Qpid JMS's default, not this client's)
keeps the process alive while it is open instead, as a Java connection's non-daemon threads keep
the JVM alive: ``keep_alive`` starts a non-daemon *keeper* thread that holds the connection and
ends when it is closed. The interpreter joins that thread before it exits, so the exit hook
leaves such connections (and the shared loop they run on) alone; when the last keeper ends after
the hook ran, it runs the hook again for what is left.

A process forked after connections were used (``os.fork``, ``multiprocessing``'s 'fork' start
method) inherits the loop objects but none of their threads. ``os.register_at_fork`` marks
every inherited ``LoopThread`` as forked in the child (``forked``: it runs nothing there, and
nothing is ever submitted to it, whose wake-up would write to the parent's loop's socket) and
forgets the shared one, so that the child's first connection starts a fresh loop thread;
connections inherited from the parent raise ``IllegalStateError`` there (``EventLoop``) and are
neither closed at the child's exit nor kept alive by it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextvars
import itertools
import logging
import os
import socket
import threading
import warnings
import weakref
from _thread import get_ident
from collections import deque
from collections.abc import Callable, Coroutine
from contextlib import suppress
from functools import partial
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup

from haclient.errors import ClosedError

__all__ = ["LoopThread", "keep_alive", "register_for_exit", "shared_loop"]

log = logging.getLogger("haclient.sync")

_numbers = itertools.count(1)
_STOP_WAIT = 5.0
"""Seconds ``LoopThread.stop`` waits for the loop thread to end."""


class LoopThread:
    """An asyncio event loop running in a daemon thread, with a task group to host tasks.

    Thread-safety: ``submit`` and ``stop`` may be called from any thread.
    """

    def __init__(self, name: str, serving: Callable[[LoopThread], Any]) -> None:
        self.name = name
        self._serving = serving
        self.loop: asyncio.AbstractEventLoop | None = None
        self._host: TaskGroup | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._context = contextvars.Context()
        self.doorbell = Doorbell()
        """How a connection's boundary wakes this loop (``haclient.sync._boundary``)."""
        self.serving: Any = None
        """The loop's half of the boundaries (``haclient.sync._served.Serving``): the loop's."""
        self.forked = False
        """True in a process forked after this loop thread started: it does not run there."""
        self.thread = threading.Thread(target=self._main, name=name, daemon=True)
        _loop_threads.add(self)

    @classmethod
    def start(cls, serving: Callable[[LoopThread], Any], name: str | None = None) -> LoopThread:
        """Start a loop thread; return once its loop runs. ``serving(loop_thread)`` makes, on
        the loop, the loop's half of the boundaries that ring it (``_served.Serving``): given
        with the thread, as a thread's target is, never afterwards."""
        loop_thread = cls(name or f"haclient-loop-{next(_numbers)}", serving)
        loop_thread.thread.start()
        loop_thread._ready.wait()
        if loop_thread._failure is not None:
            raise RuntimeError("the haclient event loop did not start") from loop_thread._failure
        return loop_thread

    def _main(self) -> None:
        try:
            anyio.run(self._serve, backend="asyncio")
        except BaseException as exc:
            self._failure = exc
            if self._ready.is_set():
                log.exception("the haclient event loop %s ended with an error", self.name)
        finally:
            self.loop = None
            self._ready.set()

    async def _serve(self) -> None:
        self._context = contextvars.copy_context()  # anyio's: where the backend is known
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self.serving = serving = self._serving(self)  # the loop's half of every boundary
        self.doorbell.answer_on(self.loop, serving.drain)
        try:
            async with anyio.create_task_group() as host:
                self._host = host
                self._ready.set()
                await self._stop.wait()
                host.cancel_scope.cancel()
        finally:
            self.doorbell.close(self.loop)
            self._host = None

    @property
    def running(self) -> bool:
        """True while the loop runs (False once ``stop()`` was called, the thread ended, or in
        a forked child)."""
        return (
            not self.forked
            and self.loop is not None
            and self._stop is not None
            and not self._stop.is_set()
        )

    def _forked(self) -> None:
        """In a forked child: the thread did not come along; drop the loop, whose wake-up
        socket is the parent's, so that nothing can be submitted to it."""
        self.forked = True
        self.doorbell.forked()
        self.loop = None
        self._host = None
        self._stop = None

    def in_thread(self) -> bool:
        """True when called from the loop thread (an ident the OS reused for a new thread
        after the loop thread ended does not count)."""
        return get_ident() == self.thread.ident and self.thread.is_alive()

    def submit(self, callback: Callable[..., object], *args: Any) -> None:
        """Run the plain function ``callback(*args)`` on the loop thread soon.

        Raises:
            RuntimeError: the loop has stopped.
        """
        loop = self.loop
        if loop is None:
            raise RuntimeError("the event loop has stopped")
        # In the loop's own context, not the caller's (where anyio finds no event loop); the
        # tasks the callback creates get copies of it.
        loop.call_soon_threadsafe(callback, *args, context=self._context)

    def start_task(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> asyncio.Task[None] | None:
        """Run ``fn()`` as a task of the loop, made in the calling thread (not the loop's);
        None, with nothing done, in asyncio's debug mode: then make the task on the loop.

        The task's first step runs in the loop's next turn: one turn and one callback sooner
        than a task made by a callback (``submit``) would. A task's constructor only appends
        its first step to the loop's ready queue, a deque, which is safe from another thread
        in CPython, and the loop is then woken as ``call_soon_threadsafe`` wakes it; asyncio's
        debug mode refuses calls from other threads, hence the None there.

        Raises:
            RuntimeError: the loop has stopped.
        """
        loop = self.loop
        if loop is None:
            raise RuntimeError("the event loop has stopped")
        if loop.get_debug():
            return None
        task = asyncio.Task(fn(), loop=loop, context=self._context.copy())
        loop.call_soon_threadsafe(_nothing)  # wakes the loop
        return task

    @property
    def host_group(self) -> TaskGroup:
        """The host task group, for long-lived tasks; use it only on the loop thread.

        Raises:
            ClosedError: the loop is stopping.
        """
        if self._host is None:
            raise ClosedError("the event loop is stopping")
        return self._host

    def stop(self) -> None:
        """Cancel what the host holds, end the loop and wait for its thread (bounded).
        Idempotent; from the loop thread itself it only asks the loop to end."""
        loop, stop = self.loop, self._stop
        if loop is not None and stop is not None:
            with suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(stop.set)
        if not self.in_thread():
            self.thread.join(_STOP_WAIT)


def _nothing() -> None:
    """A callback that only wakes the loop."""


class Doorbell:
    """How a thread tells a loop thread that a boundary has requests: it appends the boundary
    (a queue: data, never a function) to ``rung`` and signals a file the loop watches (an
    eventfd where the system has one: one counter, the cheapest such signal; else a socket
    pair, one byte a ring); the loop reads the signal and drains each boundary rung.

    Thread-safety: ``ring`` from any thread; the rest on the loop thread.
    """

    def __init__(self) -> None:
        self._rung: deque[Any] = deque()
        self._sockets: tuple[socket.socket, socket.socket] | None = None
        if hasattr(os, "eventfd"):
            self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            self._signal: Callable[[], object] = partial(os.eventfd_write, self._fd, 1)
            self._take: Callable[[], object] = partial(os.eventfd_read, self._fd)
        else:
            reader, writer = self._sockets = socket.socketpair()
            reader.setblocking(False)
            writer.setblocking(False)
            self._fd = reader.fileno()
            self._signal = partial(writer.send, b"\0")
            self._take = partial(reader.recv, 4096)  # one ring is one byte: one read takes them
        self._open = False
        self._lock = threading.Lock()  # a ring never signals a file closed (or reused) meanwhile

    def ring(self, boundary: object) -> None:
        """Tell the loop that ``boundary`` has requests.

        Raises:
            RuntimeError: the loop does not answer (stopped, or a forked child's).
        """
        with self._lock:
            if not self._open:
                raise RuntimeError("the event loop has stopped")
            self._rung.append(boundary)
            try:
                self._signal()
            except (BlockingIOError, InterruptedError):
                pass  # full of rings the loop has not read yet: it will look
            except OSError:
                raise RuntimeError("the event loop has stopped") from None

    def answer_on(self, loop: asyncio.AbstractEventLoop, drain: Callable[[Any], None]) -> None:
        """On the loop: from now on, ``drain(boundary)`` every boundary rung."""
        take = self._take

        def answer() -> None:
            try:  # noqa: SIM105 (contextlib.suppress is three calls more per ring)
                take()
            except (BlockingIOError, InterruptedError):
                pass
            rung = self._rung
            while rung:
                drain(rung.popleft())

        loop.add_reader(self._fd, answer)
        self._open = True

    def close(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the loop, as it ends: no more rings."""
        with self._lock:
            self._open = False
        with suppress(Exception):
            loop.remove_reader(self._fd)
        if self._sockets is None:
            os.close(self._fd)
        else:
            for end in self._sockets:
                end.close()

    def forked(self) -> None:
        """In a forked child: the file is the parent's loop's; never signal it."""
        self._open = False


_loop_threads: weakref.WeakSet[LoopThread] = weakref.WeakSet()
_shared: LoopThread | None = None
_shared_lock = threading.Lock()


def shared_loop(serving: Callable[[LoopThread], Any]) -> LoopThread:
    """The process's shared loop thread, started on first use (and again if it was stopped)
    with ``serving`` (see ``LoopThread.start``)."""
    global _shared
    with _shared_lock:
        if _shared is None or not _shared.running:
            _shared = LoopThread.start(serving, "haclient-loop")
            _register_exit_hook()
        return _shared


class ClosableAtExit(Protocol):
    """What the exit hook needs of a blocking connection."""

    def _close_at_exit(self) -> None: ...


_open: weakref.WeakSet[ClosableAtExit] = weakref.WeakSet()
_hook_registered = False


def register_for_exit(connection: ClosableAtExit) -> None:
    """Have ``connection`` closed at interpreter exit unless it was closed (or collected)
    before; ``connection._close_at_exit()`` warns and closes it. Weakly held."""
    _register_exit_hook()
    _open.add(connection)


def unregister_for_exit(connection: ClosableAtExit) -> None:
    """``connection`` was closed: nothing to do for it at exit."""
    _open.discard(connection)


def _register_exit_hook() -> None:
    global _hook_registered
    if _hook_registered:
        return
    _hook_registered = True
    register = getattr(threading, "_register_atexit", None)
    try:
        if register is None:
            raise RuntimeError
        register(_at_exit)
    except RuntimeError:  # no such hook, or the interpreter is already shutting down
        atexit.register(_at_exit)


_keepers: set[threading.Thread] = set()
_keepers_lock = threading.Lock()
_exit_hook_ran = False


_ENDED_POLL = 0.5
"""Seconds between a keeper's looks at whether its connection ended without ``close()``."""


def keep_alive(connection: object, ended: Callable[[], bool]) -> threading.Event:
    """Keep the process alive while ``connection`` is open (``jms.useDaemonThread=false``): a
    non-daemon thread holds it (so that it is not collected either) until the event returned
    is set, which its ``close()`` does, or until ``ended()`` says it ended otherwise (its
    failover gave up)."""
    closed = threading.Event()

    def keep(held: object) -> None:  # held: the connection, kept from the garbage collector
        while not closed.wait(_ENDED_POLL) and not ended():
            pass
        with _keepers_lock:
            _keepers.discard(threading.current_thread())
            last = not _keepers
        if last and _exit_hook_ran:  # the exit waited for this connection: finish the exit
            _at_exit()

    keeper = threading.Thread(target=keep, args=(connection,), name="haclient-keeper", daemon=False)
    with _keepers_lock:
        _keepers.add(keeper)
    keeper.start()
    return closed


def _at_exit() -> None:
    """Close every connection still open, then stop the shared loop, unless a connection that
    keeps the process alive (``keep_alive``) still runs on it."""
    global _exit_hook_ran
    _exit_hook_ran = True
    for connection in list(_open):
        try:
            connection._close_at_exit()
        except Exception:
            log.debug("closing %r at exit failed", connection, exc_info=True)
    _open.clear()
    shared = _shared
    with _keepers_lock:
        kept = bool(_keepers)
    if shared is not None and not kept:
        shared.stop()


def _after_fork_in_child() -> None:
    """``os.register_at_fork``'s hook in the child: what the parent's threads held is gone
    (their locks may have been held at the fork), and the inherited loops run nothing."""
    global _shared, _shared_lock, _keepers_lock, _exit_hook_ran
    _shared_lock = threading.Lock()
    _keepers_lock = threading.Lock()
    for loop_thread in list(_loop_threads):
        loop_thread._forked()
    _shared = None
    _open.clear()  # the parent's connections: the parent closes them, not the child's exit
    _keepers.clear()
    _exit_hook_ran = False


os.register_at_fork(after_in_child=_after_fork_in_child)


def warn_unclosed(connection: object, source: object = None) -> None:
    """The ``ResourceWarning`` for a connection the application never closed."""
    warnings.warn(
        f"unclosed haclient connection {connection!r}: call close(), or use it in a with block",
        ResourceWarning,
        stacklevel=2,
        source=source,
    )
