"""The reference broker's persistent store: durable nodes, subscriptions and messages in SQLite.

Synchronous and dependency-free (stdlib :mod:`sqlite3`). The broker core calls it straight from
its event loop, so every call is a handful of prepared statements on one connection and returns
in microseconds; nothing here awaits or spawns threads. One :class:`Store` belongs to one broker
and one thread at a time. The HA lock that decides *which* broker may open a shared store lives in
:mod:`chaos.broker.store_lock`.

Interface
---------
``Store.open(path, *, synchronous="NORMAL") -> Store``
    Open or create the store file: WAL journal, schema created or checked. ``close()`` ends it
    (idempotent; an open batch is rolled back, as a crash would leave it).
``save_node(name, kind, properties) -> None``
    Create or replace a node. ``kind`` is ``"queue"``, ``"topic"`` or ``"subscription"``;
    ``properties`` is a JSON-compatible ``dict`` (str keys; str, int, float, bool, None, list and
    dict values). A durable subscription is a node of kind ``"subscription"`` whose properties
    hold its client id, name, selector, no-local flag and topic; its messages are stored under the
    subscription node's name, like a queue's.
``delete_node(name) -> bool``
    Delete a node *and every message stored under its name*; ``False`` if there was no such node.
``nodes() -> list[StoredNode]``
    Every node, ordered by name.
``add_message(queue, seq, payload, *, priority=4, delivery_count=0, expires_at=None) -> None``
    Store a message. ``(queue, seq)`` is the key: storing the same key twice raises
    :class:`sqlite3.IntegrityError`. The queue need not have been saved as a node.
``remove_message(queue, seq) -> bool`` / ``set_delivery_count(queue, seq, count) -> bool``
    ``False`` if no such message.
``purge(queue) -> int``
    Delete every message under ``queue`` (the node stays); returns how many.
``messages(queue=None) -> list[StoredMessage]``
    One queue's messages in ``seq`` order (FIFO); with no queue, all messages ordered by
    ``(queue, seq)``, which is one query for recovery at start-up.
``next_seq() -> int``
    One more than the largest ``seq`` stored (``1`` when empty). Seqs of messages removed before
    a restart may be handed out again, but never one at or below a stored message's seq, so FIFO
    order by seq survives restarts.
``with store.batch(): ...``
    One SQLite transaction around everything inside. Leaving the block normally commits once;
    an exception rolls all of it back and propagates. Nested batches join the outer transaction
    as savepoints: an exception leaving an inner batch undoes only the inner batch's work (and
    still propagates); nothing is committed until the outermost batch ends. Outside a batch each
    call commits by itself. Never ``await`` inside a batch.

``SqlitePersistence(path, *, synchronous="NORMAL")``
    The broker core's ``chaos.broker.persistence.Persistence`` protocol (``enqueued``,
    ``removed``, ``delivery_count_changed``, ``committed``, ``queue_deleted``, ``recover``,
    ``close``) on top of a Store, plus ``batch()``, ``next_message_id()`` and ``store``.
    ``recover()`` (re)opens the file, ``close()`` closes it. See its docstring for the id
    contract on recovery.

Messages: ``seq`` is assigned by the broker (monotonically increasing; the same seq may be used
for the copies of one message fanned out to several subscriptions). ``priority`` and
``delivery_count`` are stored beside the payload, so the broker can change the count without
re-encoding; the stored ``delivery_count`` is authoritative over any count inside ``payload``.
``expires_at`` is wall-clock epoch seconds (:func:`time.time`), never a monotonic clock, because it
must mean the same after a restart. The store does not expire anything: the broker drops expired
messages it finds with :meth:`Store.remove_message`.

Durability: ``synchronous=NORMAL`` in WAL mode (the default here). A commit has written the
transaction to the WAL file with ``write()`` before it returns, so it is in the kernel's page cache
and survives the *process* being killed at any instant; only the checkpoint is ``fsync``-ed. What
NORMAL gives up is durability of the last commits across an OS crash or power loss (the database
stays consistent; recent commits may roll back), which this test broker's brief puts out of scope.
``synchronous="FULL"`` also ``fsync``-s the WAL at every commit: choose it when the machine itself
may go down; it costs an ``fsync`` per commit. Measured on the 2-core CI VM (256-byte payloads):
NORMAL about 210,000 adds/s in batches of 100 and 36,000-45,000/s at one commit each; FULL about
155,000/s and 5,000/s. So batch whatever arrives together.

Shared store (HA): open a store only while holding its ``StoreLock``; two brokers must never have
it open at once. WAL needs shared memory (``<store>-shm``), so the file must be on a local file
system: the master/slave pair shares it as two processes (or two brokers in one process) on one
host, not across machines over NFS.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

if TYPE_CHECKING:  # imported lazily at run time: this module must load on its own
    from chaos.broker.persistence import RecoveredMessage, StoredRef

__all__ = ["NodeKind", "SqlitePersistence", "Store", "StoredMessage", "StoredNode"]

NodeKind: TypeAlias = Literal["queue", "topic", "subscription"]
_NODE_KINDS: dict[str, NodeKind] = {
    "queue": "queue",
    "topic": "topic",
    "subscription": "subscription",
}
_SYNC_MODES = frozenset({"NORMAL", "FULL", "EXTRA"})

#: ``PRAGMA user_version`` of the schema below; bump it (and migrate) when the schema changes.
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    name       TEXT PRIMARY KEY,
    kind       TEXT NOT NULL CHECK (kind IN ('queue', 'topic', 'subscription')),
    properties TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    queue          TEXT NOT NULL,
    seq            INTEGER NOT NULL,
    priority       INTEGER NOT NULL,
    delivery_count INTEGER NOT NULL,
    expires_at     REAL,
    payload        BLOB NOT NULL,
    UNIQUE (queue, seq)
);
"""

# Constant SQL text: sqlite3's per-connection statement cache keeps each one prepared.
_SAVE_NODE = (
    "INSERT INTO nodes (name, kind, properties) VALUES (?, ?, ?) "
    "ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, properties = excluded.properties"
)
_DELETE_NODE = "DELETE FROM nodes WHERE name = ?"
_NODES = "SELECT name, kind, properties FROM nodes ORDER BY name"
_ADD = (
    "INSERT INTO messages (queue, seq, priority, delivery_count, expires_at, payload) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_REMOVE = "DELETE FROM messages WHERE queue = ? AND seq = ?"
_SET_COUNT = "UPDATE messages SET delivery_count = ? WHERE queue = ? AND seq = ?"
_PURGE = "DELETE FROM messages WHERE queue = ?"
_COLUMNS = "queue, seq, payload, priority, delivery_count, expires_at"
_MESSAGES_OF = f"SELECT {_COLUMNS} FROM messages WHERE queue = ? ORDER BY seq"
_ALL_MESSAGES = f"SELECT {_COLUMNS} FROM messages ORDER BY queue, seq"
_NEXT_SEQ = "SELECT COALESCE(MAX(seq), 0) + 1 FROM messages"
# Renumber every message 1..N in (seq, queue) order, through values above every current one so
# that no step breaks UNIQUE (queue, seq).
_RENUMBER_UP = (
    "UPDATE messages SET seq = ranked.n + ? FROM "
    "(SELECT rowid AS r, ROW_NUMBER() OVER (ORDER BY seq, queue) AS n FROM messages) AS ranked "
    "WHERE messages.rowid = ranked.r"
)
_RENUMBER_DOWN = "UPDATE messages SET seq = seq - ?"
_RENUMBER_OFFSET = "SELECT MAX(COALESCE(MAX(seq), 0), COUNT(*)) FROM messages"
_BY_ARRIVAL = "SELECT queue, payload, delivery_count FROM messages ORDER BY seq, queue"


@dataclass(frozen=True, slots=True)
class StoredNode:
    """A durable queue, topic or subscription as :meth:`Store.nodes` returns it."""

    name: str
    kind: NodeKind
    properties: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A durable message as :meth:`Store.messages` returns it."""

    queue: str
    seq: int
    payload: bytes
    priority: int
    delivery_count: int
    expires_at: float | None


class Store:
    """A broker's durable state in one SQLite file. Create it with :meth:`Store.open`."""

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        """Wrap an open connection; use :meth:`Store.open` instead of calling this."""
        self._conn = connection
        self._depth = 0  # how many batch() blocks are open; 0 = autocommit
        self._closed = False
        self.path = path

    @classmethod
    def open(cls, path: str | Path, *, synchronous: str = "NORMAL") -> Store:
        """Open (creating if needed) the store at ``path`` in WAL mode.

        ``synchronous`` is ``"NORMAL"`` (survives a process kill; the default) or ``"FULL"`` /
        ``"EXTRA"`` (also survive an OS crash, at an ``fsync`` per commit). In a shared-store HA
        pair only the holder of the :class:`~chaos.broker.store_lock.StoreLock` may open it.
        """
        mode = synchronous.upper()
        if mode not in _SYNC_MODES:
            raise ValueError(
                f"synchronous must be one of {sorted(_SYNC_MODES)}, not {synchronous!r}"
            )
        path = Path(path)
        # isolation_level=None: sqlite3 issues no implicit BEGIN; batch() owns transactions.
        # check_same_thread=False: the owner may close it from another thread (one at a time).
        conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, cached_statements=64
        )
        try:
            conn.execute("PRAGMA busy_timeout = 2000")
            (journal,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if str(journal).lower() != "wal":
                raise sqlite3.OperationalError(f"{path}: cannot use WAL (journal mode {journal})")
            conn.execute(f"PRAGMA synchronous = {mode}")
            conn.execute("PRAGMA journal_size_limit = 67108864")  # trim the WAL to 64 MiB
            conn.execute("PRAGMA temp_store = MEMORY")
            (version,) = conn.execute("PRAGMA user_version").fetchone()
            if version not in (0, SCHEMA_VERSION):
                raise sqlite3.DatabaseError(
                    f"{path}: store schema version {version}, this broker knows {SCHEMA_VERSION}"
                )
            if version == 0:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
        except BaseException:
            conn.close()
            raise
        return cls(conn, path)

    def close(self) -> None:
        """Close the store. Idempotent. An open batch is rolled back, not committed."""
        if not self._closed:
            self._closed = True
            self._depth = 0
            self._conn.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has been called."""
        return self._closed

    @property
    def in_batch(self) -> bool:
        """Whether a :meth:`batch` is open."""
        return self._depth > 0

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- transactions --------------------------------------------------------------------------

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group every store call inside the block into one atomic SQLite transaction.

        The outermost batch commits once when the block ends normally; an exception rolls it back
        and propagates. A nested batch is a savepoint inside the outer transaction: an exception
        leaving it undoes only its own work. Do not ``await`` inside: another task's calls would
        join (and share the fate of) this transaction.
        """
        conn = self._conn
        if self._depth == 0:
            conn.execute("BEGIN IMMEDIATE")
            self._depth = 1
            try:
                yield
            except BaseException:
                self._depth = 0
                if not self._closed and conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            self._depth = 0
            if not conn.in_transaction:
                # SQLite rolls a transaction back by itself after some errors (disk full, I/O);
                # later statements then committed one by one. Say so rather than hide it.
                raise sqlite3.OperationalError("the batch's transaction was rolled back by SQLite")
            try:
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        else:
            savepoint = f"batch{self._depth}"
            conn.execute(f"SAVEPOINT {savepoint}")
            self._depth += 1
            try:
                yield
            except BaseException:
                self._depth -= 1
                if not self._closed and conn.in_transaction:
                    conn.execute(f"ROLLBACK TO {savepoint}")
                    conn.execute(f"RELEASE {savepoint}")
                raise
            self._depth -= 1
            conn.execute(f"RELEASE {savepoint}")

    # -- nodes ---------------------------------------------------------------------------------

    def save_node(self, name: str, kind: NodeKind, properties: dict[str, Any]) -> None:
        """Create or replace the node ``name`` (its messages are untouched)."""
        if kind not in _NODE_KINDS:
            raise ValueError(f"node kind must be queue, topic or subscription, not {kind!r}")
        encoded = json.dumps(properties, separators=(",", ":"), allow_nan=False)
        self._conn.execute(_SAVE_NODE, (name, kind, encoded))

    def delete_node(self, name: str) -> bool:
        """Delete the node ``name`` and every message stored under it, atomically."""
        with self.batch():
            self._conn.execute(_PURGE, (name,))
            return self._conn.execute(_DELETE_NODE, (name,)).rowcount > 0

    def nodes(self) -> list[StoredNode]:
        """Every stored node, ordered by name."""
        return [
            StoredNode(name, kind, json.loads(properties))
            for name, kind, properties in self._conn.execute(_NODES)
        ]

    # -- messages ------------------------------------------------------------------------------

    def add_message(
        self,
        queue: str,
        seq: int,
        payload: bytes,
        *,
        priority: int = 4,
        delivery_count: int = 0,
        expires_at: float | None = None,
    ) -> None:
        """Store a message under ``queue``; a second add of the same ``(queue, seq)`` raises."""
        self._conn.execute(_ADD, (queue, seq, priority, delivery_count, expires_at, payload))

    def remove_message(self, queue: str, seq: int) -> bool:
        """Delete a message; ``False`` if it was not stored."""
        return self._conn.execute(_REMOVE, (queue, seq)).rowcount > 0

    def set_delivery_count(self, queue: str, seq: int, count: int) -> bool:
        """Record a message's new delivery-count; ``False`` if it is not stored."""
        return self._conn.execute(_SET_COUNT, (count, queue, seq)).rowcount > 0

    def purge(self, queue: str) -> int:
        """Delete every message stored under ``queue`` and return how many there were."""
        return self._conn.execute(_PURGE, (queue,)).rowcount

    def messages(self, queue: str | None = None) -> list[StoredMessage]:
        """``queue``'s messages in seq order, or with no queue all of them by (queue, seq)."""
        cursor = (
            self._conn.execute(_ALL_MESSAGES)
            if queue is None
            else self._conn.execute(_MESSAGES_OF, (queue,))
        )
        return [StoredMessage(*row) for row in cursor]

    def next_seq(self) -> int:
        """One more than the largest stored seq, or 1 for an empty store."""
        (seq,) = self._conn.execute(_NEXT_SEQ).fetchone()
        return int(seq)


class SqlitePersistence:
    """The broker core's :class:`~chaos.broker.persistence.Persistence` protocol over a Store.

    Lifecycle, matching ``Broker.start()`` / ``kill()`` / ``stop()``: :meth:`recover` opens the
    store file (if it is not open) and returns what it holds; :meth:`close` closes it; the next
    :meth:`recover` opens it again, so one object serves a broker across restarts. Between
    :meth:`close` and :meth:`recover` every other call raises :class:`sqlite3.ProgrammingError`
    rather than reopening the file: a killed broker must not write to a store that the other
    broker of an HA pair may own by now.

    Each call outside a :meth:`batch` commits by itself; :meth:`committed` is one transaction.
    Wrap the handling of everything one socket read brought in ``with persistence.batch():`` to
    make a burst of pipelined durable sends one commit, and settle those transfers only after the
    block has ended (that is, after the commit).

    Ids: rows are keyed by ``(ref.queue, ref.message_id)``. :meth:`recover` renumbers the stored
    messages ``1..N`` in the order it yields them, so the broker must give the i-th recovered
    message the id ``i`` (counting from 1) and start new messages at :meth:`next_message_id`.
    """

    def __init__(self, path: str | Path, *, synchronous: str = "NORMAL") -> None:
        """Persist into ``path``, opened by :meth:`recover` (see :meth:`Store.open`)."""
        self.path = Path(path)
        self.synchronous = synchronous
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        """The open :class:`Store`; raises unless :meth:`recover` opened it and it is still open."""
        store = self._store
        if store is None or store.closed:
            raise sqlite3.ProgrammingError(
                f"{self.path}: the store is not open (recover() opens it)"
            )
        return store

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """The store's :meth:`Store.batch`: one commit for everything inside."""
        return self.store.batch()

    def enqueued(self, ref: StoredRef) -> None:
        """Record a durable message added to a queue."""
        self.store.add_message(
            ref.queue, ref.message_id, ref.payload, delivery_count=ref.delivery_count
        )

    def removed(self, ref: StoredRef) -> None:
        """Forget a message that left its queue for good (no-op if it was never recorded)."""
        self.store.remove_message(ref.queue, ref.message_id)

    def delivery_count_changed(self, ref: StoredRef) -> None:
        """Record a message's new delivery count."""
        self.store.set_delivery_count(ref.queue, ref.message_id, ref.delivery_count)

    def committed(self, enqueued: Sequence[StoredRef], removed: Sequence[StoredRef]) -> None:
        """Record a transaction's sends and acknowledgements atomically (sends first)."""
        store = self.store
        with store.batch():
            for ref in enqueued:
                store.add_message(
                    ref.queue, ref.message_id, ref.payload, delivery_count=ref.delivery_count
                )
            for ref in removed:
                store.remove_message(ref.queue, ref.message_id)

    def queue_deleted(self, queue: str) -> None:
        """Forget a deleted queue: its node record, if any, and all its messages."""
        self.store.delete_node(queue)

    def node_created(self, name: str, kind: str) -> None:
        """Record a lasting queue or topic (idempotent).

        Raises:
            ValueError: ``kind`` is not a node kind of the store.
        """
        node_kind = _NODE_KINDS.get(kind)
        if node_kind is None:
            raise ValueError(f"node kind must be queue, topic or subscription, not {kind!r}")
        self.store.save_node(name, node_kind, {})

    def node_deleted(self, name: str) -> None:
        """Forget a node record."""
        self.store.delete_node(name)

    def recovered_nodes(self) -> list[tuple[str, str]]:
        """``(name, kind)`` of every recorded queue and topic."""
        return [
            (node.name, node.kind) for node in self.store.nodes() if node.kind != "subscription"
        ]

    def recover(self) -> list[RecoveredMessage]:
        """Open the store if needed; every stored message in arrival order, renumbered 1..N."""
        from chaos.broker.persistence import RecoveredMessage

        if self._store is None or self._store.closed:
            self._store = Store.open(self.path, synchronous=self.synchronous)
        store = self._store
        conn = store._conn
        with store.batch():
            (offset,) = conn.execute(_RENUMBER_OFFSET).fetchone()
            conn.execute(_RENUMBER_UP, (offset,))
            conn.execute(_RENUMBER_DOWN, (offset,))
        return [RecoveredMessage(*row) for row in conn.execute(_BY_ARRIVAL)]

    def next_message_id(self) -> int:
        """The id the broker's next new message must get (past every stored one)."""
        return self.store.next_seq()

    def close(self) -> None:
        """Close the store (idempotent); nothing uncommitted is committed."""
        if self._store is not None:
            self._store.close()
