"""Rules A1-A6: acknowledgement modes, through both APIs, on the reference broker and RabbitMQ."""

from __future__ import annotations

import pytest
from apikit import Api, Bed, eventually
from rulekit import TIMEOUT, leftovers, send, started

from haclient.destination import Queue
from haclient.message import TextMessage
from haclient.modes import AckConfirmation, AckMode

pytestmark = pytest.mark.anyio


def expected_confirmation(bed: Bed) -> AckConfirmation:
    """A6: the reference broker grants receiver settle mode second; RabbitMQ does not, and
    answers a flow on the probe link instead."""
    return AckConfirmation.SETTLE_SECOND if bed.reference else AckConfirmation.LINK_FLOW


async def test_A1_auto_acknowledged_and_confirmed_before_receive_returns(
    api: Api, bed: Bed
) -> None:
    queue = bed.unique("a1")
    await send(bed, Queue(queue), "one")
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue(queue))
        message = await consumer.receive(TIMEOUT)
        assert message is not None and message.body == "one"
        if bed.admin is not None:  # confirmed: the broker holds nothing for us any more
            assert bed.admin.unacked_count(queue) == 0
            assert bed.admin.queue_depth(queue) == 0
        assert session.ack_confirmation is expected_confirmation(bed)
        assert await consumer.receive(0.1) is None
    assert await leftovers(bed, queue) == []  # and it is not redelivered


async def test_A2_client_acknowledge_covers_every_delivery_of_the_session(
    api: Api, bed: Bed
) -> None:
    q1, q2 = bed.unique("a2-1"), bed.unique("a2-2")
    await send(bed, Queue(q1), "one", "three")
    await send(bed, Queue(q2), "two")
    async with await started(api, bed, prefetch=1) as connection:
        session = await connection.create_session(AckMode.CLIENT)
        c1 = await session.create_consumer(Queue(q1))
        c2 = await session.create_consumer(Queue(q2))
        first = await c1.receive(TIMEOUT)
        second = await c2.receive(TIMEOUT)
        assert first is not None and second is not None
        assert (first.body, second.body) == ("one", "two")
        if bed.admin is not None:
            assert bed.admin.unacked_count(q2) == 1
        await api.acknowledge(first)  # acknowledges c2's message too, confirmed on return
        if bed.admin is not None:
            assert bed.admin.unacked_count(q2) == 0
            assert bed.admin.queue_depth(q2) == 0
        assert session.ack_confirmation is expected_confirmation(bed)
        third = await c1.receive(TIMEOUT)
        assert third is not None and third.body == "three"
        await session.recover()  # not acknowledged: comes back, marked redelivered
        again = await c1.receive(TIMEOUT)
        assert again is not None and again.body == "three"
        assert again.message_id == third.message_id
        marked = again.redelivered and again.delivery_count == 2
        assert marked or not bed.reference
        await session.close()  # still not acknowledged: the broker keeps it
    assert await leftovers(bed, q2) == []
    assert await leftovers(bed, q1) == ["three"]
    if not marked:  # RabbitMQ 3.10 refuses `modified`; `released` leaves delivery-count alone
        pytest.skip("broker lacks redelivery marking of released messages (no `modified` outcome)")


async def test_A3_dups_ok_acknowledges_lazily_without_any_call(api: Api, bed: Bed) -> None:
    queue = bed.unique("a3")
    await send(bed, Queue(queue), *[f"m{i}" for i in range(5)])
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.DUPS_OK)
        assert session.ack_confirmation is AckConfirmation.NONE
        consumer = await session.create_consumer(Queue(queue))
        bodies = [(await consumer.receive(TIMEOUT)).body for _ in range(5)]  # type: ignore[union-attr]
        assert bodies == [f"m{i}" for i in range(5)]
        if bed.admin is not None:  # flushed by the session's flusher, nobody asked
            admin = bed.admin
            await eventually(lambda: admin.unacked_count(queue) == 0, timeout=10)
            assert admin.queue_depth(queue) == 0
    assert await leftovers(bed, queue) == []


async def test_A4_transacted_sends_and_acknowledgements_belong_to_the_transaction(
    api: Api, bed: Bed
) -> None:
    queue = bed.unique("a4")
    async with await started(api, bed) as connection:
        session = await bed.lacks(
            "transactions", lambda: connection.create_session(AckMode.TRANSACTED)
        )
        assert session.ack_confirmation is AckConfirmation.NONE
        producer = await session.create_producer(Queue(queue))
        await producer.send(TextMessage("in-txn"))
        observer = await connection.create_session(AckMode.AUTO)
        watcher = await observer.create_consumer(Queue(queue))
        assert await watcher.receive(0.3) is None  # invisible until commit
        if bed.admin is not None:
            assert bed.admin.queue_depth(queue) == 0
        await watcher.close()
        await session.commit()
        consumer = await session.create_consumer(Queue(queue))
        received = await consumer.receive(TIMEOUT)
        assert received is not None and received.body == "in-txn"
        assert not received.redelivered and received.delivery_count == 1
        await session.rollback()  # the acknowledgement is undone: it comes back
        again = await consumer.receive(TIMEOUT)
        assert again is not None and again.message_id == received.message_id
        assert again.redelivered and again.delivery_count == 2
        await session.commit()
        if bed.admin is not None:
            assert bed.admin.queue_depth(queue) == 0
            assert bed.admin.unacked_count(queue) == 0
    assert await leftovers(bed, queue) == []


async def test_A5_no_ack_messages_arrive_settled_and_never_come_back(api: Api, bed: Bed) -> None:
    queue = bed.unique("a5")
    await send(bed, Queue(queue), "one", "two")
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.NO_ACK)
        assert session.ack_confirmation is AckConfirmation.NONE
        consumer = await session.create_consumer(Queue(queue))
        message = await consumer.receive(TIMEOUT)
        assert message is not None and message.body == "one"
        if bed.admin is not None:  # both were handed to us pre-settled: gone from the broker
            admin = bed.admin
            await eventually(lambda: admin.queue_depth(queue) == 0, timeout=5)
            assert admin.unacked_count(queue) == 0
        await api.acknowledge(message)  # nothing to do, no error
    # "two" was prefetched and never handed out; pre-settled, so it is lost, not redelivered
    assert await leftovers(bed, queue) == []


@pytest.mark.parametrize(
    "mode", [AckMode.AUTO, AckMode.CLIENT, AckMode.INDIVIDUAL], ids=lambda mode: mode.name
)
async def test_A6_confirmation_mechanism_is_visible_on_the_session(
    api: Api, bed: Bed, mode: AckMode
) -> None:
    queue = bed.unique("a6")
    await send(bed, Queue(queue), "one")
    async with await started(api, bed) as connection:
        session = await connection.create_session(mode)
        consumer = await session.create_consumer(Queue(queue))
        message = await consumer.receive(TIMEOUT)
        assert message is not None
        assert session.ack_confirmation is expected_confirmation(bed)
        await api.acknowledge(message)
        if bed.admin is not None:  # confirmed when acknowledge() returned
            assert bed.admin.unacked_count(queue) == 0
        for other in (AckMode.DUPS_OK, AckMode.NO_ACK):
            assert (await connection.create_session(other)).ack_confirmation is (
                AckConfirmation.NONE
            )
    assert await leftovers(bed, queue) == []
