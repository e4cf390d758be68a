"""The relay's SQL, run in its worker thread: open the database, read the next rows in the
reading order, look for rows held back, delete the accepted ones, count what waits.

How this works: SQLite rows are read in ``seq`` order after the last one sent (one writer at a
time: rows commit in that order). PostgreSQL rows are read in ``(txid, seq)`` order, only those
of transactions older than every transaction still running (``txid <
pg_snapshot_xmin(pg_current_snapshot())``): a transaction that commits later can only have a
larger ``txid``, so no row can appear before one already read (X2; the schema is in
``haclient.exactly_once.schema``).
"""

from __future__ import annotations

from typing import Any, Final

from haclient.exactly_once.database import (
    POSTGRESQL,
    Dialect,
    begin,
    commit,
    dialect_of,
    rollback,
)
from haclient.exactly_once.database import connect as connect_database
from haclient.exactly_once.rows import Row
from haclient.exactly_once.schema import require

__all__ = ["START", "Position", "delete", "depth", "held", "open_database", "read"]

Position = tuple[int, int]
"""Where a row is in the reading order: ``(txid, seq)`` (SQLite's txid: 0)."""
START: Final[Position] = (0, 0)
"""Before every row."""

_READ: Final = (
    "SELECT seq, destination, message_id, payload, created, expires, 0"
    " FROM haclient_outbox WHERE seq > ? ORDER BY seq LIMIT ?"
)
_READ_POSTGRESQL: Final = (
    "SELECT seq, destination, message_id, payload, created, expires, txid::text::bigint"
    " FROM haclient_outbox"
    " WHERE (txid, seq) > (%s::text::xid8, %s)"
    " AND txid < pg_snapshot_xmin(pg_current_snapshot())"
    " ORDER BY txid, seq LIMIT %s"
)
"""Only rows of transactions older than every one still running: none can commit later
before them in ``(txid, seq)`` order."""


def open_database(path: str) -> Any:
    """The relay's own connection to ``path`` (a SQLite file or a URL), its schema checked."""
    db = connect_database(path)
    try:
        require(db)
    except BaseException:
        db.close()
        raise
    return db


def read(db: Any, after: Position, limit: int) -> list[Row]:
    """Up to ``limit`` rows after ``after`` in the reading order."""
    if dialect_of(db) is POSTGRESQL:
        found = db.execute(_READ_POSTGRESQL, (str(after[0]), after[1], limit))
    else:
        found = db.execute(_READ, (after[1], limit))
    return [
        Row(seq, to, mid, bytes(payload), created, expires, txid)
        for seq, to, mid, payload, created, expires, txid in found.fetchall()
    ]


def held(db: Any) -> bool:
    """Whether committed rows wait behind an older transaction still running (PostgreSQL:
    a read found none it may send; SQLite never holds a row back)."""
    return db.execute("SELECT EXISTS (SELECT 1 FROM haclient_outbox)").fetchone()[0] is True


def delete(db: Any, seqs: list[int]) -> None:
    """Delete the rows ``seqs`` in one transaction."""
    dialect: Dialect = dialect_of(db)
    begin(db, dialect)
    try:
        for start in range(0, len(seqs), 500):
            chunk = seqs[start : start + 500]
            marks = ",".join("?" * len(chunk))
            db.execute(dialect.sql(f"DELETE FROM haclient_outbox WHERE seq IN ({marks})"), chunk)
    except BaseException:
        rollback(db)
        raise
    commit(db)


def depth(db: Any) -> tuple[int, float | None]:
    """The rows waiting, and the write time of the oldest."""
    count, oldest = db.execute("SELECT count(*), min(created) FROM haclient_outbox").fetchone()
    return int(count), oldest
