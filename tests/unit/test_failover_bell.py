"""The bell of a port probe's waits (``failover.bell``): a wait reads its own ring, whether the
event loop reads the rings in a reader callback (asyncio, ``reader_loop``) or each wait waits
with ``wait_readable``; a ring a wait did not read never ends the next wait; the loop's reader
is kept from the first wait to ``close`` and removed by it, or by the finalizer of a probe
dropped without ``close``."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import pytest

from failover.bell import Bell
from failover.ports import PortWatcher, TcpProbe, Watched
from failover.supervisor import wait_readable
from failover.url import BrokerURL

pytestmark = pytest.mark.anyio

HANG = 30.0  # seconds: a hang bound, not a measure


@pytest.fixture(params=["loop reader", "wait_readable"])
def on_loop(request: pytest.FixtureRequest) -> bool:
    """Whether the bell is read by the loop's reader callback (else ``wait_readable``)."""
    return bool(request.param == "loop reader")


def _bell(on_loop: bool) -> Bell:
    return Bell(wait_readable, asyncio.get_running_loop() if on_loop else None)


def _registered(fd: int) -> bool:
    """Whether the running loop's selector watches ``fd`` for a reader."""
    loop = asyncio.get_running_loop()
    selector = getattr(loop, "_selector")  # noqa: B009
    try:
        key = selector.get_key(fd)
    except (KeyError, ValueError):
        return False
    return key.data[0] is not None


@contextmanager
def _closed_port() -> Iterator[BrokerURL]:
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        yield BrokerURL("amqp", "127.0.0.1", spare.getsockname()[1])


async def test_a_wait_returns_the_ring_the_thread_sent_it(on_loop: bool) -> None:
    bell = _bell(on_loop)
    try:
        for ring in (b"1", b"2", b"0"):
            timer = threading.Timer(0.02, bell.theirs.send, (ring,))
            timer.start()
            with anyio.fail_after(HANG):
                assert await bell.wait() == ring
            timer.join()
    finally:
        bell.close()


@pytest.mark.parametrize("read_first", [True, False], ids=["read by the loop", "left unread"])
async def test_a_ring_for_an_interrupted_wait_does_not_end_the_next(
    on_loop: bool, read_first: bool
) -> None:
    """The thread rang a wait that was cancelled meanwhile: the ring, whether the loop read it
    before the next wait began or it was still in the socket, is not the next wait's."""
    bell = _bell(on_loop)
    try:
        with anyio.move_on_after(0.01) as scope:
            await bell.wait()
        assert scope.cancelled_caught
        bell.theirs.send(b"1")  # the thread rang before the watcher's remove returned
        if read_first:
            await anyio.sleep(0.02)  # loop turns: a reader reads it now, with no wait under way
        started = time.monotonic()
        with anyio.move_on_after(0.05) as scope:
            await bell.wait()
        assert scope.cancelled_caught and time.monotonic() - started >= 0.04
        threading.Timer(0.01, bell.theirs.send, (b"2",)).start()
        with anyio.fail_after(HANG):
            assert await bell.wait() == b"2"
    finally:
        bell.close()


async def test_the_loop_reads_the_bell_from_the_first_wait_to_close() -> None:
    """On asyncio the bell's reader is added once, kept between waits and removed by close."""
    bell = _bell(True)
    fd = bell.ours.fileno()
    try:
        assert _registered(fd)
        for _ in range(3):
            threading.Timer(0.005, bell.theirs.send, (b"0",)).start()
            with anyio.fail_after(HANG):
                assert await bell.wait() == b"0"
            assert _registered(fd)
    finally:
        bell.close()
    assert not _registered(fd) and bell.ours.fileno() == -1 and bell.theirs.fileno() == -1
    bell.close()  # idempotent


async def test_a_probe_on_the_loop_watches_and_a_dropped_one_removes_its_reader() -> None:
    """A ``TcpProbe`` given the loop reads its bell there: its waits end as the port says;
    dropped without ``close``, its finalizer has the loop remove the reader and close the
    bell (a stale reader would keep the descriptor's number from being watched again)."""
    loop = asyncio.get_running_loop()
    watcher = PortWatcher(slack=HANG)
    with _closed_port() as closed, anyio.fail_after(HANG):
        probe = TcpProbe(None, wait_readable, watcher, reader_loop=loop)
        assert await probe.watch(closed, 0.03, interval=0.005, sleep=anyio.sleep) in (
            Watched.REFUSED,
            Watched.RAN_OUT,
        )
        bell = probe._bell
        assert bell is not None
        fd = bell.ours.fileno()
        assert _registered(fd)
        del probe
        gc.collect()
        await anyio.sleep(0.01)  # the loop runs the finalizer's callback
    assert not _registered(fd) and bell.ours.fileno() == -1 and bell.theirs.fileno() == -1


async def test_a_probe_on_the_loop_ends_its_wait_once_the_port_accepts() -> None:
    loop = asyncio.get_running_loop()
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        broker = BrokerURL("amqp", "127.0.0.1", spare.getsockname()[1])
        probe = TcpProbe(None, wait_readable, PortWatcher(), reader_loop=loop)
        try:
            threading.Timer(0.03, spare.listen).start()
            started = time.monotonic()
            with anyio.fail_after(HANG):
                got = await probe.watch(broker, HANG, interval=0.005, sleep=anyio.sleep)
            assert got is Watched.ACCEPTED and time.monotonic() - started < HANG / 2
        finally:
            probe.close()
