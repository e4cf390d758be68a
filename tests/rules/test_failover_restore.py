"""Rules F2-F6, F8 and F9 where restore semantics need more than test_failover_rules.py shows.

That module proves each rule on independent reference brokers. Here: what a shared-store HA pair
adds ("nothing accepted is lost": calls blocked across a kill finish on the standby, the
standby redelivers what was never acknowledged), the exact connect plan of ``roundrobin``
(``Doorman`` listeners log every attempt), the wrap-around of the broker list, temporary topics,
message listeners and blocked calls ending in a deadline or in exhaustion. Each test runs
through both APIs.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from apikit import Api, Signal, eventually
from failoverkit import (
    TIMEOUT,
    Doorman,
    HaPair,
    Recorder,
    brokers,
    connected,
    failover_url,
    on_one_broker,
    port_of,
    send_to,
    text_of,
)

from haclient.destination import Queue, TemporaryTopic
from haclient.errors import AcknowledgeFailedError, ConnectionFailedError
from haclient.message import Message, TextMessage
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio


async def test_F3_calls_blocked_across_a_master_kill_finish_and_nothing_accepted_is_lost(
    api: Api, tmp_path: Path
) -> None:
    # the standby notices the free store only after 0.3 s: long enough to block the calls
    with HaPair(tmp_path / "store", poll_interval=0.3) as pair:
        recorder = Recorder()
        url = failover_url(*pair.members, connectdelay=20, cyclecount=1000)
        async with await connected(api, url, recorder) as connection:
            session = await connection.create_session(AckMode.AUTO)
            producer = await session.create_producer(Queue("f3"))
            consumer = await session.create_consumer(Queue("f3"))
            for n in range(3):
                await producer.send(TextMessage(f"before {n}"))
            assert text_of(await consumer.receive(TIMEOUT)) == "before 0"  # acknowledged (A1)
            pair.kill_master()
            await recorder.wait_for("started")
            received: list[str | None] = []

            async def receive_three() -> None:
                for _ in range(3):
                    received.append(text_of(await consumer.receive()))  # blocked, no timeout

            with anyio.fail_after(TIMEOUT):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(receive_three)
                    await producer.send(TextMessage("during"))  # PERSISTENT: accepted (F11)
            assert len(await recorder.wait_for("completed")) == 1
            assert received == ["before 1", "before 2", "during"]
        assert pair.queue_depth("f3") == 0


@pytest.mark.parametrize("call", ["acknowledge", "recover"])
async def test_F8_the_standby_redelivers_what_failover_left_unacknowledged(
    api: Api, pair: HaPair, call: str
) -> None:
    await send_to(pair.master.url, "f8", "one", "two")
    recorder = Recorder()
    async with await connected(api, failover_url(*pair.members), recorder) as connection:
        session = await connection.create_session(AckMode.CLIENT)
        consumer = await session.create_consumer(Queue("f8"))
        first = [await consumer.receive(TIMEOUT) for _ in range(2)]
        assert [text_of(m) for m in first] == ["one", "two"]
        pair.kill_master()
        await recorder.wait_for("completed")
        with pytest.raises(AcknowledgeFailedError):
            if call == "acknowledge":
                await api.acknowledge(first[1])
            else:
                await session.recover()
        again = [await consumer.receive(TIMEOUT) for _ in range(2)]
        assert [text_of(m) for m in again] == ["one", "two"]
        assert [m.message_id for m in again] == [m.message_id for m in first]  # type: ignore[union-attr]
        await api.acknowledge(again[1])
        assert await consumer.receive(0.2) is None
    assert pair.queue_depth("f8") == 0
    assert pair.call(lambda: pair.master.unacked_count("f8")) == 0


@pytest.mark.parametrize("mode", [AckMode.CLIENT, AckMode.INDIVIDUAL])
async def test_F8_dropping_the_batch_after_the_error_loses_nothing_delivered_since_failover(
    api: Api, pair: HaPair, mode: AckMode
) -> None:
    await send_to(pair.master.url, "f8b", "one", "two")
    recorder = Recorder()
    async with await connected(api, failover_url(*pair.members), recorder) as connection:
        session = await connection.create_session(mode)
        consumer = await session.create_consumer(Queue("f8b"))
        assert text_of(await consumer.receive(TIMEOUT)) == "one"
        pair.kill_master()
        await recorder.wait_for("completed")
        batch = [await consumer.receive(TIMEOUT) for _ in range(2)]  # on the new connection
        assert [text_of(m) for m in batch] == ["one", "two"]
        with pytest.raises(AcknowledgeFailedError) as failed:
            await api.acknowledge(batch[1])  # type: ignore[arg-type]
        assert failed.value.in_doubt is False
        assert "drop them" in str(failed.value) and "delivered again" in str(failed.value)
        # The application drops its batch, as the error invites: the session was recovered,
        # so every message it had not acknowledged comes again.
        again = [await consumer.receive(TIMEOUT) for _ in range(2)]
        assert [text_of(m) for m in again] == ["one", "two"]
        assert all(m is not None and m.redelivered for m in again)
        for message in again:
            await api.acknowledge(message)  # type: ignore[arg-type]
        assert await consumer.receive(0.2) is None
    assert pair.queue_depth("f8b") == 0
    assert pair.call(lambda: pair.master.unacked_count("f8b")) == 0


async def test_F8_a_message_delivered_before_the_failover_comes_again_marked_redelivered(
    api: Api, pair: HaPair
) -> None:
    """After a kill -9 the new master of a shared-store pair delivers the unacknowledged
    messages with a delivery count of its own (not persisted, as in ActiveMQ 5.17): the
    session knows which it handed out before the failover, and marks those redelivered."""
    await send_to(pair.master.url, "f8r", "one", "two")
    recorder = Recorder()
    async with await connected(api, failover_url(*pair.members), recorder) as connection:
        session = await connection.create_session(AckMode.CLIENT)
        consumer = await session.create_consumer(Queue("f8r"))
        first = await consumer.receive(TIMEOUT)
        assert text_of(first) == "one" and not first.redelivered  # type: ignore[union-attr]
        pair.kill_master()
        await recorder.wait_for("completed")
        batch = [await consumer.receive(TIMEOUT) for _ in range(2)]  # on the new connection
        assert [text_of(m) for m in batch] == ["one", "two"]
        one, two = batch
        assert one is not None and one.message_id == first.message_id  # type: ignore[union-attr]
        assert one.redelivered and one.delivery_count >= 2
        assert two is not None and not two.redelivered and two.delivery_count == 1
        stats = await connection.statistics()
        assert stats.messages_redelivered >= 1
        with pytest.raises(AcknowledgeFailedError):
            await api.acknowledge(two)
        again = [await consumer.receive(TIMEOUT) for _ in range(2)]
        assert all(m is not None and m.redelivered for m in again)
        await api.acknowledge(again[1])  # type: ignore[arg-type]
    assert pair.queue_depth("f8r") == 0


async def test_F5_roundrobin_makes_retries_attempts_per_broker_for_cyclecount_passes(
    api: Api,
) -> None:
    attempts: list[str] = []
    with brokers(1) as (live,), Doorman("a", attempts) as a, Doorman("b", attempts) as b:
        recorder = Recorder()
        url = failover_url(live, a, b, retries=2, cyclecount=2)
        async with await connected(api, url, recorder) as connection:
            assert attempts == []  # the first connect went to the head of the list
            session = await connection.create_session()
            producer = await session.create_producer(Queue("f5"))
            live.kill()  # the pass starts after the broker that failed; it comes last
            with anyio.fail_after(TIMEOUT), pytest.raises(ConnectionFailedError):
                await producer.send(TextMessage("nowhere to go"))
            await recorder.wait_for("failed")
        assert attempts == ["a", "a", "b", "b"] * 2


async def test_F5_roundrobin_wraps_round_to_the_head_of_the_list(api: Api) -> None:
    with brokers(2) as (first, second):
        recorder = Recorder()
        async with await connected(api, failover_url(first, second), recorder) as connection:
            session = await connection.create_session()
            producer = await session.create_producer(Queue("f5w"))
            first.kill()
            await producer.send(TextMessage("on the second"))
            first.start()
            second.kill()  # the last of the list failed: the next is the first again
            await producer.send(TextMessage("on the first again"))
            completed = [port_of(b) for b in await recorder.wait_for("completed", 2)]
        assert completed == [second.port, first.port]
        assert first.queue_depth("f5w") == 1  # the first broker lost its memory when killed


async def test_F6_temporary_topic_is_recreated_and_its_object_follows(api: Api) -> None:
    with brokers(2) as (first, second):
        recorder = Recorder()
        async with await connected(api, failover_url(first, second), recorder) as connection:
            session = await connection.create_session(AckMode.AUTO)
            topic = await session.create_temporary_topic()
            assert isinstance(topic, TemporaryTopic)
            subscriber = await session.create_consumer(topic)
            publisher = await session.create_producer(topic)
            first.kill()
            await recorder.wait_for("completed")
            assert any(n.name == topic.address and n.temporary for n in second.nodes())
            note = TextMessage("news")
            note.reply_to = topic
            await publisher.send(note)
            received = await subscriber.receive(TIMEOUT)
            assert text_of(received) == "news"
            assert received is not None and isinstance(received.reply_to, TemporaryTopic)
            assert received.reply_to.address == topic.address


async def test_F9_a_message_listener_never_gets_the_old_brokers_prefetch(api: Api) -> None:
    with brokers(2) as (first, second):
        await send_to(first.url, "f9l", *(f"old {n}" for n in range(5)))
        recorder = Recorder()
        got: list[str | None] = []
        first_in = Signal()
        release = Signal()
        both_new = Signal()

        async def on_message(message: Message) -> None:
            got.append(text_of(message))
            if len(got) == 1:
                first_in.set()
                await release.wait(TIMEOUT)  # hold the listener while the broker dies
            if "new 1" in got:
                both_new.set()

        url = failover_url(first, second)
        async with await connected(api, url, recorder, prefetch=10) as connection:
            session = await connection.create_session(AckMode.AUTO)
            consumer = await session.create_consumer(Queue("f9l"))
            await consumer.set_message_listener(api.listener(on_message))
            assert await first_in.wait(TIMEOUT)  # "old 1" .. "old 4" are prefetched now
            first.kill()
            await recorder.wait_for("completed")
            release.set()
            await send_to(second.url, "f9l", "new 0", "new 1")
            assert await both_new.wait(TIMEOUT)
        assert got == ["old 0", "new 0", "new 1"]


async def test_F9_a_message_waiting_for_a_busy_session_is_dropped_at_failover(api: Api) -> None:
    """One listener of the session runs at a time: B's message, taken from the old broker
    while A's listener holds the session, must not reach B after the failover."""
    with brokers(2) as (first, second):
        await send_to(first.url, "f9a", "old a")
        await send_to(first.url, "f9b", "old b")
        recorder = Recorder()
        got_a: list[str | None] = []
        got_b: list[str | None] = []
        a_in = Signal()
        release = Signal()
        b_new = Signal()

        async def on_a(message: Message) -> None:
            got_a.append(text_of(message))
            a_in.set()
            await release.wait(TIMEOUT)  # holds the session while the broker dies

        async def on_b(message: Message) -> None:
            got_b.append(text_of(message))
            if text_of(message) == "new b":
                b_new.set()

        async with await connected(api, failover_url(first, second), recorder) as connection:
            session = await connection.create_session(AckMode.AUTO)
            consumer_a = await session.create_consumer(Queue("f9a"))
            consumer_b = await session.create_consumer(Queue("f9b"))
            await consumer_a.set_message_listener(api.listener(on_a))
            assert await a_in.wait(TIMEOUT)
            await consumer_b.set_message_listener(api.listener(on_b))
            await eventually(lambda: first.unacked_count("f9b") == 1)  # "old b" is with B
            first.kill()
            await recorder.wait_for("completed")
            release.set()
            await send_to(second.url, "f9b", "new b")
            assert await b_new.wait(TIMEOUT)
        assert got_a == ["old a"]
        assert got_b == ["new b"]


async def test_F2_a_receive_with_a_timeout_returns_none_while_no_broker_answers(
    api: Api,
) -> None:
    async with on_one_broker(api) as (only, connection, recorder):
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue("f2t"))
        only.kill()
        await recorder.wait_for("started")
        with anyio.fail_after(TIMEOUT):
            assert await consumer.receive(0.3) is None  # its deadline, not an error
        assert recorder.named("failed") == []  # failover goes on
        only.start()
        await send_to(only.url, "f2t", "back")
        assert text_of(await consumer.receive(TIMEOUT)) == "back"


async def test_F4_every_blocked_call_raises_when_the_policy_runs_out(api: Api) -> None:
    with brokers(2) as (first, second):
        recorder = Recorder()
        url = failover_url(first, second, retries=2, cyclecount=3, connectdelay=20)
        async with await connected(api, url, recorder) as connection:
            session = await connection.create_session(AckMode.AUTO)
            consumer = await session.create_consumer(Queue("f4b"))
            producer = await session.create_producer(Queue("f4b"))
            first.kill()
            second.kill()
            await recorder.wait_for("started")
            outcomes: list[BaseException] = []

            async def capture(call: object) -> None:
                try:
                    await call  # type: ignore[misc]
                except ConnectionFailedError as error:
                    outcomes.append(error)

            with anyio.fail_after(TIMEOUT):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(capture, consumer.receive())
                    tg.start_soon(capture, producer.send(TextMessage("lost")))
                    tg.start_soon(capture, connection.create_session())
            assert len(outcomes) == 3
            assert all(isinstance(e, ConnectionFailedError) and e.cause for e in outcomes)
            # The blocking API tells listeners on a thread of their own: wait for the news.
            assert len(await recorder.wait_for("failed")) == 1
