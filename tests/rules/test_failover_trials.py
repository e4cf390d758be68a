"""Regression tests for the failures independent trials found after failover.

Each test stages what a trial did on a shared-store HA pair (``HaPair``: the standby takes over
every stored message) and checks the promise the trial saw broken: nothing stays unacknowledged
for good, no call blocks past its failover, a cancelled receive never costs a message, and F8's
error says when the broker may have applied the acknowledgement. Each runs through both APIs.
"""

from __future__ import annotations

import anyio
import pytest
from apikit import Api, eventually
from failoverkit import (
    TIMEOUT,
    HaPair,
    Recorder,
    connected,
    failover_url,
    send_numbered,
    send_to,
    take_all,
    text_of,
)

from haclient.destination import Queue
from haclient.errors import AcknowledgeFailedError
from haclient.message import Message
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio


async def test_A1_a_busy_auto_listener_handles_every_message_across_a_master_kill(
    api: Api, pair: HaPair
) -> None:
    bodies = await send_numbered(pair.master.url, "busy", "m", 50)
    recorder = Recorder()
    handled: list[str] = []

    async def slow(message: Message) -> None:
        await anyio.sleep(0.01)
        handled.append(text_of(message) or "")

    connection = await connected(api, failover_url(*pair.members), recorder)
    session = await connection.create_session(AckMode.AUTO)
    consumer = await session.create_consumer(Queue("busy"))
    await consumer.set_message_listener(api.listener(slow))
    await connection.start()
    await anyio.sleep(0.05)
    pair.kill_master()
    await recorder.wait_for("completed")
    await eventually(lambda: set(handled) == set(bodies), timeout=TIMEOUT)
    await eventually(lambda: pair.queue_depth("busy") == 0, timeout=TIMEOUT)
    with anyio.fail_after(TIMEOUT):  # C1: close does not hang after the failover
        await connection.close()
    assert pair.call(lambda: pair.master.unacked_count("busy")) == 0


async def test_F8_client_acknowledge_never_blocks_across_repeated_kills(
    api: Api, pair: HaPair
) -> None:
    bodies = await send_numbered(pair.master.url, "client", "c", 60)
    recorder = Recorder()
    acknowledged: set[str] = set()
    in_doubt: set[str] = set()  # cut off in flight: the broker may have applied it
    url = failover_url(*pair.members)
    async with await connected(api, url, recorder, prefetch=1) as connection:
        sessions = [await connection.create_session(AckMode.CLIENT) for _ in range(2)]
        consumers = [await s.create_consumer(Queue("client")) for s in sessions]
        await connection.start()

        async def consume(consumer: object) -> None:
            while len(acknowledged | in_doubt) < len(bodies):
                message = await consumer.receive(0.2)  # type: ignore[attr-defined]
                if message is None:
                    continue
                try:
                    with anyio.fail_after(TIMEOUT):  # success or F8's error, never a hang
                        await api.acknowledge(message)
                    acknowledged.add(text_of(message) or "")
                except AcknowledgeFailedError as error:
                    if error.in_doubt:
                        in_doubt.add(text_of(message) or "")

        async def kill_three_times() -> None:
            for kill in range(1, 4):
                await eventually(lambda n=kill: len(acknowledged) >= n * 10, timeout=TIMEOUT)
                pair.kill_master()
                await recorder.wait_for("completed", kill)

        with anyio.fail_after(4 * TIMEOUT):
            async with anyio.create_task_group() as tg:
                for consumer in consumers:
                    tg.start_soon(consume, consumer)
                tg.start_soon(kill_three_times)
    # Every message was acknowledged, or its acknowledgement was in doubt. The consumers stop
    # once every body is accounted for, so an in-doubt acknowledgement the broker did not apply
    # leaves its message on the queue; only those may be left there.
    assert acknowledged | in_doubt == set(bodies)
    left = await take_all(url, "client")
    assert set(left) <= in_doubt, f"acknowledged, yet still on the queue: {set(left) - in_doubt}"
    assert pair.queue_depth("client") == 0


async def test_F8_recover_after_a_failed_acknowledge_raises_too_then_works(
    api: Api, pair: HaPair
) -> None:
    await send_to(pair.master.url, "again", "one")
    recorder = Recorder()
    async with await connected(api, failover_url(*pair.members), recorder) as connection:
        session = await connection.create_session(AckMode.CLIENT)
        consumer = await session.create_consumer(Queue("again"))
        first = await consumer.receive(TIMEOUT)
        assert text_of(first) == "one"
        pair.kill_master()
        await recorder.wait_for("completed")
        with pytest.raises(AcknowledgeFailedError) as failed:
            await api.acknowledge(first)  # type: ignore[arg-type]
        assert failed.value.in_doubt is False  # never sent: the broker redelivers for sure
        with pytest.raises(AcknowledgeFailedError):
            await session.recover()  # F8: recover() raises as well
        await session.recover()  # told once each: the session is usable again
        again = await consumer.receive(TIMEOUT)
        assert text_of(again) == "one"
        await api.acknowledge(again)  # type: ignore[arg-type]
    assert pair.queue_depth("again") == 0


@pytest.mark.parametrize(
    "api_variant", [("aio", "asyncio"), ("aio", "trio")], ids=["aio", "aio-trio"], indirect=True
)
async def test_A1_a_cancelled_receive_never_acknowledges_a_message_it_did_not_return(
    api: Api, pair: HaPair
) -> None:
    bodies = await send_numbered(pair.master.url, "cancel", "x", 100)
    async with await connected(api, failover_url(*pair.members), Recorder()) as connection:
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue("cancel"))
        await connection.start()
        returned: list[str] = []
        with anyio.fail_after(4 * TIMEOUT):
            while pair.queue_depth("cancel") > 0 or len(returned) < len(bodies):
                message = None
                with anyio.move_on_after(0.0005):
                    message = await consumer.receive()
                if message is not None:
                    returned.append(text_of(message) or "")
                elif pair.queue_depth("cancel") == 0 and pair.unacked_count("cancel") == 0:
                    break  # none left to take: neither waiting nor delivered to the consumer
        # Every message the broker removed (acknowledged) was returned to the application.
        assert sorted(returned) == sorted(bodies)
