"""The first step of every async call on an API object: is the object (and its connection)
still usable? One rule here, F4's: a call on what is gone raises at once, and yields first."""

from __future__ import annotations

from collections.abc import Callable

import anyio.lowlevel

from haclient.errors import HAClientError

__all__ = ["ensure_open"]


async def ensure_open(check: Callable[[], None]) -> None:
    """``check()``, the first step of an async call (an object's ``_check_open``). When it
    raises (the object or its connection is closed, or failover gave up: F4), the call is a
    checkpoint first, as every async call that waits is: an application that calls again and
    again on what is gone must not starve the other tasks of its event loop (on a real broker,
    a producer retrying a dead connection made every ``receive(0.5)`` beside it take 7 s)."""
    try:
        check()
    except HAClientError:
        await anyio.lowlevel.checkpoint()
        raise
