"""The driver's own handle on a TCP connection: non-blocking reads and writes on a duplicate
of the stream's socket, for fewer system calls and loop turns per message than anyio's stream.

anyio's asyncio stream registers the socket with epoll before every ``receive`` and removes it
after (two system calls per read), and every ``send`` yields to the loop first. Here the socket
is watched for the whole connection by one reader callback that handles what it reads at once
(``SocketWatch``, on asyncio: no task; elsewhere ``read_socket``, anyio's ``wait_readable`` in a
task), and a write that the socket takes at once
costs one ``send`` call.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import ipaddress
import socket
from collections.abc import Callable

import anyio
from anyio.abc import ByteStream, SocketAttribute, SocketStream

_async_library: contextvars.ContextVar[str | None] | None
try:
    from sniffio import current_async_library_cvar as _async_library
except ImportError:  # anyio then finds asyncio by its running loop
    _async_library = None

__all__ = [
    "PlainSocketStream",
    "SocketWatch",
    "connect_tcp",
    "own_socket",
    "read_socket",
    "refuse_self_connection",
    "send_some",
]


def own_socket(stream: ByteStream) -> socket.socket | None:
    """A socket of our own on ``stream``'s connection (a duplicate of its file descriptor, to
    be closed by the caller; a ``PlainSocketStream``'s own socket, which nothing else reads),
    or None when the stream is not a bare socket stream (a wrapper, such as the test broker's
    gated stream, must see every read and write)."""
    if not isinstance(stream, SocketStream):
        return None
    if isinstance(stream, PlainSocketStream):  # already ours alone: no duplicate needed
        return stream.raw
    own = stream.extra(SocketAttribute.raw_socket).dup()
    own.setblocking(False)
    return own


def send_some(sock: socket.socket, data: bytes | memoryview) -> int:
    """Write what the socket takes now; how many bytes that was (0: it is full)."""
    try:
        return sock.send(data)
    except BlockingIOError:
        return 0


class SocketWatch:
    """Reads a socket in the event loop's reader callback (asyncio only): no task at all.

    ``on_data`` gets what each read returned (``b""``: the peer ended its side) and says whether
    to go on; ``on_error`` gets the error of a failed read. Either way the watch ends when
    reading ends, and then calls ``on_end`` (which must not raise); an exception raised by the
    callbacks (a bug) also ends it, kept in ``failure`` for the owner to raise.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        size: int,
        on_data: Callable[[bytes], bool],
        on_error: Callable[[OSError], None],
        on_end: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._fd = sock.fileno()
        self._reading = _Reading(sock, size, on_data, on_error)
        self._on_end = on_end
        self.failure: BaseException | None = None
        self.active = True
        # The callback runs outside any task: tell anyio (through sniffio, when installed)
        # that this is asyncio, or what it does there fails under a bare ``asyncio.run``.
        # The loop copies the registering context into the callback's handle, once.
        context = contextvars.copy_context()
        if _async_library is not None:
            context.run(_async_library.set, "asyncio")
        context.run(loop.add_reader, self._fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            go_on = self._reading.read_once()
        except Exception as exc:  # a bug below: the owner raises it
            self.failure = exc
            go_on = False
        if go_on is False:
            self.stop()
            self._on_end()

    def stop(self) -> None:
        """Stop reading (idempotent)."""
        if self.active:
            self.active = False
            self._loop.remove_reader(self._fd)


async def read_socket(
    sock: socket.socket,
    size: int,
    on_data: Callable[[bytes], bool],
    on_error: Callable[[OSError], None],
) -> None:
    """Read ``sock`` in this task until ``on_data`` returns False or a read fails (anyio's wait
    per read: for event loops other than asyncio, where ``SocketWatch`` needs no task).

    ``on_data`` and ``on_error`` as for ``SocketWatch``. Cancelling this stops the reading.
    """
    reading = _Reading(sock, size, on_data, on_error)
    while True:
        await anyio.wait_readable(sock)
        if reading.read_once() is False:
            return


class _Reading:
    __slots__ = ("_on_data", "_on_error", "_size", "_sock")

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

    def read_once(self) -> bool | None:
        """One read handed on: whether to go on (None: there was nothing to read)."""
        try:
            data = self._sock.recv(self._size)
        except BlockingIOError:
            return None
        except OSError as exc:
            self._on_error(exc)
            return False
        return self._on_data(data)


class PlainSocketStream(SocketStream):
    """An anyio socket stream that is only a connected non-blocking socket (asyncio only).

    What ``connect_tcp`` hands back on asyncio: no transport, protocol, events or second
    socket behind it, so that a connection holds fewer objects for the garbage collector to
    walk. The driver reads and writes ``raw`` itself; the stream's own calls serve the
    connection's last moments (``send_eof``, ``receive`` while lingering) and tests.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.raw = sock

    @property
    def _raw_socket(self) -> socket.socket:
        return self.raw

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self.raw.fileno() < 0:
            raise anyio.ClosedResourceError
        data = await asyncio.get_running_loop().sock_recv(self.raw, max_bytes)
        if not data:
            raise anyio.EndOfStream
        return data

    async def send(self, item: bytes) -> None:
        if self.raw.fileno() < 0:
            raise anyio.ClosedResourceError
        await asyncio.get_running_loop().sock_sendall(self.raw, item)

    async def send_eof(self) -> None:
        self.raw.shutdown(socket.SHUT_WR)

    async def aclose(self) -> None:
        self.raw.close()


def _ip_family(host: str) -> socket.AddressFamily | None:
    """The address family of ``host`` when it is an IP address (None: a name to resolve)."""
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return None


async def connect_tcp(host: str, port: int) -> SocketStream:
    """A TCP connection to ``host:port`` (TCP_NODELAY set), as an anyio socket stream.

    On asyncio with an IP address for ``host``, one non-blocking ``connect`` awaited on the
    loop (``PlainSocketStream``): none of the task group, tasks, events and timer that
    ``anyio.connect_tcp``'s happy eyeballs make per connect, which, when a thousand connections
    fail over at once, live long enough for the garbage collector to walk them again and
    again. A host name, or another event loop, goes through ``anyio.connect_tcp``.

    A connection that met itself is refused (``refuse_self_connection``).

    Raises:
        OSError: the connection could not be made.
    """
    family = _ip_family(host)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio)
        loop = None
    if family is None or loop is None:
        stream = await anyio.connect_tcp(host, port)
        try:
            refuse_self_connection(stream.extra(SocketAttribute.raw_socket))
        except OSError:
            await stream.aclose()
            raise
        return stream
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await loop.sock_connect(sock, (host, port))
        refuse_self_connection(sock)
    except BaseException:
        sock.close()
        raise
    return PlainSocketStream(sock)


def refuse_self_connection(sock: socket.socket) -> None:
    """Raise unless ``sock`` is connected to another socket than itself.

    A connect to a port of this machine on which nothing listens may meet itself: when the
    kernel picks that very port as the connection's own (the port is free, and in the range it
    picks from), TCP's simultaneous open connects the socket to itself. A client failing over to
    a local broker that is down would then read its own AMQP header and Open frame back as the
    broker's, and take the echo for a connection. Such a connection is refused as the broker
    being down is.

    Raises:
        ConnectionRefusedError: the socket's own address is its peer's.
    """
    try:
        own, peer = sock.getsockname(), sock.getpeername()
    except OSError:
        return  # not connected (any more): the first read or write will say so
    if own == peer:
        where = f"{peer[0]}:{peer[1]}"
        raise ConnectionRefusedError(
            errno.ECONNREFUSED, f"connection to {where} met itself (nothing listens there)"
        )
