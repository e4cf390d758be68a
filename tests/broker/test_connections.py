"""Connection conformance: SASL, container ids, bad input, endings, heartbeats, TLS."""

from __future__ import annotations

import socket
import struct

import anyio
import pytest
from brokerkit import TIMEOUT, body_of, connect, message, receive, receiver, sender

from chaos.broker import Broker
from chaos.broker.state import ACTIVEMQ_IDLE_TIMEOUT
from haclient.amqp.config import ClientAuth
from haclient.amqp.types import CONNECTION_LOST, Accepted
from haclient.errors import AuthenticationError, ClientIdInUseError, ConnectionLostError

pytestmark = pytest.mark.anyio

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


async def test_sasl_plain_login_of_configured_user_is_accepted() -> None:
    async with Broker(users={"alice": "secret"}) as broker:
        with anyio.fail_after(TIMEOUT):
            auth = ClientAuth("alice", "secret", allow_insecure=True)
            async with connect(broker, auth=auth) as conn:
                assert await conn.send(await sender(conn, "q"), message()) == Accepted()


@pytest.mark.parametrize(
    "auth",
    [ClientAuth("alice", "wrong", allow_insecure=True), ClientAuth()],
    ids=["wrong-password", "anonymous"],
)
async def test_sasl_login_is_refused_with_unauthorized_access(auth: ClientAuth) -> None:
    async with Broker(users={"alice": "secret"}) as broker:
        with anyio.fail_after(TIMEOUT), pytest.raises(AuthenticationError) as info:
            async with connect(broker, auth=auth):
                pass
        assert info.value.condition == "amqp:unauthorized-access"


async def test_second_connection_with_same_container_id_is_refused_with_invalid_field() -> None:
    async with Broker(refuse_duplicate_container_id=True) as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker, "jms-client-1") as first:
                with pytest.raises(ClientIdInUseError) as refused:
                    async with connect(broker, "jms-client-1"):
                        pass  # the refused Open fails the connect itself
                assert refused.value.condition == "amqp:invalid-field"
                assert first.is_open
                assert broker.connections() == ["jms-client-1"]


async def test_same_container_id_is_allowed_by_default(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "twin") as first, connect(broker, "twin") as second:
            assert first.is_open and second.is_open


async def test_messages_larger_than_max_frame_size_travel_in_several_frames() -> None:
    async with Broker(max_frame_size=1024) as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker, max_frame_size=2048) as conn:
                big = b"x" * 20_000
                assert await conn.send(await sender(conn, "q"), message(big)) == Accepted()
                assert body_of(await receive(conn, await receiver(conn, "q"))) == big


def _raw_exchange(port: int, data: bytes) -> bytes:
    """Send ``data`` on a raw socket and read until the broker closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as raw:
        raw.sendall(data)
        received = b""
        while chunk := raw.recv(65536):
            received += chunk
        return received


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (AMQP_HEADER + b"\xde\xad\xbe\xef" * 64, b"amqp:connection:framing-error"),
        (
            AMQP_HEADER + struct.pack(">IBBH", 1_000_000, 2, 0, 0) + b"\x00" * 1024,
            b"amqp:connection:framing-error",
        ),
        (b"GET / HTTP/1.1\r\n\r\n", b"AMQP\x03\x01\x00\x00"),
    ],
    ids=["garbage-frames", "oversized-frame", "not-amqp"],
)
async def test_bad_client_gets_a_connection_error_and_others_are_unaffected(
    data: bytes, expected: bytes
) -> None:
    async with Broker(max_frame_size=4096) as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker, "good") as good:
                out = await sender(good, "q")
                link = await receiver(good, "q")
                await good.send(out, message("before"))
                answer = await anyio.to_thread.run_sync(_raw_exchange, broker.port, data)
                assert answer.startswith(b"AMQP")  # the broker answered, then hung up
                assert expected in answer
                assert await good.send(out, message("after")) == Accepted()
                assert body_of(await receive(good, link)) == "before"
                assert body_of(await receive(good, link)) == "after"
                assert broker.connections() == ["good"]


async def test_kill_drops_connections_without_close_frame(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await conn.send(await sender(conn, "q"), message())
            await broker.kill()
            error = await conn.wait_closed()
            assert isinstance(error, ConnectionLostError)
            assert error.condition == CONNECTION_LOST  # no Close frame: the socket just died
        assert not broker.running


async def test_stop_closes_connections_with_close_frame(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await broker.stop()
            error = await conn.wait_closed()
            assert isinstance(error, ConnectionLostError)
            assert error.condition == "amqp:connection:forced"


async def test_restart_serves_on_the_same_port_and_forgets_transient_messages(
    broker: Broker,
) -> None:
    port = broker.port
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await conn.send(await sender(conn, "q"), message())
        await broker.restart()
        assert broker.port == port
        async with connect(broker) as conn:
            await sender(conn, "q")
            assert broker.queue_depth("q") == 0


async def test_paused_broker_is_detected_by_client_idle_timeout(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, idle_timeout=0.3) as conn:
            broker.pause()
            error = await conn.wait_closed()
            assert isinstance(error, ConnectionLostError)
            assert "idle timeout" in str(error)
            broker.resume()


async def test_broker_advertises_and_enforces_its_idle_timeout() -> None:
    async with Broker(idle_timeout=0.3) as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                assert conn.remote_open is not None
                assert conn.remote_open.idle_timeout == pytest.approx(0.3)
            # A peer that sends its protocol header and then stays silent is dropped.
            answer = await anyio.to_thread.run_sync(_raw_exchange, broker.port, AMQP_HEADER)
            assert answer.startswith(AMQP_HEADER)
            assert b"amqp:resource-limit-exceeded" in answer


async def test_activemq_mode_advertises_activemqs_idle_timeout_unless_told_otherwise() -> None:
    """ActiveMQ 5.x advertises 15 s and drops a connection silent for 30 s: a client that
    vanished without a word keeps its container id on the broker that long (issue 43)."""
    expected = {
        ("activemq", None): ACTIVEMQ_IDLE_TIMEOUT,
        ("activemq", 0.0): None,  # 0 turns it off
        ("activemq", 2.0): 2.0,
        ("reference", None): None,
    }
    for (mode, asked), advertised in expected.items():
        async with Broker(mode=mode, idle_timeout=asked) as broker:
            with anyio.fail_after(TIMEOUT):
                async with connect(broker) as conn:
                    assert conn.remote_open is not None
                    got = conn.remote_open.idle_timeout or None
                    assert got == (pytest.approx(advertised) if advertised else None), (mode, asked)
