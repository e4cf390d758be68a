"""Rule F12 with ``failover.amqpOpenServerListAction``: Qpid JMS's REPLACE, ADD and IGNORE for
the broker list a broker's Open announces, through both APIs, on reference brokers that
announce a peer (``peers=``); unset, a ``roundrobin`` URL keeps its own list."""

from __future__ import annotations

import anyio
import pytest
from apikit import Api
from failoverkit import TIMEOUT, Recorder, brokers, failover_url, port_of

from chaos.broker import BrokerThread
from haclient.destination import Queue
from haclient.message import TextMessage

pytestmark = pytest.mark.anyio

# action, method -> the walked list (by name) after connecting to "first", which announces
# "third"; the broker a failover from "first" goes to (None: no kill).
CASES = [
    (None, "roundrobin", ["first", "second"], "second"),
    ("ADD", "roundrobin", ["first", "second", "third"], "second"),
    ("REPLACE", "roundrobin", ["first", "third"], "third"),
    ("IGNORE", "roundrobin", ["first", "second"], None),
]


@pytest.mark.parametrize(("action", "method", "walked", "next_broker"), CASES)
async def test_F12_amqp_open_server_list_action_decides_the_walked_list(
    api: Api, action: str | None, method: str, walked: list[str], next_broker: str | None
) -> None:
    with brokers(3) as (first, second, third):
        named: dict[str, BrokerThread] = {"first": first, "second": second, "third": third}
        inner = first.broker
        first.portal.call(lambda: inner.set_peers([third.url]))
        options = {} if action is None else {"amqpOpenServerListAction": action}
        recorder = Recorder()
        url = failover_url(first, second, method=method, **options)
        async with await api.connect(url) as connection:
            await connection.add_listener(recorder)
            expected = [named[name].port for name in walked]
            with anyio.fail_after(TIMEOUT):  # read when the connection became the one in use
                while [b.port for b in connection.brokers] != expected:
                    await anyio.sleep(0.02)
            if next_broker is None:
                await anyio.sleep(0.2)  # IGNORE: still the URL's list a moment later
                assert [b.port for b in connection.brokers] == expected
                return
            session = await connection.create_session()
            producer = await session.create_producer(Queue("f12-action"))
            first.kill()
            await producer.send(TextMessage("after the failover"))
            completed = await recorder.wait_for("completed")
        assert [port_of(b) for b in completed] == [named[next_broker].port]
