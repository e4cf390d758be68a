"""A message as an outbox row, and back: the row's destination text and payload bytes.

How this works: the payload is the message in AMQP's own encoding, encoded as a send encodes it
(``haclient.outgoing.OutgoingEncoder``, the JMS mapping of ``haclient.mapping.to_amqp``, with no
address prefixes and no JMSXUserID: a send clears an application's own, M7), so every body type,
property type and header a send carries survives the database unchanged. The relay sends those
very bytes (``encoded_of``: a ``STORED`` payload, sent as it is wherever the broker wants no
address prefixes and no user id, else decoded and encoded again for it); a row whose message
expires is encoded again at its send, so that the header's time to live is what is left of it.
The destination is ``queue:<name>`` or ``topic:<name>``: a temporary destination belongs to one
connection and cannot outlive it, so an outbox refuses one.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from typing import Final

from haclient.amqp.codec.message import decode_message
from haclient.destination import NO_PREFIXES, Destination, Queue, Topic
from haclient.errors import InvalidDestinationError, MessageFormatError
from haclient.mapping import from_amqp
from haclient.message import DeliveryMode, Message
from haclient.outgoing import STORED, Encoded, EncodingTerms, OutgoingEncoder

__all__ = [
    "Row",
    "destination_text",
    "encoded_of",
    "message_of",
    "new_message_id",
    "parse_destination",
    "payload_of",
]

_TERMS: Final = EncodingTerms(STORED, NO_PREFIXES, None)
"""What a row's payload is encoded for: any broker without address prefixes, no user id."""
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
    txid: int = 0
    """PostgreSQL: the id of the transaction that wrote the row (SQLite: 0)."""

    @property
    def position(self) -> tuple[int, int]:
        """Where the row is in the relay's reading order: ``(txid, seq)``."""
        return (self.txid, self.seq)


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


@functools.lru_cache(maxsize=1024)
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
        InvalidDestinationError: its destination or reply-to is not a destination.
    """
    if not isinstance(message, Message):
        raise MessageFormatError(f"not a message: {type(message).__name__}")
    return OutgoingEncoder().encode(message, NO_PREFIXES, None, stamp_user_id=True)


def message_of(payload: bytes) -> Message:
    """The message a row's payload holds."""
    return from_amqp(decode_message(payload))


def encoded_of(row: Row, now: float) -> Encoded:
    """What the relay sends for ``row`` at ``now`` (epoch seconds): its stored bytes, or, for a
    message that expires, the message encoded again with what is left of its time to live
    (its expiration stays the one written; its timestamp becomes the send's, as a send
    stamps it)."""
    payload = row.payload
    if row.expires is not None:
        message = message_of(payload)
        message.timestamp = now
        message.delivery_time = None
        payload = payload_of(message)
    return Encoded(
        parse_destination(row.destination),
        None,
        payload,
        row.message_id,
        DeliveryMode.PERSISTENT,
        _TERMS,
    )
