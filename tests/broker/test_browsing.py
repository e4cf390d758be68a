"""Queue browsing: a receiver whose source asks for ``distribution-mode copy`` (a JMS browser).

A browser is sent copies of the waiting messages, in the queue's order, each at most once; the
queue's messages stay as they were, whatever the client answers for a copy. Browsers here drain
to enumerate: a drain answered with nothing more is the end of the enumeration, so every drain
must be answered.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from brokerkit import (
    TIMEOUT,
    body_of,
    connect,
    count_of,
    message,
    receive,
    receiver,
    sender,
    sync,
    wake,
)

from chaos.broker import Broker
from chaos.broker.filters import SELECTOR_FILTER
from haclient.amqp.connection import AmqpConnection, ReceivedMessage
from haclient.amqp.endpoints import Receiver
from haclient.amqp.types import (
    Accepted,
    AmqpDescribed,
    Distribution,
    Modified,
    ReceiverSettleMode,
    Rejected,
    Released,
    SenderSettleMode,
    Symbol,
    Terminus,
)
from haclient.errors import HAClientError, InvalidDestinationError

pytestmark = pytest.mark.anyio


def copy_of(address: str, *capabilities: str, selector: str | None = None) -> Terminus:
    """A browsing source (with a JMS selector if given)."""
    filters = None
    if selector is not None:
        filters = {SELECTOR_FILTER: AmqpDescribed(Symbol(SELECTOR_FILTER), selector)}
    return Terminus(
        address=address,
        capabilities=capabilities,
        filter=filters,
        distribution=Distribution.COPY,
    )


async def browser(conn: AmqpConnection, address: str, **kw: Any) -> Receiver:
    """A browser of ``address`` with no credit yet (``browse`` grants it)."""
    selector = kw.pop("selector", None)
    return await receiver(conn, copy_of(address, selector=selector), credit=0, **kw)


async def browse(conn: AmqpConnection, link: Receiver, credit: int = 100) -> list[ReceivedMessage]:
    """Drain ``link`` with ``credit``: what the broker had to show, up to the end."""
    await conn.drain(link, credit)
    assert link.credit == 0 and not link.draining
    got = []
    while (received := conn.receive_nowait(link)) is not None:
        got.append(received)
    return got


async def fill(conn: AmqpConnection, address: str, *payloads: bytes) -> None:
    out = await sender(conn, address)
    for payload in payloads:
        assert await conn.send(out, payload) == Accepted()


async def consume(conn: AmqpConnection, address: str, count: int) -> list[tuple[Any, int]]:
    """Take ``count`` messages with a new consumer: (body, delivery-count) pairs, accepted."""
    link = await receiver(conn, address, credit=count)
    got = []
    for _ in range(count):
        received = await receive(conn, link)
        got.append((body_of(received), count_of(received)))
        conn.settle(received, Accepted())
    return got


def bodies(received: list[ReceivedMessage]) -> list[Any]:
    return [body_of(item) for item in received]


# What a browser is shown -------------------------------------------------------------------------


async def test_browser_sees_waiting_messages_in_order_and_takes_none(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(conn, "q", *(message(index) for index in range(5)))
            link = await browser(conn, "q")
            assert link.remote_source.distribution is Distribution.COPY
            got = await browse(conn, link)
            assert bodies(got) == [0, 1, 2, 3, 4]
            assert broker.queue_depth("q") == 5 and broker.unacked_count("q") == 0
            assert broker.consumer_count("q") == 0  # a browser is not a consumer
            assert await consume(conn, "q", 5) == [(index, 0) for index in range(5)]


async def test_browser_follows_priority_order(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            sent = [("a", 1), ("b", 7), ("c", 4), ("d", 7), ("e", 9)]
            await fill(conn, "q", *(message(body, priority=p) for body, p in sent))
            assert bodies(await browse(conn, await browser(conn, "q"))) == list("ebdca")


async def test_browser_credit_limits_what_is_sent_and_the_rest_follows(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(conn, "q", *(message(index) for index in range(5)))
            link = await browser(conn, "q")
            assert bodies(await browse(conn, link, 2)) == [0, 1]
            conn.flow(link, 2)
            assert [body_of(await receive(conn, link)) for _ in range(2)] == [2, 3]
            assert bodies(await browse(conn, link, 10)) == [4]


async def test_browser_applies_its_selector(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            colours = ["red", "blue", "red", "green"]
            await fill(
                conn,
                "q",
                *(
                    message(f"{c}{n}", application_properties={"colour": c})
                    for n, c in enumerate(colours)
                ),
            )
            link = await browser(conn, "q", selector="colour = 'red'")
            assert link.remote_source.filter is not None
            assert bodies(await browse(conn, link)) == ["red0", "red2"]
            assert broker.queue_depth("q") == 4


async def test_browser_with_an_invalid_selector_is_refused(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            with pytest.raises(HAClientError) as caught:
                await browser(conn, "q", selector="colour = ")
            assert caught.value.condition == "amqp:invalid-field"


async def test_scheduled_messages_are_not_shown(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            later = message("later", message_annotations={"x-opt-delivery-delay": 600_000})
            await fill(conn, "q", later, message("now"))
            assert bodies(await browse(conn, await browser(conn, "q"))) == ["now"]
            assert broker.queue_depth("q") == 2


# Drain: the end of the enumeration --------------------------------------------------------------


async def test_drain_on_a_browser_of_an_empty_queue_is_answered(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(conn, "q")  # the queue exists, empty
            link = await browser(conn, "q")
            assert await browse(conn, link, 10) == []


async def test_drain_after_the_last_message_is_answered_with_nothing(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(conn, "q", message("a"), message("b"))
            link = await receiver(conn, copy_of("q"), credit=2)
            assert [body_of(await receive(conn, link)) for _ in range(2)] == ["a", "b"]
            for _ in range(3):  # every drain at the end is answered, however often asked
                assert await browse(conn, link, 5) == []


async def test_drain_is_answered_for_a_browser_that_asked_for_settled_transfers(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(conn, "q", message("a"), message("b"))
            link = await browser(conn, "q", snd_settle_mode=SenderSettleMode.SETTLED)
            assert link.remote_snd_settle_mode is SenderSettleMode.UNSETTLED
            assert bodies(await browse(conn, link)) == ["a", "b"]
            assert await browse(conn, link) == []


# Later arrivals, acquired and returned messages -------------------------------------------------


async def test_messages_sent_after_the_browser_attached_are_shown(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(conn, "q", message("before"))
            link = await browser(conn, "q")
            assert bodies(await browse(conn, link)) == ["before"]
            conn.flow(link, 10)
            await fill(conn, "q", message("after-1"), message("after-2"))
            assert [body_of(await receive(conn, link)) for _ in range(2)] == ["after-1", "after-2"]
            assert bodies(await browse(conn, link)) == []
            assert broker.queue_depth("q") == 3


async def test_acquired_messages_are_hidden_and_released_ones_are_shown(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(conn, "q", *(message(index) for index in range(3)))
            consumer = await receiver(conn, "q", credit=1)
            held = await receive(conn, consumer)
            assert body_of(held) == 0
            link = await browser(conn, "q")
            assert bodies(await browse(conn, link)) == [1, 2]
            conn.settle(held, Released())
            await sync(conn)
            assert bodies(await browse(conn, link)) == [0]  # the same browser, once it is back
            assert bodies(await browse(conn, await browser(conn, "q"))) == [0, 1, 2]
            assert await consume(conn, "q", 3) == [(0, 0), (1, 0), (2, 0)]


async def test_a_browser_is_shown_a_message_once_even_if_it_comes_back(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(conn, "q", message("x"), message("y"))
            link = await browser(conn, "q")
            assert bodies(await browse(conn, link)) == ["x", "y"]
            consumer = await receiver(conn, "q", credit=1)
            taken = await receive(conn, consumer)
            conn.settle(taken, Released())
            await sync(conn)
            assert bodies(await browse(conn, link)) == []


async def test_two_browsers_are_independent(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(conn, "q", *(message(index) for index in range(4)))
            first = await browser(conn, "q")
            second = await browser(conn, "q")
            assert bodies(await browse(conn, first, 3)) == [0, 1, 2]
            assert bodies(await browse(conn, second)) == [0, 1, 2, 3]
            assert bodies(await browse(conn, first)) == [3]


# Browsing leaves the queue alone -----------------------------------------------------------------


async def test_closing_a_browser_gives_nothing_back(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(conn, "q", message("a"), message("b"))
            link = await receiver(conn, copy_of("q"), credit=10)  # asks for unsettled transfers
            assert [body_of(await receive(conn, link)) for _ in range(2)] == ["a", "b"]
            link.close()
            wake(conn)
            await sync(conn)
            assert broker.queue_depth("q") == 2 and broker.unacked_count("q") == 0
            assert await consume(conn, "q", 2) == [("a", 0), ("b", 0)]


async def test_closing_the_connection_of_a_browser_gives_nothing_back(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "producer") as conn:
            await fill(conn, "q", message("a"))
            async with connect(broker, "browsing") as browsing:
                got = await browse(browsing, await browser(browsing, "q"))
                assert bodies(got) == ["a"]
            assert await consume(conn, "q", 1) == [("a", 0)]


async def test_a_disposition_on_a_browse_delivery_does_not_touch_the_queue(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(conn, "q", message("kept"), message("not-dead"), message("not-failed"))
            link = await browser(conn, "q", rcv_settle_mode=ReceiverSettleMode.SECOND)
            got = await browse(conn, link)
            assert bodies(got) == ["kept", "not-dead", "not-failed"]
            outcomes = [Accepted(), Rejected(), Modified(delivery_failed=True)]
            for received, outcome in zip(got, outcomes, strict=True):
                conn.settle(received, outcome, settle=False)
            for received in got:
                await conn.wait_settled(received.delivery)  # the broker settled the copy
            assert broker.queue_depth("q") == 3 and broker.unacked_count("q") == 0
            assert all(info.depth == 0 for info in broker.nodes() if info.name == "DLQ")
            expected = [("kept", 0), ("not-dead", 0), ("not-failed", 0)]
            assert await consume(conn, "q", 3) == expected


async def test_deleting_the_queue_closes_its_browsers(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(conn, "q", message("a"))
            link = await browser(conn, "q")
            assert broker.delete_node("q")
            with pytest.raises(InvalidDestinationError, match="resource-deleted"):
                await conn.receive(link, timeout=TIMEOUT)


# Topics ------------------------------------------------------------------------------------------


async def test_copy_on_a_topic_is_an_ordinary_subscription(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            link = await receiver(conn, copy_of("news", "topic"), credit=10)
            out = await sender(conn, Terminus(address="news", capabilities=("topic",)))
            assert await conn.send(out, message("one")) == Accepted()
            got = await receive(conn, link)
            assert body_of(got) == "one" and not got.delivery.remote_settled
            conn.settle(got, Accepted())
            await sync(conn)
            assert broker.node_info("news").unacked == 0
