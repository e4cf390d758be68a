"""Rule F5: while the plan waits before a refused broker's next attempt its port is watched,
and a wait through which the port refused stands in for the attempt (no connect is made):
the attempt counts as refused everywhere a refused connect counts (F4's give-up after
``failover.cyclecount`` passes, ``haclient_connection_attempts{outcome="failed"}``).
Reference brokers, through both APIs."""

from __future__ import annotations

import logging

import pytest
from apikit import Api
from failoverkit import Recorder, brokers, connected

import failover.ports
from chaos.net import free_port

pytestmark = pytest.mark.anyio

PASSES = 20


async def test_F5_F4_attempts_stood_in_for_count_as_refused_ones(
    api: Api, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both ports refuse for the whole failover: it gives up after ``PASSES`` passes, each
    broker's attempts counted failed once per pass, most of them stood in for."""
    caplog.set_level(logging.DEBUG, "haclient.failover")
    # Any refusal the process's port watcher saw is the port's latest word, however late its
    # thread woke: a late tick on a busy machine turns a stand-in into a real attempt (the
    # safe side), and this test would see no stand-in at all. Nothing here opens a port.
    monkeypatch.setattr(failover.ports._WATCHER, "slack", float(PASSES))
    with brokers(1) as (first,):
        closed = free_port()
        recorder = Recorder()
        url = f"failover:({first.url},amqp://127.0.0.1:{closed})?failover.cyclecount={PASSES}"
        async with await connected(api, url, recorder) as connection:
            first.kill()
            await recorder.wait_for("failed")
            stats = await connection.statistics()
    live, dead = f"127.0.0.1:{first.port}", f"127.0.0.1:{closed}"
    assert dict(stats.connection_attempts) == {live: PASSES + 1, dead: PASSES}
    assert dict(stats.connection_attempts_failed) == {live: PASSES, dead: PASSES}
    failed = [r for r in caplog.records if r.msg.startswith("attempt %d to connect to")]
    stood_in = [r for r in caplog.records if "stands as refused" in r.msg]
    assert len(failed) == 2 * PASSES
    assert stood_in  # the ports refused through the fast phase's waits
