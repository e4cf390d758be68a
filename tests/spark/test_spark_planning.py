"""A bad URL or value fails a job when Spark plans it, on the driver, before any task runs."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.xdist_group("spark"),  # one worker: one SparkSession (a JVM) for every Spark test
]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"url": "failover:(amqp://127.0.0.1:1)?failover.methd=x"}, "failover.methd"),
        ({"url": "bogus://127.0.0.1:1"}, "bogus"),
        ({"url": "amqp://127.0.0.1:1", "receiveTimeout": "inf"}, "receiveTimeout"),
    ],
)
def test_item6_a_write_with_a_bad_url_or_value_fails_at_planning(
    spark: Any, options: dict[str, str], named: str
) -> None:
    frame = spark.range(0, 10, numPartitions=2).selectExpr("cast(id as string) as body")
    writer = frame.write.format("haclient").options(address="planned", **options)
    with pytest.raises(Exception) as caught:
        writer.mode("append").save()
    text = str(caught.value)
    assert "ConfigurationError" in text and named in text
    assert "Failed to initialize Python data source writer" in text  # planning, on the driver
    assert "publish_partition" not in text  # not a task's connect


def test_item6_a_stream_read_of_an_address_without_a_name_fails_when_loaded(spark: Any) -> None:
    reader = spark.readStream.format("haclient").options(url="amqp://127.0.0.1:1")
    with pytest.raises(Exception, match="address 'topic://' names no queue or topic"):
        reader.option("address", "topic://").load()
