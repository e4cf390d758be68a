"""One proxied TCP connection: two links (upstream: client to server; downstream: server to
client), each a chain of toxics between a reading socket and a writing one.

How a link works: a reader task puts what it reads (up to 32 KiB a chunk, stamped with the time)
and finally ``CLOSE`` into a buffer; the processor takes one item at a time through the toxics
of the link's direction, in creation order, and writes what comes out of the last one. The chain
is looked up afresh for every item, so toxics added, updated or removed apply to open
connections at once; each (toxic, version) gets a ``LinkStub`` when it first meets this link,
which rolls the toxicity dice and holds the toxic's state. A change wakes the processor (to
start a new timeout toxic's clock) and cuts short any toxic's wait. ``CLOSE`` coming out of the
chain (or a write that fails) closes the link's sink socket entirely: there is no half-close.
That ends the other link's reader, so the other link drains what its toxics hold and then closes
the first socket too. Faults (reset_peer, disabling or deleting the proxy, removing a timeout
toxic) close both sockets at once.
"""

from __future__ import annotations

import contextlib
import math
import random
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

import anyio
from anyio.abc import SocketAttribute, SocketStream

from chaos.toxiproxy.model import Toxic
from chaos.toxiproxy.toxics import CLOSE, Chunk, Item, act

__all__ = ["Connection"]

READ_SIZE = 32 * 1024
BUFFERED_CHUNKS = 1024


class _Wake:
    """Buffer item meaning "the toxics changed": look at the chain again."""


_WAKE = _Wake()


class LinkStub:
    """One toxic as one link sees it (the ``toxics.Stub`` a toxic acts through)."""

    def __init__(self, link: Link, toxic: Toxic, initial: bool) -> None:
        self.toxic = toxic
        self.version = toxic.version
        self.initial = initial
        self.active = random.random() < toxic.toxicity  # rolled per link, again per update
        self.state: dict[str, Any] = {}
        self.deadline: float | None = None
        self._link = link
        timeout = toxic.attributes.get("timeout", 0)
        if toxic.type == "timeout" and self.active and timeout > 0:
            self.deadline = time.monotonic() + timeout / 1000

    @property
    def attributes(self) -> dict[str, int]:
        return self.toxic.attributes

    async def pause(self, seconds: float) -> bool:
        return await self._link.pause(seconds)

    def set_deadline(self, when: float | None) -> None:
        self.deadline = when

    def close(self, *, reset: bool) -> None:
        self._link.connection.close(reset=reset)


class Link:
    """Data of one direction of one connection, from ``source`` through the toxics to ``sink``."""

    def __init__(
        self,
        connection: Connection,
        source: SocketStream,
        sink: SocketStream,
        toxics: Callable[[], list[Toxic]],
    ) -> None:
        self.connection = connection
        self._source = source
        self._sink = sink
        self._toxics = toxics
        self._send, self._receive = anyio.create_memory_object_stream[Item | _Wake](BUFFERED_CHUNKS)
        self._changed = anyio.Event()
        self._stubs: dict[int, LinkStub] = {}
        self._initial = {toxic.uid for toxic in toxics()}
        self._done = False

    async def run(self) -> None:
        """Carry data until ``CLOSE`` leaves the chain; the sink is then closed."""
        async with self._send, self._receive, anyio.create_task_group() as tg:
            tg.start_soon(self._read)
            await self._process()
            tg.cancel_scope.cancel()

    def toxics_changed(self) -> None:
        """Wake the processor and cut short the wait of any toxic of this link."""
        self._changed.set()
        self._changed = anyio.Event()
        # A full buffer: the processor is busy and will look at the chain anyway; a closed one:
        # the link is done.
        with contextlib.suppress(anyio.WouldBlock, anyio.ClosedResourceError):
            self._send.send_nowait(_WAKE)

    async def pause(self, seconds: float) -> bool:
        """Sleep ``seconds``; True if the toxics changed first."""
        changed = self._changed
        with anyio.move_on_after(seconds):
            await changed.wait()
            return True
        return False

    async def _read(self) -> None:
        try:
            while True:
                data = await self._source.receive(READ_SIZE)
                await self._send.send(Chunk(data, time.monotonic()))
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        await self._send.send(CLOSE)

    async def _process(self) -> None:
        while not self._done:
            chain = self._chain()
            deadlines = [(s.deadline, i) for i, s in enumerate(chain) if s.deadline is not None]
            due, index = min(deadlines, default=(math.inf, -1))
            item: Item | _Wake = _WAKE
            with anyio.move_on_after(due - time.monotonic()) as timer:
                item = await self._receive.receive()
            if timer.cancelled_caught:  # a timeout toxic saw no data for its timeout
                await self._through(chain, index + 1, CLOSE)
            elif not isinstance(item, _Wake):
                await self._through(chain, 0, item)

    def _chain(self) -> list[LinkStub]:
        toxics = self._toxics()
        live = {toxic.uid for toxic in toxics}
        for uid in [uid for uid in self._stubs if uid not in live]:
            gone = self._stubs.pop(uid)
            if gone.toxic.type == "timeout" and gone.active:  # as the real server does
                self.connection.close()
        for toxic in toxics:
            stub = self._stubs.get(toxic.uid)
            if stub is None or stub.version != toxic.version:
                self._stubs[toxic.uid] = LinkStub(self, toxic, toxic.uid in self._initial)
        return [self._stubs[toxic.uid] for toxic in toxics]

    async def _through(self, chain: list[LinkStub], index: int, item: Item) -> None:
        if index == len(chain):
            await self._deliver(item)
            return

        async def emit(out: Item) -> None:
            await self._through(chain, index + 1, out)

        stub = chain[index]
        if stub.active and not stub.toxic.removed:
            await act(stub.toxic.type, stub, item, emit)
        else:
            await emit(item)

    async def _deliver(self, item: Item) -> None:
        if self._done:
            return
        if item is not None and item.data:
            try:
                await self._sink.send(item.data)
                return
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                pass  # the sink is gone: close it as if the source had ended
        elif item is not None:
            return
        # Closing the sink ends the other link's reader, so that link drains what its toxics
        # hold and then closes our source: no half-close, and no data in flight dropped.
        self._done = True
        with anyio.CancelScope(shield=True):
            await anyio.aclose_forcefully(self._sink)


def _set_reset(stream: SocketStream) -> None:
    """Make closing ``stream`` send a TCP RST (SO_LINGER on, timeout 0)."""
    raw = stream.extra(SocketAttribute.raw_socket)
    with contextlib.suppress(OSError):  # already closed by the peer
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class Connection:
    """A client connection, the server connection it dials, and the two links between them."""

    def __init__(
        self, client: SocketStream, upstream: str, toxics: Callable[[str], list[Toxic]]
    ) -> None:
        self._client = client
        self._server: SocketStream | None = None
        self._upstream = upstream
        self._toxics = toxics
        self._scope = anyio.CancelScope()
        self._reset = False
        self.links: list[Link] = []

    async def run(self) -> None:
        """Dial the upstream and carry data both ways until the connection is closed."""
        try:
            with self._scope:
                host, _, port = self._upstream.rpartition(":")
                try:
                    self._server = await anyio.connect_tcp(host.strip("[]"), int(port))
                except (OSError, ValueError):
                    return  # the client socket is closed at once
                self.links = [
                    Link(self, self._client, self._server, lambda: self._toxics("upstream")),
                    Link(self, self._server, self._client, lambda: self._toxics("downstream")),
                ]
                async with anyio.create_task_group() as tg:
                    for link in self.links:
                        tg.start_soon(link.run)
        finally:
            with anyio.CancelScope(shield=True):
                await self._close_sockets()

    def toxics_changed(self, direction: str) -> None:
        """The toxics of ``direction`` changed: tell that link."""
        if self.links:
            self.links[direction == "downstream"].toxics_changed()

    def close(self, *, reset: bool = False) -> None:
        """Close both sockets (with RST if ``reset``) and stop both links. Idempotent."""
        self._reset = self._reset or reset
        self._scope.cancel()

    async def _close_sockets(self) -> None:
        for stream in (self._client, self._server):
            if stream is None:
                continue
            if self._reset:
                _set_reset(stream)
            await anyio.aclose_forcefully(stream)
