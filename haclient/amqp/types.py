"""Plain values that cross the engine's boundary: error conditions, termini, outcomes.

These are frozen dataclasses with no proton objects inside, so the layers above the engine can
keep, compare and log them freely. The AMQP scalar types that have no Python equivalent
(``Symbol``, ``ULong``, ``Byte`` ...) are proton's own ``str``/``int``/``float`` subclasses,
re-exported here under our names: they are plain values, and re-using them keeps encoding free of
conversions on the hot path.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from proton import (
    Array,
    Described,
    byte,
    char,
    decimal32,
    decimal64,
    decimal128,
    float32,
    int32,
    short,
    symbol,
    timestamp,
    ubyte,
    uint,
    ulong,
    ushort,
)

Symbol = symbol
ULong = ulong
UInt = uint
UShort = ushort
UByte = ubyte
Byte = byte
Short = short
Int = int32
Float = float32
Char = char
Timestamp = timestamp
Decimal32 = decimal32
Decimal64 = decimal64
Decimal128 = decimal128
AmqpArray = Array
AmqpDescribed = Described

CONNECTION_LOST = "haclient:connection-lost"
"""Condition name for a connection that ended without a Close frame (socket failure, EOF)."""

TLS_FAILED = "haclient:tls-failed"
"""Condition name for a TLS handshake that failed (untrusted or misnamed certificate ...)."""

SASL_FAILED = "haclient:sasl-failed"
"""Condition name for a SASL login the client gave up on (a SCRAM server signature that does
not match: the broker could not prove it knows the password)."""

__all__ = [
    "ACCEPTED",
    "CONNECTION_LOST",
    "RELEASED",
    "SASL_FAILED",
    "TLS_FAILED",
    "Accepted",
    "AmqpArray",
    "AmqpDescribed",
    "Byte",
    "Char",
    "Decimal32",
    "Decimal64",
    "Decimal128",
    "Declared",
    "Distribution",
    "Durability",
    "ErrorCondition",
    "ExpiryPolicy",
    "Float",
    "Int",
    "Modified",
    "Outcome",
    "Received",
    "ReceiverSettleMode",
    "Rejected",
    "Released",
    "SenderSettleMode",
    "Short",
    "Symbol",
    "Terminus",
    "TerminusKind",
    "Timestamp",
    "TransactionalState",
    "UByte",
    "UInt",
    "ULong",
    "UShort",
]


@dataclass(frozen=True, slots=True)
class ErrorCondition:
    """An AMQP error condition as the peer (or the transport) reported it.

    Attributes:
        name: The condition symbol, e.g. ``amqp:not-found``.
        description: Free text from the peer, if any.
        info: The condition's info map, if any.
        local: The client's own verdict (the SASL layer's, say), not the peer's: its
            description is the client's own words, shown whole (``condition_text``).
    """

    name: str
    description: str | None = None
    info: Mapping[str, Any] | None = None
    local: bool = False

    def __str__(self) -> str:
        return f"{self.name}: {self.description}" if self.description else self.name


class SenderSettleMode(enum.IntEnum):
    """How the sending end of a link settles (AMQP ``sender-settle-mode``)."""

    UNSETTLED = 0
    SETTLED = 1
    MIXED = 2


class ReceiverSettleMode(enum.IntEnum):
    """When the receiving end settles (AMQP ``receiver-settle-mode``).

    ``SECOND`` means the receiver settles only after the sender settled its side, which is how a
    client learns that the broker has processed its disposition.
    """

    FIRST = 0
    SECOND = 1


class Durability(enum.IntEnum):
    """AMQP ``terminus-durability``."""

    NONE = 0
    CONFIGURATION = 1
    UNSETTLED_STATE = 2


class ExpiryPolicy(enum.Enum):
    """AMQP ``terminus-expiry-policy``."""

    LINK_DETACH = "link-detach"
    SESSION_END = "session-end"
    CONNECTION_CLOSE = "connection-close"
    NEVER = "never"


class Distribution(enum.Enum):
    """AMQP ``distribution-mode`` of a source."""

    UNSPECIFIED = None
    MOVE = "move"
    COPY = "copy"


class TerminusKind(enum.Enum):
    """What a terminus names: a node, a transaction coordinator, or nothing (a null terminus)."""

    NODE = "node"
    COORDINATOR = "coordinator"
    NULL = "null"


@dataclass(frozen=True, slots=True)
class Terminus:
    """A link's source or target.

    ``capabilities`` are symbols such as ``queue``, ``topic``, ``temporary-queue``, ``shared``;
    ``filter`` maps filter names to described values (selector, no-local).
    """

    address: str | None = None
    kind: TerminusKind = TerminusKind.NODE
    durable: Durability = Durability.NONE
    expiry_policy: ExpiryPolicy = ExpiryPolicy.SESSION_END
    timeout: int = 0
    dynamic: bool = False
    capabilities: tuple[str, ...] = ()
    filter: Mapping[str, Any] | None = None
    distribution: Distribution = Distribution.UNSPECIFIED
    dynamic_node_properties: Mapping[str, Any] | None = None
    outcomes: tuple[str, ...] = ()

    @classmethod
    def null(cls) -> Terminus:
        """A null terminus (an absent source or target, as in an unsubscribe attach)."""
        return cls(kind=TerminusKind.NULL)

    @classmethod
    def coordinator(cls, capabilities: tuple[str, ...] = ("amqp:local-transactions",)) -> Terminus:
        """A transaction-coordinator target."""
        return cls(kind=TerminusKind.COORDINATOR, capabilities=capabilities)


# Outcomes and delivery states ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Accepted:
    """The message was processed (terminal)."""


@dataclass(frozen=True, slots=True)
class Released:
    """The message was not processed; deliver it again, delivery count unchanged (terminal)."""


@dataclass(frozen=True, slots=True)
class Modified:
    """The message was not processed and comes back annotated (terminal)."""

    delivery_failed: bool = False
    undeliverable_here: bool = False
    annotations: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Rejected:
    """The message is invalid and will not be processed (terminal)."""

    error: ErrorCondition | None = None


@dataclass(frozen=True, slots=True)
class Received:
    """How much of a delivery has been received (non-terminal)."""

    section_number: int = 0
    section_offset: int = 0


@dataclass(frozen=True, slots=True)
class Declared:
    """A coordinator's answer to a ``declare``: the new transaction's id."""

    txn_id: bytes


@dataclass(frozen=True, slots=True)
class TransactionalState:
    """A delivery state that ties a transfer or disposition to a transaction.

    ``outcome`` is the outcome that takes effect when the transaction commits.
    """

    txn_id: bytes
    outcome: Accepted | Released | Modified | Rejected | None = None


Outcome: TypeAlias = (
    Accepted | Released | Modified | Rejected | Received | Declared | TransactionalState
)

ACCEPTED = Accepted()
RELEASED = Released()
