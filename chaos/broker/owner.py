"""What the parts of a client connection know of it: the protocols ``BrokerConnection`` meets.

The broker's state keeps its live connections and link handlers serve one connection each, yet
neither imports ``chaos.broker.connection``: they see a connection through these protocols, so
the imports run one way (connection -> links, browsing, state -> this module).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from chaos.broker.router import Router
    from chaos.broker.transactions import TransactionManager
    from haclient.amqp.types import ErrorCondition

__all__ = ["LinkOwner", "LiveConnection", "Waker"]


class Waker(Protocol):
    """A connection whose driver can be told that its engine has bytes to write."""

    def wake(self) -> None:
        """Let the driver write what the engine has queued."""


class LiveConnection(Waker, Protocol):
    """A connection as the broker's state lists it (and the broker stops it)."""

    @property
    def id(self) -> int:
        """Unique per broker run; owns temporary nodes and transactions."""

    @property
    def opened(self) -> bool:
        """True once its Open was accepted."""

    @property
    def container_id(self) -> str | None:
        """The peer's container id, once it opened."""

    def close(self, error: ErrorCondition | None = None) -> None:
        """Close the connection with a Close frame (the driver ends once the peer answers)."""

    async def wait_ended(self) -> None:
        """Wait until the connection's driver has ended."""


class LinkOwner(LiveConnection, Protocol):
    """A connection as its link handlers see it."""

    @property
    def activemq(self) -> bool:
        """Whether the broker behaves like ActiveMQ (``BrokerMode.ACTIVEMQ``)."""

    @property
    def router(self) -> Router:
        """The broker's nodes."""

    @property
    def transactions(self) -> TransactionManager:
        """The broker's open transactions."""

    def cold_start(self, what: str) -> None:
        """The first ``what`` of a run (``"open"``, ``"attach"``, ``"send"``) is answered that
        much later (``chaos.broker.readiness.ColdStart``); later ones at once."""
