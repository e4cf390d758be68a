"""Helpers for the broker conformance tests: connect through the bare engine, build messages."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from chaos.broker import Broker
from haclient.amqp.codec import AmqpMessage, decode_message, encode_declare, encode_message
from haclient.amqp.config import ClientAuth, EngineConfig
from haclient.amqp.connection import AmqpConnection, ReceivedMessage, open_connection
from haclient.amqp.endpoints import Receiver, Sender
from haclient.amqp.types import Declared, Terminus

TIMEOUT = 5.0


def config(container_id: str = "client", **options: Any) -> EngineConfig:
    """A client engine config (SASL ANONYMOUS unless ``auth`` is given)."""
    options.setdefault("auth", ClientAuth())
    return EngineConfig(container_id=container_id, **options)


@asynccontextmanager
async def connect(
    broker: Broker, container_id: str = "client", **options: Any
) -> AsyncIterator[AmqpConnection]:
    """An open connection to ``broker``."""
    async with open_connection(
        "127.0.0.1", broker.port, config(container_id, **options), connect_timeout=TIMEOUT
    ) as connection:
        yield connection


def message(body: Any = "hello", **fields: Any) -> bytes:
    """An encoded message."""
    return encode_message(AmqpMessage(body=body, **fields))


def body_of(received: ReceivedMessage | None) -> Any:
    """The body of a received message."""
    assert received is not None, "no message arrived"
    return decode_message(received.payload).body


def count_of(received: ReceivedMessage | None) -> int:
    """The header delivery-count of a received message."""
    assert received is not None, "no message arrived"
    return decode_message(received.payload).delivery_count


async def sync(connection: AmqpConnection) -> None:
    """A round trip: the broker has handled every frame sent before this returns."""
    await connection.open_session()


def wake(connection: AmqpConnection) -> None:
    """Make the connection's driver write what was changed on its engine directly."""
    assert connection.driver is not None
    connection.driver.wakeup()


async def sender(connection: AmqpConnection, address: str | Terminus | None, **kw: Any) -> Sender:
    """A sender on a new session."""
    session = await connection.open_session()
    return await connection.open_sender(address, session=session, timeout=TIMEOUT, **kw)


async def receiver(
    connection: AmqpConnection, address: str | Terminus, credit: int = 100, **kw: Any
) -> Receiver:
    """A receiver on a new session."""
    session = await connection.open_session()
    return await connection.open_receiver(
        address, session=session, credit=credit, timeout=TIMEOUT, **kw
    )


async def receive(connection: AmqpConnection, link: Receiver) -> ReceivedMessage:
    """The next message (fails the test if none comes in time)."""
    received = await connection.receive(link, timeout=TIMEOUT)
    assert received is not None, "no message arrived in time"
    return received


async def coordinator(connection: AmqpConnection) -> Sender:
    """A link to the broker's transaction coordinator."""
    session = await connection.open_session()
    return await connection.open_sender(
        Terminus.coordinator(),
        session=session,
        source=Terminus(outcomes=("amqp:accepted:list", "amqp:rejected:list")),
        timeout=TIMEOUT,
    )


async def declare(connection: AmqpConnection, link: Sender) -> bytes:
    """Declare a transaction; its id."""
    outcome = await connection.send(link, encode_declare())
    assert isinstance(outcome, Declared), outcome
    return outcome.txn_id
