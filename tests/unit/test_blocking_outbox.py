"""The blocking producer's outbox: at most ``_LIMIT`` sends wait to be handed over; a send that
found it full goes on once half of them were handed over (not at each one: a caller woken for
every send handed over takes turns with the loop's thread for the GIL at every message), and
never past its deadline (F4)."""

from __future__ import annotations

import threading
import time

import pytest

from haclient.errors import FailoverTimeoutError
from haclient.sync import _outbox
from haclient.sync._outbox import Outbox

HANG = 10.0


def _full(outbox: Outbox) -> None:
    deadline = time.monotonic() + HANG
    for _ in range(_outbox._LIMIT):
        outbox.reserve(deadline)
    assert len(outbox) == _outbox._LIMIT


def test_a_send_that_found_the_outbox_full_goes_on_once_half_was_handed_over() -> None:
    outbox = Outbox()
    _full(outbox)
    reserved = threading.Event()
    waiter = threading.Thread(
        target=lambda: (outbox.reserve(time.monotonic() + HANG), reserved.set())
    )
    waiter.start()
    deadline = time.monotonic() + HANG
    while not outbox._waiting:  # the send waits for room
        assert time.monotonic() < deadline, "the send never waited for room"
        time.sleep(0.001)
    for _ in range(_outbox._LIMIT - _outbox._ROOM - 1):
        outbox.handed_over()
    assert not reserved.wait(0.2), "the send went on before half the outbox was handed over"
    outbox.handed_over()
    assert reserved.wait(HANG), "the send was not woken when half the outbox was handed over"
    waiter.join(HANG)
    assert len(outbox) == _outbox._ROOM + 1


def test_F4_a_send_waiting_for_room_raises_at_its_deadline() -> None:
    outbox = Outbox()
    _full(outbox)
    started_at = time.monotonic()
    with pytest.raises(FailoverTimeoutError, match="room"):
        outbox.reserve(time.monotonic() + 0.2)
    assert time.monotonic() - started_at < HANG
    assert len(outbox) == _outbox._LIMIT  # nothing counted for the send that gave up
    outbox.unreserve()
    assert len(outbox) == _outbox._LIMIT - 1
