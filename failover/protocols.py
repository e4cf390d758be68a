"""What the failover manager is given, and the order it restores resources in.

The manager (``failover.manager``) is written against these protocols only, so that it knows
nothing of AMQP: ``haclient.aio`` supplies the connector, its physical connection class and its
resources. Nothing here imports anyio; ``restore_tiers`` is the pure decision of which
resources restore, in which tiers.

- ``ManagedConnection``: one physical connection, as far as the manager needs to know it
  (``wait_closed`` and ``close``).
- ``Connector``: opens one ``ManagedConnection`` to one ``BrokerURL``.
- ``Adopter``: the client's part when a connection becomes the one in use; it answers with
  the brokers that connection's broker announced, and calls nothing back.
- ``Resource``: something built on the physical connection that failover builds again;
  ``RestoreOrder`` suggests its ``restore_order``. A ``StagedResource`` can also begin its
  restore without waiting for the answer.
- ``FailoverListener``: the failover notifications (F14).
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, TypeVar

from failover.url import BrokerURL

__all__ = [
    "Adopter",
    "Connector",
    "FailoverListener",
    "Finish",
    "ManagedConnection",
    "Resource",
    "RestoreOrder",
    "StagedResource",
    "restore_tiers",
]


class ManagedConnection(Protocol):
    """One physical connection to one broker, as far as the manager needs to know it."""

    @property
    def is_open(self) -> bool:
        """False once the connection has ended (``wait_closed`` may not have returned yet)."""
        ...

    async def wait_closed(self) -> BaseException | None:
        """Return when the connection has ended: the error that ended it, None if orderly."""
        ...

    async def close(self) -> None:
        """Close the connection (idempotent); ``wait_closed`` then returns."""
        ...


P = TypeVar("P", bound=ManagedConnection)
P_contra = TypeVar("P_contra", contravariant=True)

#: Opens one physical connection to one broker; raises on failure (the cause F4 reports).
Connector = Callable[[BrokerURL], Awaitable[P]]

#: The client takes a physical connection into use (the first connect, each failover, whichever
#: connector opened it), before anything is restored on it: the one its sessions see from now
#: on. It returns the brokers that connection's broker announced (its Open's list, F12; None or
#: empty: none), which the supervisor hands the failover machine itself, after the actions of the
#: adoption: the client tells the manager nothing. Called synchronously; must not block.
Adopter = Callable[[P], Iterable[BrokerURL] | None]


class RestoreOrder(enum.IntEnum):
    """Suggested ``restore_order`` values: what a resource depends on is restored first."""

    TEMPORARY_DESTINATION = 0
    SESSION = 1
    PRODUCER = 2
    CONSUMER = 3
    BROWSER = 4


class Resource(Protocol[P_contra]):
    """Something built on the physical connection that failover must build again.

    Subclass it to inherit the no-op ``connection_lost``.
    """

    #: The tier it restores in (see ``RestoreOrder`` and ``restore_tiers``): lower first.
    restore_order: int

    async def restore(self, connection: P_contra, epoch: int) -> None:
        """Build this resource again on ``connection`` (of ``epoch``), which the gate does
        not hand out yet: use it directly, never ``wait_connected()``. The other resources of
        the same tier restore concurrently with it; those of lower tiers have finished.

        Raises:
            ConnectionLostError: The connection died meanwhile; the manager tries the next
                broker. So does any exception raised once the connection is no longer open
                (the peer's reason for closing it, say). Any other exception is reported as
                ``resource_not_restored``.
        """
        ...

    def connection_lost(self, epoch: int, cause: BaseException) -> None:
        """The connection of ``epoch`` was lost; called at once, before any reconnect (F7-F9:
        mark a transaction dirty, drop prefetched messages). Must not block."""
        return None


#: What is left of a restore begun by ``StagedResource.begin_restore``: call and await it.
Finish = Callable[[], Awaitable[None]]


class StagedResource(Resource[P_contra], Protocol):
    """A resource whose restore can be begun without waiting (a request sent, its answer to
    come), so that many restore for the price of one round trip and no task each.

    The manager calls ``begin_restore`` instead of ``restore``: on every such resource of a
    tier, one after the other, before it waits for any; then it awaits what they returned, in
    the same order, in one task.
    """

    def begin_restore(self, connection: P_contra, epoch: int) -> Finish | None:
        """Begin building this resource again on ``connection``: send what needs sending
        and return what is left (awaiting the answer), or None when nothing is. Must not block.

        Raises:
            ConnectionLostError: as ``restore``, from this call or from the one it returns
                (and any other exception, as there).
        """
        ...


R = TypeVar("R", bound=Resource[Any])


def restore_tiers(resources: Iterable[R]) -> tuple[tuple[R, ...], ...]:
    """The resources in the tiers they restore in: one tier per ``restore_order`` value,
    lowest first, each tier in the order of ``resources`` (registration order).

    The manager restores a tier's resources concurrently and starts the next tier only when the
    whole tier has finished, so a resource may rely on everything of a lower ``restore_order``
    (a consumer on its session) and on nothing of its own tier. ``connection_lost`` goes to the
    resources in the same order, one after the other.
    """
    ordered = sorted(resources, key=_order)  # stable: ties stay in registration order
    return tuple(tuple(tier) for _, tier in itertools.groupby(ordered, key=_order))


def _order(resource: Resource[Any]) -> int:
    return resource.restore_order


class FailoverListener(Protocol):
    """Failover notifications (F14); subclass it and override what you need.

    Any object will do: a method it lacks is not called. Called synchronously on the manager's
    event loop, in the order listeners were added; must not block. An exception is logged.
    A listener may also have ``state_changed(state)``, called on every change of the
    connection's ``ConnectionState`` (closing included); it is not part of this protocol, so
    that listeners written against it stay complete.
    """

    def failover_started(self, cause: BaseException) -> None:
        """The connection was lost and failover began; calls block until it ends (F2)."""
        return None

    def failover_completed(self, broker: BrokerURL, downtime: float) -> None:
        """Connected to ``broker`` and resources restored after ``downtime`` seconds."""
        return None

    def failover_failed(self, cause: BaseException) -> None:
        """The connection is gone for good (F4): the plan ran out, or failover is off."""
        return None

    def resource_not_restored(self, resource: Resource[Any], error: BaseException) -> None:
        """``resource.restore`` raised ``error``; the resource is left unrestored."""
        return None
