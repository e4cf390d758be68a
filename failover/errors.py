"""The errors the failover layer raises or classifies, and nothing else.

What it raises of its own: ``ConnectionFailedError`` (failover gave up), ``FailoverTimeoutError``
(a call waited too long) and ``PreferredBrokerAvailable`` (the cause of a return, F16), defined
here. What it shares with the AMQP engine below the client, which it must not import (nor the
engine it): the root ``HAClientError`` (whose ``retriable`` it reads), ``ConfigurationError``,
``IllegalStateError``, ``ClosedError``, ``AuthenticationError`` (refused credentials end a
failover at once), ``ConnectionLostError`` and ``BrokerNotReadyError`` (a loss, and a broker
the schedule comes back to soon); those live in the bottom layer, ``haerrors``, and are
re-exported here, so that the failover layer imports its errors from one place and a class is
one object under every name (``failover.errors.ClosedError is haclient.errors.ClosedError``).

The errors only a JMS client means (an invalid selector or destination, a lost acknowledge, a
cut browse ...) are the client's (``haclient.jms_errors``), and the protocol's are the
engine's (``haclient.amqp.conditions``); the failover layer classifies them, if ever, by their
``retriable`` alone. ``haclient.errors`` draws the whole tree and is where applications import
it from. The rules of the tree (one root, the four attributes, the public ``__module__``,
pickling through the defining module) are ``haerrors``'s; unpickling an error of this module
loads nothing but the standard library, ``haerrors`` and this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Unpack

from haerrors import (
    AuthenticationError,
    BrokerNotReadyError,
    ClosedError,
    ConditionFields,
    ConfigurationError,
    ConnectionLostError,
    HAClientError,
    IllegalStateError,
    publish,
    without_frames,
)

__all__ = [
    "AuthenticationError",
    "BrokerNotReadyError",
    "ClosedError",
    "ConfigurationError",
    "ConnectionFailedError",
    "ConnectionLostError",
    "FailoverTimeoutError",
    "HAClientError",
    "IllegalStateError",
    "PreferredBrokerAvailable",
    "without_frames",
]


# --- Failover outcomes (SEMANTICS F4, F16) ------------------------------------------------------


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
        **fields: Unpack[ConditionFields],
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
        **fields: Unpack[ConditionFields],
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
        self, message: str = "", *, broker: str | None = None, **fields: Unpack[ConditionFields]
    ) -> None:
        self.broker = broker
        super().__init__(message, **fields)

    def _default_message(self) -> str:
        where = f" ({self.broker})" if self.broker is not None else ""
        return f"returning to a preferred broker{where}"


# their public name, haclient.errors (rule 5 of haerrors)
publish(ConnectionFailedError, FailoverTimeoutError, PreferredBrokerAvailable)
