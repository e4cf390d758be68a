"""The anyio driver over real sockets: against RabbitMQ, and against a peer that sends garbage."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

import anyio
import pytest
from anyio.abc import SocketStream

from chaos.rabbitmq import RabbitMQNode
from haclient.amqp import Accepted, ClientAuth, EngineConfig
from haclient.amqp.codec import AmqpMessage, decode_message, encode_message
from haclient.amqp.connection import AmqpConnection, open_connection
from haclient.amqp.endpoints import Sender, Session
from haclient.errors import AuthenticationError, ConnectionLostError, ProtocolError

pytestmark = pytest.mark.anyio

MESSAGES = 10_000


def rabbit_config(**overrides: object) -> EngineConfig:
    auth = ClientAuth("guest", "guest", allow_insecure=True)
    return EngineConfig(container_id=f"test-{uuid.uuid4()}", auth=auth, **overrides)  # type: ignore[arg-type]


@asynccontextmanager
async def sender_to_a_new_queue(
    rabbitmq: RabbitMQNode,
) -> AsyncIterator[tuple[AmqpConnection, Session, Sender, str]]:
    """A connection to ``rabbitmq``, its session, a sender to a new queue, and its address."""
    address = f"/queue/driver-{uuid.uuid4().hex[:8]}"
    async with open_connection("127.0.0.1", rabbitmq.port, rabbit_config()) as conn:
        session = await conn.open_session()
        yield conn, session, await conn.open_sender(address, session=session), address


@pytest.mark.rabbitmq
async def test_ten_thousand_pipelined_messages_all_settled_none_lost(
    rabbitmq: RabbitMQNode,
) -> None:
    async with sender_to_a_new_queue(rabbitmq) as (conn, session, sender, address):
        deliveries = []
        for n in range(MESSAGES):
            await conn.wait_for_credit(sender)
            body = encode_message(AmqpMessage(body=f"m-{n}", durable=True))
            deliveries.append(conn.send_nowait(sender, body))
        outcomes = [await conn.wait_settled(d) for d in deliveries]
        assert outcomes == [Accepted()] * MESSAGES

        receiver = await conn.open_receiver(address, session=session, credit=500)
        seen: list[str] = []
        with anyio.fail_after(60):
            while len(seen) < MESSAGES:
                message = await conn.receive(receiver)
                assert message is not None
                seen.append(decode_message(message.payload).body)
                conn.settle(message, Accepted())
                if len(seen) % 250 == 0:
                    conn.flow(receiver, 250)
        assert seen == [f"m-{n}" for n in range(MESSAGES)]  # every one, in order
        assert await conn.receive(receiver, timeout=0.5) is None  # and no more
        assert receiver.unsettled == 0


@pytest.mark.rabbitmq
async def test_work_queued_for_a_wait_runs_once_after_the_request_is_written(
    rabbitmq: RabbitMQNode,
) -> None:
    async with sender_to_a_new_queue(rabbitmq) as (conn, _, sender, _):
        await conn.wait_for_credit(sender)
        ran: list[bool] = []  # per run: was the transfer written before the work ran?

        def work() -> None:
            assert conn.driver is not None
            ran.append(not conn.driver.engine.wants_write)

        conn.while_waiting(work)
        delivery = conn.send_nowait(sender, encode_message(AmqpMessage(body="x")))
        assert ran == []  # queueing a transfer is no wait
        assert await conn.wait_settled(delivery) == Accepted()
        assert ran == [True]  # during the wait, the transfer already on the socket
        second = conn.send_nowait(sender, encode_message(AmqpMessage(body="y")))
        assert await conn.wait_settled(second) == Accepted()
        assert ran == [True]  # once


@pytest.mark.rabbitmq
async def test_wrong_password_is_an_authentication_error(rabbitmq: RabbitMQNode) -> None:
    config = EngineConfig(
        container_id="bad-login", auth=ClientAuth("guest", "not-the-password", allow_insecure=True)
    )
    with anyio.fail_after(30), pytest.raises(AuthenticationError):
        async with open_connection("127.0.0.1", rabbitmq.port, config):
            pass


@pytest.mark.parametrize(
    "garbage",
    [
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
        b"AMQP\x03\x01\x00\x00" + b"\xff" * 64,  # a SASL header, then nonsense frames
        b"\x00" * 4096,
    ],
    ids=["http", "bad-sasl-frame", "zeros"],
)
async def test_a_peer_sending_garbage_is_a_protocol_error(garbage: bytes) -> None:
    async def talk_nonsense(client: SocketStream) -> None:
        async with client:
            await client.receive()  # the client's protocol header
            await client.send(garbage)
            with anyio.move_on_after(10), suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                while True:
                    await client.receive()  # until the client gives up (ends its side)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, talk_nonsense)
        with anyio.fail_after(10), pytest.raises(ProtocolError) as info:
            async with open_connection("127.0.0.1", port, EngineConfig(container_id="g")):
                pass
        assert info.value.condition is not None
        tg.cancel_scope.cancel()


async def test_a_peer_that_hangs_up_is_a_lost_connection() -> None:
    async def hang_up(client: SocketStream) -> None:
        await client.aclose()

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, hang_up)
        with anyio.fail_after(10), pytest.raises(ConnectionLostError):
            async with open_connection("127.0.0.1", port, EngineConfig(container_id="h")):
                pass
        tg.cancel_scope.cancel()


async def test_nothing_listening_is_a_lost_connection() -> None:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    await listener.aclose()
    with anyio.fail_after(10), pytest.raises(ConnectionLostError, match="cannot connect"):
        async with open_connection("127.0.0.1", port, EngineConfig(container_id="n")):
            pass


async def test_the_driver_detects_a_silent_peer_through_heartbeats() -> None:
    """A peer that opens and then says nothing is found dead within ~2 idle timeouts (F13)."""
    from chaos.amqp_server import server_engine
    from haclient.amqp import ConnectionRemoteOpen, Role

    async def open_then_fall_silent(client: SocketStream) -> None:
        server = server_engine(EngineConfig(container_id="silent", role=Role.SERVER))
        async with client:
            while not any(isinstance(e, ConnectionRemoteOpen) for e in server.events()):
                server.receive_data(await client.receive())
                await client.send(server.data_to_send())
            server.open()
            await client.send(server.data_to_send())
            await anyio.sleep_forever()  # silent from here on, socket held open

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    config = EngineConfig(container_id="watchful", idle_timeout=0.3)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, open_then_fall_silent)
        async with open_connection("127.0.0.1", port, config) as conn:
            began = anyio.current_time()
            with anyio.fail_after(10):
                error = await conn.wait_closed()
            waited = anyio.current_time() - began
        assert isinstance(error, ConnectionLostError) and error.retriable
        assert "idle timeout" in str(error)
        assert waited < 3.0  # generous bound: about two idle timeouts (0.6 s) expected
        tg.cancel_scope.cancel()


async def test_a_reset_socket_is_the_cause_of_the_lost_connection() -> None:
    """The socket's own error is chained (``raise ... from``), not only quoted in the text."""
    import socket
    import struct

    from chaos.amqp_server import server_engine
    from haclient.amqp import ConnectionRemoteOpen, Role

    async def open_then_reset(client: SocketStream) -> None:
        server = server_engine(EngineConfig(container_id="resetting", role=Role.SERVER))
        while not any(isinstance(e, ConnectionRemoteOpen) for e in server.events()):
            server.receive_data(await client.receive())
            await client.send(server.data_to_send())
        server.open()
        await client.send(server.data_to_send())
        await anyio.sleep(0.2)
        raw = client.extra(anyio.abc.SocketAttribute.raw_socket)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        await client.aclose()  # linger 0: the close sends a RST

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, open_then_reset)
        async with open_connection("127.0.0.1", port, EngineConfig(container_id="r")) as conn:
            with anyio.fail_after(10):
                error = await conn.wait_closed()
        assert isinstance(error, ConnectionLostError)
        assert isinstance(error.__cause__, OSError), repr(error.__cause__)
        assert str(error.__cause__) in str(error)
        tg.cancel_scope.cancel()
