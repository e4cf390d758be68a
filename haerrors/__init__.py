"""The root of haclient's exception tree and the errors both of its lower layers raise.

The bottom layer of the client, under both the AMQP engine (``haclient.amqp``) and the failover
layer (``failover``), which never import each other: each raises or classifies the classes
here, which must therefore be one class for both (``haclient.errors.ConnectionLostError`` is the
class the engine raises when a socket dies and the one the failover layer catches). It imports
nothing but the standard library, and nothing imports it but those two layers and the client.

The tree has four homes, each class in the lowest layer that raises it; ``haclient.errors``
re-exports them all, draws the whole tree, and is where applications import them from:

- here: the root, ``HAClientError``, and the classes both layers need (a bad configuration,
  an illegal state, a closed object, refused credentials, the loss of one connection);
- ``failover.errors``: what only the failover layer raises (``ConnectionFailedError``,
  ``FailoverTimeoutError``, ``PreferredBrokerAvailable``), beside the classes of this module
  it raises or classifies;
- ``haclient.jms_errors``: what only the client means (JMS: an invalid destination or
  selector, a rolled-back transaction, a lost acknowledge ...);
- ``haclient.amqp.conditions``: the protocol's own errors and the table that turns a broker's
  error condition into one of these classes.

A class has one identity wherever it is imported from: ``haclient.ClosedError is
failover.errors.ClosedError is haerrors.ClosedError``.

``AMQPError`` is here, under its public name, only because ``ConnectionLostError`` is one and
the failover layer raises ``ConnectionLostError`` when a physical connection ends; nothing in
this module reads a condition: to it a condition is an opaque string that the peer sent.

Rules this module keeps, for the whole tree:

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
   or of ``failover.errors`` loads nothing but the standard library and those modules.
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
    "AuthenticationError",
    "BrokerNotReadyError",
    "ClosedError",
    "ConditionFields",
    "ConfigurationError",
    "ConnectionLostError",
    "HAClientError",
    "IllegalStateError",
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


class ConditionFields(TypedDict, total=False):
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
        **fields: Unpack[ConditionFields],
    ) -> None:
        self.option = option
        super().__init__(message, **fields)

    def _default_message(self) -> str:
        if self.option is not None and self.condition is None:
            return f"invalid value for {self.option}"
        return super()._default_message()


class IllegalStateError(HAClientError, RuntimeError):
    """The call is not allowed in the object's current state (JMS ``IllegalStateException``).

    Also raised when the broker refuses a call for the same reason (the condition table says
    which conditions), and for a blocking call made from the event-loop thread.
    """


class ClosedError(IllegalStateError):
    """The object, or the session or connection it belongs to, has been closed."""


# --- What the broker refused, and the loss of one connection ----------------------------------


class AuthenticationError(HAClientError):
    """The broker refused the credentials (SASL) or the permission (JMS ``JMSSecurityException``).

    Fix the user, password or the broker's permissions; retrying does not help.
    """


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
    IllegalStateError,
    ClosedError,
    AuthenticationError,
    AMQPError,
    ConnectionLostError,
    BrokerNotReadyError,
)
