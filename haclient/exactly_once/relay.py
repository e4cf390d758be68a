"""The relay: sends what the outbox holds through a failover connection, then deletes it.

How this works: one task reads the oldest rows (``batch_size``, in write order, after the last
row it sent), sends them on one anonymous producer with ``send_encoded_all`` (pipelined, each
row's stored bytes as they are, with the id its row fixed; a connection that traces sends each
with ``send_async`` instead, in its span), takes every outcome, and deletes the rows the broker
accepted (and those that expired unsent) in one transaction. The next batch is read while one
is in flight and a batch's rows are deleted while the next one is sent. An empty outbox is
looked at again every ``poll_interval``. A send the broker refused leaves its row, which is
tried again after ``retry_delay`` (reading from the oldest row again). The database (SQLite, or
PostgreSQL through psycopg) runs in worker threads, one call at a time (``anyio.to_thread``
with a limiter of one), so the event loop never waits on the disk.

The reading order: SQLite lets one transaction write at a time, so rows commit in ``seq`` order
and a read that sees a row sees every row before it. PostgreSQL's concurrent transactions
commit in any order: a read returns only rows written by transactions older than every one
still running (``txid < pg_snapshot_xmin(pg_current_snapshot())``), in ``(txid, seq)`` order,
so a row committed late by an older transaction is waited for, never skipped, and never sent
after a row of a younger transaction (``haclient.exactly_once.schema``).

What this promises (docs/semantics.md, X2): a row is deleted only after a broker accepted its
message, so a relay killed at any point sends, once restarted, every row not known accepted,
again with the same id; a consumer may see a message twice (recognised by its id, X3), never
zero times. Rows for one destination are sent in write order; after a loss the connection's own
re-send (F11) keeps that order. While the connection fails over, the sends wait (F2) and are
sent again (F11): the relay rides out broker failures without a row lost or reordered.
A refused message is the exception: the rows after it may be accepted before its next try.

The blocking twin (``haclient.exactly_once.Relay``) runs this task on a blocking connection's
event loop; the ``haclient-relay`` command runs one in a process of its own.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import anyio
import anyio.abc
import anyio.to_thread

from haclient.aio.connection import Connection
from haclient.aio.producer import MessageProducer
from haclient.aio.session import Session
from haclient.errors import ClosedError, ConfigurationError, HAClientError
from haclient.exactly_once.database import POSTGRESQL, dialect_of, is_url
from haclient.exactly_once.reading import (
    START,
    Position,
    delete,
    depth,
    held,
    open_database,
    read,
)
from haclient.exactly_once.rows import Row, encoded_of, message_of, parse_destination
from haclient.message import Message

__all__ = ["Relay", "RelayStatistics"]

log = logging.getLogger("haclient.exactly_once")

T = TypeVar("T")

_DEPTH_EVERY: Final = 1.0
"""Seconds between two counts of the outbox's depth (a statistic; never on each batch)."""


@dataclass(frozen=True, slots=True)
class RelayStatistics:
    """A relay's state and counters.

    Attributes:
        relayed: Messages a broker accepted and whose rows were deleted (a counter).
        expired: Rows deleted unsent because their time to live had passed.
        refused: Sends a broker refused (their rows wait for the next try).
        batches: Batches sent.
        depth: Rows waiting at the last count (counted at most once a second).
        oldest_created: Write time (epoch seconds) of the oldest waiting row then; None: none.
        running: Whether the relay's task runs.
        error: Why the relay stopped, if it stopped on its own (say, failover gave up).
    """

    relayed: int
    expired: int
    refused: int
    batches: int
    depth: int
    oldest_created: float | None
    running: bool
    error: BaseException | None

    def oldest_age(self, now: float | None = None) -> float:
        """Seconds the oldest waiting row has waited (0 when none)."""
        if self.oldest_created is None:
            return 0.0
        return max(0.0, (time.time() if now is None else now) - self.oldest_created)


class Relay:
    """Relays the outbox of ``database`` through ``connection`` (X2).

    Use it as an async context manager (the relay runs in a task it owns until the block
    ends), or await ``run()`` in a task of your own and ``close()`` it from another.

    Args:
        connection: A connection (``haclient.aio.connect``); the relay makes its own session.
        database: The SQLite file the application's outbox writes to, or the
            ``postgresql://`` URL of its PostgreSQL database (the ``postgresql`` extra).
        batch_size: Rows read and sent at a time (>= 1).
        poll_interval: Seconds between two looks at an empty outbox (> 0).
        retry_delay: Seconds before a row the broker refused is sent again (>= 0).
        close_timeout: Seconds ``close()`` waits for the batch in flight.

    Raises:
        ConfigurationError: a bad argument.
    """

    def __init__(
        self,
        connection: Connection,
        database: str | os.PathLike[str],
        *,
        batch_size: int = 500,
        poll_interval: float = 0.05,
        retry_delay: float = 1.0,
        close_timeout: float = 10.0,
    ) -> None:
        if not isinstance(connection, Connection):
            raise ConfigurationError(
                f"a Relay needs a haclient.aio.Connection, not {type(connection).__name__}"
            )
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigurationError(f"batch_size must be an int >= 1, not {batch_size!r}")
        if not isinstance(poll_interval, int | float) or poll_interval <= 0:
            raise ConfigurationError(f"poll_interval must be seconds > 0, not {poll_interval!r}")
        if not isinstance(retry_delay, int | float) or retry_delay < 0:
            raise ConfigurationError(f"retry_delay must be seconds >= 0, not {retry_delay!r}")
        self._connection = connection
        self._database: str = str(database) if is_url(database) else os.fspath(database)
        self._batch_size = batch_size
        self._poll_interval = float(poll_interval)
        self._retry_delay = float(retry_delay)
        self._close_timeout = float(close_timeout)
        self._limiter = anyio.CapacityLimiter(1)
        self._stopping = False
        self._running = False
        self._used = False
        self._finished = anyio.Event()
        self._ready = anyio.Event()
        self._wake = anyio.Event()
        self._group: anyio.abc.TaskGroup | None = None
        self._full_reads = 0  # reads begun from the oldest row (cursor 0), numbered
        self._empty_through = 0  # the number of the last of them that found the outbox empty
        self._emptied = anyio.Event()  # set (and replaced) at each such empty read
        self._relayed = 0
        self._expired = 0
        self._refused = 0
        self._batches = 0
        self._depth = 0
        self._oldest: float | None = None
        self._counted_at = 0.0
        self._error: BaseException | None = None

    # Lifetime -----------------------------------------------------------------------------------

    async def __aenter__(self) -> Relay:
        """Start the relay in a task of its own; returns once it is ready to send.

        Raises:
            IllegalStateError: the database has no outbox tables (or a schema to upgrade).
            ClosedError: the connection is closed; the relay was used before.
            sqlite3.Error, psycopg.Error: the database cannot be opened.
        """
        group = anyio.create_task_group()
        await group.__aenter__()
        try:
            group.start_soon(self.serve_in_background)  # never raises: wait_ready does
            await self.wait_ready()
        except Exception:  # the relay stopped before it was ready: its task ends on its own
            await group.__aexit__(None, None, None)
            raise
        except BaseException as exc:  # cancelled: the task group's own exit, told why (a
            # shielded scope of our own around it would be exited out of order)
            self._stopping = True
            self._wake.set()
            await group.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._group = group
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()
        group, self._group = self._group, None
        if group is not None:
            await group.__aexit__(None, None, None)

    async def run(self) -> None:
        """Relay until ``close()``; then return.

        Raises:
            ConnectionFailedError: failover gave up (the rows not sent stay for the next run).
            IllegalStateError: the database has no outbox tables.
            ClosedError: the connection was closed under the relay; the relay was used before.
            sqlite3.Error, psycopg.Error: the database failed.
        """
        await self._serve(anyio.TASK_STATUS_IGNORED, before=True, after=True)

    async def close(self) -> None:
        """Stop relaying: the batch in flight finishes first (its outcomes come, its rows are
        deleted), within ``close_timeout``; what is left waits for the next
        relay. Idempotent; callable from any task of the relay's loop."""
        self._stopping = True
        self._wake.set()
        if self._used:
            with anyio.move_on_after(self._close_timeout):
                await self._finished.wait()

    async def wait_stopped(self) -> None:
        """Wait until the relay stopped: closed, or stopped on its own (``statistics().error``
        says why)."""
        await self._finished.wait()

    def wake(self) -> None:
        """Look at the outbox now instead of after ``poll_interval`` (from the relay's loop)."""
        self._wake.set()

    async def wait_empty(self, timeout: float | None = None) -> None:
        """Wait until the relay found the outbox empty after this call began: every row
        committed before the call was relayed (or expired).

        Raises:
            TimeoutError: not so within ``timeout`` seconds.
            ClosedError: the relay is closed or stopped (``statistics().error`` says why).
        """
        seen = self._full_reads  # a read begun later, if it finds nothing, says so
        self._wake.set()
        with anyio.fail_after(timeout):
            while self._empty_through <= seen:
                if self._finished.is_set() or (self._stopping and not self._running):
                    raise ClosedError("the relay is not running") from self._error
                await self._emptied.wait()

    @property
    def database(self) -> str:
        """The database the relay reads (a SQLite file, or a PostgreSQL URL)."""
        return self._database

    def statistics(self) -> RelayStatistics:
        """A snapshot of the relay's counters (plain reads; safe from any thread)."""
        return RelayStatistics(
            relayed=self._relayed,
            expired=self._expired,
            refused=self._refused,
            batches=self._batches,
            depth=self._depth,
            oldest_created=self._oldest,
            running=self._running,
            error=self._error,
        )

    # The task -----------------------------------------------------------------------------------

    async def serve_in_background(self) -> None:
        """``run()`` for a task nobody awaits (the blocking relay's): it never raises; what
        stopped it is in ``statistics().error`` and raised by ``wait_ready``."""
        await self._serve(anyio.TASK_STATUS_IGNORED, before=False, after=False)

    async def wait_ready(self) -> None:
        """Wait until the relay is ready to send, or has stopped.

        Raises:
            Exception: what stopped it before it was ready (as ``run()`` raises it).
        """
        await self._ready.wait()
        if not self._running and self._error is not None:
            raise self._error

    async def _serve(
        self,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
        *,
        before: bool = True,
        after: bool = False,
    ) -> None:
        """Relay until closed; raise what stopped it ``before`` it was ready, or ``after``."""
        if self._used:
            raise ClosedError("a Relay runs once; make a new one")
        self._used = True
        db: Any = None
        session: Session | None = None
        try:
            db = await self._db(open_database, self._database)
            session = await self._connection.create_session()
            producer = await session.create_producer(None)
            producer.preserve_message_id = True
            self._running = True
            self._ready.set()
            task_status.started()
            await self._loop(db, producer)
        except Exception as exc:
            self._error = exc
            if (before and not self._running) or (after and self._running):
                raise
            log.error("the outbox relay stopped: %s", exc)
        finally:
            self._running = False
            self._ready.set()
            with anyio.CancelScope(shield=True):
                await self._cleanup(db, session)
            self._finished.set()
            self._emptied.set()  # wait_empty() sees the relay stopped

    async def _cleanup(self, db: Any, session: Session | None) -> None:
        if session is not None:
            try:
                with anyio.move_on_after(self._close_timeout):
                    await session.close()
            except HAClientError:
                pass  # the connection is gone: nothing to close
        if db is not None:
            await self._db(db.close)

    async def _loop(self, db: Any, producer: MessageProducer) -> None:
        error: Exception | None = None
        async with anyio.create_task_group() as group:  # the database calls in the background
            try:
                await self._relay(db, producer, group)
            except Exception as exc:  # raised as it is, once the calls in flight ended
                error = exc
        if error is not None:
            raise error

    async def _relay(self, db: Any, producer: MessageProducer, group: anyio.abc.TaskGroup) -> None:
        """Send batch after batch, each read (after ``cursor``) while the one before is sent,
        its accepted rows deleted while the next one is sent.

        Invariants: every row at or before ``cursor`` (a ``(txid, seq)`` position) was sent
        in a batch whose outcomes all came; it is deleted (or being deleted) unless the broker
        refused it, and then the cursor goes back to the start before the next send. A read
        returns only rows no later commit can precede in the reading order (see the module
        doc), so a read that sees a row sees every row before it. An empty read counts as "the
        outbox was empty" only from the start with no delete in flight, and, on PostgreSQL,
        no committed row held back behind an older transaction still running.
        """
        cursor = START
        reading = self._read_after(group, db, cursor)
        deleting: _Job[None] | None = None
        while not self._stopping:
            rows = await reading.result()
            if not rows:
                if deleting is not None:
                    await deleting.result()
                    deleting = None
                if cursor == START:
                    waiting = dialect_of(db) is POSTGRESQL and await self._db(held, db)
                    if not waiting:  # nothing held back behind an older transaction
                        self._found_empty(reading)
                    await self._idle(self._poll_interval)
                cursor = START
                reading = self._read_after(group, db, cursor)
                continue
            cursor = rows[-1].position
            reading = self._read_after(group, db, cursor)
            done, refused = await self._send(producer, rows)
            if deleting is not None:
                await deleting.result()
            deleting = self._start(group, delete, db, done) if done else None
            self._batches += 1
            if time.monotonic() - self._counted_at >= _DEPTH_EVERY:
                self._depth, self._oldest = await self._db(depth, db)
                self._counted_at = time.monotonic()
            if refused:  # tried again, from the oldest row, after retry_delay
                await reading.result()
                if deleting is not None:
                    await deleting.result()
                    deleting = None
                await self._idle(self._retry_delay)
                cursor = START
                reading = self._read_after(group, db, cursor)
        if deleting is not None:
            await deleting.result()

    def _read_after(self, group: anyio.abc.TaskGroup, db: Any, cursor: Position) -> _Job[Any]:
        """Read the batch after ``cursor`` in the background (a read from the oldest row is
        numbered: ``wait_empty`` waits for one begun after its call to find nothing)."""
        job = self._start(group, read, db, cursor, self._batch_size)
        if cursor == START:
            self._full_reads += 1
            job.number = self._full_reads
        return job

    def _found_empty(self, reading: _Job[Any]) -> None:
        self._empty_through = reading.number
        self._depth, self._oldest = 0, None
        self._emptied.set()
        self._emptied = anyio.Event()

    def _start(self, group: anyio.abc.TaskGroup, fn: Callable[..., T], *args: Any) -> _Job[T]:
        """``fn(*args)`` in the relay's worker thread, in the background."""
        job: _Job[T] = _Job()
        group.start_soon(job.run, self._db, fn, *args)
        return job

    async def _idle(self, seconds: float) -> None:
        with anyio.move_on_after(seconds):
            await self._wake.wait()
        if self._wake.is_set():
            self._wake = anyio.Event()

    async def _send(self, producer: MessageProducer, rows: Sequence[Row]) -> tuple[list[int], int]:
        """Send ``rows``; return the seqs to delete (accepted or expired) and how many a
        broker refused. A loss of the connection is waited out by the sends themselves (F2,
        F11); only its end (failover gave up, closed) raises."""
        now = time.time()
        done = [row.seq for row in rows if row.expires is not None and row.expires <= now]
        self._expired += len(done)
        live = [row for row in rows if row.expires is None or row.expires > now]
        outcomes: Sequence[BaseException | None]
        if producer.traced:  # each send in its span (send_async's), the trace's start
            outcomes = await self._send_each(producer, live, now)
        else:  # the stored bytes as they are, pipelined, no task per message
            outcomes = await producer.send_encoded_all([encoded_of(row, now) for row in live])
        refused = 0
        for row, error in zip(live, outcomes, strict=True):
            if error is None:
                done.append(row.seq)
                self._relayed += 1
            else:
                refused += 1
                self._refused += 1
                log.warning(
                    "the broker refused outbox row %d, tried again later: %s", row.seq, error
                )
        return done, refused

    async def _send_each(
        self, producer: MessageProducer, rows: Sequence[Row], now: float
    ) -> Sequence[BaseException | None]:
        """The general send: each row decoded and sent with ``send_async``; the outcomes in
        the order of ``rows``."""
        outcomes: list[BaseException | None] = [None] * len(rows)
        pending = len(rows)
        all_in = anyio.Event()

        def completed(index: int, error: BaseException | None) -> None:
            nonlocal pending
            outcomes[index] = error
            pending -= 1
            if pending == 0:
                all_in.set()

        from haclient.aio.tracing import continuing  # a traced connection has opentelemetry

        for index, row in enumerate(rows):
            message = message_of(row.payload)
            ttl = 0.0 if row.expires is None else row.expires - now
            with continuing(message):  # the send span: a child of the outbox write's, if any
                await producer.send_async(
                    parse_destination(row.destination),
                    message,
                    on_completion=_completion(completed, index),
                    priority=message.priority,
                    time_to_live=ttl,
                )
        if pending > 0:
            await all_in.wait()
        return outcomes

    async def _db(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiter)

    def __repr__(self) -> str:
        state = "running" if self._running else "stopped"
        return f"<Relay {self._database} {state} relayed={self._relayed}>"


def _completion(
    completed: Callable[[int, BaseException | None], None], index: int
) -> Callable[[Message, BaseException | None], None]:
    return lambda _message, error: completed(index, error)


class _Job(Generic[T]):
    """A database call running in the background; ``result()`` waits for it."""

    def __init__(self) -> None:
        self.number = 0
        self._done = anyio.Event()
        self._value: T | None = None
        self._error: Exception | None = None

    async def run(self, db: Callable[..., Awaitable[T]], fn: Callable[..., T], *args: Any) -> None:
        try:
            self._value = await db(fn, *args)
        except Exception as exc:  # raised by result()
            self._error = exc
        finally:
            self._done.set()

    async def result(self) -> T:
        """The call's value once it ended.

        Raises:
            Exception: what the call raised.
        """
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]
