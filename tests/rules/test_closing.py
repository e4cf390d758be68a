"""Rules C1-C5: closing consumers, sessions and connections, through both APIs."""

from __future__ import annotations

import anyio
import pytest
from apikit import Api, Bed, Signal, eventually
from failoverkit import Recorder, brokers, failover_url
from rulekit import TIMEOUT, leftovers, send, started

import haclient.aio as aio
from haclient.destination import Queue
from haclient.errors import ClosedError
from haclient.message import Message
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio


async def test_C1_close_may_be_called_from_another_task_or_thread(api: Api, bed: Bed) -> None:
    queue = bed.unique("c1")
    connection = await started(api, bed)
    session = await connection.create_session(AckMode.AUTO)
    consumer = await session.create_consumer(Queue(queue))
    results: list[object] = []

    async def blocked_receive() -> None:
        results.append(await consumer.receive())  # no timeout: only a close ends it

    with anyio.fail_after(TIMEOUT * 2):
        async with anyio.create_task_group() as tg:
            tg.start_soon(blocked_receive)
            await anyio.sleep(0.2)
            tg.start_soon(session.close)  # the session, from another task (thread)
        assert results == [None]
        assert session.is_closed and consumer.is_closed
        async with anyio.create_task_group() as tg:
            tg.start_soon(connection.close)
    assert connection.is_closed
    with pytest.raises(ClosedError):
        await connection.create_session()


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_C1_a_connection_left_by_a_cancelled_task_is_closed_all_the_same() -> None:
    """``async with`` left by a cancellation (a sibling task failed): the sessions' orderly
    close is cut short, but the connection is closed and does not fail over by itself."""
    with brokers(1) as (only,):
        recorder = Recorder()
        url = failover_url(only, method="singlebroker", retries=1000, connectdelay=20)
        with anyio.fail_after(TIMEOUT), anyio.CancelScope() as scope:
            async with await aio.connect(url) as connection:
                connection.add_listener(recorder)
                session = await connection.create_session()
                await session.create_consumer(Queue("c1-cancelled"))  # its close is a detach
                scope.cancel()
                await anyio.sleep(TIMEOUT)  # cancelled here: __aexit__ closes, cancelled
        assert connection.is_closed
        # Nothing of it is left on the broker (which may see the socket's end a moment later).
        await eventually(lambda: only.connections() == [], timeout=TIMEOUT)
        assert recorder.named("started") == []  # and nothing failed over


async def test_C1_concurrent_closes_finish_together(api: Api, bed: Bed) -> None:
    """Two tasks (threads) closing one connection at once: the second waits for the first and
    neither waits out a timeout (the bound is far below ``close_timeout``)."""
    connection = await started(api, bed, close_timeout=10)
    session = await connection.create_session(AckMode.AUTO)
    await session.create_consumer(Queue(bed.unique("c1-twice")))
    closed: list[bool] = []

    async def close() -> None:
        await connection.close()
        closed.append(connection.is_closed)

    with anyio.fail_after(3):
        async with anyio.create_task_group() as tg:
            tg.start_soon(close)
            tg.start_soon(close)
    assert closed == [True, True]


async def test_C2_close_makes_a_blocked_receive_return_none(api: Api, bed: Bed) -> None:
    queue = bed.unique("c2")
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue(queue))
        returned = Signal()
        results: list[object] = []

        async def blocked_receive() -> None:
            results.append(await consumer.receive())
            returned.set()

        with anyio.fail_after(TIMEOUT * 2):
            async with anyio.create_task_group() as tg:
                tg.start_soon(blocked_receive)
                await anyio.sleep(0.2)
                assert not returned.is_set()
                await consumer.close()
                assert await returned.wait(TIMEOUT)
        assert results == [None]
        # the consumer is closed: a later receive is refused, and nothing was consumed
        with pytest.raises(ClosedError):
            await consumer.receive(0)
    await send(bed, Queue(queue), "after")
    assert await leftovers(bed, queue) == ["after"]


async def test_C3_close_waits_for_a_running_listener(api: Api, bed: Bed) -> None:
    queue = bed.unique("c3")
    await send(bed, Queue(queue), "one")
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue(queue))
        entered, finished = Signal(), Signal()

        async def slow(message: Message) -> None:
            entered.set()
            await anyio.sleep(0.5)
            finished.set()

        await consumer.set_message_listener(api.listener(slow))
        assert await entered.wait(TIMEOUT)
        with anyio.fail_after(TIMEOUT):
            await consumer.close()
        assert finished.is_set(), "close() returned while the listener was still running"
    assert await leftovers(bed, queue) == []  # AUTO: acknowledged after the listener returned


async def test_C4_close_from_inside_the_listener(api: Api, bed: Bed) -> None:
    queue = bed.unique("c4")
    await send(bed, Queue(queue), "one", "two", "three")
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue(queue))
        seen: list[object] = []
        completed = Signal()

        async def closing(message: Message) -> None:
            seen.append(message.body)
            await consumer.close()  # on the listener's own thread/task: must not deadlock
            completed.set()

        await consumer.set_message_listener(api.listener(closing))
        assert await completed.wait(TIMEOUT)
        await anyio.sleep(0.2)
        assert seen == ["one"]
        assert consumer.is_closed
    # the listener completed normally: "one" acknowledged, the others given back
    assert await leftovers(bed, queue) == ["two", "three"]


async def test_C5_closing_a_consumer_leaves_client_acknowledgements_alone(
    api: Api, bed: Bed
) -> None:
    queue = bed.unique("c5c")
    await send(bed, Queue(queue), "one", "two")
    async with await started(api, bed, prefetch=0) as connection:
        session = await connection.create_session(AckMode.CLIENT)
        consumer = await session.create_consumer(Queue(queue))
        first = await consumer.receive(TIMEOUT)
        assert first is not None and first.body == "one"
        await consumer.close()  # neither acknowledges nor gives back "one"
        if bed.admin is not None:
            assert bed.admin.unacked_count(queue) == 1
        await api.acknowledge(first)  # still the session's to acknowledge
        if bed.admin is not None:
            assert bed.admin.unacked_count(queue) == 0
    assert await leftovers(bed, queue) == ["two"]


async def test_C5_a_closed_consumer_that_still_owes_acks_takes_no_new_messages(
    api: Api, bed: Bed
) -> None:
    """Its link stays until the session acknowledges (C5), but what the broker sends to it
    meanwhile goes back at once instead of waiting there for the session to end."""
    queue = bed.unique("c5late")
    await send(bed, Queue(queue), "one")
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.CLIENT)
        consumer = await session.create_consumer(Queue(queue))
        first = await consumer.receive(TIMEOUT)
        assert first is not None and first.body == "one"
        await consumer.close()  # "one" unacknowledged: the link lingers, with credit left
        await send(bed, Queue(queue), "two", "three")
        assert sorted(await leftovers(bed, queue, wait=2)) == ["three", "two"]
        await api.acknowledge(first)
    assert await leftovers(bed, queue) == []


async def test_C5_closing_a_consumer_leaves_the_transaction_alone(api: Api, bed: Bed) -> None:
    queue = bed.unique("c5t")
    await send(bed, Queue(queue), "one", "two")
    async with await started(api, bed, prefetch=1) as connection:
        session = await bed.lacks(
            "transactions", lambda: connection.create_session(AckMode.TRANSACTED)
        )
        consumer = await session.create_consumer(Queue(queue))
        first = await consumer.receive(TIMEOUT)
        assert first is not None and first.body == "one"
        await consumer.close()  # no rollback, no commit
        if bed.admin is not None:
            assert bed.admin.open_transactions() != []
        await session.commit()  # the receive of "one" commits
        if bed.admin is not None:
            assert bed.admin.unacked_count(queue) == 0
    assert await leftovers(bed, queue) == ["two"]


@pytest.mark.parametrize("closes", ["session", "connection"])
async def test_C4_closing_the_session_or_connection_from_an_auto_listener_is_quiet(
    api: Api, bed: Bed, closes: str, caplog: pytest.LogCaptureFixture
) -> None:
    queue = bed.unique("c4q")
    await send(bed, Queue(queue), "one", "two")
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue(queue))
        completed = Signal()

        async def closing(message: Message) -> None:
            await (session if closes == "session" else connection).close()
            completed.set()

        await consumer.set_message_listener(api.listener(closing))
        assert await completed.wait(TIMEOUT)
        await anyio.sleep(0.3)  # the listener's task/thread winds down
        assert session.is_closed and consumer.is_closed
    errors = [r for r in caplog.records if r.levelname == "ERROR" and r.name.startswith("haclient")]
    assert errors == []
    # closed before its acknowledgement could go: the broker delivers it again, with the rest
    assert sorted(await leftovers(bed, queue)) == ["one", "two"]
