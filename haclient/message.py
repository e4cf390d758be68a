"""JMS-style messages and their typed properties.

A message is a plain mutable object (headers, application properties, a body) with no wire
state; ``haclient.mapping`` translates it to and from AMQP as Qpid JMS does.

Property types: ``bool``, ``Byte``, ``Short``, ``Int``, ``Long``, ``Float``, ``Double``, ``str``.
``Byte``/``Short``/``Int``/``Float`` are the AMQP scalar types of ``haclient.amqp.types`` (``int``
and ``float`` subclasses). ``Long`` *is* ``int`` and ``Double`` *is* ``float``: a plain Python
int is a Java long (AMQP long) and a plain float a Java double, so ``Long(3)`` and ``3`` are the
same value; to send a Java int write ``Int(3)``. A received property comes back as the same class
it was sent as (``type(v) is Int``), and a long as a plain ``int``.
"""

from __future__ import annotations

import enum
import itertools
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypedDict, Unpack

from haclient.amqp.types import Byte, Char, Float, Int, Short
from haclient.destination import (
    Destination,
)
from haclient.errors import IllegalStateError, MessageFormatError

__all__ = [
    "BYTES_TYPE",
    "DELIVERY_COUNT_PROPERTY",
    "MAP_TYPE",
    "MESSAGE_TYPE",
    "OBJECT_TYPE",
    "STREAM_TYPE",
    "TEXT_TYPE",
    "Byte",
    "BytesMessage",
    "DeliveryMode",
    "Double",
    "Float",
    "Int",
    "Long",
    "MapMessage",
    "Message",
    "MessageIdGenerator",
    "Short",
    "StreamMessage",
    "TextMessage",
    "check_property_name",
    "check_property_value",
    "checked_map",
    "checked_properties",
    "checked_stream",
    "uuid_message_ids",
]

Long = int
"""A Java long (AMQP long, 64-bit signed): the same as a plain Python ``int``."""
Double = float
"""A Java double (AMQP double): the same as a plain Python ``float``."""

MESSAGE_TYPE, OBJECT_TYPE, MAP_TYPE, BYTES_TYPE, STREAM_TYPE, TEXT_TYPE = range(6)
"""The ``x-opt-jms-msg-type`` values of Qpid JMS."""

_RANGES: Final[Mapping[type, tuple[int, int]]] = {
    Byte: (-(2**7), 2**7 - 1),
    Short: (-(2**15), 2**15 - 1),
    Int: (-(2**31), 2**31 - 1),
    int: (-(2**63), 2**63 - 1),
}
_PROPERTY_TYPES: Final = frozenset({bool, Byte, Short, Int, int, Float, float, str})
_ITEM_TYPES: Final = _PROPERTY_TYPES | {bytes, Char, type(None)}
_RESERVED_NAMES: Final = frozenset(
    {"NULL", "TRUE", "FALSE", "NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE"}
)
DELIVERY_COUNT_PROPERTY: Final = "JMSXDeliveryCount"
"""Read-only: header delivery-count + 1, i.e. ``Message.delivery_count``."""


class DeliveryMode(enum.IntEnum):
    """JMS delivery mode (the values are JMS's). PERSISTENT is AMQP ``durable``."""

    NON_PERSISTENT = 1
    PERSISTENT = 2


# Validation --------------------------------------------------------------------------------------


def check_property_name(name: object, *, validate: bool = True) -> str:
    """``name`` if it is a valid JMS property name, so that selectors can use it.

    A Java identifier (``$`` allowed), not a selector keyword (NULL, TRUE, AND, ...), and not
    starting with ``JMS`` unless with ``JMSX`` or ``JMS_`` (names JMS reserves). Without
    ``validate`` (``jms.validatePropertyNames=false``, M10) any non-empty str, as Qpid JMS's
    ``checkPropertyNameIsValid`` lets through.

    Raises:
        MessageFormatError: the name is not allowed.
    """
    if not isinstance(name, str) or not name:
        raise MessageFormatError(f"a property name must be a non-empty str, not {name!r}")
    if not validate:
        return name
    if not name.replace("$", "_").isidentifier():
        raise MessageFormatError(f"property name {name!r} is not a JMS identifier")
    if name.upper() in _RESERVED_NAMES:
        raise MessageFormatError(f"property name {name!r} is a selector keyword")
    if name.startswith("JMS") and not name.startswith(("JMSX", "JMS_")):
        raise MessageFormatError(f"property name {name!r}: names starting with JMS are reserved")
    return name


def _check_value(value: Any, allowed: frozenset[type], where: str) -> Any:
    kind = type(value)
    if kind not in allowed:
        names = "bool, Byte, Short, Int, int (long), Float, float (double), str"
        if allowed is _ITEM_TYPES:
            names += ", bytes, Char, None"
        raise MessageFormatError(f"{where}: {kind.__name__} is not a JMS type (use {names})")
    bounds = _RANGES.get(kind)
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise MessageFormatError(f"{where}: {value} is out of range for {kind.__name__}")
    return value


def check_property_value(name: str, value: Any) -> Any:
    """``value`` if it is of a JMS property type and in range for it.

    Raises:
        MessageFormatError: it is not.
    """
    return _check_value(value, _PROPERTY_TYPES, f"property {name!r}")


def checked_properties(
    properties: Mapping[str, Any] | None, *, validate_names: bool = True
) -> dict[str, Any]:
    """``properties`` as a new dict, each name and value checked (names as ``check_property_name``
    with ``validate_names``).

    Raises:
        MessageFormatError: a name or a value is not allowed.
    """
    if properties is None or properties == {}:  # the common case, without the ABC check
        return {}
    if not isinstance(properties, Mapping):
        raise MessageFormatError(f"properties must be a mapping, not {type(properties).__name__}")
    checked: dict[str, Any] = {}
    for name, value in properties.items():
        check_property_name(name, validate=validate_names)
        if name == DELIVERY_COUNT_PROPERTY:
            raise MessageFormatError("JMSXDeliveryCount is set on receipt: see delivery_count")
        checked[name] = check_property_value(name, value)
    return checked


def _check_item(value: Any, where: str) -> Any:
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return _check_value(value, _ITEM_TYPES, where)


def checked_map(body: Mapping[str, Any] | None) -> dict[str, Any]:
    if body is None:
        return {}
    if not isinstance(body, Mapping):
        raise MessageFormatError(f"a MapMessage body must be a mapping, not {type(body).__name__}")
    checked: dict[str, Any] = {}
    for key, value in body.items():
        if not isinstance(key, str) or not key:
            raise MessageFormatError(f"MapMessage keys must be non-empty str, not {key!r}")
        checked[str(key)] = _check_item(value, f"MapMessage entry {key!r}")
    return checked


def checked_stream(body: Iterable[Any] | None) -> list[Any]:
    if body is None:
        return []
    if isinstance(body, str | bytes | bytearray | Mapping):
        raise MessageFormatError(f"a StreamMessage body is a list, not {type(body).__name__}")
    return [_check_item(value, f"StreamMessage item {i}") for i, value in enumerate(body)]


# Messages --------------------------------------------------------------------------------------


class _Headers(TypedDict, total=False):
    """The keyword arguments every message class accepts (see ``Message``)."""

    properties: Mapping[str, Any] | None
    message_id: str | None
    correlation_id: str | bytes | None
    reply_to: Destination | None
    destination: Destination | None
    type: str | None
    priority: int
    delivery_mode: DeliveryMode
    expiration: float | None
    delivery_time: float | None
    timestamp: float | None
    redelivered: bool
    delivery_count: int


class Message:
    """A message with headers and properties but no body (JMS ``Message``).

    A message received from a non-JMS sender whose body has no JMS meaning (an amqp-value
    holding a number, say) is also a ``Message``, with that value in ``body``.

    Attributes:
        properties: Application properties; values of JMS types (see the module docstring).
            Checked when the message is built and again when it is sent.
        message_id: ``JMSMessageID``, a string ``ID:...``; the producer assigns it.
        correlation_id: ``JMSCorrelationID``: a string, or bytes (sent as AMQP binary).
        reply_to: ``JMSReplyTo``.
        destination: ``JMSDestination``; the producer sets it.
        type: ``JMSType``.
        priority: ``JMSPriority``, 0-9 (4 is the default).
        delivery_mode: ``JMSDeliveryMode``.
        expiration: ``JMSExpiration``: absolute time (epoch seconds) or None for never.
        delivery_time: ``JMSDeliveryTime`` (epoch seconds), or None.
        timestamp: ``JMSTimestamp``: when the message was handed to send (epoch seconds).
        redelivered: ``JMSRedelivered``.
        delivery_count: ``JMSXDeliveryCount``: 1 on first delivery.
        ack_in_doubt: True on a message received in AUTO mode whose acknowledgement a failover
            cut off in flight: the broker may not have applied it, so the message may come
            again (then suppressed by the session's duplicate window, or flagged redelivered).

    Raises:
        MessageFormatError: a property name or value is not allowed.
    """

    _MSG_TYPE: int = MESSAGE_TYPE

    def __init__(
        self,
        *,
        properties: Mapping[str, Any] | None = None,
        message_id: str | None = None,
        correlation_id: str | bytes | None = None,
        reply_to: Destination | None = None,
        destination: Destination | None = None,
        type: str | None = None,  # JMSType: the name users know, shadowing the builtin here
        priority: int = 4,
        delivery_mode: DeliveryMode = DeliveryMode.PERSISTENT,
        expiration: float | None = None,
        delivery_time: float | None = None,
        timestamp: float | None = None,
        redelivered: bool = False,
        delivery_count: int = 1,
    ) -> None:
        self.properties: dict[str, Any] = checked_properties(properties)
        self.message_id = message_id
        self.correlation_id = correlation_id
        self.reply_to = reply_to
        self.destination = destination
        self.type = type
        self.priority = priority
        self.delivery_mode = delivery_mode
        self.expiration = expiration
        self.delivery_time = delivery_time
        self.timestamp = timestamp
        self.redelivered = redelivered
        self.delivery_count = delivery_count
        self._body: Any = None
        self._acknowledger: Callable[..., Any] | None = None
        self.ack_in_doubt = False

    def _bind_acknowledger(self, acknowledger: Callable[..., Any]) -> None:
        """What ``acknowledge()`` calls: set by the consumer that hands the message out (the
        async layer binds a coroutine function, the blocking facade a blocking one)."""
        self._acknowledger = acknowledger

    @property
    def body(self) -> Any:
        """The body: None here; str, bytes, dict or list in the subclasses."""
        return self._body

    @property
    def text(self) -> str | None:
        """The text of a ``TextMessage``. Defined here so that the ``Message`` that
        ``receive()`` returns reads as text without a cast.

        Raises:
            MessageFormatError: the message is not a ``TextMessage`` (the error names its type).
        """
        raise MessageFormatError(
            f"a {type(self).__name__} has no text (its body is {type(self._body).__name__}); "
            "only a TextMessage has"
        )

    def acknowledge(self, *, timeout: float | None = None) -> Any:
        """Acknowledge messages received in a CLIENT (or INDIVIDUAL) session (A2).

        CLIENT acknowledges every message the session delivered so far, INDIVIDUAL this one;
        in the other modes it does nothing. It returns once the broker confirmed; ``timeout``
        bounds the wait while the connection fails over. In the async
        API it returns an awaitable (``await message.acknowledge()``).

        Raises:
            IllegalStateError: the message was not received from a consumer, or its session
                is closed.
            AcknowledgeFailedError: the connection failed over since the message was delivered
                (F8): the broker will redeliver.
            FailoverTimeoutError: still failing over after ``timeout`` seconds (F4).
        """
        acknowledger = self._acknowledger
        if acknowledger is None:
            raise IllegalStateError("this message was not received from a consumer")
        return acknowledger(timeout=timeout)

    def _state(self) -> dict[str, Any]:
        state = dict(vars(self))
        state.pop("_acknowledger", None)
        state["body"] = state.pop("_body")
        return state

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Message)
        return self._state() == other._state()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        body = self._body
        shown = repr(body) if body is None or len(repr(body)) <= 40 else f"<{type(body).__name__}>"
        return f"{type(self).__name__}({shown}, message_id={self.message_id!r})"


class TextMessage(Message):
    """A message with a string body (JMS ``TextMessage``); ``text`` and ``body`` are the same.

    Raises:
        MessageFormatError: ``text`` is not a str or None, or a property is not allowed.
    """

    _MSG_TYPE = TEXT_TYPE

    def __init__(self, text: str | None = None, **headers: Unpack[_Headers]) -> None:
        super().__init__(**headers)
        self.text = text

    @property
    def text(self) -> str | None:
        """The text."""
        return self._body  # type: ignore[no-any-return]

    @text.setter
    def text(self, value: str | None) -> None:
        if value is not None and not isinstance(value, str):
            raise MessageFormatError(f"a TextMessage body is a str, not {type(value).__name__}")
        self._body = value

    @property
    def body(self) -> str | None:
        """The text."""
        return self._body  # type: ignore[no-any-return]

    @body.setter
    def body(self, value: str | None) -> None:
        self.text = value


class BytesMessage(Message):
    """A message with a bytes body (JMS ``BytesMessage``).

    Raises:
        MessageFormatError: ``body`` is not bytes-like, or a property is not allowed.
    """

    _MSG_TYPE = BYTES_TYPE

    def __init__(self, body: bytes | bytearray = b"", **headers: Unpack[_Headers]) -> None:
        super().__init__(**headers)
        self.body = body

    @property
    def body(self) -> bytes:
        """The bytes."""
        return self._body  # type: ignore[no-any-return]

    @body.setter
    def body(self, value: bytes | bytearray | memoryview | None) -> None:
        if value is None:
            value = b""
        if not isinstance(value, bytes | bytearray | memoryview):
            raise MessageFormatError(f"a BytesMessage body is bytes, not {type(value).__name__}")
        self._body = bytes(value)


class MapMessage(Message):
    """A message whose body maps string keys to JMS-typed values or bytes (JMS ``MapMessage``).

    Raises:
        MessageFormatError: a key or value is not allowed, or a property is not.
    """

    _MSG_TYPE = MAP_TYPE

    def __init__(self, body: Mapping[str, Any] | None = None, **headers: Unpack[_Headers]) -> None:
        super().__init__(**headers)
        self.body = body

    @property
    def body(self) -> dict[str, Any]:
        """The map (checked again when sent)."""
        return self._body  # type: ignore[no-any-return]

    @body.setter
    def body(self, value: Mapping[str, Any] | None) -> None:
        self._body = checked_map(value)


class StreamMessage(Message):
    """A message whose body is a sequence of JMS-typed values or bytes (JMS ``StreamMessage``).

    Raises:
        MessageFormatError: an item is not allowed, or a property is not.
    """

    _MSG_TYPE = STREAM_TYPE

    def __init__(self, body: Iterable[Any] | None = None, **headers: Unpack[_Headers]) -> None:
        super().__init__(**headers)
        self.body = body

    @property
    def body(self) -> list[Any]:
        """The items (checked again when sent)."""
        return self._body  # type: ignore[no-any-return]

    @body.setter
    def body(self, value: Iterable[Any] | None) -> None:
        self._body = checked_stream(value)


class MessageIdGenerator:
    """Makes message ids ``ID:<base>:<n>``: one base per generator (per producer), n counting up.

    Qpid JMS's default ids look alike (``ID:<connection>:<session>:<producer>-<n>``); only the
    ``ID:`` prefix matters to a Java peer. A re-sent message keeps its id (rule F11), so the
    producer assigns the id once, before the first attempt.
    """

    def __init__(self, base: str | None = None) -> None:
        self._prefix = f"ID:{base or uuid.uuid4()}:"
        self._counter = itertools.count(1)

    def __call__(self) -> str:
        """The next id."""
        return f"{self._prefix}{next(self._counter)}"


_UUID_IDS: Final[dict[str, Callable[[], str]]] = {
    "uuid": lambda: f"ID:AMQP_UUID:{uuid.uuid4()}",
    "uuid_string": lambda: f"ID:AMQP_NO_PREFIX:{uuid.uuid4()}",
    "prefixed_uuid_string": lambda: f"ID:{uuid.uuid4()}",
}


def uuid_message_ids(kind: str) -> Callable[[], str]:
    """Message ids of one of Qpid JMS's UUID id policies (``jms.messageIDPolicy.messageIDType``),
    a random UUID each, as the JMSMessageID whose wire form is that policy's: ``uuid`` an AMQP
    uuid (``ID:AMQP_UUID:<uuid>``), ``uuid_string`` the string ``<uuid>``
    (``ID:AMQP_NO_PREFIX:<uuid>``), ``prefixed_uuid_string`` the string ``ID:<uuid>``.

    Raises:
        KeyError: ``kind`` is none of those.
    """
    return _UUID_IDS[kind]
