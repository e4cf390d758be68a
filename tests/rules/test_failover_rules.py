"""Rules F1-F6, F8-F10 and F14: what failover does to each call, through both APIs.

Independent reference brokers (``failoverkit``): the connection starts on the first; ``kill()``
resets its sockets without a word; the connection walks on to the next. Outcomes are read on
the brokers' admin API and through fresh connections, never from the client's own bookkeeping.
"""

from __future__ import annotations

import copy
from typing import Any

import anyio
import pytest
from apikit import Api, Signal
from failoverkit import (
    TIMEOUT,
    HaPair,
    Recorder,
    brokers,
    connected,
    failover_url,
    on_one_broker,
    port_of,
    send_to,
    take_all,
    text_of,
)

import haclient.aio as aio
from haclient.destination import Queue, TemporaryQueue, Topic
from haclient.errors import (
    AcknowledgeFailedError,
    BrowserFailoverError,
    ConnectionFailedError,
    FailoverTimeoutError,
    ResourceLockedError,
)
from haclient.message import DeliveryMode, TextMessage
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio


async def test_F1_a_plain_url_fails_over_to_the_same_broker(api: Api) -> None:
    with brokers(1) as (only,):
        recorder = Recorder()
        async with await connected(api, only.url, recorder) as connection:  # singlebroker
            session = await connection.create_session()
            producer = await session.create_producer(Queue("f1"))
            assert only.drop_connections() == 1  # a network blip: the broker stays up
            await producer.send(TextMessage("after"))  # waits for the reconnect, then goes
            assert [port_of(b) for b in await recorder.wait_for("completed")] == [only.port]
        assert only.queue_depth("f1") == 1


async def test_F1_a_plain_url_rides_out_a_broker_restart(api: Api) -> None:
    with brokers(1) as (only,):
        recorder = Recorder()
        async with await connected(api, only.url, recorder) as connection:  # the defaults
            session = await connection.create_session()
            producer = await session.create_producer(Queue("f1r"))
            only.kill()
            await recorder.wait_for("started")
            await anyio.sleep(1.0)  # the broker restarts: the default schedule keeps trying
            assert recorder.named("failed") == []
            only.start()  # on the same port
            with anyio.fail_after(TIMEOUT):
                await producer.send(TextMessage("after the restart"))
            assert [port_of(b) for b in await recorder.wait_for("completed")] == [only.port]
        assert only.queue_depth("f1r") == 1


async def test_F1_nofailover_reports_the_loss_at_once(api: Api) -> None:
    with brokers(1) as (only,):
        recorder = Recorder()
        url = f"failover:({only.url})?failover.method=nofailover"
        async with await connected(api, url, recorder) as connection:
            session = await connection.create_session()
            producer = await session.create_producer(Queue("f1n"))
            only.drop_connections()  # the broker is still there: nofailover must not use it
            with anyio.fail_after(TIMEOUT), pytest.raises(ConnectionFailedError):
                await producer.send(TextMessage("lost"))
            assert recorder.named("completed") == []
            assert len(await recorder.wait_for("failed")) == 1


async def test_F2_F3_calls_block_while_no_broker_answers_then_go_on(api: Api) -> None:
    async with on_one_broker(api) as (only, connection, recorder):
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue("f2"))
        producer = await session.create_producer(Queue("f2"))
        only.kill()  # and it stays down for now
        await recorder.wait_for("started")
        done = Signal()
        received: list[object] = []

        async def receive() -> None:
            received.append(await consumer.receive())  # no timeout: blocks in failover
            done.set()

        async def send() -> None:
            await producer.send(TextMessage("sent during the outage"))  # PERSISTENT

        async with anyio.create_task_group() as tg:
            tg.start_soon(receive)
            tg.start_soon(send)
            message = TextMessage("built offline", properties={"n": 1})  # F2: no network
            assert message.properties["n"] == 1
            assert not await done.wait(0.5)  # F2: still blocked, no error
            only.start()  # F3: the broker is back; the blocked calls go on
            with anyio.fail_after(TIMEOUT):
                await done.wait(TIMEOUT)
        assert [m.text for m in received] == ["sent during the outage"]  # type: ignore[attr-defined]


async def test_F2_F3_pipelined_sends_wait_out_a_failover_and_every_later_one_arrives(
    api: Api,
) -> None:
    async with on_one_broker(api) as (only, connection, recorder):
        session = await connection.create_session()
        producer = await session.create_producer(Queue("f2p"))
        producer.delivery_mode = DeliveryMode.NON_PERSISTENT  # pipelined: no wait per send
        for n in range(50):
            await producer.send(TextMessage(f"before {n}"))
        await producer.flush()
        only.kill()  # the broker and what it held are gone (NON_PERSISTENT: at most once)
        await recorder.wait_for("started")
        done = Signal()

        async def send_after() -> None:
            for n in range(200):
                await producer.send(TextMessage(f"after {n}"))
            await producer.flush()
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(send_after)
            assert not await done.wait(0.5)  # F2: the first send waits, no error
            only.start()  # F3: on the new connection every send goes, in order
            with anyio.fail_after(TIMEOUT):
                await done.wait(TIMEOUT)
        assert await take_all(only.url, "f2p") == [f"after {n}" for n in range(200)]


async def test_F4_exhausted_policy_fails_blocked_and_later_calls(api: Api) -> None:
    with brokers(1) as (only,):
        recorder = Recorder()
        url = failover_url(only, method="singlebroker", retries=3, cyclecount=1)
        async with await connected(api, url, recorder) as connection:
            session = await connection.create_session()
            producer = await session.create_producer(Queue("f4"))
            only.kill()
            with anyio.fail_after(TIMEOUT):
                with pytest.raises(ConnectionFailedError) as blocked:
                    await producer.send(TextMessage("never"))
                assert blocked.value.cause is not None  # the last failure, carried
                with pytest.raises(ConnectionFailedError):
                    await connection.create_session()  # a later call: the same verdict
            # a blocking connection tells its listeners on a thread of their own: wait for it
            assert len(await recorder.wait_for("failed")) == 1


async def test_F4_failover_timeout_ends_the_call_not_the_failover(api: Api) -> None:
    with brokers(1) as (only,):
        recorder = Recorder()
        url = failover_url(only, method="singlebroker", timeout=300, retries=1000, connectdelay=20)
        async with await connected(api, url, recorder) as connection:
            session = await connection.create_session()
            producer = await session.create_producer(Queue("f4t"))
            only.kill()
            with anyio.fail_after(TIMEOUT), pytest.raises(FailoverTimeoutError):
                await producer.send(TextMessage("too early"))
            only.start()  # failover went on in the background and now succeeds
            with anyio.fail_after(TIMEOUT):
                await producer.send(TextMessage("in time"))
        assert only.queue_depth("f4t") == 1


async def test_F4_a_per_call_timeout_ends_each_kind_of_call_not_the_failover(api: Api) -> None:
    async with on_one_broker(api) as (only, connection, recorder):
        session = await connection.create_session(AckMode.CLIENT)
        producer = await session.create_producer(Queue("f4c"))
        await producer.send(TextMessage("one"))
        consumer = await session.create_consumer(Queue("f4c"))
        await connection.start()
        message = await consumer.receive(TIMEOUT)
        assert message is not None
        transacted = await connection.create_session(AckMode.TRANSACTED)
        only.kill()
        await recorder.wait_for("started")
        calls = {
            "send": lambda: producer.send(TextMessage("late"), timeout=0.2),
            "acknowledge": lambda: session.acknowledge(timeout=0.2),
            "message.acknowledge": lambda: api.call(message.acknowledge, timeout=0.2),
            "recover": lambda: session.recover(timeout=0.2),
            "commit": lambda: transacted.commit(timeout=0.2),
            "rollback": lambda: transacted.rollback(timeout=0.2),
            "create_session": lambda: connection.create_session(timeout=0.2),
            "create_producer": lambda: session.create_producer(Queue("x"), timeout=0.2),
            "create_consumer": lambda: session.create_consumer(Queue("x"), timeout=0.2),
            "create_temporary_queue": lambda: session.create_temporary_queue(timeout=0.2),
        }
        for name, call in calls.items():
            with anyio.fail_after(TIMEOUT):
                try:
                    await call()
                except FailoverTimeoutError as late:
                    assert str(only.port) in str(late), name  # names the broker tried
                else:
                    pytest.fail(
                        f"{name} returned during the failover, without FailoverTimeoutError"
                    )
        assert recorder.named("failed") == []  # failover goes on
        only.start()
        with anyio.fail_after(TIMEOUT):
            await producer.send(TextMessage("in time"), timeout=TIMEOUT)


async def test_F5_the_default_url_fails_over_on_a_shared_store_ha_pair(
    api: Api, pair: HaPair
) -> None:
    recorder = Recorder()
    url = f"failover:({','.join(m.url for m in pair.members)})"  # no failover.* option
    async with await connected(api, url, recorder) as connection:
        session = await connection.create_session()
        producer = await session.create_producer(Queue("f5ha"))
        await producer.send(TextMessage("before"))
        standby = pair.kill_master()
        with anyio.fail_after(TIMEOUT):  # generous: it catches a hang (timing is bench's)
            await producer.send(TextMessage("after"))
        completed = await recorder.wait_for("completed")
        assert [port_of(b) for b in completed] == [standby.port]
    assert pair.queue_depth("f5ha") == 2


async def test_F5_roundrobin_walks_the_list_in_order(api: Api) -> None:
    with brokers(3) as (first, second, third):
        recorder = Recorder()
        async with await connected(api, failover_url(first, second, third), recorder) as conn:
            session = await conn.create_session()
            producer = await session.create_producer(Queue("f5"))
            for n, victim in enumerate((first, second), start=1):
                victim.kill()
                await producer.send(TextMessage(f"after kill {n}"))
            completed = [port_of(b) for b in await recorder.wait_for("completed", 2)]
        assert completed == [second.port, third.port]
        assert (second.queue_depth("f5"), third.queue_depth("f5")) == (1, 1)


async def test_F6_temporary_queue_is_recreated_and_its_object_follows(api: Api) -> None:
    with brokers(2) as (first, second):
        recorder = Recorder()
        async with await connected(api, failover_url(first, second), recorder) as connection:
            session = await connection.create_session(AckMode.AUTO)
            inbox = await session.create_temporary_queue()
            assert isinstance(inbox, TemporaryQueue)
            consumer = await session.create_consumer(inbox)
            producer = await session.create_producer(inbox)
            old_address = inbox.address
            before = TextMessage("ping before")
            before.reply_to = inbox  # the producer has sent to and named the old node
            await producer.send(before)
            received = await consumer.receive(TIMEOUT)
            assert received is not None and received.reply_to == inbox
            first.kill()
            await recorder.wait_for("completed")
            assert any(n.name == inbox.address and n.temporary for n in second.nodes())
            request = TextMessage("ping")
            request.reply_to = inbox  # used as reply-to after the failover: the new address
            await producer.send(request)
            received = await consumer.receive(TIMEOUT)
            assert received is not None and received.text == "ping"  # type: ignore[attr-defined]
            assert isinstance(received.reply_to, TemporaryQueue)
            assert received.reply_to.address == inbox.address
            assert inbox.address != old_address  # a new node on the second broker


_READERS: dict[str, tuple[Any, Any]] = {  # how to ask for one, how to read a message with it
    "consumer": (
        lambda session, queue: session.create_consumer(queue),
        lambda consumer: consumer.receive(TIMEOUT),
    ),
    "browser": (
        lambda session, queue: session.create_browser(queue),
        lambda browser: browser.__aiter__().__anext__(),
    ),
}


@pytest.mark.parametrize("reader", sorted(_READERS))
async def test_F6_a_reader_asked_for_during_failover_reads_the_temporary_queues_new_node(
    api: Api, reader: str
) -> None:
    create, read = _READERS[reader]
    async with on_one_broker(api) as (only, connection, recorder):
        session = await connection.create_session(AckMode.AUTO)
        inbox = await session.create_temporary_queue()
        old_address = inbox.address
        only.kill()
        await recorder.wait_for("started")
        made: list[Any] = []

        async def ask_for_it() -> None:  # waits at the gate (F2), asked for the old node
            made.append(await create(session, inbox))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask_for_it)
            await anyio.sleep(0.2)
            only.start()  # the restart has no such node: the queue is made again (F6)
        assert inbox.address != old_address
        await (await session.create_producer(inbox)).send(TextMessage("to the new node"))
        with anyio.fail_after(TIMEOUT):
            assert text_of(await read(made[0])) == "to the new node"


async def test_F6_a_temporary_queue_keeps_its_identity_and_its_copies_follow(api: Api) -> None:
    """F6: the new broker names the node differently; a dict keyed by the temporary queue
    still finds it, and a copy made before the failover is equal and sends to the new node."""
    with brokers(2) as (first, second):
        recorder = Recorder()
        async with await connected(api, failover_url(first, second), recorder) as connection:
            session = await connection.create_session(AckMode.AUTO)
            inbox = await session.create_temporary_queue()
            earlier = copy.copy(inbox)
            pending = {inbox: "waiting for a reply"}
            old_address = inbox.address
            first.kill()
            await recorder.wait_for("completed")
            assert inbox.address != old_address  # the second broker named the node anew
            assert pending[inbox] == "waiting for a reply"
            assert earlier == inbox and pending[earlier] == "waiting for a reply"
            assert earlier.address == inbox.address
            producer = await session.create_producer(earlier)
            await producer.send(TextMessage("via the copy"))
            assert second.queue_depth(inbox.address) == 1  # on the new node
            consumer = await session.create_consumer(inbox)
            received = await consumer.receive(TIMEOUT)
            assert received is not None and received.text == "via the copy"  # type: ignore[attr-defined]


@pytest.mark.parametrize("call", ["acknowledge", "recover"])
async def test_F8_client_acknowledge_or_recover_after_failover_raises(api: Api, call: str) -> None:
    with brokers(2) as (first, second):
        await send_to(first.url, "f8", "one", "two")
        recorder = Recorder()
        async with await connected(api, failover_url(first, second), recorder) as connection:
            session = await connection.create_session(AckMode.CLIENT)
            consumer = await session.create_consumer(Queue("f8"))
            message = await consumer.receive(TIMEOUT)
            assert message is not None
            first.kill()
            await recorder.wait_for("completed")
            with pytest.raises(AcknowledgeFailedError):
                if call == "acknowledge":
                    await api.acknowledge(message)
                else:
                    await session.recover()
            await send_to(second.url, "f8", "fresh")  # told once; the session goes on
            fresh = await consumer.receive(TIMEOUT)
            assert fresh is not None and fresh.text == "fresh"  # type: ignore[attr-defined]
            await api.acknowledge(fresh)
        assert second.queue_depth("f8") == 0
        assert second.unacked_count("f8") == 0


async def test_F9_prefetched_messages_of_the_old_broker_are_never_handed_out(api: Api) -> None:
    with brokers(2) as (first, second):
        await send_to(first.url, "f9", *(f"old {n}" for n in range(5)))
        await send_to(second.url, "f9", "new 0", "new 1")
        recorder = Recorder()
        url = failover_url(first, second)
        async with await connected(api, url, recorder, prefetch=10) as connection:
            session = await connection.create_session(AckMode.AUTO)
            consumer = await session.create_consumer(Queue("f9"))
            first_message = await consumer.receive(TIMEOUT)
            assert first_message is not None and first_message.text == "old 0"  # type: ignore[attr-defined]
            first.kill()  # "old 1" .. "old 4" were prefetched
            await recorder.wait_for("completed")
            bodies = []
            while (message := await consumer.receive(1.0)) is not None:
                bodies.append(message.text)  # type: ignore[attr-defined]
        assert bodies == ["new 0", "new 1"]


async def test_F10_browser_interrupted_by_failover_raises_not_stops(api: Api) -> None:
    with brokers(2) as (first, second):
        await send_to(first.url, "f10", *(f"m{n}" for n in range(50)))
        recorder = Recorder()
        url = failover_url(first, second)
        async with await connected(api, url, recorder, prefetch=5) as connection:
            session = await connection.create_session()
            browser = await session.create_browser(Queue("f10"))
            iterator = browser.__aiter__()
            seen = await iterator.__anext__()
            assert seen.text == "m0"
            first.kill()
            await recorder.wait_for("completed")
            with anyio.fail_after(TIMEOUT), pytest.raises(BrowserFailoverError):
                while True:  # what was prefetched may still come, then the failover shows
                    await iterator.__anext__()


async def test_F14_listeners_hear_started_completed_and_unrestorable_resources(
    api: Api,
) -> None:
    with brokers(2) as (first, second):
        recorder = Recorder()
        url = failover_url(first, second)
        async with await aio.connect(second.url, client_id="f14-app") as rival:
            # on the second broker another connection with our client id holds "sub"
            rival_session = await rival.create_session()
            await rival_session.create_durable_consumer(Topic("f14"), "sub")
            async with await connected(api, url, recorder, client_id="f14-app") as connection:
                session = await connection.create_session()
                await session.create_durable_consumer(Topic("f14"), "sub")
                first.kill()
                started = await recorder.wait_for("started")
                completed = await recorder.wait_for("completed")
                not_restored = await recorder.wait_for("not_restored")
        assert len(started) == 1 and started[0] is not None
        assert [port_of(b) for b in completed] == [second.port]
        resource, error = not_restored[0]
        assert isinstance(error, ResourceLockedError)
        assert resource.subscription_name == "sub"  # the consumer that could not come back


async def test_F14_listeners_hear_that_failover_gave_up(api: Api) -> None:
    with brokers(1) as (only,):
        recorder = Recorder()
        url = failover_url(only, method="singlebroker", retries=2, cyclecount=1)
        async with await connected(api, url, recorder) as connection:
            only.kill()
            failed = await recorder.wait_for("failed")
            assert isinstance(failed[0], BaseException)
            assert await connection.statistics() is not None  # answers, without the network


async def test_F2_closing_a_consumer_releases_a_receive_blocked_by_failover(api: Api) -> None:
    """C2 holds during failover too: the close needs no network, the receive returns None."""
    async with on_one_broker(api) as (only, connection, recorder):
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue("f2c"))
        only.kill()
        await recorder.wait_for("started")
        results: list[object] = []
        done = Signal()

        async def receive() -> None:
            results.append(await consumer.receive())
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(receive)
            assert not await done.wait(0.3)
            with anyio.fail_after(TIMEOUT):
                await consumer.close()
                assert await done.wait(TIMEOUT)
        assert results == [None]
