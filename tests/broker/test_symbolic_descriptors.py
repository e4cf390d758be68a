"""Symbolic descriptors (AMQP 1.0 names each described type by number *and* by symbol; a peer may
send either) and what the broker does with a bug in its own handler."""

from __future__ import annotations

import logging
import threading
from typing import Any

import anyio
import anyio.to_thread
import pytest
from brokerkit import TIMEOUT, connect, coordinator, receive, receiver, sender
from proton import Data, Described, symbol, ubyte
from proton import Message as PnMessage
from proton.handlers import MessagingHandler, TransactionHandler
from proton.reactor import Container

import haclient.aio as aio
from chaos.broker import Broker
from chaos.broker.links import ProducerLink
from haclient.amqp.codec import decode_message
from haclient.amqp.types import Accepted, Declared
from haclient.destination import Queue
from haclient.errors import AMQPError, HAClientError

pytestmark = pytest.mark.anyio


def symbolic(*values: tuple[str, Any]) -> bytes:
    """The described values ``(symbolic descriptor, value)``, encoded one after the other."""
    data = Data()
    for descriptor, value in values:
        data.put_object(Described(symbol(descriptor), value))
    return bytes(data.encode())


SYMBOLIC_MESSAGE = symbolic(
    ("amqp:header:list", [True, ubyte(7)]),
    ("amqp:message-annotations:map", {symbol("x-opt-jms-msg-type"): 5}),
    ("amqp:properties:list", ["ID:symbolic-1", None, None, "a subject"]),
    ("amqp:application-properties:map", {"region": "eu", "n": 3}),
    ("amqp:amqp-value:*", "sections named by symbol"),
)


class _Transfer(MessagingHandler, TransactionHandler):  # type: ignore[misc]
    """python-qpid-proton's own client: declare, send one message, commit (its coordinator
    bodies use symbolic descriptors, ``amqp:declare:list``)."""

    def __init__(self, url: str, address: str) -> None:
        super().__init__()
        self.url, self.address = url, address
        self.outcome: str | None = None
        self.done = threading.Event()

    def on_start(self, event: Any) -> None:
        self.container = event.container
        self.connection = event.container.connect(self.url)
        self.sender = event.container.create_sender(self.connection, self.address)
        event.container.declare_transaction(self.connection, handler=self)
        event.container.schedule(TIMEOUT, self)  # a hang ends the reactor (on_timer_task)

    def on_transaction_declared(self, event: Any) -> None:
        event.transaction.send(self.sender, PnMessage(body="in a proton transaction"))
        event.transaction.commit()

    def _finish(self, outcome: str) -> None:
        if self.outcome is None:
            self.outcome = outcome
        self.connection.close()
        self.done.set()

    def on_transaction_committed(self, event: Any) -> None:
        self._finish("committed")

    def on_transaction_declare_failed(self, event: Any) -> None:
        self._finish("declare failed")

    def on_transaction_aborted(self, event: Any) -> None:
        self._finish("aborted")

    def on_transport_error(self, event: Any) -> None:
        self._finish(f"transport error: {event.transport.condition}")

    def on_timer_task(self, event: Any) -> None:
        self._finish("timed out")


async def test_a_proton_container_transaction_with_symbolic_descriptors_commits(
    broker: Broker,
) -> None:
    handler = _Transfer(broker.url.replace("amqp://", ""), "symbolic-tx")
    container = Container(handler)
    with anyio.fail_after(4 * TIMEOUT):
        await anyio.to_thread.run_sync(container.run, abandon_on_cancel=True)
    assert handler.outcome == "committed"
    assert broker.queue_depth("symbolic-tx") == 1
    assert broker.open_transactions() == []


async def test_a_declare_and_discharge_named_by_symbol_commit(broker: Broker) -> None:
    async with connect(broker) as connection:
        link = await coordinator(connection)
        declared = await connection.send(
            link, symbolic(("amqp:amqp-value:*", Described(symbol("amqp:declare:list"), [None])))
        )
        assert isinstance(declared, Declared)
        discharge = Described(symbol("amqp:discharge:list"), [declared.txn_id, False])
        outcome = await connection.send(link, symbolic(("amqp:amqp-value:*", discharge)))
        assert isinstance(outcome, Accepted)


async def test_a_message_with_symbolic_sections_is_received_intact(broker: Broker) -> None:
    async with connect(broker) as connection:
        link = await sender(connection, "symbolic-msg")
        assert isinstance(await connection.send(link, SYMBOLIC_MESSAGE), Accepted)
    assert decode_message(SYMBOLIC_MESSAGE).application_properties == {"region": "eu", "n": 3}
    async with await aio.connect(broker.url) as client:
        await client.start()
        session = await client.create_session()
        # The broker forwards the bytes as they came; its selector reads them too.
        consumer = await session.create_consumer(Queue("symbolic-msg"), selector="region = 'eu'")
        with anyio.fail_after(TIMEOUT):
            message = await consumer.receive(TIMEOUT)
        assert message is not None, "the message was not delivered (dead-lettered?)"
        assert message.text == "sections named by symbol"  # type: ignore[attr-defined]
        assert message.message_id == "ID:symbolic-1"
        assert message.priority == 7
        assert message.properties == {"region": "eu", "n": 3}
        await message.acknowledge()
    assert broker.queue_depth("symbolic-msg") == 0


async def test_a_broker_handler_error_closes_only_that_connection(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    original = ProducerLink.on_message

    def on_message(self: ProducerLink, delivery: Any, payload: bytes) -> None:
        if b"boom" in payload:
            raise RuntimeError("a bug in the broker")
        original(self, delivery, payload)

    monkeypatch.setattr(ProducerLink, "on_message", on_message)
    caplog.set_level(logging.ERROR, logger="chaos.broker")
    async with connect(broker) as doomed:
        link = await sender(doomed, "bug")
        with anyio.fail_after(TIMEOUT), pytest.raises(HAClientError):
            await doomed.send(link, symbolic(("amqp:amqp-value:*", "boom")))
        with anyio.fail_after(TIMEOUT):
            error = await doomed.wait_closed()
        assert isinstance(error, AMQPError)
        assert error.condition == "amqp:internal-error"
    assert len([r for r in caplog.records if "internal error" in r.getMessage()]) == 1
    async with connect(broker) as healthy:  # the broker serves on
        link = await sender(healthy, "bug")
        assert isinstance(
            await healthy.send(link, symbolic(("amqp:amqp-value:*", "fine"))), Accepted
        )
        inbox = await receiver(healthy, "bug")
        assert decode_message((await receive(healthy, inbox)).payload).body == "fine"
