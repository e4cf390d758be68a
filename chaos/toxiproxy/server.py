"""The server's lifetime: the API listener, the task group every proxy runs in, and the two
ways to run it (``async with ToxiproxyServer()`` on a loop, ``ToxiproxyServer.running()`` on a
thread of its own)."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskGroup
from anyio.from_thread import start_blocking_portal

from chaos.toxiproxy.api import Api
from chaos.toxiproxy.http import serve_http
from chaos.toxiproxy.registry import Registry

__all__ = ["ToxiproxyServer"]

log = logging.getLogger("chaos.toxiproxy")


def check_loopback(host: str) -> str:
    """``host`` as an IP address to bind (``localhost`` is ``127.0.0.1``).

    Raises:
        ValueError: the address is not a loopback one; this server binds nothing else.
    """
    address = "127.0.0.1" if host == "localhost" else host.strip("[]")
    try:
        loopback = ipaddress.ip_address(address).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(
            f"refusing to listen on {host!r}: this Toxiproxy binds loopback addresses only "
            "(127.0.0.0/8, ::1 or localhost)"
        )
    return address


class ToxiproxyServer:
    """A Toxiproxy-compatible server on ``host:port`` (``port=0``: any free port).

    ``async with`` starts it on the running loop and stops it, with every proxy and connection,
    on exit. Proxies are made and driven through the HTTP API only (``url``), as with the real
    Toxiproxy.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 8474) -> None:
        self.host = check_loopback(host)
        self._port = port
        self._stack: AsyncExitStack | None = None
        self.registry: Registry | None = None

    @property
    def port(self) -> int:
        """The API port (the bound one once started)."""
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port`` of the API."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self._port}"

    async def __aenter__(self) -> ToxiproxyServer:
        """Bind the API port and serve.

        Raises:
            OSError: the port cannot be bound (in use, say).
        """
        async with AsyncExitStack() as stack:
            listener = await anyio.create_tcp_listener(local_host=self.host, local_port=self._port)
            await stack.enter_async_context(listener)
            self._port = int(listener.extra(SocketAttribute.local_port))
            tg = await stack.enter_async_context(anyio.create_task_group())
            stack.callback(tg.cancel_scope.cancel)  # runs first on exit: stops every task
            self.registry = Registry(tg)
            tg.start_soon(self._serve, listener, tg, Api(self.registry))
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()
        if self.registry is not None:
            self.registry.release_ports()  # the disabled proxies' (``Proxy.stop``)

    @staticmethod
    async def _serve(listener: anyio.abc.Listener[SocketStream], tg: TaskGroup, api: Api) -> None:
        async def handle(stream: SocketStream) -> None:
            try:
                await serve_http(stream, api.handle)
            except Exception:  # one API client's trouble must not stop the server
                log.exception("API connection failed")

        await listener.serve(handle, tg)

    @classmethod
    @contextmanager
    def running(cls, host: str = "127.0.0.1", port: int = 0) -> Iterator[ToxiproxyServer]:
        """Run a server on an event loop in a thread of its own for the ``with`` block.

        Raises:
            OSError: the port cannot be bound.
            ValueError: ``host`` is not a loopback address.
        """
        server = cls(host, port)
        with start_blocking_portal() as portal, portal.wrap_async_context_manager(server):
            yield server

    @classmethod
    @asynccontextmanager
    async def serving(
        cls, host: str = "127.0.0.1", port: int = 0
    ) -> AsyncIterator[ToxiproxyServer]:
        """The async form of ``running()``: a server on the current loop for the block."""
        async with cls(host, port) as server:
            yield server
