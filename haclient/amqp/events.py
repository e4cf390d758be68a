"""Events the engine reports: what the peer did, as plain data.

The engine turns proton's collector events into these. They name our own endpoint wrappers
(``Session``, ``Link``, ``Delivery``), never proton objects, and carry everything a handler needs
so it does not have to ask the engine again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from haclient.amqp.types import ErrorCondition, Outcome

if TYPE_CHECKING:
    from haclient.amqp.endpoints import Delivery, Link, Session

__all__ = [
    "ConnectionRemoteClose",
    "ConnectionRemoteOpen",
    "DeliveryUpdated",
    "EngineEvent",
    "LinkFlow",
    "LinkRemoteClose",
    "LinkRemoteOpen",
    "MessageReceived",
    "SessionRemoteClose",
    "SessionRemoteOpen",
    "TransportClosed",
]


@dataclass(frozen=True, slots=True)
class ConnectionRemoteOpen:
    """The peer's Open frame arrived.

    In the server role, answer with ``Engine.open()`` (or ``close()`` to refuse).
    ``user`` is the authenticated SASL identity (server role), or None.
    """

    container_id: str | None
    hostname: str | None
    properties: Mapping[str, Any]
    offered_capabilities: tuple[str, ...]
    desired_capabilities: tuple[str, ...]
    idle_timeout: float
    user: str | None = None


@dataclass(frozen=True, slots=True)
class ConnectionRemoteClose:
    """The peer closed the connection, with its error condition if it gave one."""

    error: ErrorCondition | None


@dataclass(frozen=True, slots=True)
class SessionRemoteOpen:
    """The peer began a session (answer to ours, or a new one in the server role)."""

    session: Session


@dataclass(frozen=True, slots=True)
class SessionRemoteClose:
    """The peer ended a session."""

    session: Session
    error: ErrorCondition | None


@dataclass(frozen=True, slots=True)
class LinkRemoteOpen:
    """The peer attached a link: the answer to our attach, or a new link (server role).

    ``link.locally_opened`` tells the two apart. A peer that refuses an attach answers with
    a null terminus and then a ``LinkRemoteClose`` carrying the reason.
    """

    link: Link


@dataclass(frozen=True, slots=True)
class LinkRemoteClose:
    """The peer detached (``closed=False``) or closed (``closed=True``) a link."""

    link: Link
    error: ErrorCondition | None
    closed: bool


@dataclass(frozen=True, slots=True)
class LinkFlow:
    """Link credit or drain state changed (a Flow frame arrived, or a drain finished)."""

    link: Link


@dataclass(frozen=True, slots=True)
class MessageReceived:
    """A complete message arrived on a receiving link.

    ``payload`` is the encoded message (decode with ``haclient.amqp.codec``). The delivery
    stays unsettled until the handler settles it (unless the sender pre-settled it).
    """

    delivery: Delivery
    payload: bytes


@dataclass(frozen=True, slots=True)
class DeliveryUpdated:
    """The peer changed the state of a delivery we sent, or settled it."""

    delivery: Delivery
    outcome: Outcome | None
    settled: bool


@dataclass(frozen=True, slots=True)
class TransportClosed:
    """The connection's byte stream is finished in both directions.

    ``error`` is None after an orderly close (both Close frames exchanged); otherwise it says why
    the connection ended (``amqp:connection:framing-error`` for garbage or an early EOF,
    ``amqp:resource-limit-exceeded`` for an idle-timeout, ``amqp:unauthorized-access`` for a
    refused login ...).
    """

    error: ErrorCondition | None


EngineEvent: TypeAlias = (
    ConnectionRemoteOpen
    | ConnectionRemoteClose
    | SessionRemoteOpen
    | SessionRemoteClose
    | LinkRemoteOpen
    | LinkRemoteClose
    | LinkFlow
    | MessageReceived
    | DeliveryUpdated
    | TransportClosed
)
