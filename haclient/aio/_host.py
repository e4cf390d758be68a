"""A task group that lives in a task of its own, for objects opened in one task, closed in another.

A ``Connection`` is opened by ``await connect(...)`` and closed later, often from another task
(the blocking facade runs every call in a fresh portal task). anyio's task groups must be exited
by the task that entered them, so the connection's background tasks (socket pumps, listener
dispatchers, the DUPS_OK flusher) run in a task group hosted by a task spawned for the purpose:
an asyncio task, or a trio system task. ``TaskHost.close()`` cancels it and waits until it ended.
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
    async def open(cls) -> TaskHost:
        """Spawn the hosting task and return once its task group is running."""
        host = cls()
        started = anyio.Event()

        async def run() -> None:
            try:
                async with anyio.create_task_group() as tg:
                    host._task_group = tg
                    started.set()
                    await host._stop.wait()
                    tg.cancel_scope.cancel()
            except BaseException:  # a system task must not crash the event loop
                log.exception("background tasks of a connection failed")
            finally:
                host._done.set()
                started.set()

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio: anyio's other backend is trio
            import trio  # type: ignore[import-not-found, unused-ignore]

            trio.lowlevel.spawn_system_task(run)
        else:
            host._handle = loop.create_task(run())
        await started.wait()
        return host

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

    async def close(self) -> None:
        """Cancel every background task and wait until they have all ended. Idempotent."""
        self._stop.set()
        with anyio.CancelScope(shield=True):
            await self._done.wait()
