"""The broker's readiness delay: the protocol header is answered only a while after the port
opens; a connection that comes earlier waits for it, or is dropped without a byte."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from chaos.broker import Broker
from chaos.broker.cli import build_parser
from chaos.broker.readiness import ACTIVEMQ_READINESS, NO_DELAY, NotReady, ReadinessDelay
from chaos.net import free_port

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0
DELAY = 0.3
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


@asynccontextmanager
async def _starting(**options: Any) -> AsyncIterator[Broker]:
    """A broker being started in a task (``start()`` returns only once it is ready), stopped
    when the block ends."""
    broker = Broker(port=free_port(), **options)
    done = anyio.Event()

    async def run() -> None:
        async with broker:
            await done.wait()

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        try:
            yield broker
        finally:
            done.set()


async def _first_bytes(port: int) -> tuple[bytes, float]:
    """Connect as soon as the port opens, send the AMQP header, and read the first answer
    (b"": the broker closed the connection without a byte); with the seconds from the TCP
    connection to the answer."""
    while True:
        try:
            stream = await anyio.connect_tcp("127.0.0.1", port)
            break
        except OSError:
            await anyio.sleep(0.001)
    began = anyio.current_time()
    async with stream:
        await stream.send(AMQP_HEADER)
        try:
            data = await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            data = b""
    return data, anyio.current_time() - began


async def test_an_early_connection_waits_and_its_header_is_answered_once_ready() -> None:
    with anyio.fail_after(TIMEOUT):
        async with _starting(readiness_delay=DELAY, not_ready="wait") as broker:
            data, took = await _first_bytes(broker.port)
            assert data.startswith(AMQP_HEADER)
            assert took >= DELAY * 0.5
            assert broker.ready
            data, took = await _first_bytes(broker.port)  # once ready: at once
            assert data.startswith(AMQP_HEADER) and took < DELAY


async def test_an_early_connection_is_dropped_without_a_byte_under_drop() -> None:
    with anyio.fail_after(TIMEOUT):
        async with _starting(readiness_delay=DELAY, not_ready="drop") as broker:
            data, took = await _first_bytes(broker.port)
            assert data == b"" and took < DELAY
            assert not broker.ready
            await anyio.sleep(DELAY)
            data, _ = await _first_bytes(broker.port)
            assert data.startswith(AMQP_HEADER)


async def test_start_returns_once_ready_and_a_kill_resets_the_waiting_connections() -> None:
    with anyio.fail_after(TIMEOUT):
        async with Broker(readiness_delay=DELAY, not_ready="wait") as broker:
            assert broker.ready  # start() returned once ready
            await broker.kill()
            async with anyio.create_task_group() as tg:
                tg.start_soon(broker.start)  # every start has its delay
                data, took = await _first_bytes(broker.port)
            assert data.startswith(AMQP_HEADER) and took >= DELAY * 0.5
            await broker.kill()
            async with anyio.create_task_group() as tg:
                tg.start_soon(broker.start)
                while True:
                    try:
                        waiting = await anyio.connect_tcp("127.0.0.1", broker.port)
                        break
                    except OSError:
                        await anyio.sleep(0.001)
                async with waiting:
                    await waiting.send(AMQP_HEADER)
                    await anyio.sleep(0.05)
                    assert not broker.ready
                    await broker.kill()
                    with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                        await waiting.receive()


def test_activemq_mode_answers_94_to_134_ms_after_listening_and_reference_mode_at_once() -> None:
    activemq = Broker(mode="activemq")
    assert activemq.readiness_delay == ACTIVEMQ_READINESS == ReadinessDelay(0.094, 0.134, 0.101)
    assert activemq.not_ready is NotReady.EITHER
    reference = Broker()
    assert reference.readiness_delay == NO_DELAY and reference.not_ready is NotReady.WAIT
    assert Broker(mode="activemq", readiness_delay=0).readiness_delay == NO_DELAY
    draws = sorted(ACTIVEMQ_READINESS.draw(random.Random(seed)) for seed in range(400))
    assert all(0.094 <= d <= 0.134 for d in draws) and len(set(draws)) > 1
    # the measure's median is the model's: half of the draws under 101 ms
    assert 0.4 < sum(d < 0.101 for d in draws) / len(draws) < 0.6
    with pytest.raises(ValueError):
        ReadinessDelay(0.1, 0.2, median=0.3)


def test_the_command_line_sets_the_delay_and_what_early_connections_meet() -> None:
    args = build_parser().parse_args(["--readiness-delay", "0.05-0.1", "--not-ready", "drop"])
    assert args.readiness_delay == ReadinessDelay(0.05, 0.1) and args.not_ready == "drop"
    assert build_parser().parse_args(["--readiness-delay", "0.07"]).readiness_delay == (
        ReadinessDelay(0.07, 0.07)
    )
    assert build_parser().parse_args(
        ["--readiness-delay", "0.094-0.101-0.134"]
    ).readiness_delay == ReadinessDelay(0.094, 0.134, median=0.101)
    for wrong in ("soon", "0.08-0.06", "-1", "0.1-0.3-0.2", "0.1-0.2-0.3-0.4"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["--readiness-delay", wrong])
