"""Hostile peers: TCP servers that misbehave below the AMQP frame level.

How this works: ``HostilePeer(script)`` listens on 127.0.0.1 (a free port) and runs ``script``
on every connection it accepts; the script reads and writes raw bytes and then, usually, keeps
silent until the client hangs up. The scripts here stage what no broker (and not the scripted
peer, which speaks well-formed AMQP) can: a broker that accepts TCP and never answers, bytes that
are not AMQP, a protocol header cut in half, a frame cut in half, a frame whose size field lies::

    async with HostilePeer(silent) as peer:
        ...  # connect a client to peer.url; it must fail with a library error, in bounded time
    assert peer.connections == 1

Rules it keeps:
    Rule 1: the peer owns one task group; leaving the ``async with`` block cancels every
        connection and closes the listener.
    Rule 2: a script never raises to the listener: a client that hangs up ends its script.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Awaitable, Callable
from typing import Self

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskGroup
from anyio.streams.stapled import MultiListener

__all__ = [
    "AMQP_HEADER",
    "SASL_HEADER",
    "HostilePeer",
    "Script",
    "amqp_0_9_1",
    "bad_frame_size",
    "garbage",
    "half_frame",
    "half_header",
    "silent",
    "symbolic_descriptors",
]

Script = Callable[[SocketStream], Awaitable[None]]

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
# Bytes that are not AMQP, with a terminal escape and a NUL in them: they must never be pasted
# into an exception's text as they are.
GARBAGE = b"\x1b[2J\x00\xff\xfeHTTP/1.1 400 Bad Request\r\n\r\n" + bytes(range(0, 256, 7))


async def _hold(stream: SocketStream) -> None:
    """Keep silent, reading and dropping what the client sends, until it hangs up."""
    with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
        while True:
            await stream.receive()


async def _header(stream: SocketStream) -> bytes:
    """The 8-byte protocol header the client sent first (SASL or plain AMQP)."""
    data = b""
    while len(data) < 8:
        data += await stream.receive(8 - len(data))
    return data


async def silent(stream: SocketStream) -> None:
    """Accept the connection and never answer: a hung broker."""
    await _hold(stream)


async def garbage(stream: SocketStream) -> None:
    """Answer with bytes that are not AMQP (here: an HTTP error and binary junk)."""
    await stream.send(GARBAGE)
    await _hold(stream)


async def half_header(stream: SocketStream) -> None:
    """Send the first half of the protocol header the client asked for, then keep silent."""
    await stream.send((await _header(stream))[:4])
    await _hold(stream)


async def amqp_0_9_1(stream: SocketStream) -> None:
    """Answer as RabbitMQ without its AMQP 1.0 plugin does: the AMQP 0-9-1 protocol header,
    then hang up."""
    await _header(stream)
    await stream.send(b"AMQP\x00\x00\x09\x01")


def _frame(body: bytes, frame_type: int = 0) -> bytes:
    """One AMQP frame: size, data offset 2 (no extended header), type, channel 0, body."""
    return struct.pack(">IBBH", 8 + len(body), 2, frame_type, 0) + body


async def half_frame(stream: SocketStream) -> None:
    """Echo the client's protocol header, send half of a frame, then keep silent."""
    header = await _header(stream)
    frame = _frame(b"\x00\x53\x40" + b"\x45" * 40, 1 if header == SASL_HEADER else 0)
    await stream.send(header + frame[: len(frame) // 2])
    await _hold(stream)


async def bad_frame_size(stream: SocketStream) -> None:
    """Echo the client's protocol header, then send a frame whose size (4) is below the
    smallest legal one (8)."""
    header = await _header(stream)
    await stream.send(header + struct.pack(">IBBH", 4, 2, 0, 0) + b"\x00" * 16)
    await _hold(stream)


def _symbolic(name: bytes, field: bytes) -> bytes:
    """A performative named by its symbolic descriptor, with one field (a list of one)."""
    return b"\x00\xa3" + bytes([len(name)]) + name + bytes([0xC0, 1 + len(field), 1]) + field


async def symbolic_descriptors(stream: SocketStream) -> None:
    """Echo the client's protocol header and answer with the first performative named by its
    symbolic descriptor (``amqp:sasl-mechanisms:list`` or ``amqp:open:list``), then keep silent.
    Legal AMQP, which proton's engine does not act on."""
    header = await _header(stream)
    if header == SASL_HEADER:
        frame = _frame(_symbolic(b"amqp:sasl-mechanisms:list", b"\xa3\x09ANONYMOUS"), 1)
    else:
        frame = _frame(_symbolic(b"amqp:open:list", b"\xa1\x04peer"))
    await stream.send(header + frame)
    await _hold(stream)


class HostilePeer:
    """A TCP server on 127.0.0.1 that runs ``script`` on each connection (see the module).

    Attributes:
        connections: How many connections were accepted so far.
    """

    def __init__(self, script: Script) -> None:
        self._script = script
        self._listener: MultiListener[SocketStream] | None = None
        self._tasks: TaskGroup | None = None
        self.connections = 0

    @property
    def port(self) -> int:
        """The port it listens on (only inside ``async with``)."""
        assert self._listener is not None, "use the peer inside `async with`"
        port: int = self._listener.extra(SocketAttribute.local_port)
        return port

    @property
    def url(self) -> str:
        """``amqp://127.0.0.1:PORT``."""
        return f"amqp://127.0.0.1:{self.port}"

    async def _serve(self, stream: SocketStream) -> None:
        self.connections += 1
        async with stream:
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                await self._script(stream)

    async def __aenter__(self) -> Self:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self._listener = listener
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self._tasks.start_soon(listener.serve, self._serve)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._tasks is not None and self._listener is not None
        self._tasks.cancel_scope.cancel()
        await self._tasks.__aexit__(None, None, None)
        await self._listener.aclose()
