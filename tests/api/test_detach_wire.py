"""What closing a consumer puts on the wire, checked frame by frame with the scripted peer:
a durable subscriber's link is detached (``closed=false``, the subscription stays, as Qpid JMS
does); any other consumer's link is closed (``closed=true``)."""

from __future__ import annotations

import anyio
import pytest

import haclient.aio as aio
from chaos.peer import ScriptedPeer
from haclient.destination import Queue, Topic

pytestmark = pytest.mark.anyio


def _accept_connection(peer: ScriptedPeer) -> None:
    peer.expect_open(container_id="wire-client").respond()
    peer.expect_begin().respond()  # the application's session


def _accept_close(peer: ScriptedPeer) -> None:
    peer.expect_end().respond()
    peer.expect_close().respond()


async def test_closing_a_durable_subscriber_detaches_without_closing_its_link() -> None:
    peer = ScriptedPeer()
    _accept_connection(peer)
    peer.expect_attach(sender=False, address="news").respond()
    peer.expect_detach(closed=False).respond()
    peer.expect_begin().respond()  # the round trip that proves the broker ended the link
    peer.expect_end().respond()
    _accept_close(peer)
    with anyio.fail_after(10):
        async with peer.serving() as port:
            connection = await aio.connect(f"amqp://127.0.0.1:{port}", client_id="wire-client")
            session = await connection.create_session()
            consumer = await session.create_durable_consumer(Topic("news"), "sub")
            await consumer.close()
            await connection.close()
            await peer.wait_script_done()
    assert peer.failures == []


async def test_closing_a_queue_consumer_closes_its_link() -> None:
    peer = ScriptedPeer()
    _accept_connection(peer)
    peer.expect_attach(sender=False, address="jobs").respond()
    peer.expect_detach(closed=True).respond()
    _accept_close(peer)
    with anyio.fail_after(10):
        async with peer.serving() as port:
            connection = await aio.connect(f"amqp://127.0.0.1:{port}", client_id="wire-client")
            session = await connection.create_session()
            consumer = await session.create_consumer(Queue("jobs"))
            await consumer.close()
            await connection.close()
            await peer.wait_script_done()
    assert peer.failures == []
