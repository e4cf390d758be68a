"""Rule F3, one connection per call: everything a call does on the network comes from the
connection the gate admitted it on (``at``), links included. A call admitted before a failover
gets no link of the connection after it (it is run again on the new one, F3), and a link
cached on the old connection is never used on the new one.
"""

from __future__ import annotations

import pytest
from failoverkit import TIMEOUT, brokers, failover_url

from haclient import aio
from haclient.destination import Queue
from haclient.errors import ConnectionLostError
from haclient.message import TextMessage

pytestmark = pytest.mark.anyio


async def test_F3_a_call_never_uses_a_link_of_a_connection_other_than_its_own() -> None:
    with brokers(2) as (first, second):
        url = failover_url(first, second)
        async with await aio.connect(url) as connection:
            await connection.start()
            session = await connection.create_session()
            producer = await session.create_producer(Queue("one-connection"))
            await producer.send(TextMessage("before"))
            context = connection._context
            before = context.gate.connected_nowait()
            assert before is not None and before.epoch == 0
            old_link = producer._links[Queue("one-connection")]
            assert old_link.engine is before.amqp.engine

            assert context.manager.report_lost(0, ConnectionLostError("cut for the test"))
            await producer.send(TextMessage("after"), timeout=TIMEOUT)  # run on the new one (F3)
            after = context.gate.connected_nowait()
            assert after is not None and after.epoch == 1
            assert after.physical is not before.physical

            # admitted on the old connection: no link of the new one, cached or new
            assert producer._attached_link(before, Queue("one-connection")) is None
            with pytest.raises(ConnectionLostError, match="epoch 0"):
                await producer._link_for(before, Queue("one-connection"))
            assert context.gate.lost(before, ConnectionLostError("replaced"))  # so: run again
            # admitted on the new one: its own link, attached on it
            link = await producer._link_for(after, Queue("one-connection"))
            assert link.engine is after.amqp.engine
            assert link is not old_link
