"""Qpid JMS's timing options, applied with its meaning, on the reference broker (asyncio only:
what is tested is the option's default, which both APIs read in the async core).

- ``jms.sendTimeout`` (ms, -1: wait forever, Qpid JMS's default) is the ``timeout=`` of a
  ``send`` or ``send_async`` that gives none: a send blocked by failover raises
  ``FailoverTimeoutError`` (F4) after it; a call's own ``timeout=`` wins.
- ``jms.localMessageExpiry`` (true, Qpid JMS's default) makes a consumer drop a message whose
  ``expiration`` passed while it waited in the prefetch, settling it (M4); false hands it out.
"""

from __future__ import annotations

import time

import anyio
import pytest
from failoverkit import TIMEOUT, brokers, failover_url

import haclient
import haclient.aio as aio
from failover.url import parse_url
from haclient.aio.options import ConnectionOptions
from haclient.destination import Queue
from haclient.errors import FailoverTimeoutError
from haclient.message import TextMessage
from haclient.modes import AckMode
from haclient.options import CLIENT_OPTIONS

SLACK = 2.0  # seconds a timeout may fire late on a loaded machine

pytestmark = pytest.mark.anyio


def _send_timeout(url: str, **keywords: object) -> float | None:
    return ConnectionOptions.build(parse_url(url, options=CLIENT_OPTIONS), keywords).send_timeout


def test_send_timeout_is_read_in_milliseconds_and_minus_one_is_none() -> None:
    assert _send_timeout("amqp://a?jms.sendTimeout=250") == 0.25
    assert _send_timeout("amqp://a?jms.sendTimeout=-1") is None
    assert _send_timeout("amqp://a") is None  # Qpid JMS's default: wait
    assert _send_timeout("amqp://a?jms.sendTimeout=250", send_timeout=2) == 2


async def test_send_timeout_ends_a_send_blocked_by_failover() -> None:
    with brokers(1) as (only,):
        url = failover_url(only, method="singlebroker", retries=1000, connectdelay=20)
        async with await aio.connect(f"{url}&jms.sendTimeout=1000") as connection:
            session = await connection.create_session()
            producer = await session.create_producer(Queue("send-timeout"))
            await producer.send(TextMessage("before"))
            only.kill()
            began = time.monotonic()
            with anyio.fail_after(TIMEOUT), pytest.raises(FailoverTimeoutError):
                await producer.send(TextMessage("too early"))
            assert 0.9 <= time.monotonic() - began < 1 + SLACK
            began = time.monotonic()
            with anyio.fail_after(TIMEOUT), pytest.raises(FailoverTimeoutError):
                await producer.send(TextMessage("sooner"), timeout=0.01)  # the call's own wins
            assert time.monotonic() - began < 0.9  # well before the connection's 1 s
            with anyio.fail_after(TIMEOUT), pytest.raises(FailoverTimeoutError):
                await producer.send_async(TextMessage("async"), on_completion=lambda m, e: None)
            only.start()
            with anyio.fail_after(TIMEOUT):
                await producer.send(TextMessage("in time"), timeout=TIMEOUT)
        assert only.queue_depth("send-timeout") == 1  # "in time" (the kill lost "before")


def test_send_timeout_applies_to_the_blocking_send() -> None:
    with brokers(1) as (only,):
        url = failover_url(only, method="singlebroker", retries=1000, connectdelay=20)
        with haclient.connect(f"{url}&jms.sendTimeout=200") as connection:
            producer = connection.create_session().create_producer(Queue("send-timeout-sync"))
            only.kill()
            with pytest.raises(FailoverTimeoutError):
                producer.send(TextMessage("too early"))


async def _expired_and_fresh(**options: object) -> list[str]:
    """The bodies a consumer hands out of a message that expires in its prefetch, then a fresh
    one; the broker holds none of them unsettled afterwards."""
    with brokers(1) as (only,):
        async with await aio.connect(only.url, **options) as connection:
            session = await connection.create_session(AckMode.CLIENT)
            consumer = await session.create_consumer(Queue("expiry"))
            await connection.start()
            producer = await session.create_producer(Queue("expiry"))
            await producer.send(TextMessage("expiring"), time_to_live=0.1)
            await anyio.sleep(0.3)  # in the consumer's prefetch by now, and expired
            await producer.send(TextMessage("fresh"))
            bodies = []
            while (message := await consumer.receive(0.3)) is not None:
                bodies.append(str(message.body))
                await message.acknowledge()
            assert only.unacked_count("expiry") == 0
        return bodies


async def test_M4_an_expired_message_is_dropped_not_handed_out() -> None:
    assert await _expired_and_fresh() == ["fresh"]


async def test_M4_local_message_expiry_false_hands_it_out() -> None:
    assert await _expired_and_fresh(local_message_expiry=False) == ["expiring", "fresh"]


def test_M4_local_message_expiry_is_qpid_jms_option_and_default() -> None:
    assert (
        ConnectionOptions.build(
            parse_url("amqp://a", options=CLIENT_OPTIONS), {}
        ).local_message_expiry
        is True
    )
    url = parse_url("amqp://a?jms.localMessageExpiry=false", options=CLIENT_OPTIONS)
    assert ConnectionOptions.build(url, {}).local_message_expiry is False
