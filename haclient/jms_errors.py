"""The errors only the client means: what a JMS application is told, whatever the protocol.

An invalid selector or destination, a rolled-back transaction, a lost acknowledge, a browse cut
by a failover, a message that cannot be built, a locked resource, a broker limit or a missing
feature. The failover layer never raises these nor needs to tell them apart (it reads
``retriable``, rule 3 of ``haerrors``), so they are not its (``failover.errors``); the AMQP
engine raises some of them (``MessageFormatError`` from its codec) and its condition table
(``haclient.amqp.conditions``) builds the others from a broker's error condition, so they sit
below the engine, on the root ``haerrors``. ``haclient.errors`` re-exports them with the rest
of the tree, and is where applications import them from.
"""

from __future__ import annotations

from typing import Any, Unpack

from haerrors import ConditionFields, HAClientError, IllegalStateError, publish

__all__ = [
    "AcknowledgeFailedError",
    "BrowserFailoverError",
    "ClientIdInUseError",
    "InvalidDestinationError",
    "InvalidSelectorError",
    "MessageFormatError",
    "NotImplementedByBrokerError",
    "ResourceLimitError",
    "ResourceLockedError",
    "TransactionRolledBackError",
]


# --- Usage errors: fix the code ----------------------------------------------------------------


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


class ClientIdInUseError(IllegalStateError):
    """Another connection holds this client id (JMS ``InvalidClientIDException``).

    Brokers refuse the connection with a condition that names the client id as the invalid
    field (the condition table knows it). Use another client id, or close the other connection.
    It is ``retriable``: after a network fault the holder is mostly this client's own dead
    connection, which the broker has not noticed yet, so a failover tries again (F4).
    """


# --- Outcomes of a failover for what was under way (SEMANTICS F7, F8, F10) -----------------------


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
        **fields: Unpack[ConditionFields],
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
        self, message: str = "", *, in_doubt: bool = False, **fields: Unpack[ConditionFields]
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
        **fields: Unpack[ConditionFields],
    ) -> None:
        self.feature = feature
        super().__init__(message, **fields)

    def _default_message(self) -> str:
        base = super()._default_message()
        if self.feature is None:
            return base
        text = f"the broker does not implement {self.feature}"
        return f"{text} ({base})" if base else text


# their public name, haclient.errors (rule 5 of haerrors)
publish(
    InvalidSelectorError,
    ClientIdInUseError,
    TransactionRolledBackError,
    AcknowledgeFailedError,
    BrowserFailoverError,
    InvalidDestinationError,
    MessageFormatError,
    ResourceLockedError,
    ResourceLimitError,
    NotImplementedByBrokerError,
)
