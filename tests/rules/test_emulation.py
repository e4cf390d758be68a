"""Rules E1 and E2 (selectors and no-local applied by the client where the broker does not), E3
(transactions emulated on request), E4 (delivery counts of given-back messages) and E5 (which is
emulated is visible), through both APIs, on the reference broker (which applies selectors and
no-local, and ``selectors=client`` makes the client evaluate selectors) and on RabbitMQ (which
echoes both filters but applies neither, so the client always does it there, and has no
transactions of its own)."""

from __future__ import annotations

import pytest
from apikit import Api, Bed
from rulekit import TIMEOUT, leftovers, send, started

from haclient.destination import Queue, Topic
from haclient.message import TextMessage
from haclient.modes import AckConfirmation, AckMode

pytestmark = pytest.mark.anyio


def _regional(*regions: str) -> list[TextMessage]:
    return [TextMessage(region, properties={"region": region}) for region in regions]


@pytest.mark.parametrize("mode", ["auto", "client"])
async def test_E1_a_queue_consumer_gets_only_selected_messages_and_leaves_the_rest(
    api: Api, bed: Bed, mode: str
) -> None:
    queue = bed.unique(f"e1q-{mode}")
    await send(bed, Queue(queue), *_regional("us", "eu", "us", "eu"))
    async with await started(api, bed, selectors=mode) as connection:
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue(queue), selector="region = 'eu'")
        emulated = consumer.selector_emulated
        bodies = [(await consumer.receive(TIMEOUT)).body for _ in range(2)]
        assert await consumer.receive(0.3) is None
        await consumer.close()
    assert bodies == ["eu", "eu"]
    assert emulated is (mode == "client" or not bed.reference)  # E5
    assert await leftovers(bed, queue) == ["us", "us"]  # given back, not consumed


async def test_E1_an_exclusive_topic_consumer_consumes_what_its_selector_rejects(
    api: Api, bed: Bed
) -> None:
    topic = Topic(bed.unique("e1t"))
    async with await started(api, bed, selectors="client") as connection:
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(topic, selector="region = 'eu'")
        assert consumer.selector_emulated
        await send(bed, topic, *_regional("us", "eu", "us"))
        received = await consumer.receive(TIMEOUT)
        assert received is not None and received.body == "eu"
        assert await consumer.receive(0.3) is None  # the rejected ones were consumed, not kept
        stats = await connection.statistics()
        assert stats.messages_received == 1


@pytest.mark.parametrize("ids", ["original", "uuid"])  # UUID ids: remembered, not prefixed
async def test_E2_no_local_withholds_this_connections_messages_on_every_broker(
    api: Api, bed: Bed, ids: str
) -> None:
    topic = Topic(bed.unique("e2"))
    async with await started(api, bed, message_id_type=ids) as connection:
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(topic, no_local=True)
        assert consumer.no_local_emulated is (not bed.reference)  # E5
        producer = await session.create_producer(topic)
        await producer.send(TextMessage("mine"))
        await send(bed, topic, "theirs")  # another connection
        received = await consumer.receive(TIMEOUT)
        assert received is not None and received.body == "theirs"
        assert await consumer.receive(0.3) is None


async def test_E3_emulated_transaction_holds_sends_until_commit(api: Api, bed: Bed) -> None:
    queue = Queue(bed.unique("e3send"))
    async with await started(api, bed, transactions="emulate") as connection:
        session = await connection.create_session(AckMode.TRANSACTED)
        assert session.transactions_emulated  # E5
        producer = await session.create_producer(queue)
        await producer.send(TextMessage("one"))
        await producer.send(TextMessage("two"))
        assert await leftovers(bed, queue.name, wait=0.2) == []  # nothing sent before commit
        await session.commit()
        await producer.send(TextMessage("dropped"))
        await session.rollback()
        await session.commit()  # nothing left to commit
    assert await leftovers(bed, queue.name) == ["one", "two"]


async def test_E3_emulated_transaction_acknowledges_on_commit_and_gives_back_on_rollback(
    api: Api, bed: Bed
) -> None:
    queue = Queue(bed.unique("e3recv"))
    await send(bed, queue, "one", "two")
    async with await started(api, bed, transactions="emulate", prefetch=0) as connection:
        session = await connection.create_session(AckMode.TRANSACTED)
        consumer = await session.create_consumer(queue)
        first = await consumer.receive(TIMEOUT)
        assert first is not None and first.body == "one"
        await session.rollback()  # "one" goes back
        again = await consumer.receive(TIMEOUT)
        assert again is not None and again.body == "one"
        second = await consumer.receive(TIMEOUT)
        assert second is not None and second.body == "two"
        await session.commit()  # both acknowledged, confirmed by the broker
        await consumer.close()
    assert await leftovers(bed, queue.name) == []


async def test_E5_what_is_emulated_is_visible_and_tells_the_truth(api: Api, bed: Bed) -> None:
    queue, topic = Queue(bed.unique("e5q")), Topic(bed.unique("e5t"))
    async with await started(api, bed) as connection:  # selectors=auto, transactions=native
        session = await connection.create_session(AckMode.AUTO)
        plain = await session.create_consumer(queue)
        selecting = await session.create_consumer(queue, selector="region = 'eu'")
        local = await session.create_consumer(topic, no_local=True)
        assert not plain.selector_emulated and not plain.no_local_emulated  # nothing to do
        assert selecting.selector_emulated is (not bed.reference)  # RabbitMQ ignores selectors
        assert local.no_local_emulated is (not bed.reference)
        second = AckConfirmation.SETTLE_SECOND if bed.reference else AckConfirmation.LINK_FLOW
        assert session.ack_confirmation is second
        assert not session.transactions_emulated
    async with await started(api, bed, selectors="client", transactions="emulate") as connection:
        session = await connection.create_session(AckMode.TRANSACTED)
        selecting = await session.create_consumer(queue, selector="region = 'eu'")
        assert selecting.selector_emulated  # on every broker with selectors=client
        assert session.transactions_emulated
        # the emulated commit acknowledges with confirmation, as CLIENT does (A6)
        assert session.ack_confirmation is second
    # selectors=broker: the flag says the client does not filter, and it does not: where the
    # broker ignores the selector (RabbitMQ) the consumer gets what the selector would reject.
    trusted = Queue(bed.unique("e5b"))
    await send(bed, trusted, *_regional("us", "eu"))
    async with await started(api, bed, selectors="broker") as connection:
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(trusted, selector="region = 'eu'")
        assert not consumer.selector_emulated
        bodies = []
        while (message := await consumer.receive(0.5)) is not None:
            bodies.append(message.body)
    assert sorted(bodies) == (["eu"] if bed.reference else ["eu", "us"])


async def test_E4_a_message_given_back_counts_its_deliveries(api: Api, bed: Bed) -> None:
    queue = Queue(bed.unique("e4"))
    await send(bed, queue, "again")
    async with await started(api, bed, prefetch=1) as connection:
        session = await connection.create_session(AckMode.CLIENT)
        consumer = await session.create_consumer(queue)
        seen = []
        for _ in range(3):
            message = await consumer.receive(TIMEOUT)
            assert message is not None and message.body == "again"
            seen.append((message.delivery_count, message.redelivered))
            await session.recover()  # given back: `modified`, or `released` on RabbitMQ
        await consumer.close()
    if bed.reference:
        assert seen == [(1, False), (2, True), (3, True)]  # JMSXDeliveryCount = 1 + count
    else:  # RabbitMQ 3.10 ends the session on `modified`: `released` does not count (E4)
        assert seen == [(1, False), (1, False), (1, False)]
    assert await leftovers(bed, queue.name) == ["again"]
