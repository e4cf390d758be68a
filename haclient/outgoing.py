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

Invariant: an encoder is used by one producer on one event loop (no locking).
"""

from __future__ import annotations

from typing import Any, Final

from failover.errors import MessageFormatError
from haclient.amqp.codec import formats
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
    address_of,
    type_annotation,
)
from haclient.mapping import (
    DELIVERY_TIME_ANNOTATION,
    MSG_TYPE_ANNOTATION,
    body_of,
    check_sendable,
    delivery_time_millis,
    id_to_amqp,
    split_jmsx,
    ttl_millis,
)
from haclient.message import DeliveryMode, Message, checked_properties

__all__ = ["OutgoingEncoder"]

_Address = tuple[bytes, int]  # the encoded address, the type annotation's value
_NO_ADDRESS: Final[_Address] = (NULL_BYTES, -1)
_IMMUTABLE: Final = (Queue, Topic)
"""Destinations whose address never changes, the ones cached. A temporary destination keeps its
identity (hash, equality) across a failover while its address moves to the new node (F6): it is
encoded afresh every time."""


class OutgoingEncoder:
    """Encodes one producer's messages for the wire, caching what repeats between them."""

    __slots__ = ("_addresses", "_annotations", "_prefixes", "validate_names")

    def __init__(self, *, validate_names: bool = True) -> None:
        #: False (``jms.validatePropertyNames=false``, M10): a property name need only be a
        #: non-empty str.
        self.validate_names = validate_names
        self._prefixes: DestinationPrefixes | None = None
        self._addresses: dict[Destination, _Address] = {}
        self._annotations: dict[tuple[int, int, int], bytes] = {}

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
            user_id / stamp_user_id: With ``stamp_user_id``, ``user_id`` is the message's
                ``user-id`` (JMSXUserID), whatever the message says (``jms.populateJMSXUserID``:
                the authenticated user's name; None clears it, as Qpid JMS does); without, the
                message's own JMSXUserID property is sent.

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
            header_section(
                durable=message.delivery_mode == DeliveryMode.PERSISTENT,
                priority=message.priority,
                ttl_ms=ttl_millis(message),
                first_acquirer=False,
                delivery_count=0,
            ),
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
