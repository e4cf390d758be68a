"""The inbox: an idempotent consumer that applies each message's effect once.

How this works: ``Inbox.apply(db, message, effect)`` opens a transaction on the application's
SQLite connection (``BEGIN IMMEDIATE``) or PostgreSQL one (psycopg), records the message's id in
``haclient_inbox`` (``INSERT ... ON CONFLICT DO NOTHING``: one statement, no look-up first),
and either skips the message when the id was there (a duplicate: counted, logged, told to
listeners) or calls ``effect(message)``; the effect and the id commit together. Two consumers
applying one id at once (PostgreSQL) meet at the insert: the second waits for the first's
commit, then finds the id and skips. ``handle`` then acknowledges the message. A process
killed after the commit and before the acknowledgement gets the message again from the broker:
its id is recorded, so the copy is acknowledged and skipped (rule X3). Killed before the
commit, nothing of the effect was kept, and the redelivered message is applied then.

Ids are kept for ``retention`` seconds after they were applied (default 7 days: far past a
broker's redelivery of an unacknowledged message, and past a relay's re-send of a row whose
acceptance it had not recorded when it died, unless that relay stays dead longer). Every
``prune_every`` applied messages, the rows past it are deleted in the same transaction.

Thread-safety: an ``Inbox`` may be shared by threads, each with its own ``db`` connection (or
serialising its use of a shared one). The async twin is ``haclient.exactly_once.aio.Inbox``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from haclient.errors import ConfigurationError, IllegalStateError, MessageFormatError
from haclient.exactly_once import database
from haclient.message import Message

__all__ = ["DEFAULT_RETENTION", "Inbox", "InboxStatistics"]

log = logging.getLogger("haclient.exactly_once")

DEFAULT_RETENTION: Final = 7 * 24 * 3600.0
"""Seconds an applied message's id is remembered (7 days)."""

Effect = Callable[[Message], object]
"""What the application does for a message: writes on the same ``db`` connection."""

_RECORD: Final = (
    "INSERT INTO haclient_inbox (inbox, message_id, applied) VALUES (?, ?, ?)"
    " ON CONFLICT DO NOTHING"
)


@dataclass(frozen=True, slots=True)
class InboxStatistics:
    """An inbox's counters: messages applied, duplicates skipped, ids pruned."""

    name: str
    applied: int
    duplicates: int
    pruned: int


class Inbox:
    """Applies each message's effect once, in the application's database (X3, X4).

    Args:
        name: Which inbox of the database this is: ids are remembered per name, so two
            consumers of different queues may share one database (and even see one id).
        retention: Seconds an applied id is remembered (> 0).
        prune_every: Applied messages between two prunes of expired ids (>= 1).

    Raises:
        ConfigurationError: a bad argument.
    """

    def __init__(
        self,
        name: str = "default",
        *,
        retention: float = DEFAULT_RETENTION,
        prune_every: int = 1000,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"an inbox name is a non-empty str, not {name!r}")
        if not isinstance(retention, int | float) or retention <= 0:
            raise ConfigurationError(f"retention must be seconds > 0, not {retention!r}")
        if not isinstance(prune_every, int) or prune_every < 1:
            raise ConfigurationError(f"prune_every must be an int >= 1, not {prune_every!r}")
        self.name = name
        self.retention = float(retention)
        self.prune_every = prune_every
        self._lock = threading.Lock()
        self._applied = 0
        self._duplicates = 0
        self._pruned = 0
        self._listeners: list[Any] = []

    # The blocking API ---------------------------------------------------------------------------

    def apply(self, db: Any, message: Message, effect: Effect) -> bool:
        """Apply ``message``'s effect unless its id was applied before; True when applied.

        ``effect(message)`` runs inside a transaction of ``db`` (it writes on ``db``), which
        commits together with the record of the id; if it raises, the transaction rolls back,
        nothing is recorded, and the exception is raised (acknowledge nothing: the message will
        come again). A duplicate is skipped, counted, logged at INFO and told to listeners
        (``duplicate_skipped(inbox, message_id)``, in the calling thread). It does not
        acknowledge: ``handle`` does both.

        Raises:
            MessageFormatError: the message has no id (nothing to recognise a copy by).
            IllegalStateError: ``db`` already has an open transaction; the tables are missing.
            ConfigurationError: ``db`` is neither a ``sqlite3.Connection`` nor a
                ``psycopg.Connection``.
            Exception: what ``effect`` raised.
        """
        applied = self.apply_quietly(db, message, effect)
        if not applied:
            self.tell_duplicate(message)
        return applied

    def handle(self, db: Any, message: Message, effect: Effect) -> bool:
        """``apply``, then acknowledge the message (a duplicate too); True when applied.

        Receive from a CLIENT or INDIVIDUAL session: in AUTO mode a message is acknowledged
        when received, before its effect, so a crash in between loses it.

        Raises:
            AcknowledgeFailedError: a failover cut the acknowledgement off (F8): the message
                comes again and is then skipped as a duplicate.
            As ``apply``.
        """
        applied = self.apply(db, message, effect)
        message.acknowledge()
        return applied

    def add_listener(self, listener: object) -> None:
        """Be told of skipped duplicates: ``listener.duplicate_skipped(inbox, message_id)``
        (``inbox`` is this inbox's name), if it has that method. A listener that raises is
        logged and changes nothing."""
        with self._lock:
            self._listeners.append(listener)

    def remove_listener(self, listener: object) -> None:
        """Stop telling ``listener``."""
        with self._lock:
            self._listeners = [known for known in self._listeners if known is not listener]

    def statistics(self) -> InboxStatistics:
        """A snapshot of the counters (no database access)."""
        with self._lock:
            return InboxStatistics(self.name, self._applied, self._duplicates, self._pruned)

    def seen(self, db: Any, message_id: str) -> bool:
        """Whether ``message_id`` was applied by this inbox (and is still remembered).

        Raises:
            IllegalStateError: the tables are missing.
        """
        rows = database.read(
            db,
            "SELECT 1 FROM haclient_inbox WHERE inbox = ? AND message_id = ?",
            (self.name, message_id),
        )
        return bool(rows)

    # Shared by both APIs ------------------------------------------------------------------------

    def apply_quietly(self, db: Any, message: Message, effect: Effect) -> bool:
        """``apply`` without telling listeners (the async twin tells them on its loop)."""
        return self.apply_all_quietly(db, [message], effect)[0]

    def apply_all(self, db: Any, messages: Sequence[Message], effect: Effect) -> list[bool]:
        """``apply`` for several messages in one transaction (one commit): each message's
        effect, in order, unless its id was applied before (by an earlier transaction or
        earlier in ``messages``); all of it commits together, or nothing does. One result
        per message, True when applied. Acknowledge none of them before this returned.

        Raises:
            As ``apply``: an ``effect`` that raises rolls back every message's effect.
        """
        applied = self.apply_all_quietly(db, messages, effect)
        for message, done in zip(messages, applied, strict=True):
            if not done:
                self.tell_duplicate(message)
        return applied

    def handle_all(self, db: Any, messages: Sequence[Message], effect: Effect) -> list[bool]:
        """``apply_all``, then acknowledge every message (duplicates too), once the commit is
        done. In a CLIENT session an acknowledgement covers every message the session
        delivered: pass all the messages received and not yet acknowledged (X3).

        Raises:
            AcknowledgeFailedError: a failover cut the acknowledgement off (F8).
            As ``apply_all``.
        """
        applied = self.apply_all(db, messages, effect)
        for message in messages:
            message.acknowledge()
        return applied

    def apply_all_quietly(self, db: Any, messages: Sequence[Message], effect: Effect) -> list[bool]:
        """``apply_all`` without telling listeners (the async twin tells them on its loop)."""
        ids = [_id_of(message) for message in messages]
        dialect = database.dialect_of(db)
        if database.in_transaction(db):
            raise IllegalStateError(
                "the inbox's transaction must be its own: this connection has one open"
            )
        applied: list[bool] = []
        record = dialect.sql(_RECORD)
        try:
            database.begin(db, dialect)
            now = time.time()
            for message, message_id in zip(messages, ids, strict=True):
                # the id first: a copy (earlier, or earlier in ``messages``) inserts nothing
                fresh = db.execute(record, (self.name, message_id, now)).rowcount == 1
                if fresh:
                    effect(message)
                applied.append(fresh)
            count = applied.count(True)
            pruned = self._prune_if_due(db, dialect, now, count)
        except BaseException as exc:
            database.rollback(db)
            database.raise_translated(exc)
        database.commit(db)
        self._count(applied=count, duplicates=len(applied) - count, pruned=pruned)
        for message_id, done in zip(ids, applied, strict=True):
            if not done:
                log.info("inbox %s skipped %s: applied before", self.name, message_id)
        return applied

    def tell_duplicate(self, message: Message) -> None:
        """Call ``duplicate_skipped`` on each listener, in the calling thread."""
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                method = getattr(listener, "duplicate_skipped", None)
                if method is not None:
                    method(self.name, message.message_id)
            except Exception:
                log.exception("an inbox listener raised; ignored")

    def prune(self, db: Any, now: float | None = None) -> int:
        """Forget the ids applied more than ``retention`` seconds before ``now`` (default:
        the time of the call), in a transaction of its own; return how many.

        Raises:
            IllegalStateError: ``db`` has an open transaction; the tables are missing.
        """
        dialect = database.dialect_of(db)
        if database.in_transaction(db):
            raise IllegalStateError("prune() needs a connection without an open transaction")
        try:
            database.begin(db, dialect)
            count = self._delete_expired(db, dialect, time.time() if now is None else now)
        except BaseException as exc:
            database.rollback(db)
            database.raise_translated(exc)
        database.commit(db)
        self._count(pruned=count)
        return count

    def _prune_if_due(self, db: Any, dialect: database.Dialect, now: float, count: int) -> int:
        """Prune when this transaction's ``count`` applied messages pass a multiple of
        ``prune_every``."""
        with self._lock:
            due = (self._applied + count) // self.prune_every > self._applied // self.prune_every
        return self._delete_expired(db, dialect, now) if due else 0

    def _delete_expired(self, db: Any, dialect: database.Dialect, now: float) -> int:
        cursor = db.execute(
            dialect.sql("DELETE FROM haclient_inbox WHERE inbox = ? AND applied < ?"),
            (self.name, now - self.retention),
        )
        return max(int(cursor.rowcount), 0)

    def _count(self, *, applied: int = 0, duplicates: int = 0, pruned: int = 0) -> None:
        with self._lock:
            self._applied += applied
            self._duplicates += duplicates
            self._pruned += pruned

    def __repr__(self) -> str:
        return f"<Inbox {self.name!r} retention={self.retention:g}s>"


def _id_of(message: Message) -> str:
    if not isinstance(message, Message):
        raise MessageFormatError(f"not a message: {type(message).__name__}")
    if not message.message_id:
        raise MessageFormatError("the message has no message id: an inbox cannot recognise it")
    return message.message_id
