"""The restore of the registered resources on a new physical connection, tier by tier.

How this works: after a failover the supervisor makes the new connection the one in use (a
``Link``) and runs one ``Restore`` on it. The resources (sessions, producers, consumers, ...)
are taken in the tiers ``failover.protocols.restore_tiers`` orders them in (a session before
its links); a tier is restored concurrently, one task per resource, and the next tier starts
when it is done. A resource that offers ``begin_restore`` (a ``StagedResource``) is begun in
the tier's own task, a checkpoint now and then so that the first requests go out while the
rest are built, and all of those are then finished in turn by one task. A tier whose work is
one job (only staged resources, or a single other one) runs it in the restore's own task, with
no task group: most tiers of a connection are one session or one consumer, and a thousand
connections failing over together then make that many fewer objects.

Rules it keeps:

- Rule 3 of ``failover.manager``: the gate stays closed until every tier is done; a resource
  unregistered meanwhile is skipped; what a resource's failure means is
  ``failover.states.restore_failure``'s (invariant 9): a loss ends the restore (the supervisor
  is told, and the walk goes on to its next attempt), anything else is that resource's own
  failure (the listeners hear ``resource_not_restored``, F14) while the others restore.
- A loss of the connection cancels the restore where it waits (``Link.restoring``), so that
  nothing is left waiting on a dead connection.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final, Generic

import anyio
import anyio.lowlevel

from failover.errors import ConnectionLostError
from failover.protocols import Finish, P, Resource, restore_tiers
from failover.states import RestoreFailure, restore_failure
from failover.url import BrokerURL

__all__ = ["Link", "Restore"]

# Staged restores begun between two checkpoints (so that the first requests go out early).
_STAGED_BETWEEN_CHECKPOINTS: Final = 256


class Link(Generic[P]):
    """One physical connection in use, and what is known of its end."""

    __slots__ = ("broker", "cause", "connection", "ended", "epoch", "restoring", "scope")

    def __init__(self, connection: P, broker: BrokerURL, epoch: int) -> None:
        self.connection = connection
        self.broker = broker
        self.epoch = epoch
        self.cause: BaseException | None = None  # set once, when the loss is noticed
        self.ended = anyio.Event()
        self.scope = anyio.CancelScope()  # the task watching ``wait_closed``
        self.restoring = anyio.CancelScope()  # the restore on it: its loss cancels it


class Restore(Generic[P]):
    """One restore of ``resources`` on ``link`` (see the module docstring).

    Args:
        link: The connection to restore on; its ``cause`` is set when it is lost.
        resources: The registered resources (id -> resource), a live view: one unregistered
            while the restore runs is skipped.
        retriable: Whether a failure is one a reconnect can fix.
        lose: Called with the link and the cause when a failure means the connection is lost.
        not_restored: Called with a resource and its failure when only that resource failed.
    """

    def __init__(
        self,
        link: Link[P],
        resources: Mapping[int, Resource[P]],
        *,
        retriable: Callable[[BaseException], bool],
        lose: Callable[[Link[P], BaseException], object],
        not_restored: Callable[[Resource[P], Exception], object],
    ) -> None:
        self._link = link
        self._resources = resources
        self._retriable = retriable
        self._lose = lose
        self._not_restored = not_restored

    async def run(self) -> bool:
        """Restore the resources tier by tier; False when the connection was lost meanwhile."""
        link = self._link
        with link.restoring:
            for tier in restore_tiers(self._resources.values()):
                if link.cause is not None:
                    break
                await self._restore_tier(tier)
        return link.cause is None

    async def _restore_tier(self, tier: Sequence[Resource[P]]) -> None:
        """Every staged resource is begun first, with a checkpoint now and then, and finished
        in turn by one task; a task per other resource. A tier with nothing to run beside its
        one job (its staged resources, or its one other resource) runs it in this task, with
        no task group: a thousand connections restoring at once make that many fewer objects
        for the collector."""
        plain: list[Resource[P]] = []
        staged: list[tuple[Resource[P], Finish]] = []
        for resource in tier:
            begin = getattr(resource, "begin_restore", None)
            if begin is None:
                plain.append(resource)
                continue
            finish = self._begin_one(resource, begin)
            if finish is not None:
                staged.append((resource, finish))
                if len(staged) % _STAGED_BETWEEN_CHECKPOINTS == 0:
                    await anyio.lowlevel.checkpoint()
        if not plain:
            if staged:
                await self._finish_staged(staged)
            return
        if len(plain) == 1 and not staged:
            await self._restore_one(plain[0])
            return
        async with anyio.create_task_group() as restoring:
            for resource in plain:
                restoring.start_soon(self._restore_one, resource)
            if staged:
                restoring.start_soon(self._finish_staged, staged)

    async def _restore_one(self, resource: Resource[P]) -> None:
        if id(resource) not in self._resources:  # unregistered meanwhile
            return
        link = self._link
        try:
            await resource.restore(link.connection, link.epoch)
        except Exception as exc:
            self._failed(resource, exc)

    def _begin_one(
        self, resource: Resource[P], begin: Callable[[P, int], Finish | None]
    ) -> Finish | None:
        link = self._link
        if id(resource) not in self._resources or link.cause is not None:
            return None
        try:
            return begin(link.connection, link.epoch)
        except Exception as exc:
            self._failed(resource, exc)
            return None

    async def _finish_staged(self, staged: Sequence[tuple[Resource[P], Finish]]) -> None:
        for resource, finish in staged:
            if self._link.cause is not None:  # lost: what is left waits on a dead connection
                return
            try:
                await finish()
            except Exception as exc:
                self._failed(resource, exc)

    def _failed(self, resource: Resource[P], exc: Exception) -> None:
        """Act on what ``failover.states.restore_failure`` says ``exc`` means (rule 3)."""
        link = self._link
        meaning = restore_failure(
            exc,
            lost=link.cause is not None,
            connection_open=link.connection.is_open,
            retriable=self._retriable(exc),
        )
        if meaning is RestoreFailure.LOSS:
            self._lose(link, exc)
        elif meaning is RestoreFailure.ENDED:
            lost = ConnectionLostError(f"the connection ended during the restore: {exc}")
            lost.__cause__ = exc
            self._lose(link, lost)
        elif meaning is RestoreFailure.NOT_RESTORED:
            self._not_restored(resource, exc)
