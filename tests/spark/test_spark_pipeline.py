"""The PySpark data source end to end on local[2] against a shared-store HA pair.

12,000 rows are written while the serving broker is killed (and one task attempt fails on
purpose, so Spark retries it); the queue must then hold every row, duplicates only with a
repeated message id (a replayed transaction or task). A queue of 12,000 rows is read back as a
stream while the serving broker is killed: every row once, the queue empty. The reader's
duplicate window drops redeliveries by id, so a duplicate with a fresh id would show up as a
row read twice. (The two halves are two tests, so that each stays well within the suite's
30 s per test.)
"""

from __future__ import annotations

import importlib.util
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from failoverkit import HaPair, failover_url

from chaos.broker import BrokerThread

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.xdist_group("spark"),  # one worker: one SparkSession (a JVM) for every Spark test
]

ROWS = 12_000  # several transactions and micro-batches on each side of each kill
DEADLINE = 240.0  # seconds: catches a hang, not a measure of speed


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[HaPair]:
    with HaPair(tmp_path / "store.db") as pair:
        yield pair


def _kill_when(pair: HaPair, address: str, reached: Callable[[int], bool]) -> threading.Thread:
    """A thread that kills the serving broker once the queue's depth satisfies ``reached``."""

    def watch() -> None:
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            try:
                depth = pair.queue_depth(address)
            except (KeyError, StopIteration):  # no queue yet; no master between kill and takeover
                depth = None
            if depth is not None and reached(depth):
                pair.kill_master()
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, name="killer", daemon=True)
    thread.start()
    return thread


def _fail_first_attempt_at(row: int) -> Callable[[int], str]:
    """A row function that fails the first attempt of the task that meets ``row``."""

    def body(value: int) -> str:
        from pyspark import TaskContext

        context = TaskContext.get()
        if value == row and context is not None and context.attemptNumber() == 0:
            raise RuntimeError(f"failing attempt 0 at row {row} on purpose")
        return str(value)

    return body


def _write(spark: Any, url: str, address: str) -> None:
    from pyspark.sql.functions import col, udf

    body = udf(_fail_first_attempt_at(ROWS // 20), "string", useArrow=False)
    frame = spark.range(0, ROWS, numPartitions=2).select(body(col("id")).alias("body"))
    frame.write.format("haclient").option("url", url).option("address", address).option(
        "batchSize", 1000
    ).option("query", "pipeline").mode("append").save()


def _read(spark: Any, url: str, address: str, checkpoint: Path) -> list[Any]:
    query = (
        spark.readStream.format("haclient")
        .option("url", url)
        .option("address", address)
        .option("maxRowsPerBatch", ROWS // 5)
        .option("receiveTimeout", 10)
        .load()
        .writeStream.format("memory")
        .queryName("read_back")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(DEADLINE), "the stream did not drain the queue in time"
    assert query.exception() is None
    return spark.sql("select body, message_id, redelivered from read_back").collect()  # type: ignore[no-any-return]


def test_F7_F11_spark_write_with_the_master_killed_loses_nothing(spark: Any, pair: HaPair) -> None:
    url = failover_url(*pair.members, connectdelay=20, cyclecount=1000)  # 20 s to take over
    address = "spark-write"

    killer = _kill_when(pair, address, lambda depth: depth >= ROWS // 3)
    _write(spark, url, address)
    killer.join(DEADLINE)
    assert not killer.is_alive(), "the master was never killed during the write"
    assert pair.queue_depth(address) >= ROWS  # every row, maybe some replays with repeated ids

    browsed = (
        spark.read.format("haclient")
        .options(url=url, address=address, receiveTimeout="5", maxMessages=2 * ROWS)
        .load()
        .select("body", "message_id")
        .collect()
    )
    assert len(browsed) == pair.queue_depth(address)  # browsing saw the whole queue
    bodies_by_id = {row.message_id: row.body for row in browsed}
    assert len(bodies_by_id) == ROWS  # one id a row: a replay repeats its row's id
    assert sorted(int(body) for body in bodies_by_id.values()) == list(range(ROWS))
    assert all(bodies_by_id[row.message_id] == row.body for row in browsed)
    assert all(id_.startswith("ID:pipeline:0:") for id_ in bodies_by_id)


def test_F7_F11_spark_stream_read_with_the_master_killed_loses_nothing(
    spark: Any, pair: HaPair, tmp_path: Path
) -> None:
    url = failover_url(*pair.members, connectdelay=20, cyclecount=1000)
    address = "spark-read"
    _fill(url, address)

    killer = _kill_when(pair, address, lambda depth: depth <= ROWS // 2)
    rows = _read(spark, url, address, tmp_path / "checkpoint")
    killer.join(DEADLINE)
    assert not killer.is_alive(), "the master was never killed during the read"

    bodies = sorted(int(row.body) for row in rows)
    assert bodies == list(range(ROWS))  # every row exactly once
    assert len({row.message_id for row in rows}) == ROWS
    assert pair.queue_depth(address) == 0


def _fill(url: str, address: str) -> None:
    """ROWS persistent messages with bodies "0".."ROWS-1", in transactions of 1,000."""
    import haclient
    from haclient import AckMode, Queue, TextMessage

    with haclient.connect(url) as connection:
        session = connection.create_session(AckMode.TRANSACTED)
        producer = session.create_producer(Queue(address))
        for n in range(ROWS):
            producer.send(TextMessage(str(n)))
            if n % 1000 == 999:
                session.commit()
        session.commit()


def test_example_spark_pipeline_reads_back_every_order(spark: Any) -> None:
    """``examples/spark_pipeline.py``'s job, on the tests' session and a reference broker."""
    path = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"
    spec = importlib.util.spec_from_file_location("spark_pipeline_example", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    with BrokerThread() as broker:
        assert example.run(spark, broker.url, "example-orders", 300) == 300
        assert broker.queue_depth("example-orders") == 0


def test_F11_stream_forwarding_carries_batch_ids_and_properties(spark: Any, tmp_path: Path) -> None:
    """A stream from one queue into another: the stream writer's ids name the micro-batch
    (``ID:<query>:<batchId>:<partition>:<row>``) and properties travel with the body."""
    import haclient
    from haclient import AckMode, Queue, TextMessage

    with BrokerThread() as broker:
        with haclient.connect(broker.url) as connection:
            producer = connection.create_session().create_producer(Queue("forward-in"))
            for n in range(200):
                producer.send(TextMessage(str(n), properties={"n": n}))
        query = (
            spark.readStream.format("haclient")
            .options(url=broker.url, address="forward-in", receiveTimeout="1")
            .load()
            .writeStream.format("haclient")
            .options(url=broker.url, address="forward-out", query="fwd")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(DEADLINE) and query.exception() is None
        with haclient.connect(broker.url) as connection:
            connection.start()
            consumer = connection.create_session(AckMode.AUTO).create_consumer(Queue("forward-out"))
            received = list(iter(lambda: consumer.receive(timeout=2), None))
    assert sorted(int(m.body) for m in received) == list(range(200))
    assert all(m.properties["n"] == m.body for m in received)  # map<string,string> on the way
    assert all(re.fullmatch(r"ID:fwd:\d+:[01]:\d+", m.message_id) for m in received)
    assert len({m.message_id for m in received}) == 200


def test_batch_read_browses_by_default_and_consumes_when_asked(spark: Any) -> None:
    import haclient
    from haclient import Queue, TextMessage

    with BrokerThread() as broker:
        with haclient.connect(broker.url) as connection:
            producer = connection.create_session().create_producer(Queue("batch-read"))
            for n in range(30):
                producer.send(TextMessage(str(n), correlation_id=f"c-{n}"))
        reader = spark.read.format("haclient").options(url=broker.url, receiveTimeout="1")
        browsed = reader.option("maxMessages", 20).load("batch-read").collect()
        assert sorted(int(r.body) for r in browsed) == list(range(20))
        assert broker.queue_depth("batch-read") == 30  # browsing leaves them
        consumed = reader.options(consume="true", maxMessages=100).load("batch-read").collect()
        assert sorted(r.correlation_id for r in consumed) == sorted(f"c-{n}" for n in range(30))
        assert broker.queue_depth("batch-read") == 0
