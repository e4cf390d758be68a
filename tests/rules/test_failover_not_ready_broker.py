"""Rule F5 on a broker that listens before it serves (a new master in its first milliseconds,
as ActiveMQ's answers the protocol header only 60-80 ms after its port opens): a connect
attempt it holds waits for its header; one it drops before answering is a
``BrokerNotReadyError``, and the fast phase tries that broker again within 10 ms, not 25-50.
Reference brokers with a readiness delay (``chaos.broker.readiness``), through both APIs.
"""

from __future__ import annotations

import socket
import time

import anyio
import anyio.to_thread
import pytest
from apikit import Api
from failoverkit import TIMEOUT, Recorder, brokers, connected

from chaos.broker import BrokerThread
from chaos.net import free_port
from haclient.destination import Queue
from haclient.errors import BrokerNotReadyError, ConnectionFailedError
from haclient.message import TextMessage

pytestmark = pytest.mark.anyio

WINDOW = 0.6
"""Seconds a broker of these tests takes to become ready after its port opens."""
FAST_DELAY = 0.2
"""A slow fast phase (200-225 ms between passes): in the window it would try a broker at most
three times, where the quick retry tries it every 5-10 ms."""


def _address(broker: BrokerThread) -> str:
    return f"127.0.0.1:{broker.port}"


def _port_open(port: int) -> None:
    """Return once ``port`` accepts a TCP connection (the probe is closed at once)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.002)
    raise TimeoutError(f"port {port} did not open")


async def test_F5_a_broker_that_drops_connections_until_ready_is_tried_again_within_10_ms(
    api: Api,
) -> None:
    with brokers(1) as (first,):
        second = BrokerThread(port=free_port(), readiness_delay=WINDOW, not_ready="drop")
        try:
            recorder = Recorder()
            url = f"failover:({first.url},{second.url})?failover.fastdelay={FAST_DELAY * 1000:g}"
            async with await connected(api, url, recorder) as connection:
                session = await connection.create_session()
                producer = await session.create_producer(Queue("f5-not-ready"))
                first.kill()
                await recorder.wait_for("started")
                async with anyio.create_task_group() as tg:
                    tg.start_soon(anyio.to_thread.run_sync, second.start)
                    with anyio.fail_after(TIMEOUT):
                        await producer.send(TextMessage("on the broker once it is ready"))
                stats = await connection.statistics()
            failed = stats.connection_attempts_failed[_address(second)]
            assert failed >= 10 > WINDOW / FAST_DELAY + 1  # one refused before the port opened
            assert second.queue_depth("f5-not-ready") == 1
        finally:
            second.close()


async def test_F5_a_connect_attempt_a_broker_holds_waits_for_its_header(api: Api) -> None:
    broker = BrokerThread(port=free_port(), readiness_delay=WINDOW, not_ready="wait")
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, broker.start)
            await anyio.to_thread.run_sync(_port_open, broker.port)
            assert not broker.broker.ready
            with anyio.fail_after(TIMEOUT):
                connection = await api.connect(broker.url)  # one attempt: the first connect
            async with connection:
                assert broker.broker.ready
                stats = await connection.statistics()
        assert dict(stats.connection_attempts) == {_address(broker): 1}
        assert dict(stats.connection_attempts_failed) == {_address(broker): 0}
    finally:
        broker.close()


async def test_F5_a_broker_that_drops_the_connection_before_answering_is_not_ready(
    api: Api,
) -> None:
    """A broker that keeps dropping the first connect longer than ``jms.connectTimeout`` is
    not ready: ``connect()`` fails with ``BrokerNotReadyError`` naming it, after trying it
    again and again for that long."""
    broker = BrokerThread(port=free_port(), readiness_delay=4 * WINDOW, not_ready="drop")
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, broker.start)
            await anyio.to_thread.run_sync(_port_open, broker.port)
            url = f"failover:({broker.url})?failover.method=nofailover&jms.connectTimeout=300"
            began = time.monotonic()
            with pytest.raises(ConnectionFailedError) as failed, anyio.fail_after(TIMEOUT):
                await api.connect(url)
            took = time.monotonic() - began
        assert isinstance(failed.value.cause, BrokerNotReadyError)
        assert "closed it before answering" in str(failed.value.cause)
        assert _address(broker) in str(failed.value.cause)
        assert took >= 0.3  # retried for connect_timeout, not one attempt
    finally:
        broker.close()


@pytest.mark.parametrize(
    "form",
    [
        "{url}",
        "failover:({url})",
        "failover:({url},amqp://127.0.0.1:{refused})",
        "failover:({url})?failover.method=nofailover",
    ],
)
async def test_F1_the_first_connect_waits_for_a_broker_starting_up(api: Api, form: str) -> None:
    """A broker that accepts TCP and drops the connection until it is ready (a new broker in
    its first milliseconds, started together with the application) is tried again quickly by
    the first connect, within ``jms.connectTimeout``: the connect succeeds once it is ready."""
    broker = BrokerThread(port=free_port(), readiness_delay=WINDOW, not_ready="drop")
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, broker.start)
            await anyio.to_thread.run_sync(_port_open, broker.port)
            assert not broker.broker.ready
            url = form.format(url=broker.url, refused=free_port())
            with anyio.fail_after(TIMEOUT):
                connection = await api.connect(url)
            async with connection:
                assert broker.broker.ready
                stats = await connection.statistics()
        assert stats.connection_attempts[_address(broker)] > 1
        assert stats.connection_attempts_failed[_address(broker)] >= 1
    finally:
        broker.close()


@pytest.mark.parametrize("form", ["{url}", "failover:({url})?failover.method=nofailover"])
async def test_F1_a_refused_port_still_fails_the_first_connect_at_once(api: Api, form: str) -> None:
    url = (
        form.format(url=f"amqp://127.0.0.1:{free_port()}")
        + ("&" if "?" in form else "?")
        + "jms.connectTimeout=5000"
    )
    began = time.monotonic()
    with pytest.raises(ConnectionFailedError), anyio.fail_after(TIMEOUT):
        await api.connect(url)
    assert time.monotonic() - began < 2.5  # not connect_timeout's 5 s of retries
