"""A cold start (``chaos.broker.readiness.ColdStart``): the first Open, the first attach and the
first durable message of each start are answered later, as a JVM just started answers them;
later ones, and a broker not asked for it, at once."""

from __future__ import annotations

import time

import pytest

import haclient.aio as aio
from chaos.broker import Broker
from chaos.broker.cli import build_parser
from chaos.broker.readiness import ACTIVEMQ_COLD_START, WARM, ColdStart, ColdStartRun
from chaos.net import free_port
from haclient.destination import Queue
from haclient.message import DeliveryMode, TextMessage

pytestmark = pytest.mark.anyio

COLD = ColdStart(open=0.2, attach=0.15, send=0.25)
SLACK = 0.1  # what a busy machine may add to an answer otherwise at once


async def _timed(url: str) -> dict[str, float]:
    """How long the connect, the producer's attach and two durable sends took."""
    took: dict[str, float] = {}
    start = time.monotonic()
    async with await aio.connect(url) as connection:
        took["open"] = time.monotonic() - start
        session = await connection.create_session()
        start = time.monotonic()
        producer = await session.create_producer(Queue("cold"))
        took["attach"] = time.monotonic() - start
        for name in ("send", "second send"):
            start = time.monotonic()
            await producer.send(TextMessage(name), delivery_mode=DeliveryMode.PERSISTENT)
            took[name] = time.monotonic() - start
    return took


async def test_the_first_open_attach_and_durable_send_of_each_start_are_answered_later() -> None:
    async with Broker(port=free_port(), cold_start=COLD) as broker:
        first = await _timed(broker.url)
        again = await _timed(broker.url)  # warm now: every answer at once
        await broker.kill()
        await broker.start()  # a new start is cold again
        restarted = await _timed(broker.url)
    for took in (first, restarted):
        assert COLD.open <= took["open"] < COLD.open + SLACK, took
        assert COLD.attach <= took["attach"] < COLD.attach + SLACK, took
        assert COLD.send <= took["send"] < COLD.send + SLACK, took
        assert took["second send"] < SLACK, took
    assert max(again.values()) < SLACK, again


async def test_no_cold_start_unless_asked_for_in_either_mode() -> None:
    for mode in ("reference", "activemq"):
        broker = Broker(port=free_port(), mode=mode, readiness_delay=0)
        assert broker.cold_start == WARM
        async with broker:
            took = await _timed(broker.url)
        assert max(took.values()) < SLACK, (mode, took)


def test_the_measured_figures_and_how_they_are_given() -> None:
    assert ColdStart(open=0.044, attach=0.015, send=0.018) == ACTIVEMQ_COLD_START
    assert ColdStart.parse("activemq") == ACTIVEMQ_COLD_START
    assert ColdStart.parse("0.2,0.15,0.25") == COLD
    assert Broker(cold_start="activemq").cold_start == ACTIVEMQ_COLD_START
    assert build_parser().parse_args(["--cold-start"]).cold_start == ACTIVEMQ_COLD_START
    assert build_parser().parse_args(["--cold-start", "0.2,0.15,0.25"]).cold_start == COLD
    assert build_parser().parse_args([]).cold_start is None
    for wrong in ("soon", "0.1,-0.1,0", "0.1,0.2,0.3,0.4"):
        with pytest.raises(ValueError):
            ColdStart.parse(wrong)
    run = ColdStartRun(COLD)
    assert [run.take("open"), run.take("open"), run.take("send")] == [0.2, 0.0, 0.25]
