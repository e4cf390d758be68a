"""What the peer's AMQP error conditions mean: the protocol layer's errors and the one table.

The AMQP side of the exception tree. The root ``HAClientError`` and the classes the engine
shares with the failover layer are in the bottom layer, ``haerrors``; what a condition means to
a JMS application (an invalid destination, a rolled-back transaction ...) in
``haclient.jms_errors``; ``haclient.errors`` re-exports them all, and is where applications
import them from. This module adds the errors only the AMQP layer raises (``ProtocolError``,
``RedirectError``, ``LinkDetachedError``, ``OpenTimeoutError``, ``AttachTimeoutError``, all
``AMQPError``) and the table that maps every condition to a class.

Rules this module keeps (with those of ``haerrors``):

1. Broker error conditions become exceptions through one table, ``CONDITIONS``, which also says
   which conditions are retriable: a new connection, to this broker or another, may succeed
   where this one failed. The failover manager reconnects for those and gives up at once for
   the rest. ``error_from_condition`` builds the exception; ``is_retriable`` reads the flag.
2. A condition the table does not know is a plain ``AMQPError``, not retriable.
3. It imports nothing of the engine (nor proton): the engine's modules import it, and it loads
   with the exception tree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from haclient.jms_errors import (
    AcknowledgeFailedError,
    ClientIdInUseError,
    InvalidDestinationError,
    MessageFormatError,
    NotImplementedByBrokerError,
    ResourceLimitError,
    ResourceLockedError,
    TransactionRolledBackError,
)
from haerrors import (
    AMQPError,
    AuthenticationError,
    ConnectionLostError,
    HAClientError,
    IllegalStateError,
    condition_text,
    publish,
)

__all__ = [
    "CONDITIONS",
    "AttachTimeoutError",
    "ConditionRule",
    "LinkDetachedError",
    "OpenTimeoutError",
    "ProtocolError",
    "RedirectError",
    "error_from_condition",
    "is_retriable",
]


# --- The protocol layer's errors -------------------------------------------------------------


class ProtocolError(AMQPError):
    """A peer broke the AMQP protocol: bytes that are not AMQP, bad framing, a violated window.

    Usually a bug in one of the peers; ``amqp:connection:framing-error`` is also what a socket
    that dies mid-frame looks like, which is why that one condition is retriable.
    """


class RedirectError(AMQPError):
    """The broker redirected the connection or link elsewhere; the failover manager follows.

    The target is in ``info`` (``network-host``, ``port``, ``hostname``, ``scheme``, ``path``,
    ``address``). ``redirect_to`` is the broker the connection is sent to, a
    ``failover.url.BrokerURL`` (typed ``object``: the engine imports nothing of ``failover``),
    once the connector resolved a connection redirect it may follow (``haclient.aio.redirect``):
    the failover walk tries it next (F18). None: not followed (a link redirect, a garbled one,
    or a downgrade from ``amqps`` that ``amqp.allowNonSecureRedirects`` does not allow; the
    message says which), failover tries the next broker.
    """

    retriable = True
    redirect_to: object | None = None

    @property
    def network_host(self) -> str | None:
        """The host to connect to instead, if the broker gave one."""
        return self._info_str("network-host")

    @property
    def port(self) -> int | None:
        """The port to connect to instead, if the broker gave one."""
        value = (self.info or {}).get("port")
        try:
            return int(value) if value is not None else None
        except (TypeError, ValueError):  # a garbled redirect: the manager treats it as no port
            return None

    @property
    def address(self) -> str | None:
        """The node address to attach to instead (link redirect), if the broker gave one."""
        return self._info_str("address")

    def _info_str(self, key: str) -> str | None:
        value = (self.info or {}).get(key)
        return str(value) if value is not None else None


class LinkDetachedError(AMQPError):
    """The broker closed one producer or consumer; the session and connection still work.

    ``amqp:link:stolen`` means another client attached the same link name (e.g. the same durable
    subscription): attaching again would only steal it back.
    """


class OpenTimeoutError(AMQPError, TimeoutError):
    """The peer accepted the TCP connection but never answered the AMQP Open (or a Begin).

    A hung broker, a half-dead process or something that is not an AMQP broker at all: the
    failover manager skips it and tries the next broker (retriable), as for a refused socket.
    """

    retriable = True


class AttachTimeoutError(AMQPError, TimeoutError):
    """The broker did not answer an attach in time.

    RabbitMQ leaves an attach it cannot grant (e.g. receiver settle mode ``second``)
    unanswered; haclient then falls back to a mode the broker supports and remembers.
    """


# their public name, haclient.errors (rule 5 of haerrors)
publish(ProtocolError, RedirectError, LinkDetachedError, OpenTimeoutError, AttachTimeoutError)


# --- The one table: AMQP error condition -> exception class, and whether retrying may help ----


@dataclass(frozen=True, slots=True)
class ConditionRule:
    """How one AMQP error condition becomes an exception.

    Attributes:
        error: The class to raise (a subclass of ``HAClientError``).
        retriable: True when a new connection, to this broker or another, may succeed.
        summary: What the condition means, for messages when the peer gave no description.
    """

    error: type[HAClientError]
    retriable: bool
    summary: str

    def __post_init__(self) -> None:
        if not (isinstance(self.error, type) and issubclass(self.error, HAClientError)):
            raise TypeError(f"ConditionRule.error must be an HAClientError class: {self.error!r}")


_R = ConditionRule

CONDITIONS: Final[Mapping[str, ConditionRule]] = MappingProxyType(
    {
        # -- amqp-error (AMQP 1.0 section 2.8.15) --
        # The broker failed, not (necessarily) the request: another broker, or this one after
        # a restart, may succeed. The failover policy bounds the attempts.
        "amqp:internal-error": _R(AMQPError, True, "the broker hit an internal error"),
        # Also on Open for an unknown virtual host; same fix: name something that exists.
        "amqp:not-found": _R(InvalidDestinationError, False, "the address does not exist"),
        # Qpid JMS stops reconnecting on security errors too: the next try is refused again.
        "amqp:unauthorized-access": _R(AuthenticationError, False, "access refused"),
        # The peer could not decode what we sent: a bug on one side; retrying repeats it.
        "amqp:decode-error": _R(ProtocolError, False, "the peer could not decode a frame"),
        # A limit is state, not a property of the request (and proton reports an expired idle
        # timeout, i.e. a dead peer, with this condition): another try or broker may succeed.
        "amqp:resource-limit-exceeded": _R(ResourceLimitError, True, "a broker limit is reached"),
        "amqp:not-allowed": _R(IllegalStateError, False, "the operation is not allowed"),
        # With info {invalid-field: container-id} on Open: ClientIdInUseError (see _rule).
        "amqp:invalid-field": _R(AMQPError, False, "a field of the request is invalid"),
        "amqp:not-implemented": _R(
            NotImplementedByBrokerError, False, "the broker does not implement this"
        ),
        "amqp:resource-locked": _R(ResourceLockedError, False, "the resource is locked"),
        "amqp:precondition-failed": _R(IllegalStateError, False, "a precondition failed"),
        "amqp:resource-deleted": _R(InvalidDestinationError, False, "the node was deleted"),
        "amqp:illegal-state": _R(IllegalStateError, False, "not allowed in the current state"),
        "amqp:frame-size-too-small": _R(
            ProtocolError, False, "the maximum frame size is too small"
        ),
        # -- connection-error --
        # An operator or a shutting-down broker closed us: exactly what failover is for.
        "amqp:connection:forced": _R(ConnectionLostError, True, "the broker closed the connection"),
        # Mostly a socket that died mid-frame (proton says "connection aborted"); a fresh
        # connection starts a clean byte stream.
        "amqp:connection:framing-error": _R(ProtocolError, True, "invalid framing"),
        "amqp:connection:redirect": _R(RedirectError, True, "the connection was redirected"),
        # Ours, not the spec's: the socket failed or the peer hung up without a Close frame
        # (haclient.amqp reports it so). The broker may be restarting: try again.
        "haclient:connection-lost": _R(ConnectionLostError, True, "the connection was lost"),
        # Ours too: the TLS handshake failed (an untrusted or misnamed certificate, a missing
        # client certificate). Trying again gets the same answer: fix the configuration.
        "haclient:tls-failed": _R(AuthenticationError, False, "the TLS handshake failed"),
        # Ours too: the client gave up on the SASL login (a SCRAM broker that could not prove it
        # knows the password, an unreadable challenge). The same broker answers the same way.
        "haclient:sasl-failed": _R(AuthenticationError, False, "the SASL login failed"),
        # -- session-error: protocol violations; retrying would hide a bug and may loop --
        "amqp:session:window-violation": _R(
            ProtocolError, False, "the session window was exceeded"
        ),
        "amqp:session:errant-link": _R(ProtocolError, False, "input for a detached link"),
        "amqp:session:handle-in-use": _R(ProtocolError, False, "the link handle is in use"),
        "amqp:session:unattached-handle": _R(
            ProtocolError, False, "the link handle is not attached"
        ),
        # -- link-error --
        # An operator kicked the link on purpose; re-attaching would defeat that.
        "amqp:link:detach-forced": _R(LinkDetachedError, False, "the broker detached the link"),
        "amqp:link:transfer-limit-exceeded": _R(ProtocolError, False, "more transfers than credit"),
        "amqp:link:message-size-exceeded": _R(
            MessageFormatError, False, "the message is too large"
        ),
        "amqp:link:redirect": _R(RedirectError, True, "the link was redirected"),
        # Another client attached the same link name; taking it back would ping-pong.
        "amqp:link:stolen": _R(LinkDetachedError, False, "the link was attached elsewhere"),
        # -- transaction-error: the work is gone, failover cannot bring it back; replay it --
        "amqp:transaction:unknown-id": _R(
            TransactionRolledBackError, False, "the broker does not know the transaction"
        ),
        "amqp:transaction:rollback": _R(
            TransactionRolledBackError, False, "the broker rolled the transaction back"
        ),
        "amqp:transaction:timeout": _R(
            TransactionRolledBackError, False, "the transaction timed out and was rolled back"
        ),
        # -- vendor conditions (Azure Service Bus, reachable through JMS clients) --
        "com.microsoft:server-busy": _R(ResourceLimitError, True, "the service is busy"),
        "com.microsoft:timeout": _R(AMQPError, True, "the service timed out"),
        "com.microsoft:message-lock-lost": _R(
            AcknowledgeFailedError, False, "the message lock was lost; it will be redelivered"
        ),
    }
)
del _R


# amqp:invalid-field with info {invalid-field: container-id} on Open: the client id is taken
# (ActiveMQ, Artemis and Qpid Broker-J say it so, and Qpid JMS recognises it; the one
# info-dependent case). Retriable: after a network fault the holder is mostly our own dead
# connection, which the broker drops once its idle timeout notices the silence (ActiveMQ: 30 s),
# so a failover tries again within its budget, as Qpid JMS does (F4). A first connect that
# makes one pass still raises it at once.
_CLIENT_ID_IN_USE: Final = ConditionRule(
    ClientIdInUseError, True, "another connection already uses this client id"
)


# ActiveMQ 5.x rejects a transfer to a temporary destination that no longer exists (its
# connection failed over or closed) with its catch-all condition ``failed`` and a description
# naming the ``temp-queue://`` (or ``temp-topic://``) address: the JMS meaning is ``not-found``.
_TEMPORARY_GONE: Final = ConditionRule(
    InvalidDestinationError, False, "the temporary destination no longer exists"
)
_TEMPORARY_SCHEMES: Final = ("temp-queue://", "temp-topic://")


def _rule(
    condition: str, info: Mapping[str, Any] | None, description: str | None = None
) -> ConditionRule | None:
    """The rule for ``condition``, refined by ``info`` or ``description`` where the table
    alone cannot decide."""
    if condition == "amqp:invalid-field" and info and info.get("invalid-field") == "container-id":
        return _CLIENT_ID_IN_USE
    if condition == "failed" and any(s in (description or "") for s in _TEMPORARY_SCHEMES):
        return _TEMPORARY_GONE
    return CONDITIONS.get(condition)


def error_from_condition(
    condition: str,
    description: str | None = None,
    info: Mapping[str, Any] | None = None,
    *,
    context: str | None = None,
    local: bool = False,
) -> HAClientError:
    """Build the exception for an AMQP error condition the peer (or the transport) reported.

    Args:
        condition: The condition symbol, e.g. ``"amqp:not-found"``.
        description: The peer's description, if any.
        info: The condition's info map, if any.
        context: What haclient was doing, put in parentheses at the end of the message, e.g.
            ``"while attaching receiver to 'x'"``.
        local: The condition is the client's own verdict (``ErrorCondition.local``): its
            description is shown whole, not cut as a peer's is.

    Returns:
        An instance of the class ``CONDITIONS`` names (``AMQPError``, not retriable, for a
        condition not in the table), carrying ``condition``, ``description``, ``info`` and the
        rule's ``retriable``. It is returned, not raised.
    """
    rule = _rule(condition, info, description)
    error = AMQPError if rule is None else rule.error
    text = description or (rule.summary if rule is not None else None)
    return error(
        condition_text(condition, text, context, whole=local),
        condition=condition,
        description=description,
        info=info,
        retriable=rule is not None and rule.retriable,
    )


def is_retriable(condition: str) -> bool:
    """Whether a new connection may succeed after ``condition`` (False if unknown)."""
    rule = CONDITIONS.get(condition)
    return rule is not None and rule.retriable
