"""The JMS mapping on the send path: a message straight to AMQP bytes, per producer.

How this works: ``OutgoingEncoder.encode`` maps a stamped message exactly as
``haclient.mapping.to_amqp`` does (the tests hold ``encode`` to the very bytes of
``encode_message(to_amqp(...))``) but writes each field's encoding directly, with no
intermediate message object and no type dispatch for the fields whose type the mapping fixes.
What repeats from one message to the next is encoded once per producer and kept: the ``to`` and
``reply-to`` addresses with their type annotations, and the whole message-annotations section of
each (message class, destination type, reply-to type). The caches are per broker: they are
dropped when the broker's address prefixes differ from the last send's. Temporary destinations
are never cached: failover moves them to a new node, with a new address, under the same
identity (F6).

Invariant: an encoder is used by one producer in one thread at a time (no locking): the async
producer's on its event loop, a blocking producer's in the application's thread that sends (JMS:
one thread at a time per session).

``Encoded`` is a message as the blocking API hands it to the event loop: encoded in the caller's
thread (``OutgoingEncoder.snapshot``), so that the application may change or reuse its message
as soon as ``send()`` returned, and the loop only transfers bytes. It says what it was encoded
for (``EncodingTerms``: one physical connection); on another one, after a failover, the loop
encodes it again from its own bytes (``OutgoingEncoder.again``), never from the application's
message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from haclient.amqp.codec import MessageView, formats
from haclient.amqp.codec.encode import (
    NULL_BYTES,
    encode_binary,
    encode_string,
    encode_symbol,
    encode_uint,
)
from haclient.amqp.codec.message import BodyKind, encode_id, encode_time
from haclient.amqp.codec.sections import (
    annotations_section,
    application_properties_section,
    body_section,
    header_section,
    properties_section,
)
from haclient.amqp.types import Byte
from haclient.destination import (
    DEST_ANNOTATION,
    REPLY_TO_ANNOTATION,
    Destination,
    DestinationPrefixes,
    Queue,
    Topic,
    _require_destination,
    address_of,
    type_annotation,
)
from haclient.errors import IllegalStateError, InvalidDestinationError, MessageFormatError
from haclient.mapping import (
    DELIVERY_TIME_ANNOTATION,
    MSG_TYPE_ANNOTATION,
    body_of,
    check_sendable,
    delivery_time_millis,
    from_amqp,
    id_to_amqp,
    split_jmsx,
    ttl_millis,
)
from haclient.message import DeliveryMode, Message, checked_properties

__all__ = [
    "STORED",
    "Encoded",
    "EncodingTerms",
    "OutgoingEncoder",
    "SendDefaults",
    "resolve_send",
    "stamp",
    "stamp_send",
]

_Address = tuple[bytes, int]  # the encoded address, the type annotation's value
_NO_ADDRESS: Final[_Address] = (NULL_BYTES, -1)
_IMMUTABLE: Final = (Queue, Topic)
"""Destinations whose address never changes, the ones cached. A temporary destination keeps its
identity (hash, equality) across a failover while its address moves to the new node (F6): it is
encoded afresh every time."""


def resolve_send(
    own: Destination | None, first: Destination | Message, message: Message | None
) -> tuple[Destination, Message]:
    """Where ``send(first)`` or ``send(first, message)`` of a producer to ``own`` (None:
    anonymous) sends, and what.

    Raises:
        MessageFormatError: not a message.
        InvalidDestinationError: no destination, or not one.
        IllegalStateError: a destination given to a producer that has its own.
    """
    if message is None:
        if not isinstance(first, Message):
            raise MessageFormatError(f"not a message: {type(first).__name__}")
        if own is None:
            raise InvalidDestinationError(
                "this producer has no destination: use send(destination, message)"
            )
        return own, first
    if own is not None:
        raise IllegalStateError(
            "this producer sends to its own destination: use send(message), or an "
            "anonymous producer (create_producer(None)) to choose the destination per send"
        )
    if not isinstance(message, Message):
        raise MessageFormatError(f"not a message: {type(message).__name__}")
    return _require_destination(first), message


def stamp(
    message: Message,
    destination: Destination,
    *,
    delivery_mode: DeliveryMode,
    priority: int,
    time_to_live: float,
    delivery_delay: float,
    message_id: str,
    now: float | None = None,
) -> None:
    """Set the headers a send sets on ``message`` (JMS: visible on the message object
    afterwards), with the send's (or the producer's) delivery mode, priority, time to live and
    delay, and ``message_id``; ``now`` (epoch seconds) defaults to the time of the call."""
    if now is None:
        now = time.time()
    message.destination = destination
    mode = delivery_mode
    message.delivery_mode = mode if type(mode) is DeliveryMode else DeliveryMode(mode)
    message.priority = priority
    message.message_id = message_id
    message.timestamp = now
    message.expiration = now + time_to_live if time_to_live and time_to_live > 0 else None
    message.delivery_time = now + delivery_delay if delivery_delay and delivery_delay > 0 else now
    message.redelivered = False
    message.delivery_count = 1


class SendDefaults(Protocol):
    """A producer's defaults for what a send leaves out."""

    @property
    def delivery_mode(self) -> DeliveryMode: ...
    @property
    def priority(self) -> int: ...
    @property
    def time_to_live(self) -> float: ...
    @property
    def delivery_delay(self) -> float: ...
    @property
    def preserve_message_id(self) -> bool: ...


def stamp_send(
    message: Message,
    destination: Destination,
    defaults: SendDefaults,
    new_id: Callable[[], str],
    *,
    delivery_mode: DeliveryMode | None,
    priority: int | None,
    time_to_live: float | None,
    delivery_delay: float | None,
) -> None:
    """``stamp`` for one send: each header the send leaves out (None) from ``defaults``, and the
    message's own id kept when ``defaults.preserve_message_id`` says so, else ``new_id()``."""
    stamp(
        message,
        destination,
        delivery_mode=defaults.delivery_mode if delivery_mode is None else delivery_mode,
        priority=defaults.priority if priority is None else priority,
        time_to_live=defaults.time_to_live if time_to_live is None else time_to_live,
        delivery_delay=defaults.delivery_delay if delivery_delay is None else delivery_delay,
        message_id=(
            message.message_id if defaults.preserve_message_id and message.message_id else new_id()
        ),
    )


STORED: Final = -2
"""The ``EncodingTerms.epoch`` of a payload encoded for no connection, kept to be sent later (an
outbox row): it names queues and topics only (their addresses never move), so its bytes are right
on any connection with the same prefixes and user id, and its destinations are read back from
them (``OutgoingEncoder.again``)."""


@dataclass(frozen=True, slots=True)
class EncodingTerms:
    """What a payload is encoded for: one physical connection (``epoch``) to a broker with
    these address ``prefixes``, sending ``user_id`` as JMSXUserID (None: none)."""

    epoch: int
    prefixes: DestinationPrefixes
    user_id: bytes | None

    def fit(self, other: EncodingTerms) -> bool:
        """Whether a payload encoded for these terms can go as it is where ``other`` holds:
        the same connection, or a stored payload (``STORED``) on a connection with the same
        prefixes and user id."""
        if self.epoch == other.epoch:
            return True
        return (
            self.epoch == STORED
            and self.prefixes == other.prefixes
            and self.user_id == other.user_id
        )


class Encoded:
    """A stamped message encoded for the wire: what a blocking send hands to the event loop.

    Immutable by convention (slots, no setters): it is made in the application's thread and
    read on the loop. ``destination`` and ``reply_to`` are kept beside the bytes because a
    temporary destination's address moves with failover (F6): encoding it again reads them.
    """

    __slots__ = ("delivery_mode", "destination", "message_id", "payload", "reply_to", "terms")

    def __init__(
        self,
        destination: Destination,
        reply_to: Destination | None,
        payload: bytes,
        message_id: str | None,
        delivery_mode: DeliveryMode,
        terms: EncodingTerms,
    ) -> None:
        self.destination = destination
        self.reply_to = reply_to
        self.payload = payload
        self.message_id = message_id
        self.delivery_mode = delivery_mode
        self.terms = terms

    def __repr__(self) -> str:
        return f"<Encoded {self.message_id} to {self.destination} ({len(self.payload)} bytes)>"


class OutgoingEncoder:
    """Encodes one producer's messages for the wire, caching what repeats between them."""

    __slots__ = ("_addresses", "_annotations", "_headers", "_prefixes", "validate_names")

    def __init__(self, *, validate_names: bool = True) -> None:
        #: False (``jms.validatePropertyNames=false``, M10): a property name need only be a
        #: non-empty str.
        self.validate_names = validate_names
        self._prefixes: DestinationPrefixes | None = None
        self._addresses: dict[Destination, _Address] = {}
        self._annotations: dict[tuple[int, int, int], bytes] = {}
        self._headers: dict[tuple[bool, int], bytes] = {}  # without a ttl: by (durable, priority)

    def encode(
        self,
        message: Message,
        prefixes: DestinationPrefixes,
        user_id: bytes | None = None,
        *,
        stamp_user_id: bool = False,
    ) -> bytes:
        """The AMQP payload for ``message`` (already stamped by the producer).

        Args:
            message: The message; its headers are read, never changed.
            prefixes: The broker's address prefixes (``queue://`` ...).
            user_id: With ``stamp_user_id``, the message's ``user-id`` (JMSXUserID), whatever
                the message says (``jms.populateJMSXUserID``: the authenticated user's name;
                None clears it, as Qpid JMS does).
            stamp_user_id: Whether ``user_id`` is stamped; without, the message's own
                JMSXUserID property is sent.

        Raises:
            MessageFormatError: a property, the body, a header or an id is not allowed.
            InvalidDestinationError: the destination or reply-to is not a destination.
        """
        if prefixes is not self._prefixes and prefixes != self._prefixes:
            self._prefixes = prefixes
            self._addresses.clear()
        if not isinstance(message, Message):
            raise MessageFormatError(f"not a message: {type(message).__name__}")
        properties = checked_properties(message.properties, validate_names=self.validate_names)
        check_sendable(message)
        body, kind, content_type = body_of(message)
        jmsx = split_jmsx(properties)
        to = self._address(message.destination)
        reply_to = self._address(message.reply_to)
        parts = [
            self._header(message),
            self._message_annotations(message, to[1], reply_to[1]),
            properties_section(
                [
                    _id(message.message_id),
                    _user_id(user_id if stamp_user_id else jmsx.user_id),
                    to[0],
                    _string(message.type),
                    reply_to[0],
                    _id(message.correlation_id),
                    NULL_BYTES if content_type is None else _content_type(content_type),
                    NULL_BYTES,  # content-encoding
                    encode_time(message.expiration),
                    encode_time(message.timestamp),
                    _string(jmsx.group_id),
                    NULL_BYTES if jmsx.group_sequence is None else encode_uint(jmsx.group_sequence),
                    _string(jmsx.reply_to_group_id),
                ]
            ),
        ]
        if properties:
            parts.append(application_properties_section(properties))
        if body is not None:
            parts.append(_body(body, kind))
        return b"".join(parts)

    def snapshot(self, message: Message, terms: EncodingTerms) -> Encoded:
        """``message`` (stamped: its destination set) encoded for ``terms``, with what the
        event loop needs beside the bytes; nothing of ``message`` is kept.

        Raises:
            MessageFormatError: a property, the body, a header or an id is not allowed (as
                ``encode``).
            InvalidDestinationError: the destination or reply-to is not a destination.
        """
        destination = message.destination
        if destination is None:
            raise MessageFormatError("a message to send has a destination")
        payload = self.encode(message, terms.prefixes, terms.user_id, stamp_user_id=True)
        return Encoded(
            destination,
            message.reply_to,
            payload,
            message.message_id,
            message.delivery_mode,
            terms,
        )

    def again(self, encoded: Encoded, terms: EncodingTerms) -> bytes:
        """``encoded``'s message encoded for ``terms`` instead (a new physical connection,
        after failover): decoded from its own bytes, its destinations as they are now (a
        ``STORED`` payload's as its bytes name them: queues and topics do not move)."""
        message = from_amqp(MessageView(encoded.payload), prefixes=encoded.terms.prefixes)
        if encoded.terms.epoch != STORED:
            message.destination = encoded.destination
            message.reply_to = encoded.reply_to
        return self.encode(message, terms.prefixes, terms.user_id, stamp_user_id=True)

    def _address(self, destination: Destination | None) -> _Address:
        if destination is None:
            return _NO_ADDRESS
        cacheable = type(destination) in _IMMUTABLE
        if cacheable:
            cached = self._addresses.get(destination)
            if cached is not None:
                return cached
        prefixes = self._prefixes
        assert prefixes is not None
        address = (
            encode_string(address_of(destination, prefixes)),
            int(type_annotation(destination)),
        )
        if cacheable:
            self._addresses[destination] = address
        return address

    def _header(self, message: Message) -> bytes:
        """The header section: the same bytes for every message of the same delivery mode
        and priority without a time to live (the usual sends), encoded once."""
        durable = message.delivery_mode == DeliveryMode.PERSISTENT
        ttl_ms = ttl_millis(message)
        key = (durable, message.priority)
        if ttl_ms is None:
            cached = self._headers.get(key)
            if cached is not None:
                return cached
        header = header_section(
            durable=durable,
            priority=message.priority,
            ttl_ms=ttl_ms,
            first_acquirer=False,
            delivery_count=0,
        )
        if ttl_ms is None and type(message.priority) is int and 0 <= message.priority <= 9:
            self._headers[key] = header  # at most 20 of them
        return header

    def _message_annotations(self, message: Message, dest_type: int, reply_type: int) -> bytes:
        delivery_time = delivery_time_millis(message)
        key = (message._MSG_TYPE, dest_type, reply_type)
        if delivery_time is None:
            cached = self._annotations.get(key)
            if cached is None:
                cached = self._annotations[key] = annotations_section(
                    formats.MESSAGE_ANNOTATIONS, _annotations(key)
                )
            return cached
        annotations = _annotations(key)
        annotations[DELIVERY_TIME_ANNOTATION] = delivery_time
        return annotations_section(formats.MESSAGE_ANNOTATIONS, annotations)


def _annotations(key: tuple[int, int, int]) -> dict[str, Any]:
    """The JMS annotations, in Qpid JMS's order (-1: no such destination)."""
    msg_type, dest_type, reply_type = key
    annotations: dict[str, Any] = {MSG_TYPE_ANNOTATION: Byte(msg_type)}
    if dest_type >= 0:
        annotations[DEST_ANNOTATION] = Byte(dest_type)
    if reply_type >= 0:
        annotations[REPLY_TO_ANNOTATION] = Byte(reply_type)
    return annotations


_OCTET_STREAM_BYTES: Final = encode_symbol("application/octet-stream")


def _content_type(content_type: str) -> bytes:
    if content_type == "application/octet-stream":
        return _OCTET_STREAM_BYTES
    return encode_symbol(content_type)


def _id(value: str | bytes | None) -> bytes:
    if value is None:
        return NULL_BYTES
    return encode_id(id_to_amqp(value))


def _user_id(value: bytes | None) -> bytes:
    return NULL_BYTES if value is None else encode_binary(value)


def _string(value: str | None) -> bytes:
    if value is None:
        return NULL_BYTES
    if not isinstance(value, str):
        raise MessageFormatError(f"expected a str, not {type(value).__name__}: {value!r:.40}")
    return encode_string(value)


def _body(body: Any, kind: BodyKind) -> bytes:
    return body_section(body, data=kind is BodyKind.DATA, sequence=kind is BodyKind.SEQUENCE)
