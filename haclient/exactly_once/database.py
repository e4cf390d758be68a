"""The two databases the outbox and the inbox live in: SQLite (``sqlite3``) and PostgreSQL
(``psycopg``, the ``postgresql`` extra), behind one small set of calls.

How this works: ``dialect_of(db)`` tells which one an application's connection is (a
``sqlite3.Connection`` or a ``psycopg.Connection``); every statement is written once with ``?``
marks and turned into psycopg's ``%s`` for PostgreSQL. ``begin``, ``commit`` and ``rollback``
open and end the one transaction a call needs: SQLite's ``BEGIN IMMEDIATE`` (one writer at a
time, so rows commit in the order of their ``seq``); on PostgreSQL a plain transaction (an
``autocommit`` connection gets an explicit ``BEGIN``, another one the implicit one psycopg
opens). ``read`` runs a query outside a transaction: on a psycopg connection that is not in
``autocommit`` mode, a query opens one, which ``read`` ends again so that the caller's next
``begin`` finds none open. psycopg is imported only when such a connection or a
``postgresql://`` URL is given: SQLite users need nothing but the standard library.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, NoReturn

from haclient._extras import missing_extra
from haclient.errors import ConfigurationError, IllegalStateError

__all__ = [
    "POSTGRESQL",
    "SQLITE",
    "Dialect",
    "begin",
    "commit",
    "connect",
    "dialect_of",
    "in_transaction",
    "is_unique_violation",
    "raise_translated",
    "read",
    "rollback",
    "translated",
]

MISSING: Final = (
    "this database has no haclient outbox/inbox tables: call "
    "haclient.exactly_once.install(db) once (it is idempotent)"
)
_URL_PREFIXES: Final = ("postgresql://", "postgres://")


@dataclass(frozen=True, slots=True)
class Dialect:
    """What differs between the two databases.

    Attributes:
        name: ``sqlite`` or ``postgresql``.
        begin: The statement that opens a write transaction (on PostgreSQL, sent only on an
            ``autocommit`` connection: on another, psycopg opens the transaction itself).
    """

    name: str
    begin: str

    def sql(self, statement: str) -> str:
        """``statement`` (written with ``?`` marks) for this database's driver."""
        return statement if self is SQLITE else _postgres_marks(statement)


SQLITE: Final = Dialect("sqlite", "BEGIN IMMEDIATE")
POSTGRESQL: Final = Dialect("postgresql", "BEGIN")

_MARKED: dict[str, str] = {}


def _postgres_marks(statement: str) -> str:
    marked = _MARKED.get(statement)
    if marked is None:
        marked = _MARKED[statement] = statement.replace("?", "%s")
    return marked


def dialect_of(db: object) -> Dialect:
    """Which database ``db`` is a connection to.

    Raises:
        ConfigurationError: neither a ``sqlite3.Connection`` nor a ``psycopg.Connection`` (an
            async psycopg connection included: the async twins run the blocking calls in a
            worker thread, on a blocking connection).
    """
    if isinstance(db, sqlite3.Connection):
        return SQLITE
    if type(db).__module__.startswith("psycopg") and _psycopg().Connection in type(db).__mro__:
        return POSTGRESQL
    raise ConfigurationError(
        f"expected a sqlite3.Connection or a psycopg.Connection, not {type(db).__name__}"
    )


def in_transaction(db: Any) -> bool:
    """Whether ``db`` has a transaction open."""
    if dialect_of(db) is SQLITE:
        return bool(db.in_transaction)
    return bool(db.info.transaction_status != _psycopg().pq.TransactionStatus.IDLE)


def begin(db: Any, dialect: Dialect) -> None:
    """Open the write transaction of one call (none may be open)."""
    if dialect is SQLITE or db.autocommit:
        db.execute(dialect.begin)
    # psycopg opens a transaction itself before the first statement of a connection that is
    # not in autocommit mode


def commit(db: Any) -> None:
    """Commit the transaction ``begin`` opened."""
    db.commit()


def rollback(db: Any) -> None:
    """Roll back the transaction ``begin`` opened, if one is still open."""
    if in_transaction(db):
        db.rollback()


def read(db: Any, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """The rows of a query run outside a transaction (``statement`` with ``?`` marks); a
    transaction the query opened is ended again.

    Raises:
        IllegalStateError: the outbox's or inbox's tables are missing.
    """
    dialect = dialect_of(db)
    opened = not in_transaction(db)
    try:
        rows = list(db.execute(dialect.sql(statement), tuple(params)).fetchall())
    except Exception as exc:
        if opened:
            rollback(db)
        raise_translated(exc)
    if opened and dialect is POSTGRESQL and in_transaction(db):
        db.rollback()  # a read-only transaction psycopg opened for this query
    return rows


def is_unique_violation(error: BaseException) -> bool:
    """Whether ``error`` is a unique key's violation in either database."""
    if isinstance(error, sqlite3.IntegrityError):
        return "UNIQUE" in str(error)
    return type(error).__name__ == "UniqueViolation"


def translated(error: BaseException) -> BaseException:
    """The error to raise for a database error met on the outbox's or inbox's tables: a missing
    table says how to install them; anything else is returned as it is."""
    text = str(error)
    if isinstance(error, sqlite3.OperationalError) and "no such table: haclient_" in text:
        return IllegalStateError(MISSING)
    if type(error).__name__ == "UndefinedTable" and "haclient_" in text:
        return IllegalStateError(MISSING)
    return error


def raise_translated(error: BaseException) -> NoReturn:
    """Raise what ``translated`` makes of ``error``, from it; ``error`` itself when that is
    the same (never an error whose cause is itself)."""
    better = translated(error)
    if better is error:
        raise error
    raise better from error


def is_url(database: str | os.PathLike[str]) -> bool:
    """Whether ``database`` names a PostgreSQL database (a ``postgresql://`` URL) rather than a
    SQLite file."""
    return isinstance(database, str) and database.startswith(_URL_PREFIXES)


def connect(database: str | os.PathLike[str]) -> Any:
    """A connection of the relay's own: to the PostgreSQL database a ``postgresql://`` URL
    names (``autocommit``: each read sees what committed before it), or to a SQLite file
    (``isolation_level=None``, usable from the relay's worker thread).

    Raises:
        ImportError: a URL without psycopg installed (the ``postgresql`` extra).
        sqlite3.Error, psycopg.Error: the database cannot be opened.
    """
    if is_url(database):
        return _psycopg().connect(str(database), autocommit=True)
    return sqlite3.connect(
        os.fspath(database), check_same_thread=False, isolation_level=None, timeout=30.0
    )


def _psycopg() -> Any:
    try:
        import psycopg
    except ModuleNotFoundError as missing:
        raise missing_extra("haclient.exactly_once (PostgreSQL)", "postgresql", missing) from None
    return psycopg
