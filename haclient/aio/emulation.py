"""Client-side selectors and no-local (rules E1, E2) for brokers that do not apply them.

Which brokers: the ``jms.selectors`` option says ``broker`` (trust the broker), ``client``
(never send the selector; evaluate here) or ``auto`` (the default: evaluate here on brokers
known to ignore selectors). RabbitMQ is one: measured on 3.10, it answers an attach carrying
``apache.org:selector-filter:string`` with the filter echoed in its source, as if applied, and
then delivers every message; the echo cannot be trusted, so the product name decides. It does
the same with ``apache.org:no-local-filter:list``, so no-local is emulated there too: every
message id a connection makes starts with that connection's part (``Connection._id_base``), by
which a consumer recognises its own connection's messages.

What happens to a message the selector rejects: on an exclusive topic subscription nobody else
could want it, so it is accepted (consumed); on a queue or a shared subscription it is released
for the other consumers. A queue whose only consumer rejects a message gets it back again and
again: selectors on a broker without them cost a round trip per rejected message.
"""

from __future__ import annotations

from collections.abc import Callable

from haclient.destination import TemporaryTopic, Topic
from haclient.message import DeliveryMode, Message
from haclient.selector import Selector, compile_selector

__all__ = [
    "BROKERS_IGNORING_FILTERS",
    "broker_selector",
    "client_no_local",
    "client_selector",
    "message_lookup",
    "rejects_consume",
]

BROKERS_IGNORING_FILTERS = frozenset({"RabbitMQ"})
"""Open-frame ``product`` names of brokers that accept selector and no-local filters but apply
neither."""


def client_selector(selector: str | None, mode: str, product: str | None) -> Selector | None:
    """The selector this client must evaluate itself, or None when the broker applies it."""
    if selector is None:
        return None
    if mode == "client" or (mode == "auto" and product in BROKERS_IGNORING_FILTERS):
        return compile_selector(selector)
    return None


def client_no_local(no_local: bool, product: str | None) -> bool:
    """Whether this client must withhold its own messages itself (E2)."""
    return no_local and product in BROKERS_IGNORING_FILTERS


def broker_selector(selector: str | None, mode: str) -> str | None:
    """The selector to put in the link's source filter (none with ``selectors=client``)."""
    return None if mode == "client" else selector


def rejects_consume(destination: object, *, shared: bool) -> bool:
    """Whether a message the selector rejects is consumed (exclusive topic subscriptions)
    rather than released for other consumers (queues, shared subscriptions)."""
    return isinstance(destination, Topic | TemporaryTopic) and not shared


def message_lookup(message: Message) -> Callable[[str], object | None]:
    """The identifier lookup a selector evaluates ``message`` with (JMS 2.0, 3.8.1.1)."""

    def lookup(name: str) -> object | None:
        if name in message.properties:
            return message.properties[name]  # type: ignore[no-any-return]
        match name:
            case "JMSPriority":
                return message.priority
            case "JMSDeliveryMode":
                persistent = message.delivery_mode == DeliveryMode.PERSISTENT
                return "PERSISTENT" if persistent else "NON_PERSISTENT"
            case "JMSMessageID":
                return message.message_id
            case "JMSCorrelationID":
                correlation = message.correlation_id
                return correlation.hex() if isinstance(correlation, bytes) else correlation
            case "JMSType":
                return message.type
            case "JMSTimestamp":
                return None if message.timestamp is None else round(message.timestamp * 1000)
            case "JMSXDeliveryCount":
                return message.delivery_count
        return None

    return lookup
