"""Toxic types: their attributes, what input each refuses, and what each does to a link's data.

A toxic acts on the items of one link: ``Chunk`` (bytes read from one socket, with the time they
were read) or ``CLOSE`` (that socket reached its end, or a toxic decided to close). Each type is
an async function ``act(stub, item, emit)`` that passes on zero or more items with
``await emit(item)``, in order, and may wait. Waits go through ``stub.pause``, which ends early
(and says so) when the link's toxics change, so that an update applies at once: as in the real
server, a toxic interrupted mid-wait lets the data it holds go on unchanged.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "ATTRIBUTES",
    "CLOSE",
    "Chunk",
    "Emit",
    "Stub",
    "act",
    "invalid_attributes",
]


@dataclass
class Chunk:
    """Bytes read from one side, with the monotonic time they were read (latency counts from
    there, so that delays are pipelined and throughput kept)."""

    data: bytes
    stamp: float


CLOSE = None
"""The item that closes the link: the source ended, or a toxic closed the connection."""

Item = Chunk | None
Emit = Callable[[Item], Awaitable[None]]

ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "latency": ("latency", "jitter"),
    "bandwidth": ("rate",),
    "slow_close": ("delay",),
    "timeout": ("timeout",),
    "reset_peer": ("timeout",),
    "slicer": ("average_size", "size_variation", "delay"),
    "limit_data": ("bytes",),
    "noop": (),
}
"""Every toxic type and its integer attributes (all default to 0)."""


class Stub(Protocol):
    """What a toxic sees of the link it runs on (one toxic, one connection, one direction)."""

    @property
    def attributes(self) -> dict[str, int]:
        """The toxic's attributes, live (an update shows at once)."""
        ...

    initial: bool  # the toxic existed when the connection opened
    state: dict[str, Any]  # the toxic's own per-link state

    async def pause(self, seconds: float) -> bool:
        """Wait ``seconds``; True if the link's toxics changed first (the wait was cut short)."""
        ...

    def set_deadline(self, when: float | None) -> None:
        """Close the link at monotonic time ``when`` unless called again first (None: never)."""

    def close(self, *, reset: bool) -> None:
        """Close the whole connection now, with a TCP RST on both sockets if ``reset``."""


def invalid_attributes(kind: str, attributes: dict[str, int]) -> str | None:
    """Why ``attributes`` would crash the real server (which then answers nothing), or None.

    Ours answers 400 with this text instead.
    """
    if kind == "bandwidth" and attributes["rate"] < 0:
        return "bandwidth: rate must not be negative"
    if kind == "slicer" and attributes["average_size"] <= 0:
        return "slicer: average_size must be positive"
    return None


async def _latency(stub: Stub, item: Item, emit: Emit) -> None:
    if item is not None:
        jitter = stub.attributes["jitter"]
        delay = stub.attributes["latency"] + (
            random.randrange(-jitter, jitter) if jitter > 0 else 0
        )
        due = item.stamp + delay / 1000
        wait = due - time.monotonic()
        if wait > 0 and not await stub.pause(wait):
            item.stamp = due  # a second latency toxic adds to this one
    await emit(item)


async def _bandwidth(stub: Stub, item: Item, emit: Emit) -> None:
    if item is None:
        await emit(item)
        return
    rate = stub.attributes["rate"]  # KB/s = bytes/ms
    if rate <= 0:  # no data at all until the toxic changes
        while not await stub.pause(3600):
            pass
        await emit(item)
        return
    debt: float = stub.state.get("debt", 0.0) + len(item.data) / rate / 1000
    data = item.data
    while len(data) > rate * 100:  # big chunks go out in 100 ms slices
        if await stub.pause(0.1):
            break
        await emit(Chunk(data[: rate * 100], item.stamp))
        data = data[rate * 100 :]
        debt -= 0.1
    else:
        start = time.monotonic()
        if debt > 0:
            await stub.pause(debt)
        debt -= time.monotonic() - start
    stub.state["debt"] = debt
    await emit(Chunk(data, item.stamp))


async def _slow_close(stub: Stub, item: Item, emit: Emit) -> None:
    if item is None:
        await stub.pause(stub.attributes["delay"] / 1000)
    await emit(item)


async def _timeout(stub: Stub, item: Item, emit: Emit) -> None:
    if item is None:
        await emit(item)
        return
    timeout = stub.attributes["timeout"]  # the data is dropped; a new chunk restarts the timer
    stub.set_deadline(time.monotonic() + timeout / 1000 if timeout > 0 else None)


async def _reset_peer(stub: Stub, item: Item, emit: Emit) -> None:
    if item is None:
        await emit(item)
        return
    await stub.pause(stub.attributes["timeout"] / 1000)
    stub.close(reset=stub.initial)


def _slices(size: int, average: int, variation: int) -> list[int]:
    """Piece sizes adding up to ``size``: halve until a piece is within ``variation`` of
    ``average``, moving each cut by up to ``variation`` (the real server's recursion)."""
    pending, pieces = [size], []
    while pending:
        length = pending.pop()
        if length - average <= variation or length < 2:
            pieces.append(length)
            continue
        cut = length // 2 + (random.randrange(-variation, variation) if variation > 0 else 0)
        cut = min(max(cut, 1), length - 1)
        pending += [length - cut, cut]  # popped left piece first
    return pieces


async def _slicer(stub: Stub, item: Item, emit: Emit) -> None:
    if item is None:
        await emit(item)
        return
    attrs = stub.attributes
    sizes = _slices(len(item.data), attrs["average_size"], attrs["size_variation"])
    offset = 0
    for index, size in enumerate(sizes):
        await emit(Chunk(item.data[offset : offset + size], item.stamp))
        offset += size
        if index + 1 < len(sizes) and await stub.pause(attrs["delay"] / 1_000_000):
            await emit(Chunk(item.data[offset:], item.stamp))  # changed: the rest goes at once
            return


async def _limit_data(stub: Stub, item: Item, emit: Emit) -> None:
    if item is None:
        await emit(item)
        return
    sent: int = stub.state.get("sent", 0)
    remaining = max(stub.attributes["bytes"] - sent, 0)
    data = item.data[:remaining]
    if data:
        stub.state["sent"] = sent + len(data)
        await emit(Chunk(data, item.stamp))
    if stub.attributes["bytes"] - stub.state.get("sent", 0) <= 0:
        await emit(CLOSE)


async def _noop(stub: Stub, item: Item, emit: Emit) -> None:
    await emit(item)


_ACTS: dict[str, Callable[[Stub, Item, Emit], Awaitable[None]]] = {
    "latency": _latency,
    "bandwidth": _bandwidth,
    "slow_close": _slow_close,
    "timeout": _timeout,
    "reset_peer": _reset_peer,
    "slicer": _slicer,
    "limit_data": _limit_data,
    "noop": _noop,
}


async def act(kind: str, stub: Stub, item: Item, emit: Emit) -> None:
    """Apply a toxic of type ``kind`` to ``item``."""
    await _ACTS[kind](stub, item, emit)
