"""The restore of the registered resources on a new physical connection, one tier at a time.

How this works: after a failover the failover machine (``failover.machine``) asks for the
tiers of a restore one by one (``RestoreTier``), and the supervisor runs one ``Restore`` per
tier on the connection in use (a ``Link``). The resources (sessions, producers, consumers, ...)
are taken in the tiers ``failover.protocols.restore_tiers`` orders them in (a session before
its links); a tier is restored concurrently, one task per resource. A resource that offers
``begin_restore`` (a ``StagedResource``) is begun in the tier's own task, a checkpoint now and
then so that the first requests go out while the rest are built, and all of those are then
finished in turn by one task. A tier whose work is one job (only staged resources, or a single
other one) runs it in the restore's own task, with no task group: most tiers of a connection
are one session or one consumer, and a thousand connections failing over together then make
that many fewer objects.

It calls nobody back: a resource's failure is reported, as it happens, as a ``RestoreFailed``
event on the stream it is given; what it means, a loss or the resource's own failure, is the
machine's decision (``failover.states.restore_failure``, invariant 9), which the restore also
reads to stop at once at a failure the machine will call a loss. The supervisor reports the
tier done. A loss of the connection cancels the restore where it waits
(``Link.restoring``, cancelled by the supervisor), so that nothing is left waiting on a dead
connection; a resource unregistered meanwhile is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final, Generic

import anyio
import anyio.lowlevel
from anyio.streams.memory import MemoryObjectSendStream

from failover.events import Event, RestoreFailed
from failover.protocols import Finish, P, Resource
from failover.states import RestoreFailure, restore_failure
from failover.url import BrokerURL

__all__ = ["Link", "Restore"]

# Staged restores begun between two checkpoints (so that the first requests go out early).
_STAGED_BETWEEN_CHECKPOINTS: Final = 256


class Link(Generic[P]):
    """One physical connection in use, and what is known of its end."""

    __slots__ = ("broker", "connection", "epoch", "lost", "restoring", "scope")

    def __init__(self, connection: P, broker: BrokerURL, epoch: int) -> None:
        self.connection = connection
        self.broker = broker
        self.epoch = epoch
        self.lost = False  # set once, when the loss is noticed
        self.scope = anyio.CancelScope()  # the task watching ``wait_closed``
        self.restoring = anyio.CancelScope()  # the tier restoring on it: its loss cancels it


class Restore(Generic[P]):
    """The restore of one tier of resources on ``link`` (see the module docstring).

    Args:
        link: The connection to restore on; its ``lost`` is set when it is lost.
        resources: The registered resources (id -> resource), a live view: one unregistered
            while the restore runs is skipped.
        events: Where a resource's failure is reported (``RestoreFailed``).
        clock: Stamps the events.
        retriable: Whether a failure is one a reconnect can fix.
    """

    def __init__(
        self,
        link: Link[P],
        resources: Mapping[int, Resource[P]],
        *,
        events: MemoryObjectSendStream[Event],
        clock: Callable[[], float],
        retriable: Callable[[BaseException], bool],
    ) -> None:
        self._link = link
        self._resources = resources
        self._events = events
        self._clock = clock
        self._retriable = retriable
        self._lost = False  # a failure the machine will call a loss was reported

    async def run(self, tier: Sequence[Resource[P]]) -> bool:
        """Restore ``tier``; False when the connection was lost meanwhile (cancelled)."""
        link = self._link
        with link.restoring:
            if not link.lost:
                await self._restore_tier(tier)
        return not self._over() and not link.restoring.cancel_called

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
        if id(resource) not in self._resources or self._over():
            return None
        try:
            return begin(link.connection, link.epoch)
        except Exception as exc:
            self._failed(resource, exc)
            return None

    async def _finish_staged(self, staged: Sequence[tuple[Resource[P], Finish]]) -> None:
        for resource, finish in staged:
            if self._over():  # lost: what is left waits on a dead connection
                return
            try:
                await finish()
            except Exception as exc:
                self._failed(resource, exc)

    def _failed(self, resource: Resource[P], exc: Exception) -> None:
        """Report ``exc`` (the machine decides what it means, rule 3); none once lost."""
        link = self._link
        if self._over():  # a symptom of the loss already noticed
            return
        connection_open = link.connection.is_open
        self._events.send_nowait(
            RestoreFailed(self._clock(), link.epoch, resource, exc, connection_open)
        )
        # The machine hears of it next; what it will call a loss stops the restore now, so that
        # nothing more waits on the dead connection meanwhile (the same pure decision).
        meaning = restore_failure(
            exc, lost=False, connection_open=connection_open, retriable=self._retriable(exc)
        )
        if meaning in (RestoreFailure.LOSS, RestoreFailure.ENDED):
            self._lost = True
            link.restoring.cancel()

    def _over(self) -> bool:
        """Whether the connection was lost (noticed by the supervisor, or by this restore)."""
        return self._lost or self._link.lost
