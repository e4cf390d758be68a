"""Rule A1 across a failover, and the duplicate window: an AUTO acknowledgement cut off in flight
loses nothing and hands nothing out twice.

Staged with the scripted peer (``chaos.peer``): the broker takes the client's disposition, then
the socket drops before the settlement goes out, so the client cannot know whether the broker
applied it. The message is handed out once, flagged (``ack_in_doubt``, ``redelivered``); the next
broker's copy of it (same message id) is acknowledged and suppressed by the session's duplicate
window; the next message comes through. With the window off, the copy is handed out too.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import anyio
import pytest
from apikit import Api, Signal
from failoverkit import Recorder

from chaos.peer import ScriptedPeer
from haclient.amqp import Accepted
from haclient.destination import Queue
from haclient.errors import AcknowledgeFailedError
from haclient.mapping import to_amqp
from haclient.message import Message, TextMessage
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0
FIRST_ID = "ID:peer:1:1"


def _url(port: int, **options: Any) -> str:
    """The scripted peer's URL; its receives stay local (``jms.receiveLocalOnly``): the script
    plays no drain, which a receive that finds nothing would otherwise send (M9)."""
    extra = "".join(f"&{name}={value}" for name, value in options.items())
    return (
        f"failover:(amqp://127.0.0.1:{port})"
        f"?failover.method=singlebroker&failover.retries=20&failover.connectdelay=0"
        f"&jms.receiveLocalOnly=true{extra}"
    )


def _message(text: str, message_id: str, *, redelivered: bool = False) -> Any:
    encoded = to_amqp(TextMessage(text, message_id=message_id, destination=Queue("orders")))
    if redelivered:  # what a broker sets on a message it delivers again
        encoded = dataclasses.replace(encoded, delivery_count=1)
    return encoded


def _script(*, window: bool) -> ScriptedPeer:
    """M goes out, its acknowledgement arrives, the socket drops; the next connection delivers
    M again (a redelivery: the broker may not have applied the acknowledgement) and then N."""
    peer = ScriptedPeer()
    peer.expect_open().respond()
    peer.expect_begin().respond()
    peer.expect_attach(sender=False, address="orders").respond().send(_message("M", FIRST_ID))
    peer.expect_disposition(outcome=Accepted).drop_connection()  # taken, never confirmed
    peer.expect_connection()
    peer.expect_open().respond()
    peer.expect_begin().respond()
    peer.expect_attach(sender=False, address="orders").respond().send(
        _message("M", FIRST_ID, redelivered=True)
    ).send(_message("N", "ID:peer:1:2"))
    if window:
        peer.expect_disposition(outcome=Accepted, settled=True)  # the copy: suppressed
    else:
        peer.expect_disposition(outcome=Accepted).respond()  # the copy, handed out again
    peer.expect_disposition(outcome=Accepted).respond()  # N
    peer.expect_detach().respond()
    peer.expect_end().respond()
    peer.expect_close().respond()
    return peer


def _texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]  # type: ignore[attr-defined]


async def test_A1_an_auto_acknowledgement_cut_off_in_flight_is_handed_out_once_flagged(
    api: Api,
) -> None:
    peer = _script(window=True)
    recorder = Recorder()
    with anyio.fail_after(TIMEOUT):
        async with peer.serving() as port:
            connection = await api.connect(_url(port))
            await connection.add_listener(recorder)
            await connection.start()
            session = await connection.create_session(AckMode.AUTO)
            consumer = await session.create_consumer(Queue("orders"))
            first = await consumer.receive(TIMEOUT)
            second = await consumer.receive(TIMEOUT)
            assert await consumer.receive(0.3) is None
            statistics = await connection.statistics()
            await connection.close()
            await peer.wait_script_done()
    assert _texts([first, second]) == ["M", "N"]  # type: ignore[list-item]
    assert first.message_id == FIRST_ID  # type: ignore[union-attr]
    assert (first.ack_in_doubt, first.redelivered) == (True, True)  # type: ignore[union-attr]
    assert (second.ack_in_doubt, second.redelivered) == (False, False)  # type: ignore[union-attr]
    assert statistics.duplicates_suppressed == 1
    assert len(recorder.named("completed")) == 1
    assert peer.failures == []


async def test_A1_an_auto_listener_whose_acknowledgement_was_cut_off_gets_no_copy(
    api: Api,
) -> None:
    peer = _script(window=True)
    got: list[Message] = []
    two = Signal()

    async def on_message(message: Message) -> None:
        got.append(message)
        if len(got) == 2:
            two.set()

    with anyio.fail_after(TIMEOUT):
        async with peer.serving() as port:
            connection = await api.connect(_url(port))
            session = await connection.create_session(AckMode.AUTO)
            consumer = await session.create_consumer(Queue("orders"))
            await consumer.set_message_listener(api.listener(on_message))
            await connection.start()
            assert await two.wait(TIMEOUT)
            await anyio.sleep(0.3)  # nothing else comes
            await connection.close()
            await peer.wait_script_done()
    assert _texts(got) == ["M", "N"]
    assert peer.failures == []


async def test_A1_without_the_window_the_copy_is_handed_out_too_and_both_are_flagged(
    api: Api,
) -> None:
    peer = _script(window=False)
    with anyio.fail_after(TIMEOUT):
        async with peer.serving() as port:
            connection = await api.connect(_url(port, **{"jms.dedupWindow": 0}))
            await connection.start()
            session = await connection.create_session(AckMode.AUTO)
            consumer = await session.create_consumer(Queue("orders"))
            received = [await consumer.receive(TIMEOUT) for _ in range(3)]
            await connection.close()
            await peer.wait_script_done()
    assert _texts(received) == ["M", "M", "N"]  # type: ignore[arg-type]
    first, copy, _ = received
    assert first.message_id == copy.message_id == FIRST_ID  # type: ignore[union-attr]
    assert first.ack_in_doubt and first.redelivered  # type: ignore[union-attr]
    assert copy.redelivered and not copy.ack_in_doubt  # type: ignore[union-attr]
    assert peer.failures == []


async def test_F8_a_client_acknowledge_cut_off_in_flight_says_what_to_do_and_loses_nothing(
    api: Api,
) -> None:
    peer = _script(window=True)
    with anyio.fail_after(TIMEOUT):
        async with peer.serving() as port:
            connection = await api.connect(_url(port))
            await connection.start()
            session = await connection.create_session(AckMode.CLIENT)
            consumer = await session.create_consumer(Queue("orders"))
            first = await consumer.receive(TIMEOUT)
            with pytest.raises(AcknowledgeFailedError) as cut_off:
                await api.acknowledge(first)  # type: ignore[arg-type]
            second = await consumer.receive(TIMEOUT)  # M's copy is suppressed: it counts as done
            await api.acknowledge(second)  # type: ignore[arg-type]
            assert await consumer.receive(0.3) is None
            await connection.close()
            await peer.wait_script_done()
    assert cut_off.value.in_doubt
    text = str(cut_off.value)
    assert "treat the messages as acknowledged" in text
    assert "will deliver the messages again" not in text  # the old text said both
    assert _texts([first, second]) == ["M", "N"]  # type: ignore[list-item]
    assert peer.failures == []
