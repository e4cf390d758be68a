"""The narrow interface through which queues record durable messages.

How this works: a queue tells its ``Persistence`` about every change to a *durable* message in a
*durable* (non-temporary) queue: enqueued, delivery count changed, removed, and the changes of a
committed transaction as one unit. ``MemoryPersistence`` (the default) records nothing, so a
``kill()`` loses everything, as a crash of an in-memory broker would. The SQLite store
(``chaos.broker.store``) implements the same protocol and hands its messages back through
``recover()`` when the broker starts.

Lifecycle: the broker calls ``recover()`` at every start and ``close()`` at every stop or kill,
so one object serves a broker across restarts (``recover`` re-opens what ``close`` closed). A
``Broker`` may also be given a factory, called at every start.

Rule: the broker calls these methods on its event loop, in the order the changes happen; an
implementation must not block for long (SQLite in WAL mode with ``synchronous=NORMAL`` is fine).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["MemoryPersistence", "Persistence", "RecoveredMessage", "StoredRef"]


@dataclass(frozen=True, slots=True)
class StoredRef:
    """What a store needs to know of one message in one queue.

    ``message_id`` is unique per broker run and increases in arrival order, so ordering by it
    restores FIFO order. ``payload`` is the encoded message as it arrived (its header's
    delivery-count may be stale; ``delivery_count`` is the current one).
    """

    queue: str
    message_id: int
    payload: bytes
    delivery_count: int


@dataclass(frozen=True, slots=True)
class RecoveredMessage:
    """A message a store hands back on start, in FIFO order per queue."""

    queue: str
    payload: bytes
    delivery_count: int


@runtime_checkable
class Persistence(Protocol):
    """Where durable messages are recorded."""

    def enqueued(self, ref: StoredRef) -> None:
        """A durable message was added to a queue (outside any transaction)."""

    def removed(self, ref: StoredRef) -> None:
        """A durable message left a queue for good (accepted, dead-lettered, purged ...)."""

    def delivery_count_changed(self, ref: StoredRef) -> None:
        """A durable message's delivery count changed (it came back to its queue)."""

    def committed(self, enqueued: Sequence[StoredRef], removed: Sequence[StoredRef]) -> None:
        """A transaction committed: record all of its changes atomically."""

    def queue_deleted(self, queue: str) -> None:
        """A queue was deleted with everything in it."""

    def node_created(self, name: str, kind: str) -> None:
        """A lasting (non-temporary) node was created; ``kind`` is ``queue`` or ``topic``."""

    def node_deleted(self, name: str) -> None:
        """A lasting node was deleted (for a queue, ``queue_deleted`` follows)."""

    def recovered_nodes(self) -> Iterable[tuple[str, str]]:
        """``(name, kind)`` of every lasting node; called after ``recover()``."""

    def recover(self) -> Iterable[RecoveredMessage]:
        """The durable messages to load when the broker starts."""

    def batch(self) -> AbstractContextManager[None]:
        """A block whose calls are committed together when it ends.

        The broker wraps the handling of each batch of engine events (one socket read) in it.
        No byte of the answers (outcomes, settlements) is written before the block has ended,
        so a client never learns of an outcome that is not yet committed.
        """

    def close(self) -> None:
        """The broker stops: flush and release the store."""


class MemoryPersistence:
    """Records nothing: every message lives in memory only (the default)."""

    def enqueued(self, ref: StoredRef) -> None:
        """Nothing to record."""

    def removed(self, ref: StoredRef) -> None:
        """Nothing to record."""

    def delivery_count_changed(self, ref: StoredRef) -> None:
        """Nothing to record."""

    def committed(self, enqueued: Sequence[StoredRef], removed: Sequence[StoredRef]) -> None:
        """Nothing to record."""

    def queue_deleted(self, queue: str) -> None:
        """Nothing to record."""

    def node_created(self, name: str, kind: str) -> None:
        """Nothing to record."""

    def node_deleted(self, name: str) -> None:
        """Nothing to record."""

    def recovered_nodes(self) -> Iterable[tuple[str, str]]:
        """Nothing was kept."""
        return ()

    def recover(self) -> Iterable[RecoveredMessage]:
        """Nothing was kept."""
        return ()

    def batch(self) -> AbstractContextManager[None]:
        """Nothing to commit."""
        return contextlib.nullcontext()

    def close(self) -> None:
        """Nothing to release."""
