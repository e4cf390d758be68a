"""A6: each confirmation exchange, on every broker it applies to, proves what it claims: once an
AUTO ``receive()`` returns, the broker has processed the acknowledgement (a connection dropped
right then, without a Close, leaves nothing to redeliver). Exchanges a broker does not answer
fall back to ``round-trip``."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from apikit import Bed

import haclient.aio as aio
from chaos.broker import BrokerThread
from chaos.rabbitmq import RabbitMQNode
from haclient.aio.confirm import fallback_for
from haclient.amqp.types import ErrorCondition
from haclient.destination import Queue
from haclient.message import TextMessage
from haclient.modes import AckConfirmation, AckMode

pytestmark = pytest.mark.anyio

TIMEOUT = 20.0
COUNT = 20

SETTLE_SECOND = AckConfirmation.SETTLE_SECOND
LINK_FLOW = AckConfirmation.LINK_FLOW
DRAIN = AckConfirmation.DRAIN
ROUND_TRIP = AckConfirmation.ROUND_TRIP


def _drop(connection: aio.Connection) -> None:
    """End the socket at once, no Close frame: what the broker has not processed is lost."""
    physical = connection._context.current
    assert physical is not None
    physical.amqp.engine.abort(ErrorCondition("amqp:connection:forced", "dropped by the test"))
    assert physical.amqp.driver is not None
    physical.amqp.driver.wakeup()


async def _receive_then_drop(url: str, queue: str, chosen: str, **options: Any) -> str:
    """Receive COUNT messages AUTO with ``ack_confirmation=chosen``, drop the connection right
    after the last ``receive()`` returned; the confirmation the session used."""
    async with await aio.connect(url, **options) as connection:
        session = await connection.create_session()
        producer = await session.create_producer(Queue(queue))
        for i in range(COUNT):
            await producer.send(TextMessage(str(i)))
    async with await aio.connect(url, ack_confirmation=chosen, **options) as connection:
        await connection.start()
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue(queue))
        for i in range(COUNT):
            message = await consumer.receive(TIMEOUT)
            assert message is not None and message.body == str(i)
        used = session.ack_confirmation
        _drop(connection)
    return used.value


async def _leftovers(url: str, queue: str, **options: Any) -> list[Any]:
    async with await aio.connect(url, **options) as connection:
        await connection.start()
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue(queue))
        return [m.body for m in [await consumer.receive(1.0)] if m is not None]


CASES = [
    ("reference", "auto", SETTLE_SECOND),
    ("reference", "drain", DRAIN),
    ("reference", "round-trip", ROUND_TRIP),
    ("reference", "link-flow", ROUND_TRIP),  # the reference broker answers no plain flow
    ("activemq", "auto", DRAIN),
    ("activemq", "settle-second", DRAIN),
    ("activemq", "round-trip", ROUND_TRIP),
]


@pytest.mark.parametrize(
    ("broker", "chosen", "expected"), CASES, ids=[f"{b}-{c}" for b, c, _ in CASES]
)
async def test_A6_each_confirmation_on_the_reference_broker_and_its_activemq_mode(
    reference_broker: BrokerThread,
    activemq_broker: BrokerThread,
    broker: str,
    chosen: str,
    expected: AckConfirmation,
) -> None:
    running = reference_broker if broker == "reference" else activemq_broker
    queue = Bed.unique(f"confirm-{chosen}")
    with anyio.fail_after(TIMEOUT * 2):
        used = await _receive_then_drop(running.url, queue, chosen, attach_timeout=1)
        assert used == expected.value
        assert running.unacked_count(queue) == 0
        assert await _leftovers(running.url, queue) == []


RABBIT_CASES = [
    ("auto", LINK_FLOW),
    ("round-trip", ROUND_TRIP),
    ("drain", ROUND_TRIP),  # it would end the session on the probe: never tried there
]


@pytest.mark.rabbitmq
@pytest.mark.parametrize(("chosen", "expected"), RABBIT_CASES, ids=[c for c, _ in RABBIT_CASES])
async def test_A6_each_confirmation_on_rabbitmq(
    rabbitmq: RabbitMQNode, chosen: str, expected: AckConfirmation
) -> None:
    queue = Bed.unique(f"confirm-{chosen}")
    with anyio.fail_after(TIMEOUT * 2):
        used = await _receive_then_drop(rabbitmq.url, queue, chosen, attach_timeout=2)
        assert used == expected.value
        assert await _leftovers(rabbitmq.url, queue) == []


def test_A6_the_fallback_is_chosen_per_broker_unless_the_option_names_one() -> None:
    assert fallback_for("RabbitMQ") is LINK_FLOW
    assert fallback_for("ActiveMQ") is DRAIN
    assert fallback_for(None) is DRAIN
    assert fallback_for("RabbitMQ", "settle-second") is LINK_FLOW
    assert fallback_for("RabbitMQ", "round-trip") is ROUND_TRIP
    assert fallback_for(None, "link-flow") is LINK_FLOW
    assert fallback_for("RabbitMQ", "drain") is ROUND_TRIP
