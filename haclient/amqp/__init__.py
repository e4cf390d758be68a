"""AMQP 1.0 over python-qpid-proton's engine: the only package that imports ``proton``.

``Engine`` is sans-IO (bytes in, events out); ``haclient.amqp.driver`` pumps it over an anyio
byte stream. See ``engine.py`` for how it works and the rules it keeps.
"""

from __future__ import annotations

import logging

from haclient.amqp.config import (
    ClientAuth,
    EngineConfig,
    Role,
    ServerAuth,
    TlsClientOptions,
    TlsServerOptions,
)
from haclient.amqp.endpoints import Delivery, Link, Receiver, Sender, Session
from haclient.amqp.engine import Engine
from haclient.amqp.events import (
    ConnectionRemoteClose,
    ConnectionRemoteOpen,
    DeliveryUpdated,
    EngineEvent,
    LinkFlow,
    LinkRemoteClose,
    LinkRemoteOpen,
    MessageReceived,
    SessionRemoteClose,
    SessionRemoteOpen,
    TransportClosed,
)
from haclient.amqp.types import (
    Accepted,
    Declared,
    ErrorCondition,
    Modified,
    Outcome,
    Received,
    ReceiverSettleMode,
    Rejected,
    Released,
    SenderSettleMode,
    Terminus,
    TerminusKind,
    TransactionalState,
)

# The library's log goes nowhere unless the application configures logging (see failover).
logging.getLogger("haclient").addHandler(logging.NullHandler())

__all__ = [
    "Accepted",
    "ClientAuth",
    "ConnectionRemoteClose",
    "ConnectionRemoteOpen",
    "Declared",
    "Delivery",
    "DeliveryUpdated",
    "Engine",
    "EngineConfig",
    "EngineEvent",
    "ErrorCondition",
    "Link",
    "LinkFlow",
    "LinkRemoteClose",
    "LinkRemoteOpen",
    "MessageReceived",
    "Modified",
    "Outcome",
    "Received",
    "Receiver",
    "ReceiverSettleMode",
    "Rejected",
    "Released",
    "Role",
    "Sender",
    "SenderSettleMode",
    "ServerAuth",
    "Session",
    "SessionRemoteClose",
    "SessionRemoteOpen",
    "Terminus",
    "TerminusKind",
    "TlsClientOptions",
    "TlsServerOptions",
    "TransactionalState",
    "TransportClosed",
]
