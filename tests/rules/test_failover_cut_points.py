"""Rules F7 (a commit cut off in flight is in doubt) and F11 (a send cut off before its outcome
is sent again, same message id), staged frame by frame with the scripted peer (``chaos.peer``)
because no real broker can drop a connection at exactly those points; through both APIs."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from apikit import Api
from failoverkit import Recorder

from chaos.peer import PeerConnection, ScriptedPeer
from haclient.amqp.codec import decode_message
from haclient.amqp.types import ErrorCondition
from haclient.destination import Queue
from haclient.errors import NotImplementedByBrokerError, TransactionRolledBackError
from haclient.message import TextMessage
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio

TIMEOUT = 10.0


def _url(port: int) -> str:
    return (
        f"failover:(amqp://127.0.0.1:{port})"
        "?failover.method=singlebroker&failover.retries=20&failover.connectdelay=0"
    )


def _opened(peer: ScriptedPeer) -> None:
    peer.expect_open().respond()
    peer.expect_begin().respond()


def _closed(peer: ScriptedPeer) -> None:
    peer.expect_end().respond()
    peer.expect_close().respond()


def _record(into: list[Any]) -> Any:
    def action(connection: PeerConnection, event: Any) -> None:
        into.append(decode_message(event.payload))

    return action


async def test_F7_a_commit_cut_off_in_flight_is_in_doubt(api: Api) -> None:
    peer = ScriptedPeer()
    _opened(peer)
    peer.expect_attach(coordinator=True).respond()
    peer.expect_attach(sender=True, address="orders").respond(credit=10)
    peer.expect_declare().respond_declared(b"txn-1")
    peer.expect_transfer(address="orders").respond()
    peer.expect_discharge(fail=False).drop_connection()  # received, never answered
    peer.expect_connection()  # the reconnect restores the session and its links
    _opened(peer)
    peer.expect_attach(coordinator=True).respond()
    peer.expect_attach(sender=True, address="orders").respond(credit=10)
    peer.expect_detach().respond()  # the producer, then the coordinator, as the session closes
    peer.expect_detach().respond()
    _closed(peer)
    recorder = Recorder()
    with anyio.fail_after(TIMEOUT):
        async with peer.serving() as port:
            connection = await api.connect(_url(port))
            await connection.add_listener(recorder)
            session = await connection.create_session(AckMode.TRANSACTED)
            producer = await session.create_producer(Queue("orders"))
            await producer.send(TextMessage("maybe committed"))
            with pytest.raises(TransactionRolledBackError) as in_flight:
                await session.commit()
            await recorder.wait_for("completed")  # reconnected and restored before closing
            assert (await connection.statistics()).transactions["in_doubt"] == 1  # metrics
            await connection.close()
            await peer.wait_script_done()
    assert in_flight.value.in_doubt
    assert "may" in str(in_flight.value)  # the message says the broker may have committed
    assert peer.failures == []


async def test_F11_a_send_cut_off_before_its_outcome_is_sent_again_with_its_id(
    api: Api,
) -> None:
    transfers: list[Any] = []
    peer = ScriptedPeer()
    _opened(peer)
    peer.expect_attach(sender=True, address="orders").respond(credit=10)
    peer.expect_transfer(address="orders").then(_record(transfers)).drop_connection()
    peer.expect_connection()
    _opened(peer)
    peer.expect_attach(sender=True, address="orders").respond(credit=10)
    peer.expect_transfer(address="orders").then(_record(transfers)).respond()  # accepted
    peer.expect_detach().respond()
    _closed(peer)
    with anyio.fail_after(TIMEOUT):
        async with peer.serving() as port:
            connection = await api.connect(_url(port))
            session = await connection.create_session()
            producer = await session.create_producer(Queue("orders"))
            message = TextMessage("exactly this one")
            await producer.send(message)  # PERSISTENT: returns once the second one is accepted
            assert len(transfers) == 2  # it did not return after the first
            assert (await connection.statistics()).messages_resent == 1  # metrics
            await connection.close()
            await peer.wait_script_done()
    first, second = transfers
    assert first.message_id == second.message_id == message.message_id
    assert first.body == second.body == "exactly this one"
    assert peer.failures == []


async def test_F11_a_persistent_send_waits_for_the_brokers_accept(api: Api) -> None:
    held: list[Any] = []
    peer = ScriptedPeer()
    _opened(peer)
    peer.expect_attach(sender=True, address="orders").respond(credit=10)
    peer.expect_transfer(address="orders").then(lambda conn, event: held.append(event))
    peer.expect_detach().respond()
    _closed(peer)
    with anyio.fail_after(TIMEOUT):
        async with peer.serving() as port:
            connection = await api.connect(_url(port))
            session = await connection.create_session()
            producer = await session.create_producer(Queue("orders"))
            returned = anyio.Event()

            async def send() -> None:
                await producer.send(TextMessage("wait for me"))
                returned.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(send)
                with anyio.fail_after(TIMEOUT):
                    while not held:
                        await anyio.sleep(0.01)
                await anyio.sleep(0.3)
                assert not returned.is_set()  # the broker has not answered yet
                at_peer = peer.connections[0]
                at_peer.respond(held[0], 10, None)  # now accept it
                at_peer.driver.wakeup()
            assert returned.is_set()
            await connection.close()
            await peer.wait_script_done()
    assert peer.failures == []


async def test_item18_a_broker_without_transactions_is_told_to_use_emulate(api: Api) -> None:
    peer = ScriptedPeer()
    _opened(peer)
    peer.expect_attach(coordinator=True).refuse(
        ErrorCondition("amqp:not-implemented", "Transactions not supported")
    )
    peer.expect_close().respond()
    with anyio.fail_after(TIMEOUT):
        async with peer.serving() as port:
            connection = await api.connect(_url(port))
            with pytest.raises(NotImplementedByBrokerError) as refused:
                await connection.create_session(AckMode.TRANSACTED)
            await connection.close()
            await peer.wait_script_done()
    assert refused.value.feature == "transactions"
    assert refused.value.condition == "amqp:not-implemented"
    assert "jms.transactions=emulate" in str(refused.value), str(refused.value)
    assert peer.failures == []
