"""The tables the outbox and the inbox keep in the application's own database, and their upgrades.

How this works: ``install(db)`` makes the tables of the newest version (``SCHEMA_VERSION``) in a
SQLite or PostgreSQL database, or upgrades older ones step by step (``UPGRADES``: version n ->
n + 1, each one transaction), and switches a SQLite database to WAL so that the application's
writers, a relay and an inbox in other threads or processes do not block one another's reads.
``version(db)`` reads what is installed; ``require(db)`` refuses a database without the tables
or with a newer version than this haclient knows.

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

PostgreSQL's tables are the same in its types (``BIGINT GENERATED ALWAYS AS IDENTITY``,
``BYTEA``, ``DOUBLE PRECISION``), and its outbox rows carry one more column, ``txid xid8``: the
id of the transaction that wrote the row (``pg_current_xact_id()``). Concurrent transactions
commit in any order, so a row with a smaller ``seq`` may become visible after one with a
larger; the relay reads only rows whose transaction is older than every transaction still
running (``txid < pg_snapshot_xmin(pg_current_snapshot())``), in ``(txid, seq)`` order: no row
can appear later before one it has read (docs/semantics.md, X2).

Invariants: a row of ``haclient_outbox`` exists exactly while its message is not known accepted
by a broker (the writer inserts it in the application's transaction, the relay deletes it once
the broker accepted it); a row of ``haclient_inbox`` exists for every message whose effect the
application committed, until its retention ends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from haclient.errors import IllegalStateError
from haclient.exactly_once.database import (
    MISSING,
    POSTGRESQL,
    SQLITE,
    Dialect,
    begin,
    commit,
    dialect_of,
    in_transaction,
    read,
    rollback,
    translated,
)

__all__ = [
    "COMPONENT",
    "MISSING",
    "SCHEMA_VERSION",
    "UPGRADES",
    "install",
    "require",
    "translated",
    "version",
]

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

_V1_POSTGRESQL: Final = (
    "CREATE TABLE IF NOT EXISTS haclient_outbox ("
    " seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,"
    " txid xid8 NOT NULL DEFAULT pg_current_xact_id(),"
    " destination TEXT NOT NULL,"
    " message_id TEXT NOT NULL UNIQUE,"
    " payload BYTEA NOT NULL,"
    " created DOUBLE PRECISION NOT NULL,"
    " expires DOUBLE PRECISION)",
    "CREATE INDEX IF NOT EXISTS haclient_outbox_order ON haclient_outbox (txid, seq)",
    "CREATE TABLE IF NOT EXISTS haclient_inbox ("
    " inbox TEXT NOT NULL,"
    " message_id TEXT NOT NULL,"
    " applied DOUBLE PRECISION NOT NULL,"
    " PRIMARY KEY (inbox, message_id))",
    "CREATE INDEX IF NOT EXISTS haclient_inbox_applied ON haclient_inbox (inbox, applied)",
)

UPGRADES: Final[Mapping[Dialect, Sequence[Sequence[str]]]] = {
    SQLITE: (_V1,),
    POSTGRESQL: (_V1_POSTGRESQL,),
}
"""``UPGRADES[dialect][n]``: the statements that take a database from version n to n + 1 (0:
none). A new version appends its step here, for each database; ``install`` runs the missing
ones in order."""

_SCHEMA_TABLE: Final = (
    "CREATE TABLE IF NOT EXISTS haclient_schema"
    " (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
)
_TABLE_EXISTS: Final = {
    SQLITE: "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
    POSTGRESQL: "SELECT count(*) FROM pg_catalog.pg_tables WHERE tablename = ?"
    " AND schemaname = ANY (current_schemas(false))",
}


def version(db: Any) -> int:
    """The schema version installed in ``db`` (0: none).

    Raises:
        ConfigurationError: ``db`` is neither a ``sqlite3.Connection`` nor a
            ``psycopg.Connection``.
    """
    dialect = dialect_of(db)
    if read(db, _TABLE_EXISTS[dialect], ("haclient_schema",))[0][0] == 0:
        return 0
    rows = read(db, "SELECT version FROM haclient_schema WHERE component = ?", (COMPONENT,))
    return 0 if not rows else int(rows[0][0])


def install(db: Any, *, wal: bool = True) -> int:
    """Make the tables in ``db``, or upgrade them to ``SCHEMA_VERSION``; return the version.

    Idempotent: a database already at the newest version is left as it is. Each upgrade step
    is one transaction, so a crash during an upgrade leaves the previous version intact.
    ``wal`` switches a SQLite database to write-ahead logging (a file database; an in-memory
    one stays as it is; PostgreSQL has its own).

    Raises:
        IllegalStateError: ``db`` has an open transaction, or a newer schema than this
            haclient knows (upgrade haclient instead).
        ConfigurationError: ``db`` is neither a ``sqlite3.Connection`` nor a
            ``psycopg.Connection``.
    """
    dialect = dialect_of(db)
    if in_transaction(db):
        raise IllegalStateError("install() needs a connection without an open transaction")
    if wal and dialect is SQLITE:
        db.execute("PRAGMA journal_mode=WAL")
    _run_in_transaction(db, dialect, [_SCHEMA_TABLE])
    current = version(db)
    _refuse_newer(current)
    for step in range(current, SCHEMA_VERSION):
        _run_in_transaction(db, dialect, UPGRADES[dialect][step], step + 1)
    return SCHEMA_VERSION


def _run_in_transaction(
    db: Any, dialect: Dialect, statements: Sequence[str], recorded: int = 0
) -> None:
    """``statements`` in one transaction, and the version ``recorded`` if not 0."""
    begin(db, dialect)
    try:
        for statement in statements:
            db.execute(statement)
        if recorded:
            db.execute(dialect.sql("DELETE FROM haclient_schema WHERE component = ?"), (COMPONENT,))
            db.execute(
                dialect.sql("INSERT INTO haclient_schema (component, version) VALUES (?, ?)"),
                (COMPONENT, recorded),
            )
    except BaseException:
        rollback(db)
        raise
    commit(db)


def require(db: Any) -> None:
    """Refuse a database whose schema this haclient cannot use.

    Raises:
        IllegalStateError: no tables (``install`` them), an older version (``install``
            upgrades it) or a newer one (upgrade haclient).
        ConfigurationError: ``db`` is neither a ``sqlite3.Connection`` nor a
            ``psycopg.Connection``.
    """
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
