"""One proxy: a loopback listener, the connections it carries, and its toxics per direction.

A proxy's listener and connections run in a task of the server's task group under a cancel
scope of their own; ``stop()`` cancels it and waits until the listener and every socket are
closed, so that once an API call that disables or deletes a proxy has answered, new connections
are refused. A disabled proxy keeps its port from every other socket (``chaos.net.PortHold``)
until it listens there again, moves to another address or is deleted: clients that retry it
meet a refusal, never another server given that port.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskGroup
from anyio.streams.stapled import MultiListener

from chaos.net import Acceptor, Address, PortHold, bound_addresses
from chaos.toxiproxy.link import Connection
from chaos.toxiproxy.model import (
    PROXY_FIELDS,
    TOXIC_NOT_FOUND,
    ApiError,
    Toxic,
    format_address,
    loopback_address,
    new_toxic,
)
from chaos.toxiproxy.model import update_toxic as apply_update

__all__ = ["Proxy"]

log = logging.getLogger("chaos.toxiproxy")


class Proxy:
    """A named proxy from ``listen`` to ``upstream`` (both ``host:port``); disabled until
    ``start()``."""

    def __init__(self, name: str, listen: str, upstream: str, task_group: TaskGroup) -> None:
        self.name = name
        self.listen = listen
        self.upstream = upstream
        self.enabled = False
        self.toxics: dict[str, list[Toxic]] = {"upstream": [], "downstream": []}
        self._task_group = task_group
        self._connections: set[Connection] = set()
        self._scope: anyio.CancelScope | None = None
        self._acceptor: Acceptor | None = None
        self._stopped = anyio.Event()
        self._addresses: list[Address] = []
        self._port_hold = PortHold(())

    def to_json(self) -> dict[str, Any]:
        """The API's view of the proxy, with its toxics."""
        fields = {key: getattr(self, key) for key in PROXY_FIELDS}
        return {**fields, "toxics": [toxic.to_json() for toxic in self.all_toxics()]}

    async def start(self) -> None:
        """Listen on ``listen`` (rewritten to the bound address; empty: ``127.0.0.1:0``). Does
        nothing if enabled.

        Raises:
            ApiError: 500 if the address is malformed, not loopback, or cannot be bound (the
                error names the resolved address, as the real server's does).
        """
        if self.enabled:
            return
        host, port = loopback_address(self.listen)
        try:
            listener = await anyio.create_tcp_listener(local_host=host, local_port=port)
        except OSError as exc:
            reason = (exc.strerror or str(exc)).lower()
            raise ApiError(500, f"listen tcp {format_address(host, port)}: bind: {reason}") from exc
        self._port_hold.release()
        self._addresses = bound_addresses(listener.listeners)
        port = int(listener.extra(SocketAttribute.local_port))
        self.listen = format_address(host, port)
        self.enabled = True
        self._scope = anyio.CancelScope()
        self._stopped = anyio.Event()
        self._task_group.start_soon(self._serve, listener, self._scope, self._stopped)

    async def stop(self) -> None:
        """Close the listener and every connection, and wait until they are; the port stays
        held until ``start()`` or ``release_port()``. Idempotent."""
        if not self.enabled or self._scope is None:
            return
        self.enabled = False
        if self._acceptor is not None:
            await self._acceptor.stop()  # never a cancelled accept: see ``Acceptor``
        self._scope.cancel()
        await self._stopped.wait()
        self._port_hold = PortHold(self._addresses)

    def release_port(self) -> None:
        """Let a stopped proxy's port go (it is deleted, replaced or moves). Idempotent."""
        self._port_hold.release()

    async def _serve(
        self, listener: MultiListener[SocketStream], scope: anyio.CancelScope, done: Any
    ) -> None:
        self._acceptor = acceptor = Acceptor(listener.listeners)
        try:
            with scope:
                async with listener, anyio.create_task_group() as tg:
                    await acceptor.serve(self._carry, tg)
                    await anyio.sleep_forever()  # carrying the connections until stopped
        finally:
            done.set()

    async def _carry(self, client: SocketStream) -> None:
        connection = Connection(client, self.upstream, lambda direction: self.toxics[direction])
        self._connections.add(connection)
        try:
            await connection.run()
        except Exception:  # one broken connection must not stop the proxy
            log.exception("proxy %s: a connection failed", self.name)
        finally:
            self._connections.discard(connection)

    # --- toxics -------------------------------------------------------------------------------

    def all_toxics(self) -> list[Toxic]:
        """Upstream chain first, then downstream, each in creation order."""
        return self.toxics["upstream"] + self.toxics["downstream"]

    def toxic(self, name: str) -> Toxic:
        """The toxic called ``name``.

        Raises:
            ApiError: 404 ``toxic not found``.
        """
        for toxic in self.all_toxics():
            if toxic.name == name:
                return toxic
        raise TOXIC_NOT_FOUND

    def add_toxic(self, body: Any) -> Toxic:
        """Create a toxic from an API body; it applies to open connections at once."""
        toxic = new_toxic(body, {toxic.name for toxic in self.all_toxics()})
        self.toxics[toxic.direction].append(toxic)
        self._changed(toxic.direction)
        return toxic

    def update_toxic(self, name: str, body: Any) -> Toxic:
        """Partially update a toxic; open connections re-roll its toxicity and restart it."""
        toxic = self.toxic(name)
        apply_update(toxic, body)
        self._changed(toxic.direction)
        return toxic

    def remove_toxic(self, name: str) -> None:
        """Remove a toxic; data inside it goes on unchanged."""
        toxic = self.toxic(name)
        toxic.removed = True
        self.toxics[toxic.direction].remove(toxic)
        self._changed(toxic.direction)

    def remove_all_toxics(self) -> None:
        """Remove every toxic (``/reset``)."""
        for toxic in self.all_toxics():
            self.remove_toxic(toxic.name)

    def _changed(self, direction: str) -> None:
        for connection in self._connections:
            connection.toxics_changed(direction)
