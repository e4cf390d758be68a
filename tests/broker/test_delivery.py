"""Delivery conformance: settle modes, outcomes and delivery-count, ordering, flow, routing."""

from __future__ import annotations

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
from haclient.amqp.types import (
    Accepted,
    Byte,
    Modified,
    ReceiverSettleMode,
    Rejected,
    Released,
    SenderSettleMode,
    Terminus,
)

pytestmark = pytest.mark.anyio


# Sender settle modes ---------------------------------------------------------------------------


async def test_unsettled_sender_gets_accepted_and_message_is_queued(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            link = await sender(conn, "q")
            assert await conn.send(link, message("a")) == Accepted()
            assert broker.queue_depth("q") == 1


async def test_settled_sender_presettled_messages_are_queued(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            link = await sender(conn, "q", snd_settle_mode=SenderSettleMode.SETTLED)
            assert link.remote_snd_settle_mode is SenderSettleMode.SETTLED
            for index in range(5):
                await conn.wait_for_credit(link)
                conn.send_nowait(link, message(index), settled=True)
            await sync(conn)
            assert broker.queue_depth("q") == 5


async def test_mixed_sender_can_send_both_settled_and_unsettled(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            link = await sender(conn, "q", snd_settle_mode=SenderSettleMode.MIXED)
            conn.send_nowait(link, message("presettled"), settled=True)
            assert await conn.send(link, message("unsettled")) == Accepted()
            assert broker.queue_depth("q") == 2


# Receiver side settle modes ---------------------------------------------------------------------


async def test_consumer_asking_settled_gets_presettled_messages_and_they_are_gone(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            out = await sender(conn, "q")
            await conn.send(out, message("x"))
            link = await receiver(conn, "q", snd_settle_mode=SenderSettleMode.SETTLED)
            got = await receive(conn, link)
            assert got.delivery.remote_settled
            assert broker.queue_depth("q") == 0 and broker.unacked_count("q") == 0


async def test_mode_first_consumer_settlement_removes_message(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await conn.send(await sender(conn, "q"), message("x"))
            link = await receiver(conn, "q")
            got = await receive(conn, link)
            assert not got.delivery.remote_settled
            assert broker.unacked_count("q") == 1
            conn.settle(got, Accepted())
            await sync(conn)
            assert broker.unacked_count("q") == 0 and broker.queue_depth("q") == 0


async def test_mode_second_broker_settles_only_after_the_disposition(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await conn.send(await sender(conn, "q"), message("x"))
            link = await receiver(conn, "q", rcv_settle_mode=ReceiverSettleMode.SECOND)
            assert link.remote_rcv_settle_mode is ReceiverSettleMode.SECOND
            got = await receive(conn, link)
            await sync(conn)
            assert not got.delivery.remote_settled  # nothing decided yet: never settled early
            conn.settle(got, Accepted(), settle=False)
            await conn.wait_settled(got.delivery)  # the broker's settlement is the confirmation
            assert broker.unacked_count("q") == 0 and broker.queue_depth("q") == 0


# Outcomes and the delivery-count ---------------------------------------------------------------


async def test_released_message_is_redelivered_with_unchanged_count(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await conn.send(await sender(conn, "q"), message("x"))
            link = await receiver(conn, "q", credit=1)
            first = await receive(conn, link)
            conn.settle(first, Released())
            conn.flow(link, 1)
            again = await receive(conn, link)
            assert body_of(again) == "x" and count_of(again) == 0


async def test_modified_delivery_failed_increments_count(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await conn.send(await sender(conn, "q"), message("x"))
            link = await receiver(conn, "q", credit=1)
            for expected in (0, 1, 2):
                got = await receive(conn, link)
                assert count_of(got) == expected
                conn.settle(got, Modified(delivery_failed=True))
                conn.flow(link, 1)


async def test_modified_without_delivery_failed_keeps_count(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await conn.send(await sender(conn, "q"), message("x"))
            link = await receiver(conn, "q", credit=1)
            conn.settle(await receive(conn, link), Modified())
            conn.flow(link, 1)
            assert count_of(await receive(conn, link)) == 0


async def test_modified_undeliverable_here_never_returns_to_that_link(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await conn.send(await sender(conn, "q"), message("x"))
            first = await receiver(conn, "q", credit=1)
            got = await receive(conn, first)
            conn.flow(first, 10)
            conn.settle(got, Modified(delivery_failed=True, undeliverable_here=True))
            await sync(conn)
            assert conn.receive_nowait(first) is None
            assert broker.queue_depth("q") == 1  # waits for another consumer
            second = await receiver(conn, "q")
            again = await receive(conn, second)
            assert body_of(again) == "x" and count_of(again) == 1
            assert conn.receive_nowait(first) is None


async def test_rejected_message_moves_to_dead_letter_queue(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await conn.send(await sender(conn, "q"), message("poison"))
            link = await receiver(conn, "q")
            conn.settle(await receive(conn, link), Rejected())
            await sync(conn)
            assert broker.queue_depth("q") == 0 and broker.unacked_count("q") == 0
            assert broker.queue_depth("DLQ") == 1
            dead = await receiver(conn, "DLQ")
            assert body_of(await receive(conn, dead)) == "poison"


async def test_unsettled_deliveries_of_closed_link_return_first_with_count_plus_one(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            out = await sender(conn, "q")
            for index in range(4):
                await conn.send(out, message(index))
            link = await receiver(conn, "q", credit=2)
            assert [body_of(await receive(conn, link)) for _ in range(2)] == [0, 1]
            link.close()
            wake(conn)
            again = await receiver(conn, "q", credit=4)
            got = [await receive(conn, again) for _ in range(4)]
            assert [(body_of(m), count_of(m)) for m in got] == [(0, 1), (1, 1), (2, 0), (3, 0)]


async def test_unsettled_deliveries_of_closed_connection_are_redelivered(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "producer") as conn:
            await conn.send(await sender(conn, "q"), message("x"))
            async with connect(broker, "doomed") as doomed:
                await receive(doomed, await receiver(doomed, "q"))
            link = await receiver(conn, "q")
            again = await receive(conn, link)
            assert body_of(again) == "x" and count_of(again) == 1


async def test_unsettled_deliveries_of_ended_session_are_redelivered(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await conn.send(await sender(conn, "q"), message("x"))
            link = await receiver(conn, "q")
            await receive(conn, link)
            link.session.close()
            wake(conn)
            again = await receive(conn, await receiver(conn, "q"))
            assert body_of(again) == "x" and count_of(again) == 1


# Ordering, flow ---------------------------------------------------------------------------------


async def test_queue_delivers_in_fifo_order(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            out = await sender(conn, "q")
            for index in range(50):
                conn.send_nowait(out, message(index))
            link = await receiver(conn, "q", credit=50)
            assert [body_of(await receive(conn, link)) for _ in range(50)] == list(range(50))


async def test_competing_consumers_are_served_round_robin(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            first = await receiver(conn, "q")
            second = await receiver(conn, "q")
            assert broker.consumer_count("q") == 2
            out = await sender(conn, "q")
            for index in range(6):
                await conn.send(out, message(index))
            got_first = [body_of(await receive(conn, first)) for _ in range(3)]
            got_second = [body_of(await receive(conn, second)) for _ in range(3)]
            assert sorted(got_first + got_second) == list(range(6))
            assert got_first in ([0, 2, 4], [1, 3, 5])


async def test_drain_sends_what_is_there_and_returns_the_rest_of_the_credit(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            out = await sender(conn, "q")
            for index in range(2):
                await conn.send(out, message(index))
            link = await receiver(conn, "q", credit=0)
            await conn.drain(link, 5)
            assert link.credit == 0 and not link.draining
            assert [body_of(conn.receive_nowait(link)) for _ in range(2)] == [0, 1]
            assert conn.receive_nowait(link) is None


# Routing ----------------------------------------------------------------------------------------


async def test_anonymous_relay_routes_by_to_and_rejects_unknown_node(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            assert "ANONYMOUS-RELAY" in conn.engine.remote_offered_capabilities
            relay = await sender(conn, None)
            assert await conn.send(relay, message("x", to="relayed")) == Accepted()
            assert broker.queue_depth("relayed") == 1
            outcome = await conn.send(relay, message("y", to="haclient.tmp.queue.gone"))
            assert isinstance(outcome, Rejected)
            assert outcome.error is not None and outcome.error.name == "amqp:not-found"


async def test_anonymous_relay_creates_a_topic_when_qpid_jms_annotation_says_topic(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            relay = await sender(conn, None)
            jms_topic = {"x-opt-jms-dest": Byte(1)}
            await conn.send(relay, message("dropped", to="alerts", message_annotations=jms_topic))
            assert broker.node_info("alerts").kind == "topic"
            sub = await receiver(conn, Terminus(address="alerts", capabilities=("topic",)))
            await conn.send(relay, message("fire", to="alerts", message_annotations=jms_topic))
            assert body_of(await receive(conn, sub)) == "fire"


async def test_topic_copies_every_message_to_every_subscriber(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            out = await sender(conn, Terminus(address="news", capabilities=("topic",)))
            await conn.send(out, message("before anyone listens"))
            first = await receiver(conn, "topic://news")
            second = await receiver(conn, Terminus(address="news", capabilities=("topic",)))
            for index in range(3):
                await conn.send(out, message(index))
            assert [body_of(await receive(conn, first)) for _ in range(3)] == [0, 1, 2]
            assert [body_of(await receive(conn, second)) for _ in range(3)] == [0, 1, 2]
            assert broker.node_info("news").kind == "topic"
