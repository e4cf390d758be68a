"""haclient: a failover-aware, JMS-style messaging client for AMQP 1.0 brokers.

The blocking JMS-style API (``connect``, ``ConnectionFactory``, ``Connection``, ``Session`` ...,
from ``haclient.sync``; ``haclient.aio`` is the async API it wraps), the exception tree
(``haclient.errors``), messages and destinations with the AMQP-JMS mapping Qpid JMS uses
(``haclient.message``, ``haclient.destination``), the selector language (``haclient.selector``)
and the AMQP engine (``haclient.amqp``).

Importing ``haclient`` loads the client, anyio and proton with it: every name below is a plain
import. The failover layer, ``failover``, imports nothing of ``haclient``, and the AMQP engine
nothing of ``failover``: the errors both raise are the root of the tree, in the bottom layer
``haerrors``, so ``failover`` loads on its own; ``tests/unit/test_layers.py`` keeps it so.
The extras' modules (``haclient.metrics``, ``haclient.spark``) are not imported here: each
loads on its own import, and says which extra to install when its packages are missing.
"""

from __future__ import annotations

from haclient.destination import Destination, Queue, TemporaryQueue, TemporaryTopic, Topic
from haclient.errors import (
    CONDITIONS,
    AcknowledgeFailedError,
    AMQPError,
    AttachTimeoutError,
    AuthenticationError,
    BrokerNotReadyError,
    BrowserFailoverError,
    ClientIdInUseError,
    ClosedError,
    ConditionRule,
    ConfigurationError,
    ConnectionFailedError,
    ConnectionLostError,
    FailoverTimeoutError,
    HAClientError,
    IllegalStateError,
    InvalidDestinationError,
    InvalidSelectorError,
    LinkDetachedError,
    MessageFormatError,
    NotImplementedByBrokerError,
    OpenTimeoutError,
    PreferredBrokerAvailable,
    ProtocolError,
    RedirectError,
    ResourceLimitError,
    ResourceLockedError,
    TransactionRolledBackError,
    error_from_condition,
    is_retriable,
)
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
    "CONDITIONS",
    "AMQPError",
    "AckConfirmation",
    "AckMode",
    "AcknowledgeFailedError",
    "AttachTimeoutError",
    "AuthenticationError",
    "BrokerNotReadyError",
    "BrowserFailoverError",
    "Byte",
    "BytesMessage",
    "ClientIdInUseError",
    "ClosedError",
    "CompletionListener",
    "ConditionRule",
    "ConfigurationError",
    "Connection",
    "ConnectionFactory",
    "ConnectionFailedError",
    "ConnectionLostError",
    "DeliveryMode",
    "Destination",
    "Double",
    "FailoverTimeoutError",
    "Float",
    "HAClientError",
    "IllegalStateError",
    "Int",
    "InvalidDestinationError",
    "InvalidSelectorError",
    "LinkDetachedError",
    "Long",
    "MapMessage",
    "Message",
    "MessageConsumer",
    "MessageFormatError",
    "MessageListener",
    "MessageProducer",
    "NotImplementedByBrokerError",
    "OpenTimeoutError",
    "PreferredBrokerAvailable",
    "ProtocolError",
    "Queue",
    "QueueBrowser",
    "RedirectError",
    "ResourceLimitError",
    "ResourceLockedError",
    "Session",
    "Short",
    "StreamMessage",
    "TemporaryQueue",
    "TemporaryTopic",
    "TextMessage",
    "Topic",
    "TransactionRolledBackError",
    "__version__",
    "connect",
    "error_from_condition",
    "is_retriable",
]
