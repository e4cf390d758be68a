"""F16 and F17 where a demanding application would look, on reference brokers, through both
APIs: a return never cuts a commit off (its outcome would be in doubt); the ready connections
carry the connection's client id to other brokers only, so brokers that refuse a duplicate
client id (the reference broker's ActiveMQ mode) accept them; and connections opened and
closed with a spare leave no connection, socket or thread behind."""

from __future__ import annotations

import os
import threading

import anyio
import pytest
from apikit import Api, eventually
from failoverkit import TIMEOUT, Recorder, brokers, connected, failover_url, port_of
from test_failover_f16_f17_ready import RETURN

from chaos.broker import BrokerThread
from haclient.destination import Queue
from haclient.errors import TransactionRolledBackError
from haclient.message import TextMessage
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio


async def test_F16_a_return_never_cuts_a_commit_off(api: Api) -> None:
    with brokers(2) as (first, second):
        recorder = Recorder()
        async with await connected(api, failover_url(first, second, **RETURN), recorder) as conn:
            session = await conn.create_session(AckMode.TRANSACTED)
            producer = await session.create_producer(Queue("f16-commit"))
            first.kill()
            await recorder.wait_for("completed")
            first.start()
            rolled_back = 0
            with anyio.fail_after(TIMEOUT):
                while len(recorder.named("completed")) < 2:  # commit after commit: the return
                    await producer.send(TextMessage("in a transaction"))
                    try:
                        await session.commit()
                    except TransactionRolledBackError as exc:
                        assert not exc.in_doubt  # F7's rollback, never "may have committed"
                        rolled_back += 1
            await producer.send(TextMessage("after"))
            await session.commit()
            statistics = await conn.statistics()
            assert port_of(recorder.named("completed")[1]) == first.port
            assert statistics.failovers_returned == 1
            assert statistics.transactions["in_doubt"] == 0
            assert statistics.transactions["rolled_back_by_failover"] == rolled_back <= 2


async def test_F16_F17_brokers_that_refuse_a_duplicate_client_id_accept_the_ready_connections(
    api: Api,
) -> None:
    with brokers(2, mode="activemq") as (first, second):
        recorder = Recorder()
        url = failover_url(first, second, backup="true", **RETURN)
        async with await connected(api, url, recorder, client_id="f16-f17-unique") as conn:

            async def spare_at(broker: BrokerThread) -> bool:
                standby = (await conn.statistics()).standby_broker
                return standby is not None and port_of(standby) == broker.port

            await eventually(lambda: spare_at(second))
            assert second.connections() == ["f16-f17-unique"]  # the spare, on the other broker
            first.kill()
            await recorder.wait_for("completed")  # on the spare
            first.start()
            await recorder.wait_for("completed", 2)  # the probe, same client id, accepted
            assert port_of(recorder.named("completed")[1]) == first.port
            assert first.connections() == ["f16-f17-unique"]
            await eventually(lambda: spare_at(second))  # the one it left: free again
            statistics = await conn.statistics()
            assert statistics.failovers_returned == 1 and statistics.failovers == 2


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
async def test_F17_connections_closed_with_a_spare_leave_nothing_open(api: Api) -> None:
    with brokers(2) as (first, second):
        url = failover_url(first, second, backup="true", **RETURN)
        async with await api.connect(url):  # the runtime's own threads and sockets, once
            pass
        descriptors, threads = _open_descriptors(), threading.active_count()
        for n in range(12):
            conn = await api.connect(url)
            if n % 2:  # the other half closes while the spare may still be opening

                async def spare_ready(conn: object = conn) -> bool:
                    return (await conn.statistics()).standby_broker is not None  # type: ignore[attr-defined]

                await eventually(spare_ready)
            await conn.close()

        async def nothing_open() -> bool:
            return first.connections() == [] and second.connections() == []

        await eventually(nothing_open)
        assert _open_descriptors() <= descriptors + 2  # no socket left behind
        assert threading.active_count() <= threads
