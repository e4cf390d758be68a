"""The driver's own socket I/O (``haclient.amqp.rawsocket``), on asyncio and trio, over real
loopback TCP connections: what is read reaches the callback in order, the peer's end and a
reset end the reading, and a failing callback is raised, not swallowed by the event loop."""

from __future__ import annotations

import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream

from chaos.broker.server import Gate, GatedStream
from haclient.amqp.rawsocket import (
    PlainSocketStream,
    connect_tcp,
    own_socket,
    read_socket,
    refuse_self_connection,
    send_some,
)

pytestmark = pytest.mark.anyio

TIMEOUT = 5.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@asynccontextmanager
async def connected() -> AsyncIterator[tuple[SocketStream, socket.socket]]:
    """A client stream to a listener on 127.0.0.1 and the server's accepted socket."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        stream = await anyio.connect_tcp("127.0.0.1", port)
        server, _ = listener.accept()
        try:
            yield stream, server
        finally:
            server.close()
            await stream.aclose()


class Collected:
    def __init__(self, stop_after: int | None = None) -> None:
        self.chunks: list[bytes] = []
        self.errors: list[OSError] = []
        self.stop_after = stop_after

    def on_data(self, data: bytes) -> bool:
        self.chunks.append(data)
        if self.stop_after is not None and len(b"".join(self.chunks)) >= self.stop_after:
            return False
        return bool(data)

    def on_error(self, exc: OSError) -> None:
        self.errors.append(exc)


async def test_what_is_read_arrives_in_order_and_the_peers_end_ends_the_reading() -> None:
    async with connected() as (stream, server):
        own = own_socket(stream)
        assert own is not None
        got = Collected()
        payload = bytes(range(256)) * 1024  # more than one read
        server.sendall(payload)
        server.shutdown(socket.SHUT_WR)
        with anyio.fail_after(TIMEOUT):
            await read_socket(own, 65536, got.on_data, got.on_error)
        own.close()
        assert b"".join(got.chunks) == payload
        assert got.chunks[-1] == b""  # the EOF is handed over too
        assert got.errors == []


async def test_the_callback_says_when_to_stop() -> None:
    async with connected() as (stream, server):
        own = own_socket(stream)
        assert own is not None
        got = Collected(stop_after=3)
        server.sendall(b"abc")
        with anyio.fail_after(TIMEOUT):
            await read_socket(own, 65536, got.on_data, got.on_error)
        own.close()
        assert b"".join(got.chunks) == b"abc"


async def test_a_reset_is_handed_to_on_error() -> None:
    async with connected() as (stream, server):
        own = own_socket(stream)
        assert own is not None
        got = Collected()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        server.close()  # a reset, not an orderly end
        with anyio.fail_after(TIMEOUT):
            await read_socket(own, 65536, got.on_data, got.on_error)
        own.close()
        assert [type(e) for e in got.errors] == [ConnectionResetError]


async def test_a_failing_callback_is_raised_from_the_reading_task() -> None:
    async with connected() as (stream, server):
        own = own_socket(stream)
        assert own is not None

        def broken(data: bytes) -> bool:
            raise RuntimeError("a bug below the driver")

        server.sendall(b"x")
        with anyio.fail_after(TIMEOUT), pytest.raises(RuntimeError, match="a bug below"):
            await read_socket(own, 65536, broken, Collected().on_error)
        own.close()


async def test_send_some_takes_what_fits_and_says_zero_when_the_socket_is_full() -> None:
    async with connected() as (stream, _server):
        own = own_socket(stream)
        assert own is not None
        chunk = b"x" * 65536
        written = 0
        with anyio.fail_after(TIMEOUT):
            while (sent := send_some(own, chunk)) > 0:  # nobody reads: the buffers fill up
                written += sent
        assert written > 0
        assert send_some(own, chunk) == 0
        own.close()


async def test_a_wrapped_stream_gets_no_socket_of_its_own() -> None:
    """Only a bare socket stream is bypassed: a wrapper (the test broker's gated stream, which
    holds bytes back while paused) must see every byte, so the driver uses its calls."""
    async with connected() as (stream, _server):
        assert own_socket(GatedStream(stream, Gate())) is None
        own = own_socket(stream)
        assert own is not None
        own.close()


async def test_connect_tcp_gives_a_plain_socket_on_asyncio_and_anyios_stream_elsewhere(
    anyio_backend: str,
) -> None:
    """On asyncio, an IP address is connected with one non-blocking connect and the stream is
    the socket alone (the driver reads it without a duplicate); its own calls work to the end.
    A refused connect raises OSError either way."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        with anyio.fail_after(TIMEOUT):
            stream = await connect_tcp("127.0.0.1", port)
        server, _ = listener.accept()
        try:
            assert isinstance(stream, PlainSocketStream) == (anyio_backend == "asyncio")
            own = own_socket(stream)
            assert own is not None
            assert (own is stream.extra(anyio.abc.SocketAttribute.raw_socket)) == (
                anyio_backend == "asyncio"
            )
            raw = stream.extra(anyio.abc.SocketAttribute.raw_socket)
            assert raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            with anyio.fail_after(TIMEOUT):
                await stream.send(b"ping")
                assert server.recv(4) == b"ping"
                server.sendall(b"pong")
                assert await stream.receive() == b"pong"
                await stream.send_eof()
                assert server.recv(4) == b""
                server.shutdown(socket.SHUT_WR)
                with pytest.raises(anyio.EndOfStream):
                    await stream.receive()
            if own is not raw:
                own.close()
        finally:
            server.close()
            await stream.aclose()
    with pytest.raises(OSError), anyio.fail_after(TIMEOUT):
        await connect_tcp("127.0.0.1", port)  # nobody listens there now


def _self_connected() -> socket.socket:
    """A TCP socket connected to itself, as a connect to a free port of this machine ends when
    the kernel picks that very port for the connection's own end (simultaneous open)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.connect(sock.getsockname())
    return sock


def test_F1_a_connection_that_met_itself_is_refused_as_a_broker_that_is_down() -> None:
    with _self_connected() as sock:
        assert sock.getsockname() == sock.getpeername()  # the situation, for real
        with pytest.raises(ConnectionRefusedError, match="met itself"):
            refuse_self_connection(sock)


async def test_a_connection_to_a_listener_is_not_refused() -> None:
    async with connected() as (stream, _):
        refuse_self_connection(stream.extra(SocketAttribute.raw_socket))
