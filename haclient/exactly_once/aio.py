"""The async twins of the outbox writer and the inbox, for asyncio and trio (``haclient.aio``'s
world); the relay is async already (``haclient.exactly_once.relay.Relay``).

How this works: database calls block, so each database transaction runs in a worker thread
(``haclient.exactly_once.worker``), one at a time per object: the event loop never waits on
the disk. The application's ``db`` connection is therefore used from a thread other than the
one that made it: open it with ``sqlite3.connect(path, check_same_thread=False)``, or pass a
blocking ``psycopg.Connection`` (PostgreSQL), and use it from one task at a time. The rules
are those of the blocking objects (X1-X4).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from haclient.exactly_once.inbox import DEFAULT_RETENTION, Effect, InboxStatistics
from haclient.exactly_once.inbox import Inbox as BlockingInbox
from haclient.exactly_once.outbox import Outbox as BlockingOutbox
from haclient.exactly_once.outbox import OutboxStatistics, OutboxTransaction
from haclient.exactly_once.relay import Relay, RelayStatistics
from haclient.exactly_once.worker import DatabaseWorker
from haclient.message import Message

__all__ = [
    "Effect",
    "Inbox",
    "InboxStatistics",
    "Outbox",
    "OutboxStatistics",
    "OutboxTransaction",
    "Relay",
    "RelayStatistics",
]

T = TypeVar("T")


class Outbox:
    """Writes messages into the application's database in its transactions (X1), async;
    ``tracer_provider`` as the blocking ``haclient.exactly_once.Outbox``'s (X6)."""

    def __init__(self, *, tracer_provider: Any = None) -> None:
        self._outbox = BlockingOutbox(tracer_provider=tracer_provider)
        self._worker = DatabaseWorker("outbox")

    async def run(self, db: Any, work: Callable[[OutboxTransaction], T]) -> T:
        """Run ``work(tx)`` in a worker thread inside ``Outbox.transaction(db)`` (blocking
        ``haclient.exactly_once.Outbox``): what it writes on ``db`` and sends with
        ``tx.send`` commits together when it returns, or rolls back when it raises. Returns
        what ``work`` returned.

        A cancelled caller does not stop ``work`` half way: the transaction ends in the thread
        as ``work`` ends (committed or rolled back), and the cancellation is raised then.

        Raises:
            As ``haclient.exactly_once.Outbox.transaction``, and what ``work`` raised.
        """

        def transact() -> T:
            with self._outbox.transaction(db) as tx:
                return work(tx)

        return await self._worker.call(transact)

    def statistics(self) -> OutboxStatistics:
        """A snapshot of the writer's counters."""
        return self._outbox.statistics()


class Inbox:
    """Applies each message's effect once (X3, X4), async: the database work in a worker
    thread, listeners and the acknowledgement on the event loop. Arguments as the blocking
    ``haclient.exactly_once.Inbox``."""

    def __init__(
        self,
        name: str = "default",
        *,
        retention: float = DEFAULT_RETENTION,
        prune_every: int = 1000,
    ) -> None:
        self._inbox = BlockingInbox(name, retention=retention, prune_every=prune_every)
        self._worker = DatabaseWorker(f"inbox-{name}")

    @property
    def name(self) -> str:
        """Which inbox of the database this is."""
        return self._inbox.name

    async def apply(self, db: Any, message: Message, effect: Effect) -> bool:
        """The blocking ``Inbox.apply``, its transaction (and ``effect``) in a worker thread;
        listeners are told of a duplicate on the event loop. A cancelled caller does not stop
        the transaction half way: it commits or rolls back in its thread first.

        Raises:
            As ``haclient.exactly_once.Inbox.apply``.
        """
        applied = await self._worker.call(self._inbox.apply_quietly, db, message, effect)
        if not applied:
            self._inbox.tell_duplicate(message)
        return applied

    async def handle(self, db: Any, message: Message, effect: Effect) -> bool:
        """``apply``, then ``await message.acknowledge()``; True when applied.

        Raises:
            As ``haclient.exactly_once.Inbox.handle``.
        """
        applied = await self.apply(db, message, effect)
        await message.acknowledge()
        return applied

    async def apply_all(self, db: Any, messages: Sequence[Message], effect: Effect) -> list[bool]:
        """The blocking ``Inbox.apply_all``: every message in one transaction, in one worker
        thread call; listeners told on the event loop.

        Raises:
            As ``haclient.exactly_once.Inbox.apply_all``.
        """
        applied = await self._worker.call(self._inbox.apply_all_quietly, db, messages, effect)
        for message, done in zip(messages, applied, strict=True):
            if not done:
                self._inbox.tell_duplicate(message)
        return applied

    async def handle_all(self, db: Any, messages: Sequence[Message], effect: Effect) -> list[bool]:
        """``apply_all``, then acknowledge every message once the commit is done (in a CLIENT
        session, pass every message received and not yet acknowledged).

        Raises:
            As ``haclient.exactly_once.Inbox.handle_all``.
        """
        applied = await self.apply_all(db, messages, effect)
        for message in messages:
            await message.acknowledge()
        return applied

    async def prune(self, db: Any) -> int:
        """The blocking ``Inbox.prune`` in a worker thread."""
        return await self._worker.call(self._inbox.prune, db)

    async def seen(self, db: Any, message_id: str) -> bool:
        """The blocking ``Inbox.seen`` in a worker thread."""
        return await self._worker.call(self._inbox.seen, db, message_id)

    def add_listener(self, listener: object) -> None:
        """Be told of skipped duplicates (``duplicate_skipped(inbox, message_id)``, called on
        the event loop: it must not block)."""
        self._inbox.add_listener(listener)

    def remove_listener(self, listener: object) -> None:
        """Stop telling ``listener``."""
        self._inbox.remove_listener(listener)

    def statistics(self) -> InboxStatistics:
        """A snapshot of the counters."""
        return self._inbox.statistics()
