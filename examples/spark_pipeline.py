"""A Spark job through haclient: write a DataFrame to a queue, read the queue back as a stream.

Every Spark task opens its own failover connection with the URL, so killing the broker in use
costs a pause, not rows. The writer's message ids are ``ID:<query>:<batch>:<partition>:<row>``:
a retried task sends the same ids again, and the stream reader drops the replays it has seen.

    python examples/spark_pipeline.py 'failover:(amqp://127.0.0.1:5672,amqp://127.0.0.1:5673)'

Needs the ``spark`` extra (``pip install -e '.[spark]'``) and Java.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

from haclient.spark import HAClientDataSource
from haclient.spark.local import local_session


def session() -> Any:
    """A local[2] SparkSession on loopback, quiet, with the ``haclient`` source registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors: this interpreter
    return local_session(app_name="haclient-pipeline")


def run(spark: Any, url: str, queue: str, count: int) -> int:
    """Write ``count`` JSON orders to ``queue``, read them back; return how many came back."""
    spark.dataSource.register(HAClientDataSource)
    orders = spark.range(count).selectExpr("id", "id % 7 as region", "id * 1.5 as amount")
    (
        orders.write.format("haclient")
        .option("url", url)
        .option("address", queue)
        .option("format", "json")  # the whole row, as a JSON TextMessage
        .option("batchSize", 200)  # messages per transaction
        .mode("append")
        .save()
    )
    name = f"orders_{queue.replace('-', '_')}"
    query = (
        spark.readStream.format("haclient")
        .option("url", url)
        .option("address", queue)
        .option("receiveTimeout", 1)
        .load()
        .selectExpr("cast(get_json_object(body, '$.amount') as double) as amount", "message_id")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="haclient-pipeline-"))
        .trigger(availableNow=True)  # drain what is there, then stop
        .start()
    )
    query.awaitTermination()
    total = spark.sql(f"select count(*) as n, sum(amount) as amount from {name}").first()
    print(f"read back {total.n} orders worth {total.amount:,.1f} from {queue}")
    return int(total.n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url", help="a broker URL or a failover:(...) URL")
    parser.add_argument("--queue", default="spark-orders")
    parser.add_argument("--count", type=int, default=1000)
    args = parser.parse_args(argv)
    spark = session()
    try:
        return 0 if run(spark, args.url, args.queue, args.count) == args.count else 1
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
