"""Queue dispatch order: consumer selectors, priority, expiry and delayed delivery.

Times: ttl and delays are 100-500 ms; a test waits for a due time only with a bounded receive
(``TIMEOUT``) or, to let a ttl pass before a consumer exists, one short sleep just past it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from brokerkit import TIMEOUT, body_of, connect, count_of, message, receive, receiver, sender
from brokerkit import sync as round_trip

from chaos.broker import OFFERED_CAPABILITIES, Broker
from chaos.broker.nodes import Queue, StoredMessage
from chaos.broker.store import Store
from chaos.broker.wire import (
    MessageTiming,
    add_delivery_time,
    parse_header,
    read_timing,
    set_absolute_expiry,
)
from haclient.amqp.codec import AmqpMessage, decode_message, encode_message
from haclient.amqp.connection import AmqpConnection
from haclient.amqp.endpoints import Receiver
from haclient.amqp.types import Accepted, Modified, Released

pytestmark = pytest.mark.anyio
_ids = iter(range(1, 1_000_000))


def stored(body: object, **fields: object) -> StoredMessage:
    """A StoredMessage as the router makes one."""
    payload = encode_message(AmqpMessage(body=body, **fields))  # type: ignore[arg-type]
    header, offset = parse_header(payload)
    return StoredMessage(next(_ids), payload, header, offset)


class FakeConsumer:
    """A consumer that records what it is given (pre-settled when ``settle``)."""

    def __init__(
        self,
        consumer_id: int,
        credit: int = 100,
        selector: Callable[[StoredMessage], bool] | None = None,
        settle: bool = True,
    ) -> None:
        self.id = consumer_id
        self._credit = credit
        self.selector = selector
        self.settle = settle
        self.got: list[StoredMessage] = []

    @property
    def credit(self) -> int:
        return self._credit

    def deliver(self, message: StoredMessage) -> bool:
        self._credit -= 1
        self.got.append(message)
        return self.settle

    def node_deleted(self) -> None:
        pass


def test_consumer_selector_skips_messages_it_does_not_accept() -> None:
    queue = Queue("q")
    messages = [stored(n) for n in range(6)]
    evens = {m.id for m in messages[::2]}
    picky = FakeConsumer(1, selector=lambda m: m.id in evens)
    queue.add_consumer(picky)
    for m in messages:
        queue.enqueue(m)
    assert [m.id for m in picky.got] == sorted(evens)
    assert [m.id for m in queue.messages] == [m.id for m in messages[1::2]]  # skipped, in order
    other = FakeConsumer(2)
    queue.add_consumer(other)
    assert [m.id for m in other.got] == [m.id for m in messages[1::2]]
    assert queue.depth == 0


def test_selector_keeps_priority_and_fifo_order_among_the_messages_it_accepts() -> None:
    queue = Queue("q")
    wanted = [stored(n, priority=p) for n, p in enumerate([1, 7, 4, 7, 1])]
    unwanted = [stored("no", priority=9) for _ in range(3)]
    for index, m in enumerate(wanted):
        if index < len(unwanted):
            queue.enqueue(unwanted[index])
        queue.enqueue(m)
    ids = {m.id for m in wanted}
    consumer = FakeConsumer(1, selector=lambda m: m.id in ids)
    queue.add_consumer(consumer)
    assert [m.header.priority for m in consumer.got] == [7, 7, 4, 1, 1]
    assert [m.id for m in consumer.got] == [m.id for m in (wanted[1], wanted[3], wanted[2])] + [
        wanted[0].id,
        wanted[4].id,
    ]
    assert queue.depth == 3


def body_is(body: str) -> Callable[[StoredMessage], bool]:
    payload = encode_message(AmqpMessage(body=body))
    return lambda message: message.payload == payload


def test_a_stalled_queue_serves_consumers_that_get_credit_later() -> None:
    queue = Queue("q")
    evens = FakeConsumer(1, credit=5, selector=body_is("even"))
    odds = FakeConsumer(2, credit=0, selector=body_is("odd"))
    queue.add_consumer(evens)
    queue.add_consumer(odds)
    queue.enqueue(stored("odd"))  # fits only odds, which has no credit: the queue stalls
    queue.enqueue(stored("even"))  # offered alone
    assert (len(evens.got), len(odds.got), queue.depth) == (1, 0, 1)
    evens._credit += 3
    queue.dispatch()  # credit for a consumer nothing waiting fits: nothing to do
    odds._credit = 1
    queue.dispatch()  # a consumer that was not looked at has credit now
    assert (len(evens.got), len(odds.got), queue.depth) == (1, 1, 0)
    queue.enqueue(stored("odd"))  # odds has no credit again: waits, and odds is not stalled
    odds._credit = 1
    queue.dispatch()
    assert (len(odds.got), queue.depth) == (2, 0)
    returned = odds.got[-1]
    queue.unacked += 1  # as if it had gone unsettled
    odds.got.clear()
    queue.return_messages([returned], failed=False)  # comes back: looked at again
    assert queue.depth == 1
    odds._credit = 1
    queue.dispatch()
    assert odds.got == [returned]


def test_wire_reads_and_writes_the_timing_fields() -> None:
    sent = AmqpMessage(
        body=b"raw",
        ttl=0.5,
        to="q",
        group_id="g",
        message_annotations={"x-opt-delivery-delay": 300, "other": [1, 2]},
        application_properties={"k": "v"},
    )
    payload = encode_message(sent)
    header, offset = parse_header(payload)
    assert header.ttl == 500
    assert read_timing(payload, offset) == MessageTiming(None, 300, None)
    assert read_timing(encode_message(AmqpMessage(body="plain")), 0) is None
    rewritten = set_absolute_expiry(add_delivery_time(payload, offset, 1_000), offset, 2_000)
    assert read_timing(rewritten, offset) == MessageTiming(1_000, 300, 2_000)
    got = decode_message(rewritten)
    assert (got.body, got.to, got.group_id, got.ttl) == (b"raw", "q", "g", 0.5)
    assert got.absolute_expiry_time == 2.0
    assert got.message_annotations["other"] == [1, 2]
    assert got.application_properties == {"k": "v"}
    bare = encode_message(AmqpMessage(body="x"))  # no annotations, empty properties list
    both = set_absolute_expiry(add_delivery_time(bare, 0, 5), 0, 6)
    assert read_timing(both, 0) == MessageTiming(5, None, 6)
    assert decode_message(both).body == "x"


# Through the engine ------------------------------------------------------------------------------


def now_ms() -> int:
    return int(time.time() * 1000)


async def fill(conn: AmqpConnection, address: str, *messages: bytes) -> None:
    """Send messages, each accepted before the next (so they wait in the queue in this order)."""
    link = await sender(conn, address)
    for payload in messages:
        assert await conn.send(link, payload) == Accepted()


async def bodies(conn: AmqpConnection, link: Receiver, count: int) -> list[Any]:
    """The bodies of the next ``count`` messages, each accepted."""
    got = []
    for _ in range(count):
        received = await receive(conn, link)
        conn.settle(received, Accepted())
        got.append(body_of(received))
    return got


async def nothing_more(conn: AmqpConnection, link: Receiver) -> None:
    await round_trip(conn)
    assert conn.receive_nowait(link) is None


async def test_higher_priority_is_delivered_first(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(conn, "q", *(message(f"p{p}", priority=p) for p in (0, 4, 9, 2, 7)))
            link = await receiver(conn, "q")
            assert await bodies(conn, link, 5) == ["p9", "p7", "p4", "p2", "p0"]


async def test_fifo_within_a_priority_and_default_priority_is_4(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            sent = [("a", 1), ("b", 4), ("c", 1), ("d", None), ("e", 6), ("f", 4), ("g", 6)]
            await fill(
                conn,
                "q",
                *(message(body) if p is None else message(body, priority=p) for body, p in sent),
            )
            link = await receiver(conn, "q")
            assert await bodies(conn, link, 7) == ["e", "g", "b", "d", "f", "a", "c"]


async def test_priorities_above_9_count_as_9(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(conn, "q", message("nine", priority=9), message("200", priority=200))
            link = await receiver(conn, "q")
            assert await bodies(conn, link, 2) == ["nine", "200"]


async def test_returned_message_goes_back_ahead_of_newer_messages_of_its_priority(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(conn, "q", *(message(body) for body in "abc"))
            link = await receiver(conn, "q", credit=2)
            first, second = await receive(conn, link), await receive(conn, link)
            assert [body_of(first), body_of(second)] == ["a", "b"]
            await fill(conn, "q", message("urgent", priority=8), message("d"))
            conn.settle(second, Released())
            conn.settle(first, Modified(delivery_failed=True))
            await round_trip(conn)  # both are back before the credit comes
            conn.flow(link, 10)
            got = [await receive(conn, link) for _ in range(5)]
            assert [(body_of(m), count_of(m)) for m in got] == [
                ("urgent", 0),
                ("a", 1),
                ("b", 0),
                ("c", 0),
                ("d", 0),
            ]


async def test_message_past_its_ttl_is_never_delivered(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(
                conn,
                "q",
                message("short", ttl=0.1, durable=True),
                message("long", ttl=60.0),
                message("forever"),
            )
            await anyio.sleep(0.15)  # the first one's ttl passes
            link = await receiver(conn, "q")
            assert await bodies(conn, link, 2) == ["long", "forever"]
            await nothing_more(conn, link)
            assert broker.queue_depth("q") == 0


async def test_expired_message_goes_to_the_expiry_address() -> None:
    async with Broker(expiry_address="expired") as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                await fill(conn, "q", message("stale", ttl=0.2), message("fresh"))
                expired = await receiver(conn, "expired")
                got = await receive(conn, expired)  # moved by the expiry timer: "q" has no consumer
                assert body_of(got) == "stale"
                assert decode_message(got.payload).ttl == 0.2  # the message as it was sent
                link = await receiver(conn, "q")
                assert await bodies(conn, link, 1) == ["fresh"]
                await nothing_more(conn, link)
                await nothing_more(conn, expired)  # it expired once, not again


async def test_absolute_expiry_time_in_the_past_is_never_delivered(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            link = await receiver(conn, "q")
            await fill(
                conn,
                "q",
                message("past", absolute_expiry_time=time.time() - 1),
                message("future", absolute_expiry_time=time.time() + 60),
            )
            assert await bodies(conn, link, 1) == ["future"]
            await nothing_more(conn, link)


async def test_absolute_expiry_time_passing_while_queued(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await fill(conn, "q", message("soon", absolute_expiry_time=time.time() + 0.1))
            await anyio.sleep(0.15)
            link = await receiver(conn, "q")
            await nothing_more(conn, link)
            assert broker.queue_depth("q") == 0


async def test_delivery_delay_hides_a_message_until_it_is_due(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            link = await receiver(conn, "q")
            sent = time.monotonic()
            delayed = message("later", message_annotations={"x-opt-delivery-delay": 300})
            await fill(conn, "q", delayed, message("now"))
            assert await bodies(conn, link, 1) == ["now"]
            await nothing_more(conn, link)
            assert broker.queue_depth("q") == 1  # scheduled messages count as waiting
            assert await bodies(conn, link, 1) == ["later"]
            assert time.monotonic() - sent >= 0.29


async def test_delivery_time_hides_a_message_until_then(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            link = await receiver(conn, "q")
            due = now_ms() + 300
            await fill(conn, "q", message("at", message_annotations={"x-opt-delivery-time": due}))
            await nothing_more(conn, link)
            assert await bodies(conn, link, 1) == ["at"]
            assert now_ms() >= due


async def test_delayed_messages_come_in_order_of_due_time_behind_those_waiting(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            due = now_ms() + 200
            await fill(
                conn,
                "q",
                message("third", message_annotations={"x-opt-delivery-delay": 400}),
                message("second", message_annotations={"x-opt-delivery-time": due}),
                message("past", message_annotations={"x-opt-delivery-time": due - 10_000}),
                message("first"),
            )
            link = await receiver(conn, "q")
            assert await bodies(conn, link, 2) == ["past", "first"]
            await nothing_more(conn, link)
            assert await bodies(conn, link, 2) == ["second", "third"]


async def test_open_offers_delayed_delivery(broker: Broker) -> None:
    assert "DELAYED_DELIVERY" in OFFERED_CAPABILITIES
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            assert "DELAYED_DELIVERY" in conn.engine.remote_offered_capabilities


async def test_durable_delayed_message_keeps_its_due_time_across_a_restart(
    tmp_path: Path,
) -> None:
    async with Broker(store=tmp_path / "broker.db") as broker:
        with anyio.fail_after(TIMEOUT):
            sent = time.monotonic()
            async with connect(broker) as conn:
                delayed = message(
                    "delayed", durable=True, message_annotations={"x-opt-delivery-delay": 500}
                )
                before = now_ms()
                await fill(conn, "q", delayed, message("plain", durable=True))
            await broker.kill()
            with Store.open(tmp_path / "broker.db") as store:  # the due time, not the delay
                stored = decode_message(store.messages("q")[0].payload)
            due = stored.message_annotations["x-opt-delivery-time"]
            assert before + 500 <= due <= now_ms() + 500
            await broker.start()
            async with connect(broker) as conn:
                link = await receiver(conn, "q")
                assert await bodies(conn, link, 1) == ["plain"]
                if time.monotonic() - sent < 0.45:  # still before the due time
                    await nothing_more(conn, link)
                assert await bodies(conn, link, 1) == ["delayed"]
                assert time.monotonic() - sent >= 0.49
            await broker.kill()  # accepted above: gone from the store too
            await broker.start()
            assert broker.queue_depth("q") == 0


async def test_durable_message_with_a_ttl_keeps_its_expiry_across_a_restart(
    tmp_path: Path,
) -> None:
    async with Broker(store=tmp_path / "broker.db") as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                before = now_ms()
                await fill(conn, "q", message("short", durable=True, ttl=0.3))
            await broker.kill()
            with Store.open(tmp_path / "broker.db") as store:
                stored = decode_message(store.messages("q")[0].payload)
            assert stored.absolute_expiry_time is not None
            assert before + 300 <= stored.absolute_expiry_time * 1000 <= now_ms() + 301
            await anyio.sleep(max(0.0, (before + 350 - now_ms()) / 1000))  # past the ttl
            await broker.start()  # the ttl must not count again from here
            async with connect(broker) as conn:
                await nothing_more(conn, await receiver(conn, "q"))
            assert broker.queue_depth("q") == 0
            await broker.kill()
            with Store.open(tmp_path / "broker.db") as store:
                assert store.messages("q") == []  # the expired message left the store too
            await broker.start()
