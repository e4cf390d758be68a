"""JMS message selectors (``apache.org:selector-filter:string``) evaluated by the broker.

On a queue the selector picks what a consumer is offered (the rest waits for other consumers);
on a topic subscription it decides at publish time what enters the subscription. An invalid
selector refuses the attach with ``amqp:invalid-field`` and the reason; an accepted one is
echoed in the attach reply's source.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from brokerkit import TIMEOUT, body_of, connect, message, receive, receiver, sender, sync

from chaos.broker import Broker
from chaos.broker.filters import SELECTOR_CODE, SELECTOR_FILTER
from haclient.amqp.connection import AmqpConnection
from haclient.amqp.endpoints import Receiver
from haclient.amqp.types import Accepted, AmqpDescribed, Symbol, Terminus, ULong
from haclient.errors import HAClientError

pytestmark = pytest.mark.anyio


def selecting(address: str, selector: str, *capabilities: str, by_code: bool = False) -> Terminus:
    descriptor = ULong(SELECTOR_CODE) if by_code else Symbol(SELECTOR_FILTER)
    return Terminus(
        address=address,
        capabilities=capabilities,
        filter={SELECTOR_FILTER: AmqpDescribed(descriptor, selector)},
    )


async def send_all(conn: AmqpConnection, address: str, *messages: bytes) -> None:
    link = await sender(conn, address)
    for payload in messages:
        assert await conn.send(link, payload) == Accepted()


async def drain(conn: AmqpConnection, link: Receiver) -> list[Any]:
    await sync(conn)
    got = []
    while (received := conn.receive_nowait(link)) is not None:
        got.append(body_of(received))
    return got


def colour(body: str, value: str, **fields: Any) -> bytes:
    return message(body, application_properties={"colour": value}, **fields)


async def test_queue_consumer_is_offered_only_matching_messages_others_wait(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await send_all(
                conn, "q", colour("r1", "red"), colour("b1", "blue"), colour("r2", "red")
            )
            link = await receiver(conn, selecting("q", "colour = 'red'"))
            assert link.remote_source.filter is not None  # echoed: the broker applies it
            assert SELECTOR_FILTER in link.remote_source.filter
            assert await drain(conn, link) == ["r1", "r2"]
            assert broker.queue_depth("q") == 1  # blue waits for someone else
            blue = await receiver(conn, selecting("q", "colour <> 'red'", by_code=True))
            assert body_of(await receive(conn, blue)) == "b1"


async def test_two_queue_consumers_with_different_selectors_each_get_theirs(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            red = await receiver(conn, selecting("q", "colour = 'red'"))
            blue = await receiver(conn, selecting("q", "colour = 'blue'"))
            await send_all(conn, "q", *(colour(f"m{i}", ("red", "blue")[i % 2]) for i in range(6)))
            assert await drain(conn, red) == ["m0", "m2", "m4"]
            assert await drain(conn, blue) == ["m1", "m3", "m5"]


async def test_invalid_selector_is_refused_with_invalid_field_and_reason(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            with pytest.raises(HAClientError) as caught:
                await receiver(conn, selecting("q", "colour = "))
            assert caught.value.condition == "amqp:invalid-field"
            assert "column" in (caught.value.description or "")
            with pytest.raises(HAClientError) as caught:
                await receiver(conn, selecting("news", "a ==", "topic"), name="sub")
            assert caught.value.condition == "amqp:invalid-field"
            assert broker.state.subscriptions() == []
            await sync(conn)  # the connection is still usable


async def test_subscription_selector_filters_at_publish_time(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            source = selecting("news", "colour = 'red'", "topic", "shared")
            link = await receiver(conn, source, name="reds", credit=0)
            everything = await receiver(conn, Terminus(address="news", capabilities=("topic",)))
            await send_all(conn, "topic://news", colour("r", "red"), colour("b", "blue"))
            [info] = broker.state.subscriptions()
            assert info.depth == 1  # the blue one never entered the subscription
            conn.flow(link, 10)
            assert body_of(await receive(conn, link)) == "r"
            assert await drain(conn, everything) == ["r", "b"]


async def test_jms_header_identifiers_come_from_header_and_properties(broker: Broker) -> None:
    cases = [
        ("JMSPriority > 6", dict(priority=7), dict(priority=4)),
        ("JMSType = 'order'", dict(subject="order"), dict(subject="other")),
        ("JMSDeliveryMode = 'PERSISTENT'", dict(durable=True), dict(durable=False)),
        ("JMSCorrelationID = 'c-1'", dict(correlation_id="c-1"), dict(correlation_id="c-2")),
        ("JMSMessageID = 'ID:1'", dict(message_id="ID:1"), dict(message_id="ID:2")),
        ("JMSTimestamp = 1700000000123", dict(creation_time=1700000000.123), {}),
        ("JMSXDeliveryCount = 1", {}, dict(delivery_count=3)),
        ("JMSXGroupID = 'g'", dict(group_id="g"), dict(group_id="h")),
        ("JMSXGroupSeq = 2", dict(group_id="g", group_sequence=2), dict(group_sequence=3)),
    ]
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            for index, (selector, matching, other) in enumerate(cases):
                queue = f"q{index}"
                await send_all(conn, queue, message("no", **other), message("yes", **matching))
                link = await receiver(conn, selecting(queue, selector))
                assert await drain(conn, link) == ["yes"], selector
