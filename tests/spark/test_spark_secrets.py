"""No secret leaks through Spark: a canary password in the data source's URL and in its
``password`` option is in no plan Spark shows (``explain``, the query execution) and in no
error of a task whose login was refused (tests/rules/test_no_secret_leaks.py searches the rest)."""

from __future__ import annotations

import traceback
from typing import Any

import pytest

from chaos.broker import BrokerThread

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.xdist_group("spark"),  # one worker: one SparkSession (a JVM) for every Spark test
]

PASSWORD = "canarySPARKPW-5c81d7"


def plans(frame: Any, capsys: pytest.CaptureFixture[str]) -> str:
    """Every plan Spark shows for ``frame``: each explain mode, and the query execution."""
    capsys.readouterr()
    for mode in ("simple", "extended", "formatted", "cost"):
        frame.explain(mode=mode)
    return capsys.readouterr().out + frame._jdf.queryExecution().toString()


def test_T5_no_canary_password_in_spark_plans_or_task_errors(
    spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with BrokerThread(users={"app": PASSWORD}) as broker:
        in_url = f"amqp://app:{PASSWORD}@127.0.0.1:{broker.port}"
        as_option = {"url": broker.url, "username": "app", "password": PASSWORD}
        body = spark.range(0, 6, numPartitions=2).selectExpr("cast(id as string) as body")
        body.write.format("haclient").options(url=in_url).mode("append").save("secrets")
        assert broker.queue_depth("secrets") == 6  # the password was given and used

        shown: list[str] = []
        for options in ({"url": in_url}, as_option):
            reader = spark.read.format("haclient").options(receiveTimeout="1", **options)
            frame = reader.option("maxMessages", 6).load("secrets")
            assert sorted(int(row.body) for row in frame.collect()) == list(range(6))
            shown.append(plans(frame, capsys))
            assert "haclient" in shown[-1]  # the plans name the source: they were read

        # A task whose login is refused: the error says so, without the password it was given.
        refused = f"amqp://intruder:{PASSWORD}@127.0.0.1:{broker.port}"
        writer = body.write.format("haclient").options(url=refused).mode("append")
        with pytest.raises(Exception) as caught:
            writer.save("secrets")
        error = "".join(traceback.format_exception(caught.value))
        assert "AuthenticationError" in error  # it is the task's refused login
        shown.append(error + capsys.readouterr().err)

    assert all(PASSWORD not in text for text in shown), [
        text[max(0, text.find(PASSWORD) - 120) :][:200] for text in shown if PASSWORD in text
    ]
