"""What a PERSISTENT send raises when the broker answers other than with an accept, the same
through both APIs; staged with the scripted peer (``chaos.peer``)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from apikit import Api

from chaos.peer import PeerConnection, ScriptedPeer
from haclient.amqp.types import ErrorCondition
from haclient.destination import Queue
from haclient.errors import LinkDetachedError, ResourceLimitError
from haclient.message import TextMessage

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0
FULL = ErrorCondition("amqp:resource-limit-exceeded", "queue orders is full")
GONE = ErrorCondition("amqp:link:detach-forced", "the queue was deleted")


def _url(port: int) -> str:
    return f"amqp://127.0.0.1:{port}"


def _opened(peer: ScriptedPeer) -> None:
    peer.expect_open().respond()
    peer.expect_begin().respond()
    peer.expect_attach(sender=True, address="orders").respond(credit=10)


async def test_a_rejected_send_raises_the_brokers_reason_and_the_producer_goes_on(
    api: Api,
) -> None:
    peer = ScriptedPeer()
    _opened(peer)
    peer.expect_transfer(address="orders").refuse(FULL)
    peer.expect_transfer(address="orders").respond()  # the next one is accepted
    peer.expect_detach().respond()
    peer.expect_end().respond()
    peer.expect_close().respond()
    with anyio.fail_after(TIMEOUT):
        async with peer.serving() as port:
            connection = await api.connect(_url(port))
            session = await connection.create_session()
            producer = await session.create_producer(Queue("orders"))
            refused = TextMessage("too many")
            with pytest.raises(ResourceLimitError) as info:
                await producer.send(refused)
            assert "queue orders is full" in str(info.value)
            assert refused.message_id is not None and refused.message_id in str(info.value)
            await producer.send(TextMessage("room again"))
            await connection.close()
            await peer.wait_script_done()
    assert peer.failures == []


async def test_a_producer_detached_while_its_send_waits_raises_that(api: Api) -> None:
    def detach(connection: PeerConnection, event: Any) -> None:
        event.delivery.link.close(GONE)
        connection.driver.wakeup()

    peer = ScriptedPeer()
    _opened(peer)
    peer.expect_transfer(address="orders").then(detach)  # never settled
    peer.expect_detach().respond()
    peer.expect_end().respond()
    peer.expect_close().respond()
    with anyio.fail_after(TIMEOUT):
        async with peer.serving() as port:
            connection = await api.connect(_url(port))
            session = await connection.create_session()
            producer = await session.create_producer(Queue("orders"))
            with pytest.raises(LinkDetachedError, match="the queue was deleted"):
                await producer.send(TextMessage("nobody takes it"))
            await connection.close()
            await peer.wait_script_done()
    assert peer.failures == []
