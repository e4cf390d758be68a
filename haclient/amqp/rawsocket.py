"""The driver's own handle on a TCP connection: non-blocking reads and writes on a duplicate
of the stream's socket, for fewer system calls and loop turns per message than anyio's stream.

anyio's asyncio stream registers the socket with epoll before every ``receive`` and removes it
after (two system calls per read), and every ``send`` yields to the loop first. Here the socket
is watched for the whole connection (on asyncio: one reader callback; elsewhere anyio's
``wait_readable``), and a write that the socket takes at once costs one ``send`` call.
"""

from __future__ import annotations

import asyncio
import socket

import anyio
from anyio.abc import ByteStream, SocketAttribute, SocketStream

__all__ = ["Readable", "own_socket", "send_some"]


def own_socket(stream: ByteStream) -> socket.socket | None:
    """A socket of our own on ``stream``'s connection (a duplicate of its file descriptor, to
    be closed by the caller), or None when the stream is not a bare socket stream (a wrapper,
    such as the test broker's gated stream, must see every read and write)."""
    if not isinstance(stream, SocketStream):
        return None
    own = stream.extra(SocketAttribute.raw_socket).dup()
    own.setblocking(False)
    return own


def send_some(sock: socket.socket, data: bytes | memoryview) -> int:
    """Write what the socket takes now; how many bytes that was (0: it is full)."""
    try:
        return sock.send(data)
    except BlockingIOError:
        return 0


class Readable:
    """Waits until ``sock`` has something to read (data, the peer's end, an error).

    Create and ``close()`` it in the task that reads; one reader at a time.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._ready = anyio.Event()
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio): anyio's wait per read
            self._loop = None
        else:
            self._loop.add_reader(sock.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        self._ready.set()  # level-triggered: called again each loop turn until it is read

    async def wait(self) -> None:
        """Return once a read would not block."""
        if self._loop is None:
            await anyio.wait_readable(self._sock)
            return
        await self._ready.wait()
        self._ready = anyio.Event()

    def close(self) -> None:
        """Stop watching (before the socket is closed)."""
        if self._loop is not None:
            self._loop.remove_reader(self._sock.fileno())
            self._loop = None
