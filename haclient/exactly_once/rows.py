"""A message as an outbox row, and back: the row's destination text and payload bytes.

How this works: the payload is the message in AMQP's own encoding, made by the same JMS mapping
a send uses (``haclient.mapping.to_amqp``), so every body type, property type and header a send
carries survives the database unchanged; the relay decodes it (``from_amqp``) and sends the
message it gets. The destination is ``queue:<name>`` or ``topic:<name>``: a temporary
destination belongs to one connection and cannot outlive it, so an outbox refuses one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Final

from haclient.amqp.codec.message import decode_message, encode_message
from haclient.destination import Destination, Queue, Topic
from haclient.errors import InvalidDestinationError, MessageFormatError
from haclient.mapping import from_amqp, to_amqp
from haclient.message import Message

__all__ = [
    "Row",
    "destination_text",
    "message_of",
    "new_message_id",
    "parse_destination",
    "payload_of",
]

_QUEUE: Final = "queue:"
_TOPIC: Final = "topic:"


@dataclass(frozen=True, slots=True)
class Row:
    """One unsent outbox row, as the relay reads it."""

    seq: int
    destination: str
    message_id: str
    payload: bytes
    created: float
    expires: float | None


def new_message_id() -> str:
    """A message id for an outbox row: ``ID:<uuid4>``, unique without coordination between
    the processes that write to one database."""
    return f"ID:{uuid.uuid4()}"


def destination_text(destination: object) -> str:
    """How a row names ``destination``.

    Raises:
        InvalidDestinationError: not a ``Queue`` or ``Topic`` (a temporary destination dies
            with its connection; the relay's connection could never send to it).
    """
    if type(destination) is Queue:
        return _QUEUE + destination.name
    if type(destination) is Topic:
        return _TOPIC + destination.name
    raise InvalidDestinationError(
        f"an outbox sends to a Queue or a Topic, not {type(destination).__name__}"
    )


def parse_destination(text: str) -> Destination:
    """The destination a row's text names (``destination_text``'s inverse).

    Raises:
        InvalidDestinationError: the text names no queue or topic (a row written by hand).
    """
    if text.startswith(_QUEUE):
        return Queue(text[len(_QUEUE) :])
    if text.startswith(_TOPIC):
        return Topic(text[len(_TOPIC) :])
    raise InvalidDestinationError(f"an outbox row names no queue or topic: {text!r}")


def payload_of(message: Message) -> bytes:
    """The bytes a row keeps for ``message`` (its id, destination and headers already set).

    Raises:
        MessageFormatError: the message cannot be sent as it is (a property, body or header).
    """
    if not isinstance(message, Message):
        raise MessageFormatError(f"not a message: {type(message).__name__}")
    return encode_message(to_amqp(message))


def message_of(payload: bytes) -> Message:
    """The message a row's payload holds, as the relay sends it."""
    return from_amqp(decode_message(payload))
