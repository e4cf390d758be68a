"""Brokers that do not fail cleanly, through both APIs: one that accepts TCP and never answers
the Open (a hung broker, skipped like a dead one: F5) and one that refuses the login (F15: the
next broker is tried; with no other broker, given up at once with ``AuthenticationError``)."""

from __future__ import annotations

import time

import anyio
import pytest
from apikit import Api
from failoverkit import Recorder, brokers, failover_url, port_of

from chaos.broker import BrokerThread
from chaos.hostile import HostilePeer, silent
from haclient.destination import Queue
from haclient.errors import AuthenticationError, ClientIdInUseError, ConnectionFailedError
from haclient.message import TextMessage

pytestmark = pytest.mark.anyio

# Generous: the silent broker costs one connect_timeout; this only catches a hang.
BOUND = 20.0


async def test_F5_a_silent_broker_first_in_the_list_is_skipped_at_connect(api: Api) -> None:
    with brokers(1) as (good,):
        async with HostilePeer(silent) as hung:
            started = time.monotonic()
            with anyio.fail_after(BOUND):
                url = failover_url(hung, good)
                async with await api.connect(url, connect_timeout=1) as connection:
                    assert port_of(str(connection.broker)) == good.port
                    session = await connection.create_session()
                    producer = await session.create_producer(Queue("hung-first"))
                    await producer.send(TextMessage("after the hung broker"))
            assert hung.connections >= 1  # it was tried, and skipped
            assert time.monotonic() - started < BOUND
        assert good.queue_depth("hung-first") == 1


async def test_F5_a_failover_whose_next_broker_is_silent_moves_on(api: Api) -> None:
    with brokers(2) as (first, last):
        async with HostilePeer(silent) as hung:
            recorder = Recorder()
            url = failover_url(first, hung, last)
            async with await api.connect(url, connect_timeout=1) as connection:
                await connection.add_listener(recorder)
                assert port_of(str(connection.broker)) == first.port
                session = await connection.create_session()
                producer = await session.create_producer(Queue("hung-next"))
                first.kill()
                (broker,) = await recorder.wait_for("completed", timeout=BOUND)
                assert port_of(broker) == last.port
                with anyio.fail_after(BOUND):
                    await producer.send(TextMessage("after failover"))
            assert hung.connections >= 1
            assert not recorder.named("failed")
        assert last.queue_depth("hung-next") == 1


async def test_F15_a_wrong_password_moves_on_to_the_next_broker_and_both_failures_are_named(
    api: Api,
) -> None:
    with BrokerThread(users={"app": "secret"}) as broker:
        async with HostilePeer(silent) as next_broker:
            url = failover_url(broker, next_broker)
            with anyio.fail_after(BOUND), pytest.raises(AuthenticationError) as refused:
                await api.connect(url, username="app", password="wrong", connect_timeout=1)
            assert refused.value.condition == "amqp:unauthorized-access"
            assert not refused.value.retriable
            assert next_broker.connections == 1  # one broker's refusal is not the list's
            text = str(refused.value)
            assert f"127.0.0.1:{broker.port} refused the login of user 'app'" in text, text
            assert f"127.0.0.1:{next_broker.port} accepted the TCP connection" in text, text
            gave_up = refused.value.__cause__
            assert isinstance(gave_up, ConnectionFailedError) and len(gave_up.failures) == 2
        with anyio.fail_after(BOUND), pytest.raises(AuthenticationError) as alone:
            await api.connect(broker.url, username="app", password="wrong")
        assert not alone.value.retriable  # the only broker refused: given up at once
        async with await api.connect(broker.url, username="app", password="secret"):
            pass  # the right password gets in


def _chain(error: BaseException, path: tuple[BaseException, ...] = ()) -> list[BaseException]:
    """Every exception reachable from ``error`` (causes, contexts, group members); a cycle
    fails the test instead of looping forever as a tool walking the chain would."""
    assert all(error is not e for e in path), f"cyclic exception chain at {error!r}"
    linked = [e for e in (error.__cause__, error.__context__) if e is not None]
    if isinstance(error, BaseExceptionGroup):
        linked += error.exceptions
    return [error, *(e for link in linked for e in _chain(link, (*path, error)))]


async def test_item3_a_refused_login_has_a_finite_chain_naming_broker_and_user(
    api: Api,
) -> None:
    with (
        BrokerThread(users={"app": "secret"}) as broker,
        anyio.fail_after(BOUND),
        pytest.raises(AuthenticationError) as refused,
    ):
        await api.connect(broker.url, username="app", password="w(r)ong")
    text = str(refused.value)
    assert f"127.0.0.1:{broker.port}" in text and "'app'" in text, text
    for error in _chain(refused.value):
        assert "w(r)ong" not in f"{error} {error!r}"


async def test_F4_credentials_in_the_url_log_in(api: Api) -> None:
    with BrokerThread(users={"app": "s3cret"}) as broker:
        url = broker.url.replace("amqp://", "amqp://app:s3cret@")
        async with await api.connect(url) as connection:
            session = await connection.create_session()
            producer = await session.create_producer(Queue("url-login"))
            await producer.send(TextMessage("logged in by the URL"))
        with pytest.raises(AuthenticationError):
            await api.connect(broker.url.replace("amqp://", "amqp://app:wrong@"))
        assert broker.queue_depth("url-login") == 1


async def test_F4_a_client_id_in_use_raises_client_id_in_use_at_connect(api: Api) -> None:
    with BrokerThread(refuse_duplicate_container_id=True) as broker:
        async with await api.connect(broker.url, client_id="only-once"):
            with pytest.raises(ClientIdInUseError):
                await api.connect(broker.url, client_id="only-once")


async def test_item18_with_every_broker_down_the_error_names_each_brokers_failure(
    api: Api,
) -> None:
    with brokers(1) as (stopped,):
        stopped.kill()  # refuses connections from now on
        async with HostilePeer(silent) as hung:
            hung_port, url = hung.port, failover_url(stopped, hung, cyclecount=1)
            with anyio.fail_after(BOUND), pytest.raises(ConnectionFailedError) as gave_up:
                await api.connect(url, connect_timeout=1)
    text = str(gave_up.value)
    assert f"127.0.0.1:{stopped.port}: cannot connect" in text, text
    assert f"127.0.0.1:{hung_port} accepted the TCP connection but sent nothing" in text, text
    assert set(gave_up.value.failures) == {
        f"amqp://127.0.0.1:{stopped.port}",
        f"amqp://127.0.0.1:{hung_port}",
    }
