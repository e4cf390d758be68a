"""The tables the outbox and the inbox keep in the application's own database, and their upgrades.

How this works: ``install(db)`` makes the tables of the newest version (``SCHEMA_VERSION``) in a
SQLite database, or upgrades older ones step by step (``UPGRADES``: version n -> n + 1, each one
transaction), and switches the database to WAL so that the application's writers, a relay and
an inbox in other threads or processes do not block one another's reads. ``version(db)`` reads
what is installed; ``require(db)`` refuses a database without the tables or with a newer
version than this haclient knows.

Version 1::

    haclient_schema(component TEXT PRIMARY KEY, version INTEGER)   -- 'exactly_once' -> 1
    haclient_outbox(seq INTEGER PRIMARY KEY AUTOINCREMENT,         -- the write order
                    destination TEXT,      -- 'queue:<name>' or 'topic:<name>'
                    message_id TEXT UNIQUE,-- fixed when the row is written
                    payload BLOB,          -- the message, AMQP-encoded (haclient.mapping)
                    created REAL,          -- epoch seconds of the write
                    expires REAL NULL)     -- epoch seconds; NULL: never
    haclient_inbox(inbox TEXT, message_id TEXT, applied REAL,      -- one row per applied message
                   PRIMARY KEY (inbox, message_id)) WITHOUT ROWID

Invariants: a row of ``haclient_outbox`` exists exactly while its message is not known accepted
by a broker (the writer inserts it in the application's transaction, the relay deletes it once
the broker accepted it); a row of ``haclient_inbox`` exists for every message whose effect the
application committed, until its retention ends.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Final

from haclient.errors import ConfigurationError, IllegalStateError

__all__ = ["COMPONENT", "SCHEMA_VERSION", "UPGRADES", "install", "require", "version"]

COMPONENT: Final = "exactly_once"
SCHEMA_VERSION: Final = 1

_V1: Final = (
    "CREATE TABLE IF NOT EXISTS haclient_outbox ("
    " seq INTEGER PRIMARY KEY AUTOINCREMENT,"
    " destination TEXT NOT NULL,"
    " message_id TEXT NOT NULL UNIQUE,"
    " payload BLOB NOT NULL,"
    " created REAL NOT NULL,"
    " expires REAL)",
    "CREATE TABLE IF NOT EXISTS haclient_inbox ("
    " inbox TEXT NOT NULL,"
    " message_id TEXT NOT NULL,"
    " applied REAL NOT NULL,"
    " PRIMARY KEY (inbox, message_id)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS haclient_inbox_applied ON haclient_inbox (inbox, applied)",
)

UPGRADES: Final[Sequence[Sequence[str]]] = (_V1,)
"""``UPGRADES[n]``: the statements that take a database from version n to n + 1 (0: none).
A new version appends its step here; ``install`` runs the missing ones in order."""

MISSING: Final = (
    "this database has no haclient outbox/inbox tables: call "
    "haclient.exactly_once.install(db) once (it is idempotent)"
)


def version(db: sqlite3.Connection) -> int:
    """The schema version installed in ``db`` (0: none)."""
    try:
        row = db.execute(
            "SELECT version FROM haclient_schema WHERE component = ?", (COMPONENT,)
        ).fetchone()
    except sqlite3.OperationalError:  # no haclient_schema table
        return 0
    return 0 if row is None else int(row[0])


def install(db: sqlite3.Connection, *, wal: bool = True) -> int:
    """Make the tables in ``db``, or upgrade them to ``SCHEMA_VERSION``; return the version.

    Idempotent: a database already at the newest version is left as it is. Each upgrade step
    is one transaction, so a crash during an upgrade leaves the previous version intact.
    ``wal`` switches the database to write-ahead logging (a file database; an in-memory one
    stays as it is).

    Raises:
        IllegalStateError: ``db`` has an open transaction, or a newer schema than this
            haclient knows (upgrade haclient instead).
        ConfigurationError: ``db`` is not a ``sqlite3.Connection``.
    """
    _check_connection(db)
    if db.in_transaction:
        raise IllegalStateError("install() needs a connection without an open transaction")
    if wal:
        db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS haclient_schema"
        " (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
    )
    db.commit()
    current = version(db)
    _refuse_newer(current)
    for step in range(current, SCHEMA_VERSION):
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in UPGRADES[step]:
                db.execute(statement)
            db.execute(
                "INSERT OR REPLACE INTO haclient_schema (component, version) VALUES (?, ?)",
                (COMPONENT, step + 1),
            )
        except BaseException:
            db.rollback()
            raise
        db.commit()
    return SCHEMA_VERSION


def require(db: sqlite3.Connection) -> None:
    """Refuse a database whose schema this haclient cannot use.

    Raises:
        IllegalStateError: no tables (``install`` them), an older version (``install``
            upgrades it) or a newer one (upgrade haclient).
        ConfigurationError: ``db`` is not a ``sqlite3.Connection``.
    """
    _check_connection(db)
    current = version(db)
    if current == 0:
        raise IllegalStateError(MISSING)
    _refuse_newer(current)
    if current < SCHEMA_VERSION:
        raise IllegalStateError(
            f"this database has haclient's outbox/inbox schema version {current}, this haclient "
            f"uses {SCHEMA_VERSION}: call haclient.exactly_once.install(db) to upgrade it"
        )


def _refuse_newer(current: int) -> None:
    if current > SCHEMA_VERSION:
        raise IllegalStateError(
            f"this database has haclient's outbox/inbox schema version {current}, newer than "
            f"this haclient's {SCHEMA_VERSION}: upgrade haclient"
        )


def _check_connection(db: object) -> None:
    if not isinstance(db, sqlite3.Connection):
        raise ConfigurationError(f"expected a sqlite3.Connection, not {type(db).__name__}")


def translated(error: sqlite3.Error) -> Exception:
    """The error to raise for a sqlite3 error met on the outbox's or inbox's tables: a missing
    table says how to install them; anything else is returned as it is."""
    if isinstance(error, sqlite3.OperationalError) and "no such table: haclient_" in str(error):
        return IllegalStateError(MISSING)
    return error
