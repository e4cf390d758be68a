"""Hostile peers: a broker address that answers with silence, garbage,
half a protocol header, half a frame, a frame whose size lies, or legal AMQP the engine does not
act on (symbolic descriptors). Through both APIs, every outcome is a haclient error (never a
proton or anyio exception), with a message fit to print, within a bound (never a hang)."""

from __future__ import annotations

import functools
import time
from typing import Any

import anyio
import anyio.to_thread
import pytest

import haclient
import haclient.aio as aio
from chaos.hostile import (
    HostilePeer,
    Script,
    amqp_0_9_1,
    bad_frame_size,
    garbage,
    half_frame,
    half_header,
    silent,
    symbolic_descriptors,
)
from haclient.errors import HAClientError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

# Generous: the slowest outcome is one idle timeout or one connect_timeout (2 s each here).
BOUND = 20.0
SCRIPTS = [
    silent,
    garbage,
    half_header,
    half_frame,
    bad_frame_size,
    symbolic_descriptors,
    amqp_0_9_1,
]


CONNECT_TIMEOUT = 1.0
"""What a peer that answers nothing (or half) costs each test: it is waited for this long."""


async def _connect(api: str, url: str) -> None:
    """Connect through ``api`` and close again (the peers make sure it does not get that far)."""
    if api == "aio":
        connection = await aio.connect(url, connect_timeout=CONNECT_TIMEOUT)
        await connection.close()
        return
    connect = functools.partial(haclient.connect, url, connect_timeout=CONNECT_TIMEOUT)
    connection: Any = await anyio.to_thread.run_sync(connect, abandon_on_cancel=True)
    await anyio.to_thread.run_sync(connection.close)


def _assert_fit_to_print(error: BaseException) -> None:
    text = str(error)
    assert text, f"{type(error).__name__} without a message"
    assert text.isprintable(), f"unprintable characters in {text!r}"
    assert len(text) < 600, f"a message of {len(text)} characters: {text[:100]!r} ..."


@pytest.mark.parametrize("api", ["aio", "blocking"])
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.__name__)
async def test_F4_a_hostile_peer_gives_a_library_error_in_bounded_time(
    api: str, script: Script
) -> None:
    async with HostilePeer(script) as peer:
        url = f"{peer.url}?amqp.idleTimeout=2000"
        started = time.monotonic()
        with anyio.fail_after(BOUND), pytest.raises(Exception) as raised:
            await _connect(api, url)
        elapsed = time.monotonic() - started
        assert peer.connections >= 1
    error = raised.value
    assert isinstance(error, HAClientError), f"{type(error).__module__}.{type(error).__name__}"
    # One of the public tree's classes (haclient.errors re-exports them from where they live).
    assert type(error) is getattr(haclient.errors, type(error).__name__, None), repr(error)
    _assert_fit_to_print(error)
    cause = getattr(error, "cause", None)
    if cause is not None:
        assert isinstance(cause, HAClientError), repr(cause)
        _assert_fit_to_print(cause)
    assert elapsed < BOUND


async def test_garbage_is_quoted_as_a_short_escaped_excerpt() -> None:
    async with HostilePeer(garbage) as peer:
        with anyio.fail_after(BOUND), pytest.raises(HAClientError) as raised:
            await aio.connect(peer.url, connect_timeout=2)
    text = str(raised.value)
    assert "\x1b" not in text and "\x00" not in text
    assert "\\x1b" in text  # the junk is shown escaped ...
    assert "more characters" in text  # ... and cut short


@pytest.mark.parametrize("api", ["aio", "blocking"])
async def test_item18_a_broker_speaking_amqp_0_9_1_gets_the_plugin_hint(api: str) -> None:
    async with HostilePeer(amqp_0_9_1) as peer:
        with anyio.fail_after(BOUND), pytest.raises(HAClientError) as raised:
            await _connect(api, peer.url)
    text = str(raised.value)
    assert "AMQP 0-9-1" in text and "rabbitmq-plugins enable rabbitmq_amqp1_0" in text, text
    assert "Unknown protocol" not in text


async def test_item18_a_silent_port_fails_connect_within_10_s_by_default_naming_the_wait() -> None:
    async with HostilePeer(silent) as peer:
        with anyio.fail_after(BOUND), pytest.raises(HAClientError) as raised:
            await aio.connect(peer.url)  # the default connect_timeout
    text = str(raised.value)
    assert "sent nothing back (awaited: its AMQP protocol header" in text, text
    assert "within 10 s" in text, text
