"""What a new user gets wrong in a first hour (issue 39, items 7 and 8): a receive on a
connection never started (JMS lets it wait, silently, for ``start()``; haclient warns once per
connection, the first time a receive waits so), and a session asked for by a mode's name."""

from __future__ import annotations

import logging

import pytest
from apikit import Api

from chaos.broker import BrokerThread
from haclient import Queue, TextMessage

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

WAIT = 0.2


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "start()" in r.getMessage()
    ]


async def test_item7_a_receive_waiting_on_a_stopped_connection_warns_once_per_connection(
    api: Api, reference_broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    queue = Queue(f"stopped.{api.name}")
    caplog.set_level(logging.WARNING)
    async with await api.connect(reference_broker.url) as connection:
        session = await connection.create_session()
        await (await session.create_producer(queue)).send(TextMessage("waiting"))
        consumer = await session.create_consumer(queue)
        assert await consumer.receive_nowait() is None  # does not wait: no warning
        assert _warnings(caplog) == []
        assert await consumer.receive(WAIT) is None  # JMS: nothing until start()
        assert await consumer.receive(WAIT) is None
        assert len(_warnings(caplog)) == 1, _warnings(caplog)
        await connection.start()
        received = await consumer.receive(WAIT * 25)
        assert received is not None and received.text == "waiting"
        await connection.stop()
        assert await consumer.receive(WAIT) is None
    assert len(_warnings(caplog)) == 1  # once per connection
    async with await api.connect(reference_broker.url) as other:
        consumer = await (await other.create_session()).create_consumer(queue)
        assert await consumer.receive(WAIT) is None
    assert len(_warnings(caplog)) == 2  # and once for the next


async def test_item8_a_session_asked_for_by_name_says_which_ack_mode_is_meant(
    api: Api, reference_broker: BrokerThread
) -> None:
    from haclient.errors import ConfigurationError

    async with await api.connect(reference_broker.url) as connection:
        with pytest.raises(ConfigurationError, match=r"did you mean AckMode\.CLIENT\?"):
            await connection.create_session("client")
        await connection.create_session(2)  # the JMS number is taken
