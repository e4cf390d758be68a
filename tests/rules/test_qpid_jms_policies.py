"""Rules M5-M9 (Qpid JMS's presettle policy, forced sync and async sends, JMSXUserID, local
message priority, the pull of a receive that found nothing) through both APIs: on the scripted
peer where the frames are the proof (a settled transfer, a send that returns though no outcome
ever comes, a message sent only when the client drains), on the reference broker and RabbitMQ
where what arrives (or not) is.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from apikit import Api, Bed
from failoverkit import Recorder
from rulekit import TIMEOUT, leftovers, send, started

from chaos.peer import ScriptedPeer
from haclient.amqp.codec import AmqpMessage, encode_message
from haclient.amqp.types import ErrorCondition, SenderSettleMode
from haclient.destination import Queue, Topic
from haclient.errors import ClosedError, ResourceLimitError
from haclient.message import DeliveryMode, TextMessage
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio

FULL = ErrorCondition("amqp:resource-limit-exceeded", "queue orders is full")


def _settled_attach(event: Any) -> bool:
    return bool(event.link.remote_snd_settle_mode is SenderSettleMode.SETTLED)


def _settled_transfer(event: Any) -> bool:
    return bool(event.delivery.remote_settled)


def _unsettled_transfer(event: Any) -> bool:
    return not event.delivery.remote_settled


async def _one_producer(api: Api, peer: ScriptedPeer, **options: Any) -> tuple[Any, Any]:
    connection = await api.connect(f"amqp://127.0.0.1:{peer.port}", **options)
    session = await connection.create_session()
    return connection, await session.create_producer(Queue("orders"))


async def _close(connection: Any, peer: ScriptedPeer) -> None:
    await connection.close()
    await peer.wait_script_done()
    assert peer.failures == []


def _opened(peer: ScriptedPeer) -> None:
    peer.expect_open().respond()
    peer.expect_begin().respond()


def _closing(peer: ScriptedPeer) -> None:
    peer.expect_detach().respond()
    peer.expect_end().respond()
    peer.expect_close().respond()


# --- M5: presettling ---------------------------------------------------------------------------


async def test_M5_a_presettled_producer_sends_settled_and_waits_for_no_outcome(api: Api) -> None:
    peer = ScriptedPeer()
    _opened(peer)
    peer.expect_attach(sender=True, address="orders").where(_settled_attach).respond(credit=10)
    for _ in range(2):  # never answered: a PERSISTENT send returns all the same
        peer.expect_transfer(address="orders").where(_settled_transfer).no_answer()
    _closing(peer)
    with anyio.fail_after(TIMEOUT):
        async with peer.serving():
            connection, producer = await _one_producer(api, peer, presettle_queue_producers=True)
            for body in ("one", "two"):
                await producer.send(TextMessage(body), delivery_mode=DeliveryMode.PERSISTENT)
            await _close(connection, peer)


async def test_M5_the_policy_presettles_only_the_kinds_it_names(api: Api) -> None:
    peer = ScriptedPeer()
    _opened(peer)
    # presettleTopicProducers: a queue's producer is not presettled, and waits as before
    peer.expect_attach(sender=True, address="orders").respond(credit=10)
    peer.expect_transfer(address="orders").where(_unsettled_transfer).respond()
    _closing(peer)
    with anyio.fail_after(TIMEOUT):
        async with peer.serving():
            connection, producer = await _one_producer(api, peer, presettle_topic_producers=True)
            await producer.send(TextMessage("one"), delivery_mode=DeliveryMode.PERSISTENT)
            await _close(connection, peer)


async def test_M5_presettled_messages_arrive_and_are_gone_once_delivered(
    api: Api, bed: Bed
) -> None:
    queue = Queue(bed.unique("m5"))
    connection = await started(api, bed, presettle_all=True)
    try:
        session = await connection.create_session(AckMode.CLIENT)
        producer = await session.create_producer(queue)
        consumer = await session.create_consumer(queue)
        for body in ("a", "b", "c"):
            await producer.send(TextMessage(body), delivery_mode=DeliveryMode.PERSISTENT)
        first = await consumer.receive(TIMEOUT)
        assert first is not None and first.body == "a"
        await session.recover()  # nothing given back: the broker forgot what it sent settled
        received = [await consumer.receive(TIMEOUT) for _ in range(2)]
        assert [m.body for m in received if m is not None] == ["b", "c"]  # prefetched, kept
        assert await consumer.receive(0.3) is None
    finally:
        await connection.close()
    assert await leftovers(bed, queue.name, wait=0.3) == []


async def test_M5_a_transacted_session_never_presettles_its_consumers(api: Api, bed: Bed) -> None:
    queue = Queue(bed.unique("m5-tx"))
    await send(bed, queue, "kept")
    native = "native" if bed.reference else "emulate"  # RabbitMQ 3.x has no transactions
    connection = await started(api, bed, presettle_all=True, transactions=native)
    try:
        session = await connection.create_session(AckMode.TRANSACTED)
        consumer = await session.create_consumer(queue)
        first = await consumer.receive(TIMEOUT)
        assert first is not None and first.body == "kept"
        await session.rollback()
        again = await consumer.receive(TIMEOUT)
        assert again is not None and again.body == "kept"
        await session.commit()
    finally:
        await connection.close()


async def test_M5_a_topic_subscriber_is_presettled_by_the_topic_flag(api: Api, bed: Bed) -> None:
    topic = Topic(bed.unique("m5-topic"))
    connection = await started(api, bed, presettle_topic_consumers=True)
    try:
        session = await connection.create_session(AckMode.CLIENT)
        consumer = await session.create_consumer(topic)
        producer = await session.create_producer(topic)
        await producer.send(TextMessage("news"), delivery_mode=DeliveryMode.PERSISTENT)
        message = await consumer.receive(TIMEOUT)
        assert message is not None and message.body == "news"
        await session.recover()  # settled by the broker: not delivered again
        assert await consumer.receive(0.3) is None
    finally:
        await connection.close()


async def test_M5_presettled_sends_of_a_transaction_wait_for_its_commit(
    api: Api, reference_broker: Any
) -> None:
    bed = Bed("reference", reference_broker.url, admin=reference_broker)
    queue = Queue(bed.unique("m5-txsend"))
    connection = await started(api, bed, presettle_transacted_producers=True)
    try:
        session = await connection.create_session(AckMode.TRANSACTED)
        producer = await session.create_producer(queue)
        for body in ("one", "two"):
            await producer.send(TextMessage(body), delivery_mode=DeliveryMode.PERSISTENT)
        assert await leftovers(bed, queue.name, wait=0.2) == []  # settled, in the transaction
        await session.commit()
    finally:
        await connection.close()
    assert await leftovers(bed, queue.name) == ["one", "two"]


# --- M6: forced sync and async sends ----------------------------------------------------------


async def test_M6_force_sync_send_makes_a_non_persistent_send_wait_for_its_outcome(
    api: Api,
) -> None:
    peer = ScriptedPeer()
    _opened(peer)
    peer.expect_attach(sender=True, address="orders").respond(credit=10)
    peer.expect_transfer(address="orders").refuse(FULL)
    _closing(peer)
    with anyio.fail_after(TIMEOUT):
        async with peer.serving():
            connection, producer = await _one_producer(api, peer, force_sync_send=True)
            with pytest.raises(ResourceLimitError):  # raised by this send, not a later call
                await producer.send(TextMessage("x"), delivery_mode=DeliveryMode.NON_PERSISTENT)
            await _close(connection, peer)


async def test_M6_force_async_send_returns_before_a_persistent_outcome(api: Api) -> None:
    peer = ScriptedPeer()
    _opened(peer)
    peer.expect_attach(sender=True, address="orders").respond(credit=10)
    peer.expect_transfer(address="orders").where(_unsettled_transfer).no_answer()
    peer.expect_detach().respond()  # close() waits close_timeout for the outcome, then detaches
    peer.expect_end().respond()
    peer.expect_close().respond()
    with anyio.fail_after(TIMEOUT):
        async with peer.serving():
            connection, producer = await _one_producer(
                api, peer, force_async_send=True, close_timeout=0.3
            )
            await producer.send(TextMessage("x"), delivery_mode=DeliveryMode.PERSISTENT)
            await _close(connection, peer)


# --- M7: JMSXUserID ---------------------------------------------------------------------------


@pytest.mark.parametrize("populate", [False, True], ids=["cleared", "populated"])
async def test_M7_an_application_set_user_id_is_never_sent_as_is(
    api: Api, reference_broker: Any, populate: bool
) -> None:
    bed = Bed("reference", reference_broker.url, admin=reference_broker)
    queue = Queue(bed.unique("m7"))
    connection = await started(
        api, bed, username="alice", password="secret", populate_user_id=populate
    )
    try:
        session = await connection.create_session()
        producer = await session.create_producer(queue)
        consumer = await session.create_consumer(queue)
        message = TextMessage("who")
        message.properties["JMSXUserID"] = "mallory"
        await producer.send(message)
        received = await consumer.receive(TIMEOUT)
        assert received is not None
        assert received.properties.get("JMSXUserID") == ("alice" if populate else None)
    finally:
        await connection.close()


# --- M8: local message priority ---------------------------------------------------------------

PRIORITIES = (1, 5, 9, 4, 9, 0, 7)


@pytest.mark.parametrize("by_priority", [True, False], ids=["by-priority", "arrival-order"])
async def test_M8_prefetched_messages_are_handed_out_highest_priority_first(
    api: Api, reference_broker: Any, by_priority: bool
) -> None:
    bed = Bed("reference", reference_broker.url, admin=reference_broker)
    queue = Queue(bed.unique("m8"))
    connection = await started(api, bed, local_message_priority=by_priority)
    try:
        session = await connection.create_session()
        consumer = await session.create_consumer(queue)  # credit granted: each one comes at once
        producer = await session.create_producer(queue)
        for n, priority in enumerate(PRIORITIES):
            # PERSISTENT: the broker's accept follows its transfer to the consumer on this same
            # connection, so once the last send returns every message is prefetched.
            await producer.send(TextMessage(f"{priority}-{n}"), priority=priority)
        bodies = [getattr(await consumer.receive(TIMEOUT), "body", None) for _ in PRIORITIES]
    finally:
        await connection.close()
    sent = [f"{priority}-{n}" for n, priority in enumerate(PRIORITIES)]
    if by_priority:  # highest first, in arrival order within a priority
        assert bodies == ["9-2", "9-4", "7-6", "5-1", "4-3", "1-0", "0-5"]
    else:
        assert bodies == sent


# --- M9: a receive that finds nothing asks the broker (drain) ---------------------------------


def _draining(event: Any) -> bool:
    return bool(event.link.drain_requested)


def _send_on_drain(body: str) -> Any:
    """The peer's answer to a drain: one message held back until then, the rest of the credit
    given back (``drained``)."""
    payload = encode_message(AmqpMessage(body=body))

    def action(conn: Any, event: Any) -> None:
        event.link.send(payload)
        event.link.drained()

    return action


def _holding_back(peer: ScriptedPeer, *, drains: bool) -> None:
    """A broker that sends a message on the consumer's link only when the client drains it."""
    _opened(peer)
    peer.expect_attach(sender=False, address="orders").respond()
    if drains:
        peer.expect_flow(address="orders").where(_draining).then(_send_on_drain("held"))
        peer.expect_disposition().respond()  # AUTO acknowledges it
    _closing(peer)


async def _consumer(api: Api, peer: ScriptedPeer, **options: Any) -> tuple[Any, Any]:
    connection = await api.connect(f"amqp://127.0.0.1:{peer.port}", prefetch=10, **options)
    await connection.start()
    session = await connection.create_session()
    return connection, await session.create_consumer(Queue("orders"))


@pytest.mark.parametrize("nowait", [True, False], ids=["receive_nowait", "receive-timeout"])
async def test_M9_a_receive_that_found_nothing_drains_the_link(api: Api, nowait: bool) -> None:
    peer = ScriptedPeer()
    _holding_back(peer, drains=True)
    with anyio.fail_after(TIMEOUT):
        async with peer.serving():
            connection, consumer = await _consumer(api, peer)
            message = await (consumer.receive_nowait() if nowait else consumer.receive(0.2))
            assert message is not None and message.body == "held"
            await _close(connection, peer)


@pytest.mark.parametrize("nowait", [True, False], ids=["receive_nowait", "receive-timeout"])
async def test_M9_local_only_receives_do_not_ask_the_broker(api: Api, nowait: bool) -> None:
    peer = ScriptedPeer()
    _holding_back(peer, drains=False)
    local = {"receive_no_wait_local_only": True} if nowait else {"receive_local_only": True}
    with anyio.fail_after(TIMEOUT):
        async with peer.serving():
            connection, consumer = await _consumer(api, peer, **local)
            assert await (consumer.receive_nowait() if nowait else consumer.receive(0.2)) is None
            await _close(connection, peer)


async def test_M9_an_unanswered_drain_closes_the_consumer_after_drain_timeout(api: Api) -> None:
    peer = ScriptedPeer()
    _opened(peer)
    peer.expect_attach(sender=False, address="orders").respond()
    peer.expect_flow(address="orders").where(_draining).no_answer()
    _closing(peer)
    with anyio.fail_after(TIMEOUT):
        async with peer.serving():
            connection, consumer = await _consumer(api, peer, drain_timeout=0.3)
            with pytest.raises(ClosedError, match="drainTimeout"):
                await consumer.receive_nowait()
            assert consumer.is_closed
            await _close(connection, peer)


async def test_M9_a_pull_consumer_receives_what_the_broker_holds_without_waiting(
    api: Api, reference_broker: Any
) -> None:
    bed = Bed("reference", reference_broker.url, admin=reference_broker)
    queue = Queue(bed.unique("m9"))
    await send(bed, queue, "first", "second")
    connection = await started(api, bed, prefetch=0)
    try:
        session = await connection.create_session()
        consumer = await session.create_consumer(queue)
        bodies = [getattr(await consumer.receive_nowait(), "body", None) for _ in range(3)]
        assert bodies == ["first", "second", None]
    finally:
        await connection.close()
    assert await leftovers(bed, queue.name, wait=0.3) == []  # nothing prefetched and lost


async def test_M9_a_drain_cut_off_by_failover_returns_none_and_the_next_broker_is_drained(
    api: Api,
) -> None:
    peer = ScriptedPeer()
    _opened(peer)
    peer.expect_attach(sender=False, address="orders").respond()
    peer.expect_flow(address="orders").where(_draining).drop_connection()
    peer.expect_connection()  # failover restores the consumer's link
    _holding_back(peer, drains=True)
    recorder = Recorder()
    url = (
        "failover:(amqp://127.0.0.1:{port})"
        "?failover.method=singlebroker&failover.retries=20&failover.connectdelay=0"
    )
    with anyio.fail_after(TIMEOUT):
        async with peer.serving() as port:
            connection = await api.connect(url.format(port=port), prefetch=10)
            await connection.add_listener(recorder)
            await connection.start()
            session = await connection.create_session()
            consumer = await session.create_consumer(Queue("orders"))
            assert await consumer.receive_nowait() is None  # the drain met the connection's end
            await recorder.wait_for("completed")
            message = await consumer.receive_nowait()
            assert message is not None and message.body == "held"
            await _close(connection, peer)


async def test_M9_a_pull_drains_once_even_when_the_client_gives_messages_back(
    api: Api, reference_broker: Any
) -> None:
    bed = Bed("reference", reference_broker.url, admin=reference_broker)
    queue = Queue(bed.unique("m9-selector"))
    await send(bed, queue, TextMessage("not for us", properties={"kind": "other"}))
    # the client evaluates the selector, and releases what it rejects: back on the queue
    connection = await started(api, bed, prefetch=0, selectors="client")
    try:
        session = await connection.create_session()
        consumer = await session.create_consumer(queue, "kind = 'mine'")
        with anyio.fail_after(TIMEOUT):
            assert await consumer.receive_nowait() is None
            assert await consumer.receive(0.2) is None
    finally:
        await connection.close()
    assert await leftovers(bed, queue.name, wait=0.3) == ["not for us"]
