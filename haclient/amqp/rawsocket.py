"""The driver's own handle on a TCP connection: non-blocking reads and writes on a duplicate
of the stream's socket, for fewer system calls and loop turns per message than anyio's stream.

anyio's asyncio stream registers the socket with epoll before every ``receive`` and removes it
after (two system calls per read), and every ``send`` yields to the loop first. Here the socket
is watched for the whole connection by one reader callback that handles what it reads at once
(on asyncio; elsewhere anyio's ``wait_readable``), and a write that the socket takes at once
costs one ``send`` call.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import anyio
from anyio.abc import ByteStream, SocketAttribute, SocketStream

__all__ = ["own_socket", "read_socket", "send_some"]


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


async def read_socket(
    sock: socket.socket,
    size: int,
    on_data: Callable[[bytes], bool],
    on_error: Callable[[OSError], None],
) -> None:
    """Read ``sock`` until ``on_data`` returns False or a read fails.

    ``on_data`` gets what each read returned (``b""``: the peer ended its side) and says
    whether to go on; ``on_error`` gets the error of a failed read, which ends the reading.
    On asyncio ``on_data`` runs in the loop's reader callback, as a protocol's
    ``data_received`` does: no task switch per read. Cancelling this stops the reading.
    """
    reading = _Reading(sock, size, on_data, on_error)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio): anyio's wait per read
        await reading.in_task()
    else:
        await reading.in_callbacks(loop)


class _Reading:
    def __init__(
        self,
        sock: socket.socket,
        size: int,
        on_data: Callable[[bytes], bool],
        on_error: Callable[[OSError], None],
    ) -> None:
        self._sock = sock
        self._size = size
        self._on_data = on_data
        self._on_error = on_error

    def _read_once(self) -> bool | None:
        """One read handed on: whether to go on (None: there was nothing to read)."""
        try:
            data = self._sock.recv(self._size)
        except BlockingIOError:
            return None
        except OSError as exc:
            self._on_error(exc)
            return False
        return self._on_data(data)

    async def in_task(self) -> None:
        while True:
            await anyio.wait_readable(self._sock)
            if self._read_once() is False:
                return

    async def in_callbacks(self, loop: asyncio.AbstractEventLoop) -> None:
        fd = self._sock.fileno()
        ended = anyio.Event()
        failures: list[BaseException] = []

        def on_readable() -> None:
            try:
                go_on = self._read_once()
            except BaseException as exc:  # a bug below: raised from the reading task
                failures.append(exc)
                go_on = False
            if go_on is False:
                loop.remove_reader(fd)
                ended.set()

        loop.add_reader(fd, on_readable)
        try:
            await ended.wait()
        finally:
            loop.remove_reader(fd)
        if failures:
            raise failures[0]
