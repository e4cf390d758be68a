"""Where RabbitMQ users trip, on a real RabbitMQ: a TRANSACTED session on a
broker without AMQP 1.0 transactions names the way out, ``jms.transactions=emulate``."""

from __future__ import annotations

import anyio
import pytest

import haclient.aio as aio
from chaos.rabbitmq import RabbitMQNode
from haclient.errors import NotImplementedByBrokerError
from haclient.modes import AckMode

pytestmark = [pytest.mark.rabbitmq, pytest.mark.anyio]


async def test_item18_rabbitmq_refusing_transactions_names_the_emulation(
    rabbitmq: RabbitMQNode,
) -> None:
    with anyio.fail_after(30):
        async with await aio.connect(rabbitmq.url) as connection:
            try:
                await connection.create_session(AckMode.TRANSACTED)
            except NotImplementedByBrokerError as refused:
                assert refused.feature == "transactions"
                assert "jms.transactions=emulate" in str(refused)
            else:
                pytest.skip("this RabbitMQ implements AMQP 1.0 transactions")
            emulated = await aio.connect(rabbitmq.url, transactions="emulate")
            async with emulated:
                await emulated.create_session(AckMode.TRANSACTED)  # the way out works
