"""Source filters the broker understands: JMS selectors and no-local.

How this works: ``parse_filters`` reads a source's filter map and keeps the two filters this
broker implements, recognised by their descriptor (symbol or code) and, for a value sent without
one, by their key:

    ``apache.org:selector-filter:string`` (``0x0000468C00000004``): a JMS message selector, a
        string, compiled with ``haclient.selector`` (an invalid one raises
        ``InvalidSelectorError``, which the connection turns into ``amqp:invalid-field``).
    ``apache.org:no-local-filter:list`` (``0x0000468C00000003``): no-local; its list value is
        ignored.

Other filters are not applied and are not echoed in the attach reply (AMQP 1.0 section 3.5.3:
the reply's filter map holds the filters the node actually applies, so a client can tell).

Selector lookups are built from the message's header, properties and application properties.
Decoding happens only when a selector is evaluated, and the decoded sections are cached per
message (``SectionCache``, bounded) so that a message a selector skipped is not decoded again.

Thread-safety: none; everything runs on the broker's event loop.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from haclient.amqp.codec import AmqpMessage, decode_message
from haclient.amqp.types import AmqpDescribed
from haclient.errors import MessageFormatError

if TYPE_CHECKING:
    from chaos.broker.stored import StoredMessage

__all__ = [
    "NO_LOCAL_CODE",
    "NO_LOCAL_FILTER",
    "SELECTOR_CODE",
    "SELECTOR_FILTER",
    "Filters",
    "Matcher",
    "SectionCache",
    "compile_matcher",
    "parse_filters",
]

SELECTOR_FILTER = "apache.org:selector-filter:string"
SELECTOR_CODE = 0x0000468C00000004
NO_LOCAL_FILTER = "apache.org:no-local-filter:list"
NO_LOCAL_CODE = 0x0000468C00000003

Matcher = Callable[["StoredMessage"], bool]


def _kind(key: str, value: Any) -> str | None:
    """``"selector"``, ``"no-local"`` or None (a filter this broker does not apply)."""
    if isinstance(value, AmqpDescribed):
        descriptor = value.descriptor
        if isinstance(descriptor, str):
            name = str(descriptor)
            if name == SELECTOR_FILTER:
                return "selector"
            if name == NO_LOCAL_FILTER:
                return "no-local"
            return None
        if isinstance(descriptor, int):
            if descriptor == SELECTOR_CODE:
                return "selector"
            if descriptor == NO_LOCAL_CODE:
                return "no-local"
        return None
    if key == SELECTOR_FILTER and isinstance(value, str):
        return "selector"
    if key == NO_LOCAL_FILTER:
        return "no-local"
    return None


@dataclass(frozen=True, slots=True)
class Filters:
    """The filters of one source that the broker applies.

    ``selector`` and ``no_local`` decide equality (a subscription is rebound when they change);
    ``echo`` is the part of the source's filter map to answer with.
    """

    selector: str | None = None
    no_local: bool = False
    echo: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def empty(self) -> bool:
        """True when nothing is filtered."""
        return self.selector is None and not self.no_local


def parse_filters(filter_map: Mapping[str, Any] | None) -> Filters:
    """The selector and no-local filters of a source's filter map (others are ignored)."""
    if not filter_map:
        return Filters()
    selector: str | None = None
    no_local = False
    echo: dict[str, Any] = {}
    for key, value in filter_map.items():
        kind = _kind(str(key), value)
        if kind == "selector":
            text = value.value if isinstance(value, AmqpDescribed) else value
            if not isinstance(text, str):
                from haclient.errors import InvalidSelectorError

                raise InvalidSelectorError(
                    f"the selector filter {key!r} must hold a string, not {type(text).__name__}"
                )
            selector = str(text)
            echo[str(key)] = value
        elif kind == "no-local":
            no_local = True
            echo[str(key)] = value
    return Filters(selector, no_local, echo or None)


@dataclass(frozen=True, slots=True)
class Sections:
    """What selectors read beyond the header: properties and application properties.

    The body is not kept, so the cache stays small whatever the messages carry.
    """

    subject: object | None
    correlation_id: object | None
    message_id: object | None
    creation_time: float | None
    group_id: object | None
    group_sequence: object | None
    application_properties: Mapping[str, Any]

    @classmethod
    def of(cls, message: AmqpMessage) -> Sections:
        """The selector-visible parts of a decoded message."""
        return cls(
            message.subject,
            message.correlation_id,
            message.message_id,
            message.creation_time,
            message.group_id,
            message.group_sequence,
            message.application_properties,
        )


class SectionCache:
    """Decoded sections by message id, for selector lookups (least recently used go first)."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._decoded: OrderedDict[int, Sections | None] = OrderedDict()

    def decoded(self, message: StoredMessage) -> Sections | None:
        """The message's sections (None if it does not decode: no selector matches it then)."""
        decoded = self._decoded
        key = message.id
        if key in decoded:
            decoded.move_to_end(key)
            return decoded[key]
        try:
            value: Sections | None = Sections.of(decode_message(message.payload))
        except MessageFormatError:
            value = None
        decoded[key] = value
        if len(decoded) > self.size:
            decoded.popitem(last=False)
        return value

    def forget(self, message_id: int) -> None:
        """Drop one entry (not required: the cache is bounded)."""
        self._decoded.pop(message_id, None)


def _text(value: Any) -> object | None:
    """A message-id or correlation-id as JMS shows it (strings stay, others become text)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def lookup_for(message: StoredMessage, cache: SectionCache) -> Callable[[str], object | None]:
    """The identifier lookup a selector evaluates ``message`` with."""
    header = message.header
    sections: list[Sections | None] = []

    def decoded() -> Sections | None:
        if not sections:
            sections.append(cache.decoded(message))
        return sections[0]

    def lookup(name: str) -> object | None:
        if name.startswith("JMS"):
            if name == "JMSPriority":
                return header.priority
            if name == "JMSDeliveryMode":
                return "PERSISTENT" if header.durable else "NON_PERSISTENT"
            if name == "JMSXDeliveryCount":
                return header.delivery_count + 1
            amqp = decoded()
            if amqp is None:
                return None
            if name == "JMSType":
                return amqp.subject
            if name == "JMSCorrelationID":
                return _text(amqp.correlation_id)
            if name == "JMSMessageID":
                return _text(amqp.message_id)
            if name == "JMSTimestamp":
                return None if amqp.creation_time is None else round(amqp.creation_time * 1000)
            if name == "JMSXGroupID":
                return amqp.group_id
            if name == "JMSXGroupSeq":
                return amqp.group_sequence
        amqp = decoded()
        if amqp is None:
            return None
        value: object | None = amqp.application_properties.get(name)
        return value

    return lookup


def compile_matcher(text: str, cache: SectionCache) -> Matcher:
    """A predicate on stored messages for a JMS selector.

    Raises:
        InvalidSelectorError: the selector does not parse (the message says where).
    """
    from haclient.selector import compile_selector

    selector = compile_selector(text)

    def matches(message: StoredMessage) -> bool:
        return bool(selector.matches(lookup_for(message, cache)))

    return matches
