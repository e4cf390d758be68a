"""The AMQP <-> JMS message mapping of Qpid JMS.

How this works: a message is a plain mutable object (headers, application properties, a body)
with no wire state. Two pure functions translate: ``to_amqp`` builds the ``AmqpMessage`` a
producer sends (the send path writes the same message straight to bytes with
``haclient.outgoing.OutgoingEncoder``, from the checks here), ``from_amqp`` builds the message a
consumer hands out (from an ``AmqpMessage`` or a lazily decoded ``MessageView``). They follow
the mapping of Qpid JMS (``AmqpJmsMessageFacade`` and friends), so that a Java application on the
same broker reads what we send and we read what it sends:

=====================  =========================================================================
JMS                    AMQP 1.0
=====================  =========================================================================
message class          annotation ``x-opt-jms-msg-type`` (byte): 0 Message, 1 Object, 2 Map,
                       3 Bytes, 4 Stream, 5 Text
TextMessage            amqp-value holding a string (no body section for None)
BytesMessage           data section, content type ``application/octet-stream``
MapMessage             amqp-value holding a map with string keys
StreamMessage          amqp-sequence (read from an amqp-value list too)
JMSMessageID           message-id, a string ``ID:...``; ``ID:AMQP_ULONG:n``, ``ID:AMQP_UUID:u``,
                       ``ID:AMQP_BINARY:HEX``, ``ID:AMQP_STRING:s`` and ``ID:AMQP_NO_PREFIX:s``
                       stand for the other AMQP id types, both ways
JMSCorrelationID       correlation-id (same encodings; a string without ``ID:`` goes as is)
JMSDestination         to, plus annotation ``x-opt-jms-dest`` (see ``haclient.destination``)
JMSReplyTo             reply-to, plus annotation ``x-opt-jms-reply-to``
JMSType                subject
JMSDeliveryMode        header durable (PERSISTENT <-> true)
JMSPriority            header priority
JMSTimestamp           creation-time
JMSExpiration          absolute-expiry-time; header ttl = expiration - timestamp; a received
                       ttl without an absolute expiry gives "now + ttl"
JMSDeliveryTime        annotation ``x-opt-delivery-time`` (long, ms), sent only when it differs
                       from the timestamp (a delivery delay); when absent it is the timestamp
JMSRedelivered         header delivery-count > 0
JMSXDeliveryCount      header delivery-count + 1 (rule E4)
JMSXGroupID/GroupSeq   group-id / group-sequence
JMSXUserID             user-id (UTF-8 bytes)
JMS_AMQP_REPLY_TO_...  the property ``JMS_AMQP_REPLY_TO_GROUP_ID`` is reply-to-group-id
properties             application-properties, each value keeping its AMQP (= Java) type
=====================  =========================================================================

Times are seconds since the epoch (floats, like ``time.time()``) and go on the wire in
milliseconds, so they keep millisecond precision.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Final, NamedTuple, TypeAlias

from haclient.amqp.codec import AmqpMessage, BodyKind, MessageView
from haclient.amqp.codec.message import millis
from haclient.amqp.types import Byte, Int, ULong
from haclient.destination import (
    DEST_ANNOTATION,
    LEGACY_DEST_ANNOTATION,
    LEGACY_REPLY_TO_ANNOTATION,
    NO_PREFIXES,
    REPLY_TO_ANNOTATION,
    Destination,
    DestinationPrefixes,
    address_of,
    destination_from_address,
    type_annotation,
)
from haclient.errors import MessageFormatError
from haclient.message import (
    BYTES_TYPE,
    MAP_TYPE,
    MESSAGE_TYPE,
    OBJECT_TYPE,
    STREAM_TYPE,
    TEXT_TYPE,
    BytesMessage,
    DeliveryMode,
    MapMessage,
    Message,
    StreamMessage,
    TextMessage,
    checked_map,
    checked_properties,
    checked_stream,
)

__all__ = [
    "DELIVERY_TIME_ANNOTATION",
    "MSG_TYPE_ANNOTATION",
    "OCTET_STREAM",
    "correlation_id_from_amqp",
    "from_amqp",
    "id_to_amqp",
    "message_id_from_amqp",
    "to_amqp",
]

MSG_TYPE_ANNOTATION: Final = "x-opt-jms-msg-type"
DELIVERY_TIME_ANNOTATION: Final = "x-opt-delivery-time"
OCTET_STREAM: Final = "application/octet-stream"
_SERIALIZED_JAVA_OBJECT: Final = "application/x-java-serialized-object"
_TEXT_MEDIA: Final = frozenset(
    {"application/json", "application/xml", "application/javascript", "application/ecmascript"}
)

# Properties Qpid JMS carries in AMQP message properties, not in application properties.
_GROUP_ID: Final = "JMSXGroupID"  # group-id
_GROUP_SEQ: Final = "JMSXGroupSeq"  # group-sequence (0 means none, as in Qpid JMS)
_USER_ID: Final = "JMSXUserID"  # user-id, UTF-8
_REPLY_TO_GROUP_ID: Final = "JMS_AMQP_REPLY_TO_GROUP_ID"  # reply-to-group-id

# Message and correlation ids -----------------------------------------------------------------

_ID: Final = "ID:"
_AMQP_PREFIXES: Final = (
    "AMQP_NO_PREFIX:",
    "AMQP_ULONG:",
    "AMQP_UUID:",
    "AMQP_BINARY:",
    "AMQP_STRING:",
)


def _has_encoding_prefix(value: str) -> bool:
    return value.startswith(_AMQP_PREFIXES, len(_ID))


def id_to_amqp(value: str | bytes | None) -> Any:
    """The AMQP message-id (or correlation-id) for a JMS id string, as Qpid JMS encodes it.

    ``ID:AMQP_ULONG:7`` becomes the ulong 7, ``ID:AMQP_UUID:..`` a uuid, ``ID:AMQP_BINARY:0AFF``
    the binary ``0a ff``, ``ID:AMQP_STRING:s`` and ``ID:AMQP_NO_PREFIX:s`` the string ``s``; any
    other string (``ID:...`` or an application's correlation id) goes as it is; bytes go as
    binary.

    Raises:
        MessageFormatError: an encoded id does not decode (``ID:AMQP_ULONG:x``).
    """
    if value is None or isinstance(value, bytes):
        return value
    if not isinstance(value, str):
        raise MessageFormatError(f"a message id is a str, not {type(value).__name__}")
    if not value.startswith(_ID) or not _has_encoding_prefix(value):
        return value
    kind, _, rest = value[len(_ID) :].partition(":")
    try:
        if kind == "AMQP_ULONG":
            number = int(rest, 10)
            if not 0 <= number < 2**64:
                raise ValueError("out of range for a ulong")
            return ULong(number)
        if kind == "AMQP_UUID":
            return uuid.UUID(rest)
        if kind == "AMQP_BINARY":
            if len(rest) % 2:
                raise ValueError("odd number of hex digits")
            return bytes.fromhex(rest)
    except ValueError as exc:
        raise MessageFormatError(f"message id {value!r} cannot be converted: {exc}") from exc
    return rest  # AMQP_STRING, AMQP_NO_PREFIX


def _non_string_id(value: Any) -> str:
    if isinstance(value, uuid.UUID):
        return f"ID:AMQP_UUID:{value}"
    if isinstance(value, bytes):
        return f"ID:AMQP_BINARY:{value.hex().upper()}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"ID:AMQP_ULONG:{int(value)}"
    raise MessageFormatError(f"unsupported message id type {type(value).__name__}")


def message_id_from_amqp(value: Any) -> str | None:
    """The JMSMessageID for an AMQP message-id: always ``ID:...`` (Qpid JMS's encoding).

    Raises:
        MessageFormatError: the id is of a type AMQP does not allow for ids.
    """
    if value is None:
        return None
    if isinstance(value, str):
        if not value.startswith(_ID):
            return f"ID:AMQP_NO_PREFIX:{value}"
        return f"ID:AMQP_STRING:{value}" if _has_encoding_prefix(value) else str(value)
    return _non_string_id(value)


def correlation_id_from_amqp(value: Any) -> str | None:
    """The JMSCorrelationID for an AMQP correlation-id (a string without ``ID:`` stays as is).

    Raises:
        MessageFormatError: the id is of a type AMQP does not allow for ids.
    """
    if isinstance(value, str) and not value.startswith(_ID):
        return str(value)
    return message_id_from_amqp(value)


# JMS -> AMQP -----------------------------------------------------------------------------------


def body_of(message: Message) -> tuple[Any, BodyKind, str | None]:
    """The checked body of ``message``, the body section it goes in, and its content type.

    Raises:
        MessageFormatError: the body is not allowed for the message class.
    """
    if isinstance(message, TextMessage):
        return message.text, BodyKind.VALUE, None
    if isinstance(message, BytesMessage):
        body = message.body
        if not isinstance(body, bytes | bytearray | memoryview):
            raise MessageFormatError(f"a BytesMessage body is bytes, not {type(body).__name__}")
        return bytes(body), BodyKind.DATA, OCTET_STREAM
    if isinstance(message, MapMessage):
        return checked_map(message.body), BodyKind.VALUE, None
    if isinstance(message, StreamMessage):
        return checked_stream(message.body), BodyKind.SEQUENCE, None
    return message.body, BodyKind.VALUE, None


class Jmsx(NamedTuple):
    """The JMSX properties Qpid JMS carries in AMQP message properties (None: not set), by
    the names of those fields."""

    group_id: str | None = None
    group_sequence: int | None = None
    user_id: bytes | None = None
    reply_to_group_id: str | None = None


_NO_JMSX: Final = Jmsx()


def _group_sequence(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MessageFormatError("JMSXGroupSeq must be an int")
    # A Java int on the JMS side, an AMQP uint on the wire: negative ints wrap, as in Java.
    if not -(2**31) <= value < 2**32:
        raise MessageFormatError(f"JMSXGroupSeq {value} is out of range")
    return int(value) % 2**32


def _str_property(value: Any, name: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise MessageFormatError(f"{name} must be a str")
    return value


def split_jmsx(properties: dict[str, Any]) -> Jmsx:
    """Move the JMSX properties Qpid JMS carries in AMQP fields out of ``properties``.

    Raises:
        MessageFormatError: one of them has the wrong type or range.
    """
    if not (
        _GROUP_ID in properties
        or _GROUP_SEQ in properties
        or _USER_ID in properties
        or _REPLY_TO_GROUP_ID in properties
    ):
        return _NO_JMSX
    group_id = _str_property(properties.pop(_GROUP_ID, None), _GROUP_ID)
    group_seq = properties.pop(_GROUP_SEQ, None)
    sequence = None if group_seq is None else _group_sequence(group_seq)
    user_id = _str_property(properties.pop(_USER_ID, None), _USER_ID)
    reply_group = _str_property(properties.pop(_REPLY_TO_GROUP_ID, None), _REPLY_TO_GROUP_ID)
    return Jmsx(
        group_id, sequence, None if user_id is None else user_id.encode("utf-8"), reply_group
    )


def ttl_millis(message: Message) -> int | None:
    """The header ttl (ms) for ``message``: expiration - timestamp, when both are set and the
    difference fits a uint."""
    if message.expiration is None or message.timestamp is None:
        return None
    ttl = millis(message.expiration) - millis(message.timestamp)
    return ttl if 0 < ttl < 2**32 else None


def delivery_time_millis(message: Message) -> int | None:
    """The ``x-opt-delivery-time`` annotation: only when it differs from the timestamp."""
    if message.delivery_time is not None and message.delivery_time != message.timestamp:
        return millis(message.delivery_time)
    return None


def check_sendable(message: Message) -> None:
    """Raise ``MessageFormatError`` if ``message`` is not a message or its priority is invalid."""
    if not isinstance(message, Message):
        raise MessageFormatError(f"not a message: {type(message).__name__}")
    if not isinstance(message.priority, int) or not 0 <= message.priority <= 9:
        raise MessageFormatError(f"priority must be an int from 0 to 9, not {message.priority!r}")


def to_amqp(
    message: Message, *, destination_prefixes: DestinationPrefixes = NO_PREFIXES
) -> AmqpMessage:
    """The AMQP message to send for ``message``, mapped as Qpid JMS maps it.

    Nothing is generated here: the producer sets ``message_id``, ``timestamp``,
    ``destination``, ``expiration`` and ``delivery_time`` before it calls this. The header's
    delivery-count is always 0 (redelivery is counted by brokers, not by senders). The send
    path encodes with ``haclient.outgoing.OutgoingEncoder``, which writes the same message
    straight to bytes.

    Args:
        message: The message.
        destination_prefixes: The broker's address prefixes (``queue://`` ...).

    Raises:
        MessageFormatError: a property, the body, a header or an id is not allowed.
    """
    if not isinstance(message, Message):
        raise MessageFormatError(f"not a message: {type(message).__name__}")
    properties = checked_properties(message.properties)
    check_sendable(message)
    body, kind, content_type = body_of(message)
    annotations: dict[str, Any] = {MSG_TYPE_ANNOTATION: Byte(message._MSG_TYPE)}
    jmsx = split_jmsx(properties)  # takes them out of the application properties
    amqp = AmqpMessage(
        body=body,
        body_kind=kind,
        content_type=content_type,
        durable=message.delivery_mode == DeliveryMode.PERSISTENT,
        priority=message.priority,
        message_id=id_to_amqp(message.message_id),
        correlation_id=id_to_amqp(message.correlation_id),
        subject=message.type,
        message_annotations=annotations,
        application_properties=properties,
        **jmsx._asdict(),  # the JMSX properties are AMQP fields of the same names
        creation_time=message.timestamp,
        absolute_expiry_time=message.expiration,
    )
    if message.destination is not None:
        amqp.to = address_of(message.destination, destination_prefixes)
        annotations[DEST_ANNOTATION] = type_annotation(message.destination)
    if message.reply_to is not None:
        amqp.reply_to = address_of(message.reply_to, destination_prefixes)
        annotations[REPLY_TO_ANNOTATION] = type_annotation(message.reply_to)
    ttl = ttl_millis(message)
    if ttl is not None:
        amqp.ttl = ttl / 1000
    delivery_time = delivery_time_millis(message)
    if delivery_time is not None:
        annotations[DELIVERY_TIME_ANNOTATION] = delivery_time
    return amqp


# AMQP -> JMS -----------------------------------------------------------------------------------

Received: TypeAlias = AmqpMessage | MessageView
"""A received message: decoded (``AmqpMessage``) or decoded on access (``MessageView``)."""


def _text_charset(content_type: str | None) -> str | None:
    """The charset to read a body of ``content_type`` as text with, or None if it is not text.

    Like Qpid JMS: ``text/*``, JSON, XML and JavaScript types are text (UTF-8 unless a
    ``charset`` parameter says otherwise).
    """
    if not content_type:
        return None
    media, *params = (part.strip() for part in content_type.split(";"))
    media = media.lower()
    textual = media.startswith("text/") or media in _TEXT_MEDIA or media.endswith(("+json", "+xml"))
    if not textual:
        return None
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            return value.strip().strip('"')
    return "utf-8"


def _decode_text(data: bytes, charset: str) -> str | None:
    try:
        return data.decode(charset)
    except (LookupError, UnicodeDecodeError):
        return None


def _foreign_message(amqp: Received) -> Message:
    """The message for an AMQP message without ``x-opt-jms-msg-type`` (a non-JMS sender).

    As Qpid JMS, except that what it would make an ObjectMessage (an amqp-value map or list, an
    amqp-sequence) becomes a MapMessage or StreamMessage, the nearest Python shapes; other
    values a ``Message`` whose ``body`` holds the value.
    """
    body, content_type = amqp.body, amqp.content_type
    if amqp.body_kind is BodyKind.SEQUENCE:
        return _stream(body)
    if amqp.body_kind is BodyKind.DATA or body is None:
        data = bytes(body or b"")
        if content_type in (None, OCTET_STREAM):
            return BytesMessage(data)
        charset = _text_charset(content_type)
        text = _decode_text(data, charset) if charset else None
        if text is not None:
            return TextMessage(text if body is not None else None)
        if content_type == _SERIALIZED_JAVA_OBJECT or body is None:
            return _raw(body)
        return BytesMessage(data)
    if isinstance(body, str):
        return TextMessage(str(body))
    if isinstance(body, bytes):
        return BytesMessage(body)
    if isinstance(body, dict) and all(isinstance(k, str) for k in body):
        return _map(body)
    if isinstance(body, list):
        return _stream(body)
    return _raw(body)


def _raw(body: Any) -> Message:
    message = Message()
    message._body = body
    return message


# Received bodies are taken as they are, unchecked: a foreign sender may use any AMQP type.
def _stream(body: Any) -> Message:
    message = StreamMessage()
    message._body = list(body or [])
    return message


def _map(body: Any) -> Message:
    message = MapMessage()
    message._body = {str(k): v for k, v in body.items()} if isinstance(body, dict) else {}
    return message


def _jms_message(amqp: Received, msg_type: Any) -> Message:
    """The message for an AMQP message that says its JMS type."""
    body = amqp.body
    if isinstance(msg_type, bool) or not isinstance(msg_type, int):
        raise MessageFormatError(f"invalid {MSG_TYPE_ANNOTATION} annotation: {msg_type!r}")
    if msg_type == TEXT_TYPE:
        if isinstance(body, bytes):
            charset = _text_charset(amqp.content_type) or "utf-8"
            body = _decode_text(body, charset)
        return TextMessage(body if isinstance(body, str) else None)
    if msg_type == BYTES_TYPE:
        return BytesMessage(body if isinstance(body, bytes) else b"")
    if msg_type == MAP_TYPE:
        return _map(body)
    if msg_type == STREAM_TYPE:
        return _stream(body if isinstance(body, list) else [])
    if msg_type in (MESSAGE_TYPE, OBJECT_TYPE):
        # No ObjectMessage here: an object message's serialized or AMQP-typed body is kept raw.
        return _raw(body if msg_type == OBJECT_TYPE else None)
    raise MessageFormatError(f"invalid {MSG_TYPE_ANNOTATION} annotation: {msg_type!r}")


def _received_properties(amqp: Received) -> dict[str, Any]:
    properties = {str(k): v for k, v in amqp.application_properties.items()}
    if amqp.group_id is not None:
        properties[_GROUP_ID] = amqp.group_id
    if amqp.group_sequence is not None:
        properties[_GROUP_SEQ] = Int(amqp.group_sequence - 2**32 * (amqp.group_sequence >= 2**31))
    if amqp.user_id is not None:
        properties[_USER_ID] = amqp.user_id.decode("utf-8", errors="replace")
    if amqp.reply_to_group_id is not None:
        properties[_REPLY_TO_GROUP_ID] = amqp.reply_to_group_id
    return properties


def _delivery_time(annotation: Any, timestamp: float | None) -> float | None:
    if isinstance(annotation, int) and not isinstance(annotation, bool):
        return int(annotation) / 1000
    return timestamp


def from_amqp(
    amqp: Received,
    *,
    delivery_count: int | None = None,
    prefixes: DestinationPrefixes = NO_PREFIXES,
    consumer_destination: Destination | None = None,
    now: float | None = None,
) -> Message:
    """The message a consumer hands out for a received AMQP message, mapped as Qpid JMS does.

    Args:
        amqp: The received message.
        delivery_count: ``JMSXDeliveryCount`` when the consumer knows better than the header
            (client-side redeliveries, rule E4); default 1 + the header's delivery-count.
        prefixes: The broker's address prefixes, stripped from ``to`` and ``reply-to``.
        consumer_destination: The consumer's destination: the type of ``to``/``reply-to``
            when neither an annotation nor a prefix gives it, and the destination when the
            message has no ``to``.
        now: The receive time (epoch seconds) for a ttl without an absolute expiry; default now.

    Raises:
        MessageFormatError: the JMS type annotation or an id is invalid.
    """
    annotations = amqp.message_annotations
    msg_type = annotations.get(MSG_TYPE_ANNOTATION)
    message = _foreign_message(amqp) if msg_type is None else _jms_message(amqp, msg_type)
    message.properties = _received_properties(amqp)
    message.message_id = message_id_from_amqp(amqp.message_id)
    message.correlation_id = correlation_id_from_amqp(amqp.correlation_id)
    dest_type = annotations.get(DEST_ANNOTATION, annotations.get(LEGACY_DEST_ANNOTATION))
    message.destination = destination_from_address(
        amqp.to, dest_type, prefixes=prefixes, default=consumer_destination
    )
    if message.destination is None:
        message.destination = consumer_destination
    reply_type = annotations.get(REPLY_TO_ANNOTATION, annotations.get(LEGACY_REPLY_TO_ANNOTATION))
    message.reply_to = destination_from_address(
        amqp.reply_to, reply_type, prefixes=prefixes, default=consumer_destination
    )
    message.type = amqp.subject
    message.priority = min(max(int(amqp.priority), 0), 9)
    message.delivery_mode = DeliveryMode.PERSISTENT if amqp.durable else DeliveryMode.NON_PERSISTENT
    message.timestamp = amqp.creation_time
    if amqp.absolute_expiry_time is not None:
        message.expiration = amqp.absolute_expiry_time
    elif amqp.ttl:
        message.expiration = (time.time() if now is None else now) + amqp.ttl
    message.delivery_time = _delivery_time(
        annotations.get(DELIVERY_TIME_ANNOTATION), message.timestamp
    )
    count = 1 + amqp.delivery_count if delivery_count is None else delivery_count
    message.delivery_count = count
    message.redelivered = count > 1
    return message
