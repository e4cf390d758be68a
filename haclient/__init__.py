"""haclient: a failover-aware, JMS-style messaging client for AMQP 1.0 brokers.

The blocking JMS-style API (``connect``, ``ConnectionFactory``, ``Connection``, ``Session`` ...,
from ``haclient.sync``; ``haclient.aio`` is the async API it wraps), the exception tree
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
