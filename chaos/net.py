"""Small network helpers shared by the test bed, the tests and the benchmarks."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import socket
import threading
from collections.abc import Callable, Coroutine, Iterable, Sequence
from pathlib import Path
from typing import Any, Self

import anyio
from anyio.abc import Listener, SocketAttribute, SocketListener, SocketStream, TaskGroup

__all__ = ["Acceptor", "Address", "PortHold", "TcpServer", "bound_addresses", "free_port"]

_JOIN_TIMEOUT = 10.0
_ACCEPT_END_WAIT = 1.0
"""Seconds ``Acceptor.stop`` waits for its accept loops to see their sockets shut."""


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that is free at the time of the call.

    The port is drawn at random from outside the kernel's ephemeral range (``_server_ports``),
    where no outgoing connection takes its local port: a broker killed and started again on its
    port finds it free even while clients (of this process or of another test worker) keep
    connecting elsewhere. Under pytest-xdist each worker draws from a slice of its own
    (``_worker_slice``). The socket is closed again before returning, so another process could
    still take the port in between; callers that start a server on it should be ready to retry.

    Args:
        host: The address to bind to.

    Returns:
        The port number.
    """
    low, high = _worker_slice(*_server_ports())
    for _ in range(100):
        port = _random.randint(low, high)
        if port in _handed_out:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as a server binds
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # all taken: the kernel's
        sock.bind((host, 0))
        kernel_port: int = sock.getsockname()[1]
        return kernel_port


def _worker_slice(low: int, high: int) -> tuple[int, int]:
    """The part of ``low..high`` this process draws from: under pytest-xdist, worker ``gwN`` of
    ``PYTEST_XDIST_WORKER_COUNT`` gets the N-th of that many equal slices, so that two workers
    never hand out the same port (one may pick a port while the other's server, picked before,
    is still starting); any other process, the whole range."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit()):
        return low, high
    index, slices = int(worker[2:]), int(count)
    if not 0 <= index < slices:
        return low, high
    size = (high - low + 1) // slices
    return low + index * size, low + (index + 1) * size - 1


_random = random.Random()
_handed_out: set[int] = set()
"""Ports ``free_port`` returned in this process: never twice, so that two servers of one test
(or a server and the port it is given back after a kill) never meet."""
_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


@functools.cache
def _server_ports() -> tuple[int, int]:
    """The ports ``free_port`` draws from: 10000 up to the kernel's ephemeral range (Linux's
    default 32768-60999, read from /proc), or above it when it starts too low."""
    try:
        first, last = (int(part) for part in _EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        first, last = 32768, 60999
    if first > 12000:
        return 10000, first - 1
    if last < 64000:
        return last + 1, 65535
    return 10000, 65535  # no room outside it: anywhere


Address = tuple[socket.AddressFamily, Any]
"""A socket's family and the address it is bound to (``getsockname()``)."""


def bound_addresses(listeners: Sequence[Listener[SocketStream]]) -> list[Address]:
    """The address each of ``listeners`` (TCP) is bound to, for a ``PortHold`` once they
    close."""
    found = []
    for listener in listeners:
        raw = _socket_listener(listener).extra(SocketAttribute.raw_socket)
        found.append((socket.AddressFamily(raw.family), raw.getsockname()))
    return found


class PortHold:
    """The port of a server that stopped listening, kept from every other socket until the
    server listens on it again.

    How this works: one socket per address the server listened on, bound with
    ``SO_REUSEADDR`` (as a listener binds) and never listening. A connection to the port is
    refused, as if nothing were bound; but the kernel gives the port to no socket that binds
    port 0 and to no outgoing connection, where without the hold another server (of another
    test worker, say) could be given it while clients of the stopped one still retry it (a
    failover), and those clients would meet that other server. The server binds the port again
    explicitly (two reusable sockets of which one is not listening may share a port), then
    ``release()`` s the hold.

    Args:
        addresses: ``(family, sockaddr)`` of each address to hold; one already bound by a
            socket that does not allow reuse is skipped.
    """

    def __init__(self, addresses: Iterable[Address]) -> None:
        self._sockets: list[socket.socket] = []
        for family, address in addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(address)
            except OSError:
                sock.close()
                continue
            self._sockets.append(sock)

    @property
    def held(self) -> bool:
        """Whether any address is held."""
        return bool(self._sockets)

    def release(self) -> None:
        """Let the port go. Idempotent."""
        sockets, self._sockets = self._sockets, []
        for sock in sockets:
            sock.close()


class TcpServer:
    """A threaded TCP server on a free loopback port, for tests to connect to.

    ``serve(sock)`` runs per connection on a thread of its own; the connection is closed when
    it returns (or raises ``OSError``). Leaving ``with`` closes the listener and every
    connection.

    Args:
        serve: What to do with each accepted connection.
    """

    def __init__(self, serve: Callable[[socket.socket], None]) -> None:
        self._serve = serve
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def address(self) -> str:
        """``127.0.0.1:port``."""
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in list(self._sockets):
            sock.close()
        self._thread.join(_JOIN_TIMEOUT)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(sock)
            threading.Thread(target=self._run, args=(sock,), daemon=True).start()

    def _run(self, sock: socket.socket) -> None:
        try:
            self._serve(sock)
        except OSError:
            pass
        finally:
            sock.close()


def _socket_listener(listener: Listener[SocketStream]) -> SocketListener:
    if not isinstance(listener, SocketListener):
        raise TypeError(f"not a socket listener: {listener!r}")
    return listener


class Acceptor:
    """Accepts on anyio TCP listeners until ``stop()``, which shuts the listening sockets down
    instead of cancelling an accept: asyncio can accept a connection for an accept that was
    just cancelled and drop the socket unclosed, and its client would wait on it for an answer
    (a reconnect racing a broker kill, a proxy disabled). The kernel resets the connections it
    had not handed over yet.
    """

    def __init__(self, listeners: Sequence[Listener[SocketStream]]) -> None:
        # anyio.create_tcp_listener's MultiListener types its parts as plain listeners; they
        # are socket listeners, which accept one stream at a time.
        self._listeners = [_socket_listener(listener) for listener in listeners]
        self._accepting = True
        self._ended = anyio.Event()

    async def serve(
        self, handler: Callable[[SocketStream], Coroutine[Any, Any, None]], task_group: TaskGroup
    ) -> None:
        """Start ``handler`` in ``task_group`` for each accepted stream; returns after
        ``stop()``. Raises what an accept raised while not stopping."""
        try:
            async with anyio.create_task_group() as accepting:
                for listener in self._listeners:
                    accepting.start_soon(self._accept_loop, listener, handler, task_group)
        finally:
            self._ended.set()

    async def _accept_loop(
        self,
        listener: SocketListener,
        handler: Callable[[SocketStream], Coroutine[Any, Any, None]],
        task_group: TaskGroup,
    ) -> None:
        while self._accepting:
            try:
                stream = await listener.accept()
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                if not self._accepting:
                    return
                raise
            task_group.start_soon(handler, stream)

    async def stop(self) -> None:
        """Stop accepting and wait, briefly, until the accept loops have ended. Idempotent."""
        self._accepting = False
        for listener in self._listeners:
            with contextlib.suppress(OSError):
                listener.extra(SocketAttribute.raw_socket).shutdown(socket.SHUT_RDWR)
        with anyio.move_on_after(_ACCEPT_END_WAIT):
            await self._ended.wait()
