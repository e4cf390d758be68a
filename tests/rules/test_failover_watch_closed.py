"""Rule F5's port watch ends with its walk, however the walk ends: a first connect cancelled
while it waits on a refused port leaves none of the watch's sockets open (one left to the
collector warned in whichever test ran next, failing it under ``filterwarnings = error``)."""

from __future__ import annotations

import os

import anyio
import pytest

import haclient.aio as aio
from chaos.net import free_port

pytestmark = pytest.mark.anyio


def _open_sockets() -> set[str]:
    """The inodes of this process's open sockets."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:  # the listing's own descriptor
            continue
        if link.startswith("socket:"):
            found.add(link)
    return found


async def test_F5_a_walk_cancelled_while_it_watches_a_refused_port_closes_the_watch() -> None:
    refused = free_port()  # nothing listens there: every wait of the walk watches it
    url = f"failover:(amqp://127.0.0.1:{refused})?failover.startup.cyclecount=-1"
    before = _open_sockets()
    with anyio.move_on_after(0.5) as waited:
        await aio.connect(url + "&failover.giveupafter=30000")
    assert waited.cancel_called, "the walk ended before the test cancelled it"
    with anyio.move_on_after(5):  # the watcher's thread lets its probe go at its next tick
        while _open_sockets() - before:
            await anyio.sleep(0.01)
    assert _open_sockets() - before == set()
