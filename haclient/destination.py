"""Destinations (queues, topics, temporary ones) and how they map onto AMQP addresses.

How this works: a queue or topic is a small frozen value; a temporary one has a fixed identity
and an address that follows its node across failover (F6). What the wire needs from it is decided by
pure functions here, following Qpid JMS so that a Java application on the same broker agrees:

* a link's terminus gets the destination's *address* (with the broker's prefix, see below) and a
  *type capability*: ``queue``, ``topic``, ``temporary-queue`` or ``temporary-topic``;
* a message's ``to`` / ``reply-to`` get the address, and the message annotations
  ``x-opt-jms-dest`` / ``x-opt-jms-reply-to`` get the type as an AMQP byte (0 queue, 1 topic,
  2 temporary queue, 3 temporary topic). On receipt the byte says which class to build; without
  it the legacy string annotations ``x-opt-to-type`` / ``x-opt-reply-type`` ("queue", "topic",
  "temporary" comma-separated, from old Qpid clients) are read, then the address prefix, then the
  consuming destination's type; a queue is the last resort.
* Some brokers (ActiveMQ 5.x) tell queues from topics only by an address prefix, which they
  announce in the Open frame's properties (``queue-prefix: queue://``, ``topic-prefix:
  topic://``). ``DestinationPrefixes`` holds them; the prefix is added to the names of
  non-temporary destinations that do not already carry it, and stripped again from addresses
  that arrive. Temporary destinations hold the broker-assigned address and are never prefixed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, TypeAlias

from haclient.amqp.types import Byte
from haclient.errors import ConfigurationError, InvalidDestinationError

__all__ = [
    "DEST_ANNOTATION",
    "LEGACY_DEST_ANNOTATION",
    "LEGACY_REPLY_TO_ANNOTATION",
    "NO_PREFIXES",
    "QUEUE_PREFIX_PROPERTY",
    "REPLY_TO_ANNOTATION",
    "TOPIC_PREFIX_PROPERTY",
    "Destination",
    "DestinationPrefixes",
    "Queue",
    "TemporaryQueue",
    "TemporaryTopic",
    "Topic",
    "address_of",
    "capability_of",
    "destination_from_address",
    "destination_from_capabilities",
    "type_annotation",
]

DEST_ANNOTATION: Final = "x-opt-jms-dest"
"""Message annotation with the type of ``to`` (Qpid JMS)."""
REPLY_TO_ANNOTATION: Final = "x-opt-jms-reply-to"
"""Message annotation with the type of ``reply-to`` (Qpid JMS)."""
LEGACY_DEST_ANNOTATION: Final = "x-opt-to-type"
"""The string form of ``x-opt-jms-dest`` that old Qpid AMQP 1.0 JMS clients send (read only)."""
LEGACY_REPLY_TO_ANNOTATION: Final = "x-opt-reply-type"
"""The string form of ``x-opt-jms-reply-to`` that old clients send (read only)."""
QUEUE_PREFIX_PROPERTY: Final = "queue-prefix"
"""Open-frame connection property in which a broker announces its queue address prefix."""
TOPIC_PREFIX_PROPERTY: Final = "topic-prefix"
"""Open-frame connection property in which a broker announces its topic address prefix."""

_QUEUE_TYPE: Final = 0
_TOPIC_TYPE: Final = 1
_TEMP_QUEUE_TYPE: Final = 2
_TEMP_TOPIC_TYPE: Final = 3


def _check_name(value: object, what: str) -> None:
    if not isinstance(value, str):
        raise InvalidDestinationError(f"a {what} needs a str, not {type(value).__name__}")
    if not value:
        raise InvalidDestinationError(f"a {what} cannot be empty")


@dataclass(frozen=True, slots=True)
class Queue:
    """A queue, by name (JMS ``Queue``).

    Raises:
        InvalidDestinationError: ``name`` is empty or not a str.
    """

    name: str

    def __post_init__(self) -> None:
        _check_name(self.name, "queue name")

    @property
    def address(self) -> str:
        """The node's address before any broker prefix is applied (the name itself)."""
        return self.name

    def __str__(self) -> str:
        return f"queue://{self.name}"


@dataclass(frozen=True, slots=True)
class Topic:
    """A topic, by name (JMS ``Topic``).

    Raises:
        InvalidDestinationError: ``name`` is empty or not a str.
    """

    name: str

    def __post_init__(self) -> None:
        _check_name(self.name, "topic name")

    @property
    def address(self) -> str:
        """The node's address before any broker prefix is applied (the name itself)."""
        return self.name

    def __str__(self) -> str:
        return f"topic://{self.name}"


class _Node:
    """The broker node behind a temporary destination: its current address.

    Shared by a temporary destination and its copies; the connection that made the node moves
    it when failover creates the node again under another address (F6).
    """

    __slots__ = ("address",)

    def __init__(self, address: str) -> None:
        self.address = address


class _TemporaryDestination:
    """What ``TemporaryQueue`` and ``TemporaryTopic`` share: an identity fixed for life, and an
    address that follows the node.

    Equality and hash come from the class and the address the object was made with (its
    identity key), so a dict or set keyed by it keeps finding it after a failover moved the
    node. ``address`` is the node's current address; copies (``copy.copy``, ``copy.deepcopy``)
    are the object itself, so they follow too. A pickled destination comes back with the
    address it had when pickled, and with the same identity.
    """

    __slots__ = ("_key", "_node")
    __match_args__ = ("address",)
    _what: ClassVar[str] = "temporary destination"
    _scheme: ClassVar[str] = "temp"

    def __init__(self, address: str) -> None:
        _check_name(address, f"{self._what} address")
        self._key = address
        self._node = _Node(address)

    @property
    def address(self) -> str:
        """The node's current address: the broker's, followed across failover (F6)."""
        return self._node.address

    @property
    def name(self) -> str:
        """The same as ``address`` (JMS calls it the queue or topic name)."""
        return self._node.address

    def _follow(self, address: str) -> None:
        """Point this destination (and so every copy) at the node's new address. For the
        connection that made the node, when failover made it again (F6)."""
        _check_name(address, f"{self._what} address")
        self._node.address = address

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, _TemporaryDestination)
        return self._key == other._key

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key))

    def __copy__(self) -> _TemporaryDestination:
        return self  # one node: a copy that did not follow it would name a dead address

    def __deepcopy__(self, memo: dict[int, Any]) -> _TemporaryDestination:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore_temporary, (type(self), self._key, self._node.address))

    def __str__(self) -> str:
        address = self._node.address
        if address.startswith(f"{self._scheme}://"):  # ActiveMQ's addresses carry it
            return address
        return f"{self._scheme}://{address}"

    def __repr__(self) -> str:
        if self._key == self._node.address:
            return f"{type(self).__name__}({self._key!r})"
        return f"{type(self).__name__}({self._key!r}, now {self._node.address!r})"


def _restore_temporary(
    cls: type[_TemporaryDestination], key: str, address: str
) -> _TemporaryDestination:
    """Unpickle a temporary destination: its identity, and the address it had."""
    destination = cls(key)
    destination._follow(address)
    return destination


class TemporaryQueue(_TemporaryDestination):
    """A temporary queue: a dynamic node whose address the broker assigned.

    Two instances are equal when they were made with the same address; ``address`` follows the
    node when failover re-creates it under a new one (F6), equality and hash do not change.
    Creating and deleting the node is the connection's business; this is only its name.

    Raises:
        InvalidDestinationError: ``address`` is empty or not a str.
    """

    __slots__ = ()
    _what = "temporary queue"
    _scheme = "temp-queue"


class TemporaryTopic(_TemporaryDestination):
    """A temporary topic: a dynamic node whose address the broker assigned.

    Equality, hash and ``address`` behave as ``TemporaryQueue``'s do.

    Raises:
        InvalidDestinationError: ``address`` is empty or not a str.
    """

    __slots__ = ()
    _what = "temporary topic"
    _scheme = "temp-topic"


Destination: TypeAlias = Queue | Topic | TemporaryQueue | TemporaryTopic
"""Any destination."""

_DESTINATION_TYPES: Final = (Queue, Topic, TemporaryQueue, TemporaryTopic)


@dataclass(frozen=True, slots=True)
class DestinationPrefixes:
    """The address prefixes a broker wants for queues and topics ("" for none).

    Raises:
        ConfigurationError: a prefix is not a str.
    """

    queue: str = ""
    topic: str = ""

    def __post_init__(self) -> None:
        for option, value in (("queue-prefix", self.queue), ("topic-prefix", self.topic)):
            if not isinstance(value, str):
                raise ConfigurationError(
                    f"{option} must be a str, not {type(value).__name__}", option=option
                )

    @classmethod
    def from_open_properties(cls, properties: Mapping[str, Any] | None) -> DestinationPrefixes:
        """The prefixes a broker announced in its Open frame (``queue-prefix``, ``topic-prefix``).

        Missing or non-string values count as no prefix.
        """
        properties = properties or {}
        queue = properties.get(QUEUE_PREFIX_PROPERTY)
        topic = properties.get(TOPIC_PREFIX_PROPERTY)
        return cls(
            queue=str(queue) if isinstance(queue, str) else "",
            topic=str(topic) if isinstance(topic, str) else "",
        )


NO_PREFIXES: Final = DestinationPrefixes()


def _require_destination(destination: object) -> Destination:
    if not isinstance(destination, _DESTINATION_TYPES):
        raise InvalidDestinationError(
            f"not a destination: {destination!r} (use Queue, Topic, TemporaryQueue or "
            "TemporaryTopic)"
        )
    return destination


def address_of(destination: Destination, prefixes: DestinationPrefixes = NO_PREFIXES) -> str:
    """The AMQP address for ``destination``: its name with the broker's prefix, if one applies.

    The prefix is added to queues and topics whose name does not already start with it, never to
    temporary destinations (their address came from the broker), as Qpid JMS does.

    Raises:
        InvalidDestinationError: ``destination`` is not a destination.
    """
    destination = _require_destination(destination)
    if isinstance(destination, Queue):
        prefix = prefixes.queue
    elif isinstance(destination, Topic):
        prefix = prefixes.topic
    else:
        return destination.address
    name = destination.name
    return name if not prefix or name.startswith(prefix) else prefix + name


def capability_of(destination: Destination) -> str:
    """The terminus capability that tells the broker the node's type.

    ``queue``, ``topic``, ``temporary-queue`` or ``temporary-topic``; a link to the destination
    carries it in its source (consumer) or target (producer) capabilities.

    Raises:
        InvalidDestinationError: ``destination`` is not a destination.
    """
    destination = _require_destination(destination)
    if isinstance(destination, Queue):
        return "queue"
    if isinstance(destination, Topic):
        return "topic"
    if isinstance(destination, TemporaryQueue):
        return "temporary-queue"
    return "temporary-topic"


def destination_from_capabilities(
    address: str, capabilities: tuple[str, ...] | list[str]
) -> Destination:
    """The destination a terminus names, typed by its capabilities (a queue when none says).

    Used for the address the broker assigns to a dynamic node, e.g. ``TemporaryQueue`` for a
    node attached with ``temporary-queue``. No prefix is stripped.

    Raises:
        InvalidDestinationError: ``address`` is empty.
    """
    caps = set(capabilities)
    if "temporary-queue" in caps:
        return TemporaryQueue(address)
    if "temporary-topic" in caps:
        return TemporaryTopic(address)
    if "topic" in caps:
        return Topic(address)
    return Queue(address)


def type_annotation(destination: Destination) -> Byte:
    """The ``x-opt-jms-dest`` / ``x-opt-jms-reply-to`` value: an AMQP byte, 0 to 3.

    Raises:
        InvalidDestinationError: ``destination`` is not a destination.
    """
    destination = _require_destination(destination)
    if isinstance(destination, Queue):
        return Byte(_QUEUE_TYPE)
    if isinstance(destination, Topic):
        return Byte(_TOPIC_TYPE)
    if isinstance(destination, TemporaryQueue):
        return Byte(_TEMP_QUEUE_TYPE)
    return Byte(_TEMP_TOPIC_TYPE)


def _legacy_type(value: str) -> int | None:
    """The type byte for a legacy ``x-opt-to-type`` string ("queue", "temporary,topic" ...)."""
    attributes = {part.strip() for part in value.split(",") if part.strip()}
    temporary = "temporary" in attributes
    if "queue" in attributes:
        return _TEMP_QUEUE_TYPE if temporary else _QUEUE_TYPE
    if "topic" in attributes:
        return _TEMP_TOPIC_TYPE if temporary else _TOPIC_TYPE
    return None


def _type_of(annotation: Any) -> int | None:
    """The destination type an annotation value names, or None when it names none."""
    if isinstance(annotation, bool):
        return None
    if isinstance(annotation, int):
        value = int(annotation)
        return value if _QUEUE_TYPE <= value <= _TEMP_TOPIC_TYPE else None
    if isinstance(annotation, str):
        return _legacy_type(annotation)
    return None


def _strip(address: str, prefix: str) -> str | None:
    return address[len(prefix) :] if prefix and address.startswith(prefix) else None


def destination_from_address(
    address: str | None,
    annotation: Any = None,
    *,
    prefixes: DestinationPrefixes = NO_PREFIXES,
    default: Destination | None = None,
) -> Destination | None:
    """The destination a received ``to`` or ``reply-to`` address names.

    Args:
        address: The address from the message (None gives None).
        annotation: The value of ``x-opt-jms-dest`` / ``x-opt-jms-reply-to`` (a byte 0-3), or of
            the legacy string annotation, or None.
        prefixes: The broker's prefixes; a matching prefix is stripped from the name.
        default: The consumer's destination, whose type is used when neither the annotation
            nor a prefix tells the type (Qpid JMS does the same); a queue when None.

    Returns:
        A destination, or None when ``address`` is None or empty.
    """
    if not address:
        return None
    kind = _type_of(annotation)
    if kind is None:
        stripped = _strip(address, prefixes.queue)
        if stripped:
            return Queue(stripped)
        stripped = _strip(address, prefixes.topic)
        if stripped:
            return Topic(stripped)
        if default is not None:
            kind = _type_of(type_annotation(default))
    if kind == _TOPIC_TYPE:
        return Topic(_strip(address, prefixes.topic) or address)
    if kind == _TEMP_QUEUE_TYPE:
        return TemporaryQueue(address)
    if kind == _TEMP_TOPIC_TYPE:
        return TemporaryTopic(address)
    return Queue(_strip(address, prefixes.queue) or address)
