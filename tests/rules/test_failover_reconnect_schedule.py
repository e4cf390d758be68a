"""Rule F5 with a reconnect schedule given to ``connect()`` as tenacity strategies, end to end
on reference brokers, through both APIs: the wait paces the attempts (one broker each, in the
policy's order) and the stop ends the failover, in place of the URL's delays and budget.
"""

from __future__ import annotations

import time

import anyio
import pytest
import tenacity
from apikit import Api
from failoverkit import TIMEOUT, Recorder, brokers, connected, port_of

from haclient.destination import Queue
from haclient.errors import ConnectionFailedError
from haclient.message import TextMessage

pytestmark = pytest.mark.anyio


async def test_F5_a_tenacity_wait_rides_out_a_restart_until_its_stop(api: Api) -> None:
    with brokers(1) as (only,):
        recorder = Recorder()
        async with await connected(
            api,
            only.url,
            recorder,
            reconnect_wait=tenacity.wait_fixed(0.05) + tenacity.wait_random(0, 0.05),
            reconnect_stop=tenacity.stop_after_delay(60),
        ) as connection:
            session = await connection.create_session()
            producer = await session.create_producer(Queue("f5t"))
            only.kill()
            await recorder.wait_for("started")
            await anyio.sleep(1.0)  # down for a while: the wait keeps the attempts coming
            assert recorder.named("failed") == []
            only.start()  # on the same port
            with anyio.fail_after(TIMEOUT):
                await producer.send(TextMessage("after the restart"))
            assert [port_of(b) for b in await recorder.wait_for("completed")] == [only.port]
        assert only.queue_depth("f5t") == 1


async def test_F5_a_tenacity_stop_gives_up_where_the_url_would_go_on(api: Api) -> None:
    with brokers(2) as (first, second):
        recorder = Recorder()
        # The URL's own schedule would try for 2 minutes; the stop given ends it after three
        # attempts, one broker each: second, first, second.
        url = f"failover:({first.url},{second.url})"
        async with await connected(
            api,
            url,
            recorder,
            reconnect_wait=tenacity.wait_fixed(0.2),
            reconnect_stop=tenacity.stop_after_attempt(3),
        ) as connection:
            session = await connection.create_session()
            producer = await session.create_producer(Queue("f5s"))
            second.stop()
            began = time.monotonic()
            first.kill()
            failed = await recorder.wait_for("failed")
            took = time.monotonic() - began
            assert len(failed) == 1 and recorder.named("completed") == []
            assert 0.35 <= took < TIMEOUT  # two waits of 0.2 s between the three attempts
            with anyio.fail_after(TIMEOUT), pytest.raises(ConnectionFailedError):
                await producer.send(TextMessage("lost"))


async def test_F5_a_refused_port_is_watched_and_tried_as_soon_as_it_accepts(api: Api) -> None:
    with brokers(1) as (only,):
        recorder = Recorder()
        # One fast pass after the first: its wait is 3 s. The broker refuses the first attempt
        # and is back 0.3 s later; its port is watched during that wait, so the attempt comes
        # within a probe interval of the restart, not at the end of the wait.
        url = f"failover:({only.url})?failover.fastdelay=3000&failover.jitter=0"
        async with await connected(api, url, recorder) as connection:
            session = await connection.create_session()
            producer = await session.create_producer(Queue("f5w"))
            only.kill()
            await recorder.wait_for("started")
            await anyio.sleep(0.3)
            only.start()  # on the same port
            restarted = time.monotonic()
            with anyio.fail_after(TIMEOUT):
                await producer.send(TextMessage("after the restart"))
            assert time.monotonic() - restarted < 1.0  # not the 2.7 s left of the wait
            assert [port_of(b) for b in await recorder.wait_for("completed")] == [only.port]
        assert only.queue_depth("f5w") == 1
