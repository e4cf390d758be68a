"""The outbox writer: messages written in the application's own database transaction.

How this works: ``Outbox.transaction(db)`` opens a transaction on the application's SQLite
connection (``BEGIN IMMEDIATE``) or PostgreSQL one (psycopg), hands out an
``OutboxTransaction`` whose ``send`` inserts one row per message into ``haclient_outbox``, and
commits on a normal exit or rolls back on an exception, together with whatever else the
application wrote in it. The message's id is fixed here (``ID:<uuid4>``, or the id the
application set), so every send of the row by a relay, the first and any after a crash,
carries the same id and a consumer can recognise a copy.

Nothing here touches the network: the rows wait for a relay (``haclient.exactly_once.Relay``,
or the ``haclient-relay`` command). What is promised (rules X1, X2 of docs/semantics.md): a row
exists exactly when the application's transaction committed, and its message leaves only
through the relay.

Thread-safety: an ``Outbox`` may be shared by threads; each thread uses its own ``db``
connection (or serialises its use of a shared one, as sqlite3 requires).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from haclient.destination import Destination
from haclient.errors import ClosedError, ConfigurationError, IllegalStateError, MessageFormatError
from haclient.exactly_once import database
from haclient.exactly_once.rows import destination_text, new_message_id, payload_of
from haclient.message import DeliveryMode, Message

__all__ = ["Outbox", "OutboxStatistics", "OutboxTransaction", "outbox_depth"]

_INSERT = (
    "INSERT INTO haclient_outbox (destination, message_id, payload, created, expires)"
    " VALUES (?, ?, ?, ?, ?)"
)


@dataclass(frozen=True, slots=True)
class OutboxStatistics:
    """What an ``Outbox`` wrote: messages in committed transactions, and transactions rolled
    back (their messages were never written)."""

    written: int
    rolled_back: int


class Outbox:
    """Writes messages to send into the application's database, in its transactions (X1).

    One ``Outbox`` serves any number of database connections and threads. The database needs
    the tables first: ``haclient.exactly_once.install(db)``.

    Args:
        tracer_provider: An OpenTelemetry ``TracerProvider`` (the ``tracing`` extra): each
            message written gets an ``outbox write <destination>`` span (PRODUCER), current
            where ``send`` is called, whose trace context the row's message carries; the
            relay's send span is its child and the consumer's spans join the same trace.
            None: no span.
    """

    def __init__(self, *, tracer_provider: Any = None) -> None:
        self._lock = threading.Lock()
        self._written = 0
        self._rolled_back = 0
        self._tracer: Any = None
        if tracer_provider is not None:
            from haclient.exactly_once.tracing import OutboxTracer

            self._tracer = OutboxTracer(tracer_provider)

    @contextmanager
    def transaction(self, db: Any) -> Iterator[OutboxTransaction]:
        """A transaction on ``db`` in which ``send`` writes messages to the outbox.

        Everything written on ``db`` (a ``sqlite3.Connection``, or a ``psycopg.Connection``)
        inside the ``with`` block commits together at its end, the messages included, or
        nothing does: an exception rolls it all back and is raised again.

        Raises:
            ConfigurationError: ``db`` is neither a ``sqlite3.Connection`` nor a
                ``psycopg.Connection``.
            IllegalStateError: ``db`` already has an open transaction (commit it first, or
                write into it with ``write``); the outbox's tables are missing.
            sqlite3.Error, psycopg.Error: the database failed (the transaction is rolled back).
        """
        dialect = database.dialect_of(db)
        if database.in_transaction(db):
            raise IllegalStateError(
                "this connection already has an open transaction: commit it first, or use "
                "Outbox.write(db, ...) to write into it"
            )
        database.begin(db, dialect)
        tx = OutboxTransaction(self, db)
        try:
            yield tx
        except BaseException:
            tx._closed = True
            database.rollback(db)
            self._count(rolled_back=1)
            raise
        tx._closed = True
        database.commit(db)
        self._count(written=tx.count)

    def write(
        self,
        db: Any,
        destination: Destination,
        message: Message,
        *,
        priority: int | None = None,
        time_to_live: float = 0.0,
    ) -> str:
        """Write ``message`` into the transaction ``db`` has open; the application commits it
        (with its own changes) or rolls it back. Returns the message's id.

        For applications that manage their transactions themselves; ``transaction`` does it
        for the others. The count in ``statistics()`` counts it when written, not committed.

        Raises:
            IllegalStateError: ``db`` has no open transaction (the row would commit alone,
                outside the business change it belongs to); the outbox's tables are missing.
            InvalidDestinationError, MessageFormatError, ConfigurationError: as ``send``.
        """
        if not database.in_transaction(db):
            raise IllegalStateError(
                "Outbox.write needs an open transaction on the connection (BEGIN first), so "
                "that the message commits with the change it announces"
            )
        message_id = _insert(db, destination, message, priority, time_to_live, self._tracer)
        self._count(written=1)
        return message_id

    def statistics(self) -> OutboxStatistics:
        """A snapshot of this writer's counters (no database access)."""
        with self._lock:
            return OutboxStatistics(self._written, self._rolled_back)

    def _count(self, *, written: int = 0, rolled_back: int = 0) -> None:
        with self._lock:
            self._written += written
            self._rolled_back += rolled_back


class OutboxTransaction:
    """The messages of one ``Outbox.transaction``; usable until its ``with`` block ends."""

    def __init__(self, outbox: Outbox, db: Any) -> None:
        self._outbox = outbox
        self._db = db
        self._closed = False
        self.count = 0
        """Messages written in this transaction so far."""

    def send(
        self,
        destination: Destination,
        message: Message,
        *,
        priority: int | None = None,
        time_to_live: float = 0.0,
    ) -> str:
        """Write ``message`` for ``destination``; it is sent (PERSISTENT) by a relay once the
        transaction committed. Returns its message id, fixed now: the message's own
        ``message_id`` if the application set one (unique per database), else ``ID:<uuid4>``.

        The message object's headers are set as a JMS send sets them (id, destination,
        timestamp, priority, delivery mode, expiration); later changes to it change nothing.
        ``time_to_live`` (seconds, 0: never) counts from now: a row the relay finds expired
        is deleted unsent.

        Raises:
            ClosedError: the transaction's ``with`` block has ended.
            InvalidDestinationError: not a ``Queue`` or ``Topic`` (a temporary destination
                dies with its connection).
            MessageFormatError: the message cannot be sent as it is.
            ConfigurationError: a bad ``priority`` or ``time_to_live``.
            IllegalStateError: the message id is in the outbox already; the tables are missing.
        """
        if self._closed:
            raise ClosedError("this outbox transaction has ended")
        message_id = _insert(
            self._db, destination, message, priority, time_to_live, self._outbox._tracer
        )
        self.count += 1
        return message_id


def _insert(
    db: Any,
    destination: Destination,
    message: Message,
    priority: int | None,
    time_to_live: float,
    tracer: Any,
) -> str:
    if not isinstance(message, Message):
        raise MessageFormatError(f"not a message: {type(message).__name__}")
    where = destination_text(destination)
    if not isinstance(time_to_live, int | float) or time_to_live < 0:
        raise ConfigurationError(f"time_to_live must be seconds >= 0, not {time_to_live!r}")
    now = time.time()
    message.message_id = message.message_id or new_message_id()
    message.destination = destination
    message.timestamp = now
    message.delivery_mode = DeliveryMode.PERSISTENT
    if priority is not None:
        message.priority = priority
    message.expiration = now + time_to_live if time_to_live > 0 else None
    message.delivery_time = None
    if tracer is not None:
        tracer.written(destination, message)  # its span's context into the message
    payload = payload_of(message)
    dialect = database.dialect_of(db)
    try:
        db.execute(
            dialect.sql(_INSERT), (where, message.message_id, payload, now, message.expiration)
        )
    except Exception as exc:
        if database.is_unique_violation(exc):
            raise IllegalStateError(
                f"message id {message.message_id} is in the outbox already: ids must be unique"
            ) from exc
        database.raise_translated(exc)
    return message.message_id


def outbox_depth(db: Any) -> tuple[int, float | None]:
    """The rows waiting in ``db``'s outbox and the write time (epoch seconds) of the oldest,
    None when it is empty.

    Raises:
        IllegalStateError: the outbox's tables are missing.
    """
    count, oldest = database.read(db, "SELECT count(*), min(created) FROM haclient_outbox")[0]
    return int(count), oldest
