"""Rules A7, E7 and M10 (Qpid JMS's ``jms.forceAsyncAcks``, ``jms.validateSelector`` and
``jms.validatePropertyNames``) through both APIs, on the reference broker: what the broker
keeps after asynchronous acknowledgements, the broker's own refusal of a selector the client
let through, the property names that arrive.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from apikit import Api, Bed, Signal, eventually
from failoverkit import Recorder, brokers, connected, failover_url, send_to
from rulekit import TIMEOUT, leftovers, send, started

from haclient.destination import Queue
from haclient.errors import (
    AcknowledgeFailedError,
    HAClientError,
    InvalidSelectorError,
    MessageFormatError,
)
from haclient.message import TextMessage
from haclient.modes import AckConfirmation, AckMode

pytestmark = pytest.mark.anyio


def _bed(reference_broker: Any) -> Bed:
    return Bed("reference", reference_broker.url, admin=reference_broker)


@asynccontextmanager
async def _session(
    api: Api, bed: Bed, mode: AckMode = AckMode.AUTO, **options: Any
) -> AsyncIterator[Any]:
    """A session of a started connection with ``options``, closed at the end."""
    connection = await started(api, bed, **options)
    try:
        yield await connection.create_session(mode)
    finally:
        await connection.close()


# --- A7: forced asynchronous acknowledgements --------------------------------------------------


@pytest.mark.parametrize("mode", [AckMode.AUTO, AckMode.CLIENT], ids=["auto", "client"])
async def test_A7_forced_async_acks_wait_for_nothing_and_reach_the_broker(
    api: Api, reference_broker: Any, mode: AckMode
) -> None:
    bed = _bed(reference_broker)
    queue = Queue(bed.unique("a7"))
    await send(bed, queue, "one", "two", "three")
    async with _session(api, bed, mode, force_async_acks=True) as session:
        consumer = await session.create_consumer(queue)
        bodies = []
        for _ in range(3):
            message = await consumer.receive(TIMEOUT)
            assert message is not None and not message.ack_in_doubt
            bodies.append(message.body)
        if mode is AckMode.CLIENT:
            await session.acknowledge()
        assert bodies == ["one", "two", "three"]
        assert session.ack_confirmation is AckConfirmation.NONE  # A6 does not apply
    assert await leftovers(bed, queue.name) == []


async def test_A7_off_by_default_acknowledgements_are_confirmed(
    api: Api, reference_broker: Any
) -> None:
    bed = _bed(reference_broker)
    queue = Queue(bed.unique("a7-default"))
    await send(bed, queue, "one")
    async with _session(api, bed, AckMode.AUTO) as session:
        consumer = await session.create_consumer(queue)
        assert await consumer.receive(TIMEOUT) is not None
        assert session.ack_confirmation is AckConfirmation.SETTLE_SECOND


async def test_A7_a_listener_raising_still_gives_its_message_back(
    api: Api, reference_broker: Any
) -> None:
    bed = _bed(reference_broker)
    queue = Queue(bed.unique("a7-listener"))
    await send(bed, queue, "boom")
    async with _session(api, bed, AckMode.AUTO, force_async_acks=True) as session:
        consumer = await session.create_consumer(queue)
        seen: list[bool] = []
        done = Signal()

        async def on_message(message: Any) -> None:
            seen.append(message.redelivered)
            if len(seen) == 1:
                raise RuntimeError("first time fails")
            done.set()

        await consumer.set_message_listener(api.listener(on_message))
        assert await done.wait(TIMEOUT)
        assert seen == [False, True]
    assert await leftovers(bed, queue.name) == []


async def test_A7_f8_still_holds_for_messages_not_yet_acknowledged(api: Api) -> None:
    """A failover with a CLIENT message unacknowledged: the next acknowledge() raises and
    the session recovers, as F8 says, forced asynchronous acknowledgements or not; what was
    acknowledged before the failover stays acknowledged."""
    with brokers(2) as (first, second):
        await send_to(first.url, "a7-f8", "acked", "pending")
        recorder = Recorder()
        url = failover_url(first, second)
        async with await connected(api, url, recorder, force_async_acks=True) as connection:
            session = await connection.create_session(AckMode.CLIENT)
            consumer = await session.create_consumer(Queue("a7-f8"))
            acked = await consumer.receive(TIMEOUT)
            assert acked is not None
            await api.acknowledge(acked)
            # written, not waited for: the broker applies it a moment later
            assert await eventually(lambda: first.unacked_count("a7-f8") == 1)
            pending = await consumer.receive(TIMEOUT)
            assert pending is not None
            first.kill()
            await recorder.wait_for("completed")
            with pytest.raises(AcknowledgeFailedError):
                await api.acknowledge(pending)
            await send_to(second.url, "a7-f8", "fresh")
            fresh = await consumer.receive(TIMEOUT)
            assert fresh is not None and fresh.body == "fresh"
            await api.acknowledge(fresh)
        assert await eventually(lambda: second.unacked_count("a7-f8") == 0)
        assert second.queue_depth("a7-f8") == 0


# --- E7: selectors the client does not check ---------------------------------------------------

BAD_SELECTOR = "colour = 'red' AND"


async def test_E7_by_default_a_bad_selector_raises_before_any_frame(
    api: Api, reference_broker: Any
) -> None:
    bed = _bed(reference_broker)
    async with _session(api, bed) as session:
        with pytest.raises(InvalidSelectorError):
            await session.create_consumer(Queue(bed.unique("e7")), selector=BAD_SELECTOR)


async def test_E7_unchecked_the_broker_refuses_the_selector_with_its_own_error(
    api: Api, reference_broker: Any
) -> None:
    bed = _bed(reference_broker)
    async with _session(api, bed, validate_selector=False) as session:
        with pytest.raises(HAClientError) as raised:
            await session.create_consumer(Queue(bed.unique("e7")), selector=BAD_SELECTOR)
        assert not isinstance(raised.value, InvalidSelectorError)  # the broker's refusal
        assert "invalid-field" in str(raised.value) or "selector" in str(raised.value).lower()


async def test_E7_unchecked_a_valid_selector_still_selects(api: Api, reference_broker: Any) -> None:
    bed = _bed(reference_broker)
    queue = Queue(bed.unique("e7-ok"))
    red, blue = TextMessage("red"), TextMessage("blue")
    red.properties["colour"], blue.properties["colour"] = "red", "blue"
    await send(bed, queue, blue, red)
    async with _session(api, bed, validate_selector=False) as session:
        consumer = await session.create_consumer(queue, selector="colour = 'red'")
        message = await consumer.receive(TIMEOUT)
        assert message is not None and message.body == "red"


async def test_E7_a_selector_the_client_evaluates_is_always_parsed(
    api: Api, reference_broker: Any
) -> None:
    bed = _bed(reference_broker)
    async with _session(api, bed, validate_selector=False, selectors="client") as session:
        with pytest.raises(InvalidSelectorError):
            await session.create_consumer(Queue(bed.unique("e7-client")), selector=BAD_SELECTOR)


async def test_E7_unchecked_a_bad_selector_fails_whoever_evaluates_it(api: Api, bed: Bed) -> None:
    """With the default ``selectors=auto``: the reference broker evaluates the selector and
    refuses it with its own error; RabbitMQ ignores filters, so the client evaluates it and
    parses it before the attach (``InvalidSelectorError``) even though it was not checked."""
    async with _session(api, bed, validate_selector=False) as session:
        with pytest.raises(HAClientError) as raised:
            await session.create_consumer(Queue(bed.unique("e7-auto")), selector=BAD_SELECTOR)
        assert isinstance(raised.value, InvalidSelectorError) == (bed.kind == "rabbitmq")


# --- M10: property names the client does not check ---------------------------------------------

FOREIGN_NAMES = {"x-opt-id": 1, "content.type": "text", "NULL": True, "JMSFoo": "bar"}


async def test_M10_unchecked_any_property_name_is_sent_and_arrives(
    api: Api, reference_broker: Any
) -> None:
    bed = _bed(reference_broker)
    queue = Queue(bed.unique("m10"))
    async with _session(api, bed, validate_property_names=False) as session:
        producer = await session.create_producer(queue)
        consumer = await session.create_consumer(queue)
        message = TextMessage("foreign")
        message.properties.update(FOREIGN_NAMES)  # the constructor would check them (M1)
        await producer.send(message)
        received = await consumer.receive(TIMEOUT)
        assert received is not None
        assert {k: received.properties[k] for k in FOREIGN_NAMES} == FOREIGN_NAMES
        await producer.send(received)  # forwarded as it came
        again = await consumer.receive(TIMEOUT)
        assert again is not None and again.properties["x-opt-id"] == 1


async def test_M10_by_default_such_names_are_refused_when_sent(
    api: Api, reference_broker: Any
) -> None:
    bed = _bed(reference_broker)
    async with _session(api, bed) as session:
        producer = await session.create_producer(Queue(bed.unique("m10-default")))
        for name in FOREIGN_NAMES:
            message = TextMessage("foreign")
            message.properties[name] = 1
            with pytest.raises(MessageFormatError):
                await producer.send(message)


async def test_M10_unchecked_an_empty_name_is_still_refused(
    api: Api, reference_broker: Any
) -> None:
    bed = _bed(reference_broker)
    async with _session(api, bed, validate_property_names=False) as session:
        producer = await session.create_producer(Queue(bed.unique("m10-empty")))
        message = TextMessage("empty")
        message.properties[""] = 1
        with pytest.raises(MessageFormatError):
            await producer.send(message)
