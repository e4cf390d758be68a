"""Every exception haclient raises: one tree, one root, sorted by what the caller does next.

The tree (builtin mixins in parentheses)::

    HAClientError                           the root: ``except HAClientError`` catches them all
      ConfigurationError (ValueError)       a bad URL, option or argument: fix the config or code
      InvalidSelectorError (ValueError)     a message selector that does not parse: fix it
      IllegalStateError (RuntimeError)      not allowed in the object's current state
        ClosedError                         the object (or its session, connection) is closed
        ClientIdInUseError                  another connection holds this client id
      ConnectionFailedError                 could not connect, or failover gave up (F4); ``.cause``
      FailoverTimeoutError (TimeoutError)   blocked past ``failover.timeout``; failover goes on
      TransactionRolledBackError            rolled back: replay it; ``.in_doubt``: check first (F7)
      AcknowledgeFailedError                acknowledge lost to a failover; redelivered (F8)
      BrowserFailoverError                  a browse cut by a failover: browse again (F10)
      InvalidDestinationError               the queue or topic does not exist (any more)
      MessageFormatError                    the message cannot be built, read or sent as it is
      ResourceLockedError                   someone else holds it exclusively: wait or give up
      ResourceLimitError                    a broker limit is reached: back off, then retry
      AuthenticationError                   credentials or permissions refused: fix them
      NotImplementedByBrokerError           the broker lacks a feature (``.feature``)
      AMQPError                             any other broker error condition
        ProtocolError                       a peer broke the AMQP protocol (a bug, or corruption)
        ConnectionLostError                 one physical connection ended; failover handles it
          PreferredBrokerAvailable          the cause of a return to a preferred broker (F16)
          BrokerNotReadyError               accepted, then closed before any answer: a broker
                                            starting up; failover comes back to it soon
        RedirectError                       the broker sent us elsewhere (``.network_host``)
        LinkDetachedError                   the broker closed one producer or consumer
        OpenTimeoutError (TimeoutError)     the peer never answered an Open or Begin: a hung
                                            broker; failover skips it (retriable)
        AttachTimeoutError (TimeoutError)   the broker never answered an attach

Every error has ``condition``, ``description`` and ``info`` (the error condition the broker
reported, or None when haclient raised it on its own) and ``retriable`` (whether a new
connection may succeed). ``CONDITIONS`` maps each AMQP error condition to its class and says
whether it is retriable; ``error_from_condition`` builds the exception, ``is_retriable`` reads
the flag.

This module defines nothing: it is the one place applications import the tree from. Each class
lives in the lowest layer that raises it, so that the AMQP engine and the failover layer need
nothing of each other, nor the failover layer anything of the client:

- ``haerrors``, the bottom layer under both: the root and the classes both raise or classify
  (configuration, illegal state, closed, authentication, the loss of one connection);
- ``failover.errors``: what only failover raises (``ConnectionFailedError``,
  ``FailoverTimeoutError``, ``PreferredBrokerAvailable``);
- ``haclient.jms_errors``: what only the client means (an invalid selector or destination, a
  rolled-back transaction, a lost acknowledge, a cut browse ...);
- ``haclient.amqp.conditions``: the protocol's errors and the condition table, beside the
  engine.

A class is the same object under every name (``haclient.ClosedError is
failover.errors.ClosedError``); its ``__module__`` is this module, the name a traceback shows
(the defining module sets it: ``haerrors.publish``), while pickle goes through the module that
defines it. The rules the tree keeps are in ``haerrors``'s docstring, the condition table's in
``haclient.amqp.conditions``'s.
"""

from __future__ import annotations

from failover.errors import ConnectionFailedError, FailoverTimeoutError, PreferredBrokerAvailable
from haclient.amqp.conditions import (
    CONDITIONS,
    AttachTimeoutError,
    ConditionRule,
    LinkDetachedError,
    OpenTimeoutError,
    ProtocolError,
    RedirectError,
    error_from_condition,
    is_retriable,
)
from haclient.jms_errors import (
    AcknowledgeFailedError,
    BrowserFailoverError,
    ClientIdInUseError,
    InvalidDestinationError,
    InvalidSelectorError,
    MessageFormatError,
    NotImplementedByBrokerError,
    ResourceLimitError,
    ResourceLockedError,
    TransactionRolledBackError,
)
from haerrors import (
    AMQPError,
    AuthenticationError,
    BrokerNotReadyError,
    ClosedError,
    ConfigurationError,
    ConnectionLostError,
    HAClientError,
    IllegalStateError,
)

__all__ = [
    "CONDITIONS",
    "AMQPError",
    "AcknowledgeFailedError",
    "AttachTimeoutError",
    "AuthenticationError",
    "BrokerNotReadyError",
    "BrowserFailoverError",
    "ClientIdInUseError",
    "ClosedError",
    "ConditionRule",
    "ConfigurationError",
    "ConnectionFailedError",
    "ConnectionLostError",
    "FailoverTimeoutError",
    "HAClientError",
    "IllegalStateError",
    "InvalidDestinationError",
    "InvalidSelectorError",
    "LinkDetachedError",
    "MessageFormatError",
    "NotImplementedByBrokerError",
    "OpenTimeoutError",
    "PreferredBrokerAvailable",
    "ProtocolError",
    "RedirectError",
    "ResourceLimitError",
    "ResourceLockedError",
    "TransactionRolledBackError",
    "error_from_condition",
    "is_retriable",
]
