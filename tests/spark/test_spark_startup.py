"""A data source task that starts while a standby is taking over (no Spark session needed).

``publish_partition`` is what every write task runs; outside Spark it publishes as partition 0.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from failoverkit import HaPair

pytestmark = [
    pytest.mark.usefixtures("pyspark_installed"),
    pytest.mark.timeout(120),
    pytest.mark.xdist_group("spark"),  # one worker: one SparkSession (a JVM) for every Spark test
]

TAKEOVER = 1.5  # seconds: how often the standby tries the store's lock
DEADLINE = 60.0  # seconds: catches a hang, not a measure of speed


def test_item5_a_write_task_started_during_a_takeover_rides_it_out(tmp_path: Path) -> None:
    """The default URL (no ``failover.*`` option): the task's first connect must not give up
    after one pass over the list while the standby has not yet taken the lock."""
    from pyspark.sql import Row

    from haclient.spark.options import SparkOptions
    from haclient.spark.writer import publish_partition

    with HaPair(tmp_path / "store.db", poll_interval=TAKEOVER) as pair:
        url = f"failover:({','.join(member.url for member in pair.members)})"
        options = SparkOptions.parse({"url": url, "address": "startup"})
        pair.kill_master()  # neither broker listens until the standby polls the lock again
        started = time.monotonic()
        done = publish_partition(options, iter([Row(body=str(n)) for n in range(50)]), "s")
        assert time.monotonic() - started < DEADLINE
        assert done.rows == 50
        assert pair.queue_depth("startup") == 50
