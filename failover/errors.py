"""The exception tree's generic part: the root and every error that knows no protocol.

These are the errors the failover layer raises (configuration, illegal state, connection
failed, failover timeout, connection lost) and those whose meaning is the application's, not
the wire's (JMS: an invalid destination, a rolled-back transaction, a lost acknowledge ...).
The AMQP side of the tree, the protocol errors and the table that turns a broker's error
condition into one of these classes, lives with the AMQP engine (``haclient.amqp.conditions``);
``haclient.errors`` re-exports both halves, and is where applications import them from. A class
has one identity wherever it is imported from: ``haclient.ClosedError is
failover.errors.ClosedError``.

The whole tree, both halves, is drawn once, in ``haclient.errors``; the classes here are all of
it but ``ProtocolError``, ``RedirectError``, ``LinkDetachedError``, ``OpenTimeoutError`` and
``AttachTimeoutError``.

``AMQPError`` is here, under its public name, only because ``ConnectionLostError`` is one and
the failover manager raises ``ConnectionLostError`` when a physical connection ends; nothing in
this module reads a condition: to it a condition is an opaque string that the peer sent.

Rules this module keeps:

1. One root, ``HAClientError``. A builtin is mixed in only where its meaning matches (a bad value
   is a ``ValueError``, a timeout a ``TimeoutError``, a wrong-state call a ``RuntimeError``), so
   generic code that catches builtins still works. No class shadows a builtin: Python's
   ``ConnectionError`` means an OS-level socket error, so ours are ``ConnectionFailedError`` (the
   logical connection is gone for good) and ``ConnectionLostError`` (one socket died).
2. Every error has the same four attributes: ``condition``, ``description`` and ``info`` (the
   error condition the peer reported, or None when haclient raised it on its own) and
   ``retriable``. To ask "did the broker say this?" test ``exc.condition is not None``;
   ``AMQPError`` is only the home of conditions that have no better meaning for an application.
3. ``retriable`` says whether a new connection, to this broker or another, may succeed where
   this one failed: the failover manager reconnects for those and gives up at once for the
   rest. A class says it by default; an error built from a condition takes the condition
   table's word.
4. Exceptions of other libraries (proton, anyio, ssl, socket) never cross the public API: they
   are translated where they are caught, ``raise SomeHAClientError(...) from exc``.
5. A class shows its public name: its ``__module__`` is ``haclient.errors`` (``PUBLIC_MODULE``,
   set by ``publish`` where the class is defined, as the logger is ``haclient.failover``), the
   module applications import it from, so a traceback says ``haclient.errors.ClosedError``.
   Errors pickle with their attributes (PySpark ships them between processes) through the
   module that defines the class (``HAClientError.__reduce__``): unpickling one of this module
   loads nothing but the standard library.
6. A peer's words reach a message only escaped and cut short: a description may quote bytes of
   a peer that does not speak the protocol (terminal escapes, NULs), which never go into the
   text as they are (``description`` keeps the original); ``condition_text`` writes them.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import Any, Final, TypedDict, Unpack

__all__ = [
    "PUBLIC_MODULE",
    "AMQPError",
    "AcknowledgeFailedError",
    "AuthenticationError",
    "BrokerNotReadyError",
    "BrowserFailoverError",
    "ClientIdInUseError",
    "ClosedError",
    "ConfigurationError",
    "ConnectionFailedError",
    "ConnectionLostError",
    "FailoverTimeoutError",
    "HAClientError",
    "IllegalStateError",
    "InvalidDestinationError",
    "InvalidSelectorError",
    "MessageFormatError",
    "NotImplementedByBrokerError",
    "PreferredBrokerAvailable",
    "ResourceLimitError",
    "ResourceLockedError",
    "TransactionRolledBackError",
    "condition_text",
    "publish",
    "without_frames",
]

PUBLIC_MODULE: Final = "haclient.errors"
"""Where applications import every error from: the ``__module__`` a published class shows."""


# A peer's description goes into exception text: at most this many characters of it, and of
# any bytes it quotes (the engine quotes what it received from a peer that does not speak its
# protocol).
_DESCRIPTION_LIMIT: Final = 200
_QUOTE_LIMIT: Final = 24
_QUOTED: Final = re.compile(r"\['(.*?)'\]", re.DOTALL)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def _printable(text: str, *, whole: bool = False) -> str:
    """``text`` as it may appear in an exception message: unprintable characters escaped
    (``\\x1b``), quoted junk bytes cut to a short excerpt, the whole cut to a few lines unless
    ``whole`` (the client's own words, which the cut would rob of their advice)."""
    text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    text = _QUOTED.sub(lambda m: f"['{_cut(m.group(1), _QUOTE_LIMIT)}']", text)
    return text if whole else _cut(text, _DESCRIPTION_LIMIT)


def condition_text(
    condition: str, description: str | None, context: str | None = None, *, whole: bool = False
) -> str:
    """The message of an error the peer reported: the condition, the peer's description made
    printable and cut short (rule 6), and what haclient was doing, in parentheses. With
    ``whole``, the description is the client's own (a verdict of its SASL layer, say) and is
    not cut: the cut bounds what a peer may put into an exception, not the client's advice.

    ``"amqp:not-found: no queue 'x' (while attaching receiver to 'x')"``.
    """
    text = f"{condition}: {_printable(description, whole=whole)}" if description else condition
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
        condition: The error condition the peer reported (a symbol such as AMQP's
            ``amqp:not-found``) that caused this error, or None when haclient raised it on its
            own.
        description: The peer's free-text description of the condition, if any.
        info: The condition's info map (a copy), if any.
        retriable: True when a new connection, to this broker or another, may succeed where
            this failed. Set from the condition table (``haclient.errors.CONDITIONS``) for
            errors built from a condition; otherwise the class default.
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
            return condition_text(self.condition, self.description)
        return self.description or ""

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle a published class (``publish``) through the module that defines it, not its
        public one, so that unpickling imports no more than that module (rule 5)."""
        reduced = super().__reduce__()
        home = type(self).__dict__.get("_defined_in")
        if home is None:  # an application's own subclass: pickled as Python does
            return reduced  # type: ignore[return-value]
        return (_rebuild, (home, type(self).__qualname__, self.args), *reduced[2:])


def _rebuild(home: str, qualname: str, args: tuple[Any, ...]) -> HAClientError:
    """An error of class ``qualname`` of module ``home`` made from its ``args`` (its other
    attributes are restored from the pickle's state afterwards)."""
    cls: type[HAClientError] = getattr(importlib.import_module(home), qualname)
    return cls(*args)


def without_frames(error: BaseException | None) -> None:
    """Drop the tracebacks of ``error`` and of the errors it was raised from, when ``error``
    is one of this tree: its message says what failed (a translated error quotes the one it
    was raised from), and the frames deep in the client that raised it would only bury that
    in what an application prints. Any other error (a bug) keeps them."""
    if not isinstance(error, HAClientError):
        return
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        current.__traceback__ = None
        current = current.__cause__ or current.__context__


def publish(*classes: type[HAClientError]) -> None:
    """Give ``classes``, defined in the calling module, their public name (``PUBLIC_MODULE``,
    rule 5); pickle still goes through the module that defines them."""
    for cls in classes:
        if "_defined_in" not in cls.__dict__:
            cls._defined_in = cls.__module__  # type: ignore[attr-defined]
            cls.__module__ = PUBLIC_MODULE


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

    Also raised when the broker refuses a call for the same reason (the condition table says
    which conditions), and for a blocking call made from the event-loop thread.
    """


class ClosedError(IllegalStateError):
    """The object, or the session or connection it belongs to, has been closed."""


class ClientIdInUseError(IllegalStateError):
    """Another connection holds this client id (JMS ``InvalidClientIDException``).

    Brokers refuse the connection with a condition that names the client id as the invalid
    field (the condition table knows it). Use another client id, or close the other connection.
    It is ``retriable``: after a network fault the holder is mostly this client's own dead
    connection, which the broker has not noticed yet, so a failover tries again (F4).
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
        first_connect: True when the first connect failed (no connection was ever made):
            the message says "could not connect", naming the broker when there was one.
    """

    def __init__(
        self,
        message: str = "",
        *,
        cause: BaseException | None = None,
        failures: Mapping[str, BaseException] | None = None,
        first_connect: bool = False,
        **fields: Unpack[_ConditionFields],
    ) -> None:
        self.cause = cause
        self.failures: dict[str, BaseException] = dict(failures or {})
        self.first_connect = first_connect
        super().__init__(message, **fields)
        if cause is not None:
            self.__cause__ = cause

    def _default_message(self) -> str:
        gave_up = "could not connect" if self.first_connect else "failover gave up"
        if len(self.failures) == 1 and self.first_connect:
            ((broker, error),) = self.failures.items()
            return self._with_cause(f"could not connect to {broker}: {error}")
        if len(self.failures) > 1:
            each = "; ".join(f"{broker}: {error}" for broker, error in self.failures.items())
            return self._with_cause(f"{gave_up}; the last failure of each broker: {each}")
        if self.cause is not None:
            return f"{gave_up}{':' if self.first_connect else '; last failure:'} {self.cause}"
        return gave_up

    def _with_cause(self, text: str) -> str:
        """``text`` (which names the failures), and the cause unless it is one of them or
        was raised from one (then it is told already)."""
        cause = self.cause
        if cause is not None and all(
            e is not cause and e is not cause.__cause__ for e in self.failures.values()
        ):
            text += f"; last failure: {cause}"
        return text


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

    An expired idle timeout (a silent peer) is reported as this condition too.
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


# --- A peer's error condition with no better meaning, and the loss of one connection -----------


class AMQPError(HAClientError):
    """A broker error condition with no better meaning for an application.

    Also what ``haclient.amqp.conditions.error_from_condition`` returns for a condition it does
    not know. The ``condition``, ``description`` and ``info`` attributes say what the peer
    reported.
    """


class ConnectionLostError(AMQPError):
    """One physical connection ended unexpectedly (the broker forced it, or the socket died).

    The failover manager handles it; applications see ``ConnectionFailedError`` (with this as
    the cause) only when failover gives up or is off.
    """

    retriable = True


class PreferredBrokerAvailable(ConnectionLostError):
    """The cause of a planned failover: a preferred broker accepts connections again, and the
    connection, running on another broker, moves there (F16, ``failover.priorityBackup``).

    Listeners get it as ``failover_started(cause)``; resources are told of it as of a loss
    (``connection_lost``), so an open transaction rolls back (F7) and unacknowledged CLIENT
    messages come again (F8), exactly as after a loss. It is never raised to a caller.

    Attributes:
        broker: The preferred broker moved to, as text with the password masked.
    """

    def __init__(
        self, message: str = "", *, broker: str | None = None, **fields: Unpack[_ConditionFields]
    ) -> None:
        self.broker = broker
        super().__init__(message, **fields)

    def _default_message(self) -> str:
        where = f" ({self.broker})" if self.broker is not None else ""
        return f"returning to a preferred broker{where}"


class BrokerNotReadyError(ConnectionLostError):
    """A connect attempt's TCP connection was accepted, then closed before a single byte came
    back: the broker listens but does not serve yet (a new master of a shared-store pair in its
    first milliseconds), or a proxy has nothing behind it.

    The reconnect schedule comes back to such a broker sooner than to one that refused the
    connection (``failover.schedule``); otherwise it is a lost connection like any other.
    """


publish(
    HAClientError,
    ConfigurationError,
    InvalidSelectorError,
    IllegalStateError,
    ClosedError,
    ClientIdInUseError,
    ConnectionFailedError,
    FailoverTimeoutError,
    TransactionRolledBackError,
    AcknowledgeFailedError,
    BrowserFailoverError,
    InvalidDestinationError,
    MessageFormatError,
    ResourceLockedError,
    ResourceLimitError,
    AuthenticationError,
    NotImplementedByBrokerError,
    AMQPError,
    ConnectionLostError,
    PreferredBrokerAvailable,
    BrokerNotReadyError,
)
