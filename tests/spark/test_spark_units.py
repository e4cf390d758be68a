"""The data source's pieces without Spark running: options, rows and messages, partitions."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from haclient.options import CLIENT_OPTIONS

pytestmark = [
    pytest.mark.usefixtures("pyspark_installed"),
    pytest.mark.xdist_group("spark"),  # one worker: one SparkSession (a JVM) for every Spark test
]

URL = "failover:(amqp://app:secret@127.0.0.1:1,amqp://app:secret@127.0.0.1:2)"


def test_options_parse_case_insensitively_and_convert() -> None:
    from haclient.spark.options import SparkOptions

    options = SparkOptions.parse(
        {"URL": URL, "Address": "topic://news", "batchSize": "50", "consume": "TRUE"}
    )
    assert (options.batch_size, options.consume, options.transacted) == (50, True, True)
    assert str(options.destination) == "topic://news"
    assert SparkOptions.parse({"url": URL, "path": "orders"}).destination.address == "orders"
    spark_own = {"url": URL, "address": "q", "checkpointLocation": "/tmp/c"}
    assert SparkOptions.parse(spark_own).address == "q"  # Spark's own options pass


@pytest.mark.parametrize(
    ("raw", "option"),
    [
        ({"url": URL}, "address"),
        ({"url": URL, "address": "q", "batchsize": "0"}, "batchSize"),
        ({"url": URL, "address": "q", "format": "xml"}, "format"),
        ({"url": URL, "address": "q", "batchsiz": "5"}, "batchsiz"),
        ({"url": URL, "address": "q", "consume": "yes"}, "consume"),
        ({"url": URL, "address": "q", "query": "a:b"}, "query"),
    ],
)
def test_bad_options_raise_naming_the_option(raw: dict[str, str], option: str) -> None:
    from haclient.errors import ConfigurationError
    from haclient.spark.options import SparkOptions

    with pytest.raises(ConfigurationError) as caught:
        SparkOptions.parse(raw)
    assert caught.value.option == option


@pytest.mark.parametrize(
    ("raw", "option", "says"),
    [
        ({"url": "failover:(amqp://h:1)?failover.methd=x", "address": "q"}, "url", "methd"),
        ({"url": "bogus://h:1", "address": "q"}, "url", "scheme 'bogus'"),
        ({"url": URL, "address": "q", "receiveTimeout": "nan"}, "receiveTimeout", "finite"),
        ({"url": URL, "address": "q", "receiveTimeout": "inf"}, "receiveTimeout", "finite"),
        ({"url": URL, "address": "q", "receivetimeout": "soon"}, "receiveTimeout", "seconds"),
        ({"url": URL, "address": "topic://"}, "address", "topic://name"),
        ({"url": URL, "path": "queue://"}, "address", "queue://name"),
        ({"url": URL, "address": "q", "BATCHSIZE": "ten"}, "batchSize", "a whole number"),
        ({"url": URL, "address": "q", "maxrowsperbatch": "0"}, "maxRowsPerBatch", "at least 1"),
    ],
)
def test_item6_url_and_values_are_checked_at_planning_naming_the_documented_option(
    raw: dict[str, str], option: str, says: str
) -> None:
    """What fails inside executor tasks otherwise fails here, on the driver, naming the
    option as the docs spell it and saying what is accepted."""
    from haclient.errors import ConfigurationError
    from haclient.spark.options import SparkOptions

    with pytest.raises(ConfigurationError) as caught:
        SparkOptions.parse(raw)
    assert caught.value.option == option
    assert str(caught.value).startswith(option) and says in str(caught.value)
    assert "invalid literal" not in str(caught.value) and "_" not in option


def test_item6_a_misspelt_option_is_answered_with_its_documented_spelling() -> None:
    from haclient.errors import ConfigurationError
    from haclient.spark.options import SparkOptions

    with pytest.raises(ConfigurationError, match=r"did you mean 'receiveTimeout'\?"):
        SparkOptions.parse({"url": URL, "address": "q", "recieveTimeout": "1"})


def test_item5_the_first_connect_retries_within_the_budget_unless_the_url_says_otherwise() -> None:
    from failover.url import parse_url
    from haclient.spark.options import startup_rides_out_takeovers

    for url in (URL, "amqp://127.0.0.1:1", "amqp://127.0.0.1:1?jms.prefetch=5"):
        widened = parse_url(startup_rides_out_takeovers(url), options=CLIENT_OPTIONS)
        assert widened.policy.startup_cyclecount is None  # as many passes as failover makes
        assert widened.policy.give_up_after == 120.0  # ... within its time budget
        assert widened.brokers == parse_url(url, options=CLIENT_OPTIONS).brokers  # credentials kept
    own = URL + "?failover.startupMaxReconnectAttempts=3"
    assert (
        parse_url(
            startup_rides_out_takeovers(own), options=CLIENT_OPTIONS
        ).policy.startup_cyclecount
        == 3
    )


def test_credentials_are_never_shown() -> None:
    from haclient.spark.options import SparkOptions

    shown = repr(SparkOptions.parse({"url": URL, "address": "q", "password": "hunter2"}))
    assert "secret" not in shown and "hunter2" not in shown
    assert "app:******@127.0.0.1:1" in shown


def test_rows_become_messages_in_each_format() -> None:
    from haclient.message import BytesMessage, TextMessage
    from haclient.spark.schema import message_from_row

    row: dict[str, Any] = {"body": "hi", "properties": {"k": "v"}, "correlation_id": "c-1"}
    text = message_from_row(row, "text")
    assert isinstance(text, TextMessage) and text.body == "hi"
    assert (text.properties, text.correlation_id) == ({"k": "v"}, "c-1")
    data = message_from_row({"value": "hé"}, "bytes")
    assert isinstance(data, BytesMessage) and data.body == "hé".encode()
    assert message_from_row({"id": 1, "name": "x"}, "json").body == '{"id":1,"name":"x"}'


def test_messages_become_rows_of_the_schema() -> None:
    from haclient.destination import Queue
    from haclient.message import BytesMessage, TextMessage
    from haclient.spark.schema import read_schema, row_from_message

    message = TextMessage("hi", properties={"n": 5}, message_id="ID:q:0:0:0")
    message.destination, message.timestamp, message.delivery_count = Queue("q"), 0.0, 2
    row = row_from_message(message, "text")
    epoch = datetime.fromtimestamp(0, UTC)
    assert row == ("hi", {"n": "5"}, "ID:q:0:0:0", None, "queue://q", epoch, 2, False)
    assert row_from_message(BytesMessage(b"\x00"), "bytes")[0] == b"\x00"
    assert read_schema("bytes").startswith("body binary,")


def test_rows_split_into_at_most_the_partitions_asked() -> None:
    from haclient.spark.reader import split

    parts = split([(n,) for n in range(5)], 2)
    assert [p.rows for p in parts] == [[(0,), (1,), (2,)], [(3,), (4,)]]
    assert split([], 2) == []


def test_item7_a_default_micro_batch_ships_in_tasks_below_sparks_warning_size() -> None:
    """Spark warns of a task of very large size past 1000 KiB; a default micro-batch (10,000
    rows) of incompressible 240-character bodies is split into partitions below that."""
    import os

    from pyspark import cloudpickle

    from haclient.spark.reader import split

    epoch = datetime.fromtimestamp(0, UTC)
    rows = [
        (os.urandom(120).hex(), {"n": str(n)}, f"ID:q:0:0:{n}", None, "queue://q", epoch, 1, False)
        for n in range(10_000)
    ]
    parts = split(rows, 2)
    assert len(parts) > 2  # more than asked: two would each carry about 1.5 MB
    assert max(len(cloudpickle.dumps(part)) for part in parts) < 1000 * 1024
    assert [row for part in parts for row in part.rows] == rows


def test_O2_the_trace_context_is_carried_in_columns_when_asked() -> None:
    from haclient.message import TextMessage
    from haclient.spark.options import SparkOptions
    from haclient.spark.schema import message_from_row, read_schema, row_from_message

    assert SparkOptions.parse({"url": URL, "address": "q", "traceContext": "true"}).trace_context
    assert read_schema("text", True).endswith(", traceparent string, tracestate string")
    assert "traceparent" not in read_schema("text")
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    message = TextMessage("hi", properties={"traceparent": parent})
    assert row_from_message(message, "text", True)[-2:] == (parent, None)
    assert len(row_from_message(message, "text")) == 8
    row = {"body": "hi", "traceparent": parent, "tracestate": "k=v"}
    sent = message_from_row(row, "text", True)
    assert sent.properties == {"traceparent": parent, "tracestate": "k=v"}
    assert message_from_row(row, "text").properties == {}
