"""``token_provider=``: called before every connect (failover reconnects too), its token the
password; a provider that fails is an ``AuthenticationError`` naming the failure, never a token.

The reference broker checks PLAIN logins here (its XOAUTH2 comes with its own tests), so the
token goes with ``sasl_mechanisms="PLAIN"``, as for a broker that takes a token as a password.
"""

from __future__ import annotations

import logging
import threading

import anyio
import pytest

import haclient
import haclient.aio as aio
from chaos.broker import Broker
from chaos.broker.blocking import BrokerThread
from haclient.destination import Queue
from haclient.errors import AuthenticationError
from haclient.message import TextMessage

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

TOKEN = "canary-token-5e1d"
TIMEOUT = 20.0


async def test_T4_the_token_provider_is_called_on_every_connect(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[int] = []

    async def provider() -> str:
        calls.append(1)
        return TOKEN

    caplog.set_level(logging.DEBUG)
    async with Broker(users={"app": TOKEN}) as broker:
        with anyio.fail_after(TIMEOUT):
            connection = await aio.connect(
                broker.url, username="app", token_provider=provider, sasl_mechanisms="PLAIN"
            )
            try:
                assert calls == [1]
                session = await connection.create_session()
                producer = await session.create_producer(Queue("token"))
                assert await broker.drop_connections() == 1
                await producer.send(TextMessage("after the reconnect"))
                assert calls == [1, 1]  # the reconnect logged in with a fresh token
                assert TOKEN not in repr(connection) and TOKEN not in str(connection.statistics())
            finally:
                await connection.close()
    assert all(TOKEN not in record.getMessage() for record in caplog.records)


def test_a_plain_callable_works_through_the_blocking_api() -> None:
    with (
        BrokerThread(users={"app": TOKEN}) as broker,
        haclient.connect(
            broker.url, username="app", token_provider=lambda: TOKEN, sasl_mechanisms="PLAIN"
        ) as connection,
    ):
        connection.create_session().close()  # logged in and working


async def test_T4_a_provider_that_raises_fails_the_connect_naming_the_failure() -> None:
    def provider() -> str:
        raise RuntimeError("the identity provider is down")

    async with Broker(users={"app": TOKEN}) as broker:
        with anyio.fail_after(TIMEOUT), pytest.raises(AuthenticationError) as raised:
            await aio.connect(broker.url, username="app", token_provider=provider)
    text = str(raised.value)
    assert "token_provider failed: RuntimeError: the identity provider is down" in text, text


async def test_a_refused_token_is_an_authentication_error_without_the_token() -> None:
    async with Broker(users={"app": "another"}) as broker:
        with anyio.fail_after(TIMEOUT), pytest.raises(AuthenticationError) as raised:
            await aio.connect(
                broker.url, username="app", token_provider=lambda: TOKEN, sasl_mechanisms="PLAIN"
            )
    assert TOKEN not in str(raised.value) and TOKEN not in repr(raised.value)


async def test_a_provider_that_returns_no_str_is_an_authentication_error() -> None:
    async with Broker(users={"app": TOKEN}) as broker:
        with (
            anyio.fail_after(TIMEOUT),
            pytest.raises(AuthenticationError, match="returned NoneType"),
        ):
            await aio.connect(broker.url, username="app", token_provider=lambda: None)


async def test_a_plain_provider_runs_off_the_event_loop_thread() -> None:
    """A plain provider may block (a file, an HTTP call): it runs in a worker thread, so the
    event loop that serves other connections goes on meanwhile."""
    threads: list[int] = []

    def provider() -> str:
        threads.append(threading.get_ident())
        return TOKEN

    async with Broker(users={"app": TOKEN}) as broker:
        with anyio.fail_after(TIMEOUT):
            connection = await aio.connect(
                broker.url, username="app", token_provider=provider, sasl_mechanisms="PLAIN"
            )
            await connection.close()
    assert threads and threading.get_ident() not in threads


# --- Issue 39, item 1: a provider that hangs is bounded by connect_timeout --------------------

HANG_URL = "{url}?jms.connectTimeout=1000&failover.giveupafter=3000"


async def test_T4_a_plain_provider_that_hangs_fails_the_connect_after_connect_timeout() -> None:
    release = threading.Event()

    def provider() -> str:
        release.wait(60)  # a stuck call to the identity provider
        return TOKEN

    try:
        async with Broker(users={"app": TOKEN}) as broker:
            started = anyio.current_time()
            with anyio.fail_after(TIMEOUT), pytest.raises(AuthenticationError) as raised:
                await aio.connect(
                    HANG_URL.format(url=broker.url), username="app", token_provider=provider
                )
            assert anyio.current_time() - started < 10  # not the provider's 60 s
    finally:
        release.set()  # the abandoned worker thread ends
    assert "token_provider" in str(raised.value) and "1 s" in str(raised.value), raised.value


async def test_T4_an_async_provider_that_never_returns_fails_the_connect_likewise() -> None:
    async def provider() -> str:
        await anyio.sleep_forever()
        raise AssertionError("not reached")

    async with Broker(users={"app": TOKEN}) as broker:
        with anyio.fail_after(TIMEOUT), pytest.raises(AuthenticationError) as raised:
            await aio.connect(
                HANG_URL.format(url=broker.url), username="app", token_provider=provider
            )
    assert "connect_timeout" in str(raised.value), raised.value


def test_T4_a_hanging_provider_fails_a_blocking_connect_too() -> None:
    release = threading.Event()
    try:
        with (
            BrokerThread(users={"app": TOKEN}) as broker,
            pytest.raises(AuthenticationError, match="token_provider"),
        ):
            haclient.connect(
                HANG_URL.format(url=broker.url),
                username="app",
                token_provider=lambda: (release.wait(60), TOKEN)[1],
            )
    finally:
        release.set()
