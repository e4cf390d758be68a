"""haclient: a failover-aware, JMS-style messaging client for AMQP 1.0 brokers.

The blocking JMS-style API (``connect``, ``ConnectionFactory``, ``Connection``, ``Session`` ...,
from ``haclient.sync``; ``haclient.aio`` is the async API it wraps), the exception tree
(``haclient.errors``), messages and destinations with the AMQP-JMS mapping Qpid JMS uses
(``haclient.message``, ``haclient.destination``), the selector language (``haclient.selector``)
and the AMQP engine (``haclient.amqp``).

Importing ``haclient`` (or any ``haclient.*`` module, which runs this file first) loads only the
error tree, which needs nothing but the standard library. Every other name is imported on first
use (PEP 562's module ``__getattr__``), so that the layers below the client, ``failover`` above
all, can use ``haclient.errors`` without loading the client, anyio or proton;
``tests/unit/test_layers.py`` keeps it so.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from haclient.errors import *  # noqa: F403  (the error tree is part of the public API)
from haclient.errors import __all__ as _errors_all

if TYPE_CHECKING:
    from haclient.destination import Destination, Queue, TemporaryQueue, TemporaryTopic, Topic
    from haclient.message import (
        Byte,
        BytesMessage,
        DeliveryMode,
        Double,
        Float,
        Int,
        Long,
        MapMessage,
        Message,
        Short,
        StreamMessage,
        TextMessage,
    )
    from haclient.modes import AckConfirmation, AckMode
    from haclient.sync import (
        CompletionListener,
        Connection,
        ConnectionFactory,
        MessageConsumer,
        MessageListener,
        MessageProducer,
        QueueBrowser,
        Session,
        connect,
    )

__version__ = "0.1.0"

__all__ = [
    *_errors_all,
    "AckConfirmation",
    "AckMode",
    "Byte",
    "BytesMessage",
    "CompletionListener",
    "Connection",
    "ConnectionFactory",
    "DeliveryMode",
    "Destination",
    "Double",
    "Float",
    "Int",
    "Long",
    "MapMessage",
    "Message",
    "MessageConsumer",
    "MessageListener",
    "MessageProducer",
    "Queue",
    "QueueBrowser",
    "Session",
    "Short",
    "StreamMessage",
    "TemporaryQueue",
    "TemporaryTopic",
    "TextMessage",
    "Topic",
    "__version__",
    "connect",
]

# Name -> the module it is imported from on first use (the TYPE_CHECKING imports above, again).
_LAZY: dict[str, str] = {
    **dict.fromkeys(
        ("Destination", "Queue", "TemporaryQueue", "TemporaryTopic", "Topic"),
        "haclient.destination",
    ),
    **dict.fromkeys(
        (
            "Byte",
            "BytesMessage",
            "DeliveryMode",
            "Double",
            "Float",
            "Int",
            "Long",
            "MapMessage",
            "Message",
            "Short",
            "StreamMessage",
            "TextMessage",
        ),
        "haclient.message",
    ),
    **dict.fromkeys(("AckConfirmation", "AckMode"), "haclient.modes"),
    **dict.fromkeys(
        (
            "CompletionListener",
            "Connection",
            "ConnectionFactory",
            "MessageConsumer",
            "MessageListener",
            "MessageProducer",
            "QueueBrowser",
            "Session",
            "connect",
        ),
        "haclient.sync",
    ),
}

# Subpackages that ``import haclient; haclient.aio...`` reaches (they used to be loaded eagerly).
_SUBMODULES = frozenset(
    {"aio", "amqp", "destination", "errors", "mapping", "message", "modes", "selector", "sync"}
)


def __getattr__(name: str) -> object:
    """Import a public name (or a subpackage) on first use, then keep it as a plain global."""
    if name in _LAZY:
        value: object = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_SUBMODULES})
