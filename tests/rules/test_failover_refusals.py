"""A broker that refuses the login is one broker's answer, through both APIs (F15): with two
reference brokers where only the second knows the client's password, the client connects to
the second; when both refuse, ``connect`` raises ``AuthenticationError`` at once, naming both,
instead of walking the list for the whole time budget."""

from __future__ import annotations

import time

import anyio
import pytest
from apikit import Api
from failoverkit import failover_url, port_of

from chaos.broker import BrokerThread
from haclient.destination import Queue
from haclient.errors import AuthenticationError
from haclient.message import TextMessage

pytestmark = pytest.mark.anyio

# Only catches a hang: without F15 the refused connect would retry for the two-minute budget.
BOUND = 20.0
# What "at once" means here: a pass over two local brokers, far under the budget.
AT_ONCE = 5.0
# Retry for as long as the time budget lasts, the first connect too (failover.startup.cyclecount
# -1: as many passes as failover.cyclecount, which is unlimited here).
FOREVER = {"cyclecount": -1, "startup.cyclecount": -1, "giveupafter": 120_000}


async def test_F15_the_client_connects_to_the_broker_that_accepts_its_login(api: Api) -> None:
    with (
        BrokerThread(users={"app": "not-the-clients"}) as refusing,
        BrokerThread(users={"app": "s3cret"}) as accepting,
    ):
        url = failover_url(refusing, accepting, **FOREVER)
        with anyio.fail_after(BOUND):
            async with await api.connect(url, username="app", password="s3cret") as connection:
                assert port_of(str(connection.broker)) == accepting.port
                session = await connection.create_session()
                producer = await session.create_producer(Queue("refused-first"))
                await producer.send(TextMessage("past the broker that refused"))
        assert accepting.queue_depth("refused-first") == 1


async def test_F15_when_every_broker_refuses_connect_raises_at_once_naming_each(
    api: Api,
) -> None:
    with (
        BrokerThread(users={"app": "one"}) as first,
        BrokerThread(users={"app": "two"}) as second,
    ):
        url = failover_url(first, second, **FOREVER)
        started = time.monotonic()
        with anyio.fail_after(BOUND), pytest.raises(AuthenticationError) as refused:
            await api.connect(url, username="app", password="neither")
        assert time.monotonic() - started < AT_ONCE
    error = refused.value
    text = str(error)
    assert text.startswith("every broker refused the connection: "), text
    assert f"127.0.0.1:{first.port} refused the login of user 'app'" in text, text
    assert f"127.0.0.1:{second.port} refused the login of user 'app'" in text, text
    assert (error.condition, error.retriable) == ("amqp:unauthorized-access", False)
    assert isinstance(error.__cause__, AuthenticationError)  # the last refusal
    assert f"127.0.0.1:{second.port}" in str(error.__cause__)
    assert "neither" not in f"{text} {error.__cause__}"
