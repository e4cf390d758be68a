"""A task group that lives in a task of its own, for objects opened in one task, closed in another.

A ``Connection`` is often closed from another task than the one that opened it (the blocking
facade runs every call in a fresh portal task). anyio's task groups must be exited by the task
that entered them, so the connection's background tasks (socket pumps, listener dispatchers, the
DUPS_OK flusher) run in a task group hosted by a task spawned for the purpose. Who owns that
task:

* ``TaskHost.open(owner)``: a task group the caller entered (``async with aio.connect(...)``
  enters one in ``__aenter__`` and exits it in ``__aexit__``): the structured form, whose
  tasks cannot outlive the caller's ``async with`` block;
* ``TaskHost.open()``: nobody: an asyncio task, or a trio system task (``await
  aio.connect(...)``, kept for compatibility); the connection must be closed to end it.

``TaskHost.close()`` cancels the hosted task group and waits until it ended, from any task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
from anyio.abc import TaskGroup

__all__ = ["TaskHost"]

log = logging.getLogger("haclient.connection")


class TaskHost:
    """Hosts one anyio task group in a dedicated task; start it with ``await TaskHost.open()``."""

    def __init__(self) -> None:
        self._task_group: TaskGroup | None = None
        self._stop = anyio.Event()
        self._done = anyio.Event()
        self._handle: Any = None  # keeps the asyncio task referenced

    @classmethod
    async def open(cls, owner: TaskGroup | None = None) -> TaskHost:
        """Spawn the hosting task (in ``owner`` if given, else one nobody owns) and return
        once its task group is running."""
        host = cls()
        started = anyio.Event()
        cancelled = anyio.get_cancelled_exc_class()

        async def run() -> None:
            try:
                async with anyio.create_task_group() as tg:
                    host._task_group = tg
                    started.set()
                    await host._stop.wait()
                    tg.cancel_scope.cancel()
            except cancelled:
                raise  # the owner's scope was cancelled: let it see its cancellation
            except BaseException:  # neither the owner nor the loop should crash for it
                log.exception("background tasks of a connection failed")
            finally:
                host._done.set()
                started.set()

        if owner is not None:
            owner.start_soon(run, name="haclient connection tasks")
        else:
            host._spawn_unowned(run)
        await started.wait()
        return host

    def _spawn_unowned(self, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio: anyio's other backend is trio
            import trio  # type: ignore[import-not-found, unused-ignore]

            trio.lowlevel.spawn_system_task(run)
        else:
            self._handle = loop.create_task(run())

    def start_soon(
        self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any, name: str | None = None
    ) -> None:
        """Run ``fn(*args)`` as a background task; cancelled by ``close()``."""
        assert self._task_group is not None
        self._task_group.start_soon(fn, *args, name=name)

    @property
    def task_group(self) -> TaskGroup:
        """The hosted task group (for ``start()``)."""
        assert self._task_group is not None
        return self._task_group

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called or the host ended."""
        return self._stop.is_set() or self._done.is_set()

    async def close(self, *, wait: bool = True) -> None:
        """Cancel every background task and (with ``wait``) wait until they have all ended.
        Idempotent. A task of this host closing it passes ``wait=False``: it cannot wait for
        its own end (it is cancelled at its next checkpoint)."""
        self._stop.set()
        if wait:
            with anyio.CancelScope(shield=True):
                await self._done.wait()
