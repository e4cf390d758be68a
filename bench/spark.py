"""The PySpark data source on local[2] against plain haclient in one process, same run.

Run from the repository root (needs the ``spark`` extra and Java)::

    .venv/bin/python -m bench.spark --rows 20000 --rounds 2

One run starts the reference broker with its SQLite store (``python -m chaos.broker.cli`` in its
own process, on a free loopback port, stopped by its pid) and one local[2] SparkSession (its
start is not timed). In each round, on new queues, it measures rows per second of:

1. plain write: one blocking producer in this process, TRANSACTED, PERSISTENT text messages with
   deterministic ids, a commit every ``--batch`` messages (what each Spark task does).
2. Spark write: ``spark.range(rows, numPartitions=2)`` written with ``format("haclient")``
   (``batchSize=--batch``), from the call to ``save()`` until it returns.
3. plain read: one CLIENT consumer in this process, acknowledging every ``--batch`` messages.
4. Spark read: ``readStream.format("haclient")`` with ``trigger(availableNow=True)`` into the
   memory sink, from ``start()`` until the query ends (including the ``receiveTimeout`` the last,
   empty batch waits, 0.5 s here).

Each read checks that it got every row once. The table shows the medians over ``--rounds`` and
the ratio Spark/plain.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import haclient
from bench.broker import BrokerProcess
from bench.throughput import PASSWORD, USER, check, machine_info
from haclient import AckMode, Queue, TextMessage

PHASES = ("plain write", "spark write", "plain read", "spark read")


def plain_write(url: str, queue: str, rows: int, batch: int) -> None:
    with haclient.connect(url) as connection:
        session = connection.create_session(AckMode.TRANSACTED)
        producer = session.create_producer(Queue(queue))
        producer.preserve_message_id = True
        for n in range(rows):
            producer.send(TextMessage(str(n), message_id=f"ID:plain:0:0:{n}"))
            if (n + 1) % batch == 0:
                session.commit()
        session.commit()


def plain_read(url: str, queue: str, rows: int, batch: int) -> None:
    bodies: set[str] = set()
    with haclient.connect(url) as connection:
        connection.start()
        session = connection.create_session(AckMode.CLIENT)
        consumer = session.create_consumer(Queue(queue))
        while (message := consumer.receive(timeout=5)) is not None:
            bodies.add(message.body)
            if len(bodies) % batch == 0:
                session.acknowledge()
        session.acknowledge()
    check(bodies == {str(n) for n in range(rows)}, f"plain read got {len(bodies)} of {rows}")


def spark_write(spark: Any, url: str, queue: str, rows: int, batch: int) -> None:
    frame = spark.range(0, rows, numPartitions=2).selectExpr("cast(id as string) as body")
    options = {"url": url, "address": queue, "batchSize": str(batch)}
    frame.write.format("haclient").options(**options).mode("append").save()


def spark_read(spark: Any, url: str, queue: str, rows: int, batch: int) -> None:
    name = f"bench_{uuid.uuid4().hex[:8]}"
    options = {"url": url, "address": queue, "receiveTimeout": "0.5", "maxRowsPerBatch": "20000"}
    query = (
        spark.readStream.format("haclient")
        .options(**options)
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="bench-spark-"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    got = spark.sql(f"select count(distinct body) as n, count(*) as m from {name}").collect()[0]
    check(got.n == rows == got.m, f"spark read got {got.m} rows, {got.n} distinct, of {rows}")


def start_spark() -> Any:
    from haclient.spark.local import local_session

    root = str(Path(__file__).resolve().parents[1])
    os.environ.update(
        PYSPARK_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
    )
    return local_session(config={"spark.ui.showConsoleProgress": "false"})


def timed(run: Callable[[], None], rows: int) -> float:
    """Rows per second of ``run()``."""
    started = time.perf_counter()
    run()
    return rows / (time.perf_counter() - started)


def one_round(spark: Any, url: str, rows: int, batch: int) -> dict[str, float]:
    plain_q, spark_q = f"plain-{uuid.uuid4().hex[:6]}", f"spark-{uuid.uuid4().hex[:6]}"
    return {
        "plain write": timed(lambda: plain_write(url, plain_q, rows, batch), rows),
        "spark write": timed(lambda: spark_write(spark, url, spark_q, rows, batch), rows),
        "plain read": timed(lambda: plain_read(url, spark_q, rows, batch), rows),
        "spark read": timed(lambda: spark_read(spark, url, plain_q, rows, batch), rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args(argv)
    spark = start_spark()
    results: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as work, BrokerProcess("ref", Path(work), store=True) as b:
        url = f"amqp://{USER}:{PASSWORD}@127.0.0.1:{b.port}"
        for n in range(args.rounds):
            results.append(one_round(spark, url, args.rows, args.batch))
            print(f"round {n + 1}: " + ", ".join(f"{k} {v:,.0f}" for k, v in results[-1].items()))
    spark.stop()
    medians = {phase: statistics.median(r[phase] for r in results) for phase in PHASES}
    print(f"\n{args.rows:,} rows, {args.rounds} rounds, medians (rows/s):")
    for phase in PHASES:
        print(f"  {phase:12} {medians[phase]:>10,.0f}")
    for kind in ("write", "read"):
        ratio = medians[f"spark {kind}"] / medians[f"plain {kind}"]
        print(f"  spark/plain {kind}: {ratio:.2f}")
    if args.json:
        report = {"rows": args.rows, "rounds": results, "medians": medians}
        Path(args.json).write_text(json.dumps({**report, "machine": machine_info()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
