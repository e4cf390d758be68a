"""Every exception haclient raises: one tree, one root, sorted by what the caller does next.

The tree (builtin mixins in parentheses)::

    HAClientError                           the root: ``except HAClientError`` catches them all
      ConfigurationError (ValueError)       a bad URL, option or argument: fix the config or code
      InvalidSelectorError (ValueError)     a message selector that does not parse: fix it
      IllegalStateError (RuntimeError)      not allowed in the object's current state
        ClosedError                         the object (or its session, connection) is closed
        ClientIdInUseError                  another connection holds this client id
      ConnectionFailedError                 failover gave up (F4); ``.cause`` is the last failure
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
        RedirectError                       the broker sent us elsewhere (``.network_host``)
        LinkDetachedError                   the broker closed one producer or consumer
        OpenTimeoutError (TimeoutError)     the peer never answered an Open or Begin: a hung
                                            broker; failover skips it (retriable)
        AttachTimeoutError (TimeoutError)   the broker never answered an attach

Rules this module keeps:

1. One root, ``HAClientError``. A builtin is mixed in only where its meaning matches (a bad value
   is a ``ValueError``, a timeout a ``TimeoutError``, a wrong-state call a ``RuntimeError``), so
   generic code that catches builtins still works. No class shadows a builtin: Python's
   ``ConnectionError`` means an OS-level socket error, so ours are ``ConnectionFailedError`` (the
   logical connection is gone for good) and ``ConnectionLostError`` (one socket died).
2. Every error has the same four attributes: ``condition``, ``description`` and ``info`` (the AMQP
   error condition that caused it, or None when haclient raised it on its own) and ``retriable``.
   To ask "did the broker say this?" test ``exc.condition is not None``; ``AMQPError`` is only
   the home of conditions that have no better meaning for an application.
3. Broker error conditions become exceptions through one table, ``CONDITIONS``, which also says
   which conditions are retriable: a new connection, to this broker or another, may succeed where
   this one failed. The failover manager reconnects for those and gives up at once for the rest.
   ``error_from_condition`` builds the exception; ``is_retriable`` reads the flag.
4. Exceptions of other libraries (proton, anyio, ssl, socket) never cross the public API: they
   are translated where they are caught, ``raise SomeHAClientError(...) from exc``.
5. Errors pickle with their attributes (PySpark ships them between processes).
6. A peer's words reach a message only escaped and cut short: a description may quote bytes of
   a peer that does not speak AMQP (terminal escapes, NULs), which never go into the text as
   they are (``description`` keeps the original).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, TypedDict, Unpack

__all__ = [
    "CONDITIONS",
    "AMQPError",
    "AcknowledgeFailedError",
    "AttachTimeoutError",
    "AuthenticationError",
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
    "ProtocolError",
    "RedirectError",
    "ResourceLimitError",
    "ResourceLockedError",
    "TransactionRolledBackError",
    "error_from_condition",
    "is_retriable",
]


# A peer's description goes into exception text: at most this many characters of it, and of
# any bytes it quotes (proton quotes what it received from a peer that does not speak AMQP).
_DESCRIPTION_LIMIT: Final = 200
_QUOTE_LIMIT: Final = 24
_QUOTED: Final = re.compile(r"\['(.*?)'\]", re.DOTALL)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def _printable(text: str) -> str:
    """``text`` as it may appear in an exception message: unprintable characters escaped
    (``\\x1b``), quoted junk bytes cut to a short excerpt, the whole cut to a few lines."""
    text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    text = _QUOTED.sub(lambda m: f"['{_cut(m.group(1), _QUOTE_LIMIT)}']", text)
    return _cut(text, _DESCRIPTION_LIMIT)


def _format(condition: str, description: str | None, context: str | None = None) -> str:
    """``"amqp:not-found: no queue 'x' (while attaching receiver to 'x')"``."""
    text = f"{condition}: {_printable(description)}" if description else condition
    return f"{text} ({context})" if context else text


class _ConditionFields(TypedDict, total=False):
    """The keyword arguments every error accepts (see ``HAClientError``)."""

    condition: str | None
    description: str | None
    info: Mapping[str, Any] | None
    retriable: bool | None


class HAClientError(Exception):
    """The root of every error haclient raises.

    Attributes:
        condition: The AMQP error condition (``amqp:not-found`` ...) that caused this error, or
            None when haclient raised it on its own.
        description: The peer's free-text description of the condition, if any.
        info: The condition's info map (a copy), if any.
        retriable: True when a new connection, to this broker or another, may succeed where
            this failed. Set from ``CONDITIONS`` for errors built from a condition; otherwise
            the class default.
    """

    retriable: bool = False

    def __init__(
        self,
        message: str = "",
        *,
        condition: str | None = None,
        description: str | None = None,
        info: Mapping[str, Any] | None = None,
        retriable: bool | None = None,
    ) -> None:
        self.condition = condition
        self.description = description
        self.info: dict[str, Any] | None = dict(info) if info is not None else None
        if retriable is not None:
            self.retriable = retriable
        super().__init__(message or self._default_message())

    def _default_message(self) -> str:
        """The message when none is given; subclasses say what happened in their own words."""
        if self.condition is not None:
            return _format(self.condition, self.description)
        return self.description or ""


# --- Usage errors: fix the code or the configuration --------------------------------------------


class ConfigurationError(HAClientError, ValueError):
    """An invalid URL, option or argument value.

    Attributes:
        option: The option or argument at fault (``failover.retries``), if known.
    """

    def __init__(
        self,
        message: str = "",
        *,
        option: str | None = None,
        **fields: Unpack[_ConditionFields],
    ) -> None:
        self.option = option
        super().__init__(message, **fields)

    def _default_message(self) -> str:
        if self.option is not None and self.condition is None:
            return f"invalid value for {self.option}"
        return super()._default_message()


class InvalidSelectorError(HAClientError, ValueError):
    """A message selector that is not valid JMS selector syntax.

    It is a ``ValueError`` because the selector is an argument whose value is wrong, whether
    haclient's parser or the broker found out; nothing but a corrected selector fixes it. It is
    not a ``ConfigurationError``, which is about URLs and options.

    Attributes:
        column: The 1-based column where haclient's parser found the selector wrong, or None
            (e.g. when the broker refused it).
    """

    def __init__(self, message: str = "", *, column: int | None = None, **fields: Any) -> None:
        self.column = column
        super().__init__(message, **fields)


class IllegalStateError(HAClientError, RuntimeError):
    """The call is not allowed in the object's current state (JMS ``IllegalStateException``).

    Also raised for the broker's ``amqp:illegal-state``, ``amqp:not-allowed`` and
    ``amqp:precondition-failed``, and for a blocking call made from the event-loop thread.
    """


class ClosedError(IllegalStateError):
    """The object, or the session or connection it belongs to, has been closed."""


class ClientIdInUseError(IllegalStateError):
    """Another connection holds this client id (JMS ``InvalidClientIDException``).

    Brokers refuse the Open with ``amqp:invalid-field`` and info ``{invalid-field: container-id}``
    (ActiveMQ, Artemis, Qpid Broker-J), as Qpid JMS recognises. Use another client id, or close
    the other connection.
    """


# --- Failover outcomes (SEMANTICS F4, F7, F8, F10) --------------------------------------------


class ConnectionFailedError(HAClientError):
    """Failover gave up: the policy is exhausted and the connection is gone for good (F4).

    Every blocked call and every later call on the connection raises this. Build a new
    connection to go on.

    Attributes:
        cause: The last failure that failover saw (also set as ``__cause__``), if any.
        failures: The last failure of each broker that the last connect or failover tried,
            by broker (as text, password masked); the message names each.
    """

    def __init__(
        self,
        message: str = "",
        *,
        cause: BaseException | None = None,
        failures: Mapping[str, BaseException] | None = None,
        **fields: Unpack[_ConditionFields],
    ) -> None:
        self.cause = cause
        self.failures: dict[str, BaseException] = dict(failures or {})
        super().__init__(message, **fields)
        if cause is not None:
            self.__cause__ = cause

    def _default_message(self) -> str:
        if len(self.failures) > 1:
            each = "; ".join(f"{broker}: {error}" for broker, error in self.failures.items())
            text = f"failover gave up; the last failure of each broker: {each}"
            if self.cause is not None and all(e is not self.cause for e in self.failures.values()):
                text += f"; last failure: {self.cause}"
            return text
        if self.cause is not None:
            return f"failover gave up; last failure: {self.cause}"
        return "failover gave up"


class FailoverTimeoutError(HAClientError, TimeoutError):
    """A call blocked by failover for longer than its limit (``failover.timeout``, or the
    call's own ``timeout``) (F4).

    Failover goes on in the background; the call may be tried again.

    Attributes:
        timeout: The limit that was exceeded, in seconds, if known.
        broker: The broker failover was trying (or about to try) then, as text with the
            password masked, if known.
        attempts: The number of that attempt in the failover under way (1 for the first), if
            known.
    """

    def __init__(
        self,
        message: str = "",
        *,
        timeout: float | None = None,
        broker: str | None = None,
        attempts: int | None = None,
        **fields: Unpack[_ConditionFields],
    ) -> None:
        self.timeout = timeout
        self.broker = broker
        self.attempts = attempts
        super().__init__(message, **fields)

    def _default_message(self) -> str:
        text = "still failing over"
        if self.timeout is not None:
            text += f" after {self.timeout:g} s"
        where = []
        if self.attempts is not None:
            where.append(f"attempt {self.attempts}")
        if self.broker is not None:
            where.append(f"trying {self.broker}")
        return f"{text} ({', '.join(where)})" if where else text


_IN_DOUBT = "the broker may have committed the transaction"


class TransactionRolledBackError(HAClientError):
    """The transaction did not commit (F7); the session is usable and the work may be replayed.

    Attributes:
        in_doubt: True when the connection failed while the commit was in flight, so the broker
            may have committed after all. Check (e.g. for the sent message ids) before replaying.
    """

    def __init__(
        self,
        message: str = "",
        *,
        in_doubt: bool = False,
        **fields: Unpack[_ConditionFields],
    ) -> None:
        self.in_doubt = in_doubt
        # F7: an in-doubt error must say so whatever message the raiser chose.
        if in_doubt and message and "may have committed" not in message:
            message = f"{message} (in doubt: {_IN_DOUBT})"
        super().__init__(message, **fields)

    def _default_message(self) -> str:
        if self.in_doubt:
            return (
                "the commit is in doubt: the connection failed while it was in flight, so "
                f"{_IN_DOUBT}; check before replaying it"
            )
        if self.condition is not None:
            return f"transaction rolled back: {super()._default_message()}"
        return "the transaction was rolled back; its sends and acknowledgements were discarded"


class AcknowledgeFailedError(HAClientError):
    """An acknowledge (or recover) could not be done; drop the messages: nothing is lost (F8).

    Raised in CLIENT_ACKNOWLEDGE mode when a failover came between the delivery and the
    acknowledge, and for a broker that lost the delivery's lock. Then nothing was acknowledged
    and the session was recovered: every message it had not acknowledged is delivered again.

    Attributes:
        in_doubt: True when the connection ended with the acknowledgement on its way: the
            broker may have applied it (then it does not redeliver those messages) or not (then
            it does, and the duplicate window suppresses the copies). Either way treat the
            messages as acknowledged.
    """

    def __init__(
        self, message: str = "", *, in_doubt: bool = False, **fields: Unpack[_ConditionFields]
    ) -> None:
        self.in_doubt = in_doubt
        if in_doubt and message and "may have applied" not in message:
            message = f"{message} (in doubt: the broker may have applied the acknowledgement)"
        super().__init__(message, **fields)


class BrowserFailoverError(HAClientError):
    """A queue browser's iteration was cut by a failover (F10); create a new browser.

    Deliberately not a ``StopIteration``: that would end a ``for`` loop silently and make a
    full queue look empty.
    """


# --- What the broker refused -----------------------------------------------------------------


class InvalidDestinationError(HAClientError):
    """The queue or topic does not exist or was deleted (JMS ``InvalidDestinationException``)."""


class MessageFormatError(HAClientError):
    """The message cannot be built, read or sent as it is (a wrong type, or too large)."""


class ResourceLockedError(HAClientError):
    """Another client holds the resource exclusively (an exclusive queue, a subscription).

    Also what a broker says when it closed our connection because another one with the same
    client id took over; reconnecting would only take it back.
    """


class ResourceLimitError(HAClientError):
    """A broker limit is reached (memory, connections, queue size); back off, then retry.

    proton also reports an expired idle timeout (a silent peer) with this condition.
    """

    retriable = True


class AuthenticationError(HAClientError):
    """The broker refused the credentials (SASL) or the permission (JMS ``JMSSecurityException``).

    Fix the user, password or the broker's permissions; retrying does not help.
    """


class NotImplementedByBrokerError(HAClientError):
    """The broker does not implement a feature haclient needs and cannot emulate.

    Not a ``NotImplementedError``: that builtin means an abstract method of our own code.

    Attributes:
        feature: The missing capability (``"transactions"``, ``"dynamic nodes"``), if known.
    """

    def __init__(
        self,
        message: str = "",
        *,
        feature: str | None = None,
        **fields: Unpack[_ConditionFields],
    ) -> None:
        self.feature = feature
        super().__init__(message, **fields)

    def _default_message(self) -> str:
        base = super()._default_message()
        if self.feature is None:
            return base
        text = f"the broker does not implement {self.feature}"
        return f"{text} ({base})" if base else text


# --- The protocol layer --------------------------------------------------------------------------


class AMQPError(HAClientError):
    """A broker error condition with no better meaning for an application.

    Also what ``error_from_condition`` returns for a condition it does not know. The
    ``condition``, ``description`` and ``info`` attributes say what the peer reported.
    """


class ProtocolError(AMQPError):
    """A peer broke the AMQP protocol: bytes that are not AMQP, bad framing, a violated window.

    Usually a bug in one of the peers; ``amqp:connection:framing-error`` is also what a socket
    that dies mid-frame looks like, which is why that one condition is retriable.
    """


class ConnectionLostError(AMQPError):
    """One physical connection ended unexpectedly (the broker forced it, or the socket died).

    The failover manager handles it; applications see ``ConnectionFailedError`` (with this as
    the cause) only when failover gives up or is off.
    """

    retriable = True


class RedirectError(AMQPError):
    """The broker redirected the connection or link elsewhere; the failover manager follows.

    The target is in ``info`` (``network-host``, ``port``, ``hostname``, ``address``).
    """

    retriable = True

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
# (the one info-dependent case; Qpid JMS knows it too). Not retriable: at worst the broker still
# holds our own dead connection, which the failover manager may choose to wait out.
_CLIENT_ID_IN_USE: Final = ConditionRule(
    ClientIdInUseError, False, "another connection already uses this client id"
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
) -> HAClientError:
    """Build the exception for an AMQP error condition the peer (or the transport) reported.

    Args:
        condition: The condition symbol, e.g. ``"amqp:not-found"``.
        description: The peer's description, if any.
        info: The condition's info map, if any.
        context: What haclient was doing, put in parentheses at the end of the message, e.g.
            ``"while attaching receiver to 'x'"``.

    Returns:
        An instance of the class ``CONDITIONS`` names (``AMQPError``, not retriable, for a
        condition not in the table), carrying ``condition``, ``description``, ``info`` and the
        rule's ``retriable``. It is returned, not raised.
    """
    rule = _rule(condition, info, description)
    error = AMQPError if rule is None else rule.error
    text = description or (rule.summary if rule is not None else None)
    return error(
        _format(condition, text, context),
        condition=condition,
        description=description,
        info=info,
        retriable=rule is not None and rule.retriable,
    )


def is_retriable(condition: str) -> bool:
    """Whether a new connection may succeed after ``condition`` (False if unknown)."""
    rule = CONDITIONS.get(condition)
    return rule is not None and rule.retriable
