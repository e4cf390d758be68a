"""haclient: a failover-aware, JMS-style messaging client for AMQP 1.0 brokers.

The blocking JMS-style API is re-exported here as it lands. Today: the exception tree
(``haclient.errors``), messages and destinations with the AMQP-JMS mapping Qpid JMS uses
(``haclient.message``, ``haclient.destination``), the selector language (``haclient.selector``)
and the AMQP engine (``haclient.amqp``).
"""

from __future__ import annotations

from haclient.destination import Destination, Queue, TemporaryQueue, TemporaryTopic, Topic
from haclient.errors import *  # noqa: F403  (the error tree is part of the public API)
from haclient.errors import __all__ as _errors_all
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

__version__ = "0.1.0"

__all__ = [
    *_errors_all,
    "Byte",
    "BytesMessage",
    "DeliveryMode",
    "Destination",
    "Double",
    "Float",
    "Int",
    "Long",
    "MapMessage",
    "Message",
    "Queue",
    "Short",
    "StreamMessage",
    "TemporaryQueue",
    "TemporaryTopic",
    "TextMessage",
    "Topic",
    "__version__",
]
