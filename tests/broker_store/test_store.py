"""The reference broker's SQLite store and its shared-store HA lock (``chaos.broker.store*``)."""

from __future__ import annotations

import fcntl
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.broker.persistence import Persistence, StoredRef
from chaos.broker.store import SqlitePersistence, Store, StoredMessage, StoredNode
from chaos.broker.store_lock import StoreLock

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "broker.db"


@pytest.fixture
def store(db: Path) -> Iterator[Store]:
    with Store.open(db) as opened:
        yield opened


def spawn(code: str, *args: str) -> subprocess.Popen[str]:
    """Start ``python -c code args...`` with the repository importable; the caller must wait."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(proc: subprocess.Popen[str]) -> None:
    """Make sure a child is gone and reaped, whatever the test did."""
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=10)


def run_to_end(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        stop(proc)
    return proc.returncode, out, err


# -- nodes and messages ------------------------------------------------------------------------


def test_nodes_round_trip_replace_and_delete(db: Path) -> None:
    sub = {"client_id": "c1", "name": "s1", "selector": "color = 'red'", "no_local": True}
    with Store.open(db) as store:
        store.save_node("orders", "queue", {"durable": True})
        store.save_node("prices", "topic", {})
        store.save_node("c1:s1", "subscription", {**sub, "topic": "prices"})
        store.save_node("orders", "queue", {"durable": True, "max": 10})  # replaces
        assert store.delete_node("prices") is True
        assert store.delete_node("nope") is False
    with Store.open(db) as store:
        assert store.nodes() == [
            StoredNode("c1:s1", "subscription", {**sub, "topic": "prices"}),
            StoredNode("orders", "queue", {"durable": True, "max": 10}),
        ]


def test_bad_arguments_are_refused(db: Path, store: Store) -> None:
    with pytest.raises(ValueError, match="kind"):
        store.save_node("x", "exchange", {})  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        store.save_node("x", "queue", {"raw": b"bytes"})
    with pytest.raises(ValueError, match="synchronous"):
        Store.open(db, synchronous="OFF")
    assert store.nodes() == []


def test_messages_round_trip_in_fifo_order(db: Path) -> None:
    with Store.open(db) as store:
        for seq in (5, 1, 3, 2, 4):
            store.add_message("q", seq, bytes([0, seq, 255]), priority=seq % 10, expires_at=None)
        store.add_message("r", 3, b"", delivery_count=2, expires_at=1_900_000_000.25)
        assert store.remove_message("q", 3) is True
        assert store.remove_message("q", 3) is False
        assert store.set_delivery_count("q", 4, 7) is True
        assert store.set_delivery_count("q", 99, 7) is False
    with Store.open(db) as store:
        assert [m.seq for m in store.messages("q")] == [1, 2, 4, 5]
        assert store.messages("q")[2] == StoredMessage("q", 4, b"\x00\x04\xff", 4, 7, None)
        assert store.messages("r") == [StoredMessage("r", 3, b"", 4, 2, 1_900_000_000.25)]
        assert [(m.queue, m.seq) for m in store.messages()] == [
            ("q", 1),
            ("q", 2),
            ("q", 4),
            ("q", 5),
            ("r", 3),
        ]
        assert store.messages("empty") == []
        assert isinstance(store.messages("q")[0].payload, bytes)


def test_next_seq_is_past_every_stored_message_across_restarts(db: Path) -> None:
    with Store.open(db) as store:
        assert store.next_seq() == 1
        store.add_message("a", 10, b"x")
        store.add_message("b", 42, b"y")
        store.add_message("c", 42, b"same seq, other queue")  # fan-out copies may share a seq
        assert store.next_seq() == 43
    with Store.open(db) as store:
        assert store.next_seq() == 43
        store.remove_message("b", 42)
        store.remove_message("c", 42)
        assert store.next_seq() == 11


def test_same_key_twice_raises_and_keeps_the_first(store: Store) -> None:
    store.add_message("q", 1, b"first")
    with pytest.raises(sqlite3.IntegrityError):
        store.add_message("q", 1, b"second")
    assert [m.payload for m in store.messages("q")] == [b"first"]


def test_delete_node_takes_its_messages_and_purge_keeps_the_node(store: Store) -> None:
    store.save_node("q", "queue", {})
    store.save_node("keep", "queue", {})
    for seq in range(1, 4):
        store.add_message("q", seq, b"m")
        store.add_message("keep", seq, b"m")
    assert store.delete_node("q") is True
    assert store.messages("q") == []
    assert store.purge("keep") == 3
    assert store.messages() == []
    assert [n.name for n in store.nodes()] == ["keep"]


def test_uses_wal_and_the_chosen_synchronous_mode(db: Path) -> None:
    for mode, level in (("NORMAL", 1), ("full", 2)):
        with Store.open(db, synchronous=mode) as store:
            assert store._conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
            assert store._conn.execute("PRAGMA synchronous").fetchone() == (level,)


# -- batches -----------------------------------------------------------------------------------


class Boom(Exception):
    pass


def test_an_exception_in_a_batch_leaves_nothing_written(db: Path, store: Store) -> None:
    store.add_message("q", 1, b"before")
    with pytest.raises(Boom), store.batch():
        store.save_node("q", "queue", {})
        store.add_message("q", 2, b"in batch")
        store.remove_message("q", 1)
        store.set_delivery_count("q", 2, 5)
        raise Boom
    assert not store.in_batch
    assert store.nodes() == []
    assert [(m.seq, m.payload) for m in store.messages("q")] == [(1, b"before")]
    with Store.open(db) as again:
        assert [m.seq for m in again.messages("q")] == [1]


def test_a_batch_is_one_transaction_invisible_until_it_commits(db: Path, store: Store) -> None:
    with Store.open(db) as reader:
        store.add_message("q", 1, b"autocommit")
        assert len(reader.messages("q")) == 1  # outside a batch each call commits by itself
        with store.batch():
            for seq in range(2, 102):
                store.add_message("q", seq, b"batched")
            with store.batch():  # nested: joins the outer transaction
                store.remove_message("q", 1)
            assert len(store.messages("q")) == 100
            assert len(reader.messages("q")) == 1  # another connection sees nothing yet
        assert len(reader.messages("q")) == 100


def test_a_failed_inner_batch_undoes_only_its_own_work(store: Store) -> None:
    with store.batch():
        store.add_message("q", 1, b"outer")
        with pytest.raises(Boom), store.batch():
            store.add_message("q", 2, b"inner")
            raise Boom
        with pytest.raises(sqlite3.IntegrityError), store.batch():
            store.add_message("q", 3, b"inner ok")
            store.add_message("q", 1, b"duplicate")
        store.add_message("q", 4, b"outer again")
        store.delete_node("q")  # nested batch inside delete_node
        store.add_message("q", 5, b"after delete")
    assert [m.seq for m in store.messages("q")] == [5]


def test_closing_inside_a_batch_commits_nothing(db: Path) -> None:
    store = Store.open(db)
    store.add_message("q", 1, b"committed")
    with pytest.raises(sqlite3.ProgrammingError), store.batch():
        store.add_message("q", 2, b"never committed")
        store.close()  # what Broker.kill() does
    store.close()
    with Store.open(db) as again:
        assert [m.seq for m in again.messages("q")] == [1]


# -- durability across a real process kill -----------------------------------------------------

WRITER = """
    import os, signal, sys
    from chaos.broker.store import Store

    store = Store.open(sys.argv[1], synchronous=sys.argv[2])
    store.save_node("q", "queue", {"durable": True})
    with store.batch():
        for seq in range(1, 1001):
            store.add_message("q", seq, b"m%d" % seq, priority=seq % 10, expires_at=seq + 0.5)
    store.add_message("q", 1001, b"alone")
    store.remove_message("q", 1)
    store.set_delivery_count("q", 2, 3)
    with store.batch():
        store.add_message("q", 5000, b"uncommitted")
        store.remove_message("q", 3)
        print("killing", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("mode", ["NORMAL", "FULL"])
def test_committed_writes_survive_sigkill_and_uncommitted_ones_vanish(db: Path, mode: str) -> None:
    returncode, out, err = run_to_end(spawn(WRITER, str(db), mode))
    assert returncode == -signal.SIGKILL, err
    assert out == "killing\n"
    assert Path(f"{db}-wal").exists()  # not checkpointed: recovery reads the WAL
    with Store.open(db) as store:
        assert store.nodes() == [StoredNode("q", "queue", {"durable": True})]
        messages = store.messages("q")
        assert [m.seq for m in messages] == [*range(2, 1002)]
        assert messages[0] == StoredMessage("q", 2, b"m2", 2, 3, 2.5)
        assert messages[-1].payload == b"alone"
        assert store.next_seq() == 1002


# -- the HA lock -------------------------------------------------------------------------------


def test_flock_excludes_two_open_files_of_one_process(tmp_path: Path) -> None:
    """The kernel property StoreLock relies on for a master and a slave in one process."""
    path = tmp_path / "probe.lock"
    first = os.open(path, os.O_RDWR | os.O_CREAT)
    second = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(first, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(BlockingIOError):
            fcntl.flock(second, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(first)
        first = -1
        fcntl.flock(second, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        for fd in (first, second):
            if fd >= 0:
                os.close(fd)


@pytest.mark.anyio
async def test_two_locks_in_one_process_and_takeover_on_release(db: Path) -> None:
    master, slave = StoreLock(db), StoreLock(db)
    try:
        assert master.try_acquire() and master.held
        assert master.try_acquire()  # idempotent for the holder
        assert not slave.try_acquire() and not slave.held
        with anyio.move_on_after(0.3) as waited:
            await slave.wait_acquire(poll_interval=0.05)
        assert waited.cancelled_caught and not slave.held
        assert master.path.read_text() == f"{os.getpid()}\n"

        async def release_soon() -> None:
            await anyio.sleep(0.1)
            master.release()

        async with anyio.create_task_group() as tg:
            tg.start_soon(release_soon)
            with anyio.fail_after(2):
                await slave.wait_acquire(poll_interval=0.05)
        assert slave.held and not master.held
        master.release()  # idempotent
        assert not master.try_acquire()
    finally:
        master.release()
        slave.release()
    assert master.try_acquire()  # free again once both let go
    master.release()


def test_lock_as_context_manager(db: Path) -> None:
    with StoreLock(db) as lock:
        assert lock.held
        with pytest.raises(BlockingIOError), StoreLock(db):
            pass
    assert not lock.held


HOLDER = """
    import sys, time
    from chaos.broker.store_lock import StoreLock

    lock = StoreLock(sys.argv[1])
    print("held" if lock.try_acquire() else "busy", flush=True)
    if sys.argv[2] == "hold":
        time.sleep(60)
"""


@pytest.mark.anyio
async def test_slave_takes_over_after_the_holding_process_is_sigkilled(db: Path) -> None:
    poll = 0.05
    holder = spawn(HOLDER, str(db), "hold")
    slave = StoreLock(db)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "held\n"
        assert not slave.try_acquire()
        with anyio.move_on_after(0.2):
            await slave.wait_acquire(poll_interval=poll)
        assert not slave.held
        holder.kill()
        holder.wait(timeout=10)
        died = time.monotonic()
        with anyio.fail_after(2):
            await slave.wait_acquire(poll_interval=poll)
        assert time.monotonic() - died < poll + 0.5
    finally:
        stop(holder)
        slave.release()
    assert holder.returncode == -signal.SIGKILL


def test_a_lock_held_here_keeps_another_process_out(db: Path) -> None:
    with StoreLock(db):
        returncode, out, err = run_to_end(spawn(HOLDER, str(db), "probe"))
        assert (returncode, out) == (0, "busy\n"), err
    returncode, out, err = run_to_end(spawn(HOLDER, str(db), "probe"))
    assert (returncode, out) == (0, "held\n"), err


MASTER = """
    import sys
    from chaos.broker.store import Store
    from chaos.broker.store_lock import StoreLock

    lock = StoreLock(sys.argv[1])
    assert lock.try_acquire()
    store = Store.open(sys.argv[1])
    seq = store.next_seq()
    print("master", flush=True)
    while True:  # pipelined sends, ten per commit, until killed
        with store.batch():
            for _ in range(10):
                store.add_message("q", seq, b"x" * 100)
                seq += 1
        print(seq - 1, flush=True)  # acknowledged only once committed
"""


@pytest.mark.anyio
async def test_ha_pair_slave_finds_every_acknowledged_write_after_master_is_killed(
    db: Path,
) -> None:
    master = spawn(MASTER, str(db))
    slave = StoreLock(db)
    try:
        assert master.stdout is not None
        assert master.stdout.readline() == "master\n"
        lines = [master.stdout.readline() for _ in range(50)]  # let it commit for a while
        assert not slave.try_acquire()
        master.kill()  # mid-stream
        out, _ = master.communicate(timeout=10)
        acknowledged = int([*lines, *out.splitlines()][-1])  # a line cut short only says less
        with anyio.fail_after(2):
            await slave.wait_acquire(poll_interval=0.05)
        with Store.open(db) as store:
            seqs = [m.seq for m in store.messages("q")]
        assert acknowledged >= 500
        assert seqs[:acknowledged] == [*range(1, acknowledged + 1)]
        assert len(seqs) % 10 == 0  # whole batches only: the one cut short left nothing
    finally:
        stop(master)
        slave.release()


# -- model-based -------------------------------------------------------------------------------

Key = tuple[str, int]
Row = tuple[bytes, int, int, float | None]

queues = st.sampled_from(["a", "b", "c"])
seqs = st.integers(min_value=1, max_value=25)
adds = st.tuples(
    st.just("add"),
    queues,
    seqs,
    st.binary(max_size=16),
    st.integers(0, 9),
    st.integers(0, 5),
    st.none() | st.floats(allow_nan=False, allow_infinity=False),
)
removes = st.tuples(st.just("remove"), queues, seqs)
counts = st.tuples(st.just("count"), queues, seqs, st.integers(0, 1000))
purges = st.tuples(st.just("purge"), queues)
simple_ops = adds | adds | removes | counts | counts | purges
ops = simple_ops | st.tuples(st.just("batch"), st.lists(simple_ops, max_size=8), st.booleans())


def apply_to_model(model: dict[Key, Row], op: tuple[Any, ...]) -> None:
    """Apply one op to the model; raise KeyError where the store raises IntegrityError."""
    kind = op[0]
    if kind == "add":
        _, queue, seq, payload, priority, count, expires = op
        if (queue, seq) in model:
            raise KeyError((queue, seq))
        model[queue, seq] = (payload, priority, count, expires)
    elif kind == "remove":
        model.pop((op[1], op[2]), None)
    elif kind == "count":
        if (op[1], op[2]) in model:
            payload, priority, _, expires = model[op[1], op[2]]
            model[op[1], op[2]] = (payload, priority, op[3], expires)
    elif kind == "purge":
        for key in [k for k in model if k[0] == op[1]]:
            del model[key]


def apply_to_store(store: Store, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "add":
        _, queue, seq, payload, priority, count, expires = op
        store.add_message(
            queue, seq, payload, priority=priority, delivery_count=count, expires_at=expires
        )
    elif kind == "remove":
        store.remove_message(op[1], op[2])
    elif kind == "count":
        store.set_delivery_count(op[1], op[2], op[3])
    elif kind == "purge":
        store.purge(op[1])


def contents(store: Store) -> dict[Key, Row]:
    for queue in ("a", "b", "c"):
        seqs_in_order = [m.seq for m in store.messages(queue)]
        assert seqs_in_order == sorted(seqs_in_order)
    return {
        (m.queue, m.seq): (m.payload, m.priority, m.delivery_count, m.expires_at)
        for m in store.messages()
    }


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, max_size=30))
def test_random_operations_match_a_dict_model_also_after_reopen(
    operations: list[tuple[Any, ...]],
) -> None:
    model: dict[Key, Row] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.db"
        with Store.open(path) as store:
            for op in operations:
                if op[0] == "batch":
                    _, inner, fail = op
                    attempt = dict(model)
                    try:
                        for sub in inner:
                            apply_to_model(attempt, sub)
                        ok = not fail
                    except KeyError:
                        ok = False
                    try:
                        with store.batch():
                            for sub in inner:
                                apply_to_store(store, sub)
                            if fail:
                                raise Boom
                    except (Boom, sqlite3.IntegrityError):
                        pass
                    if ok:
                        model = attempt
                else:
                    try:
                        apply_to_model(model, op)
                    except KeyError:
                        with pytest.raises(sqlite3.IntegrityError):
                            apply_to_store(store, op)
                    else:
                        apply_to_store(store, op)
            assert contents(store) == model
        with Store.open(path) as store:
            assert contents(store) == model
            assert store.next_seq() == max((seq for _, seq in model), default=0) + 1


# -- the broker core's Persistence protocol ----------------------------------------------------


def ref(queue: str, message_id: int, payload: bytes = b"p", count: int = 0) -> StoredRef:
    return StoredRef(queue, message_id, payload, count)


def test_sqlite_persistence_implements_the_cores_protocol(db: Path) -> None:
    persistence = SqlitePersistence(db)
    try:
        assert isinstance(persistence, Persistence)
        with pytest.raises(sqlite3.ProgrammingError, match="not open"):
            persistence.enqueued(ref("q", 1))
        assert persistence.recover() == []
        with persistence.batch():  # a burst of pipelined sends: one commit
            for message_id in range(1, 6):
                persistence.enqueued(ref("q", message_id, b"m%d" % message_id))
        persistence.enqueued(ref("sub1", 6, b"fan"))  # one topic message, two subscriptions
        persistence.enqueued(ref("sub2", 6, b"fan"))
        persistence.removed(ref("q", 1))
        persistence.delivery_count_changed(ref("q", 2, count=2))
        persistence.committed([ref("q", 7, b"tx send")], [ref("q", 3), ref("sub1", 6)])
        persistence.committed([ref("q", 8, b"tx")], [])
        with pytest.raises(sqlite3.IntegrityError):  # a failed commit records none of it
            persistence.committed([ref("q", 9, b"x"), ref("q", 9, b"dup")], [ref("q", 4)])
        persistence.enqueued(ref("gone", 10))
        persistence.queue_deleted("gone")
    finally:
        persistence.close()  # like kill(): what is committed is all there is
    with pytest.raises(sqlite3.ProgrammingError):  # a killed broker cannot write any more
        persistence.removed(ref("q", 2))

    try:  # restart: the same object reopens the store
        recovered = persistence.recover()
        assert [(m.queue, m.payload, m.delivery_count) for m in recovered] == [
            ("q", b"m2", 2),
            ("q", b"m4", 0),
            ("q", b"m5", 0),
            ("sub2", b"fan", 0),
            ("q", b"tx send", 0),
            ("q", b"tx", 0),
        ]
        # The i-th recovered message is stored as id i; new ids start past them.
        assert persistence.next_message_id() == 7
        persistence.removed(ref("q", 2))  # the broker acknowledges recovered message 2 ("m4")
        persistence.delivery_count_changed(ref("sub2", 4, count=1))
        persistence.enqueued(ref("q", persistence.next_message_id(), b"new"))
    finally:
        persistence.close()

    persistence = SqlitePersistence(db)  # a new broker process on the same file
    try:
        assert [(m.queue, m.payload, m.delivery_count) for m in persistence.recover()] == [
            ("q", b"m2", 2),
            ("q", b"m5", 0),
            ("sub2", b"fan", 1),
            ("q", b"tx send", 0),
            ("q", b"tx", 0),
            ("q", b"new", 0),
        ]
    finally:
        persistence.close()
