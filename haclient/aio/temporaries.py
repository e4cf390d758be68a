"""``TemporaryDestinations``: a connection's temporary queues and topics, made and re-made.

How this works: each temporary destination is a dynamic node created by a sender link on an
internal AMQP session; the broker deletes it when the link or the connection goes. After
failover each is created again (F6) and the application's object follows the new address. The
connection's context (haclient.aio.context) owns one; it needs of it only ``TemporaryHost``.

Thread-safety: none; everything runs on the connection's event loop.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from failover.manager import RestoreOrder
from haclient.amqp.connection import Attaching
from haclient.amqp.endpoints import Link, Sender
from haclient.amqp.endpoints import Session as AmqpSession
from haclient.amqp.types import Terminus
from haclient.destination import TemporaryQueue, TemporaryTopic
from haclient.errors import HAClientError, InvalidDestinationError

if TYPE_CHECKING:
    from haclient.aio.options import ConnectionOptions
    from haclient.aio.physical import PhysicalConnection
    from haclient.aio.stats import Counters

__all__ = ["TemporaryDestinations", "TemporaryHost"]

log = logging.getLogger("haclient.connection")


class TemporaryHost(Protocol):
    """What the temporary destinations use of their connection."""

    @property
    def options(self) -> ConnectionOptions: ...

    @property
    def current(self) -> PhysicalConnection | None:
        """The physical connection in use, None before the first."""

    @property
    def counters(self) -> Counters: ...

    def physical(self) -> PhysicalConnection:
        """The physical connection in use; raises if the connection is closed."""

    def link_name(self, kind: str) -> str:
        """A link name unique in this process."""


class TemporaryDestinations:
    """The connection's temporary queues and topics: made, kept and re-made after failover.

    Each is a dynamic node created by a sender link on an internal session; the broker deletes
    it when the link or the connection goes. After failover each is created again and the
    application's object (with every copy of it) follows the new address (F6), so producers,
    consumers and reply-to headers built from it afterwards use the new node; its equality and
    hash stay as they were, so the application's dicts and sets keep finding it.
    """

    restore_order: int = RestoreOrder.TEMPORARY_DESTINATION

    def __init__(self, host: TemporaryHost) -> None:
        self._host = host
        self._session: AmqpSession | None = None
        # Keyed by the object: two destinations may be equal (made with the same address) and
        # still be two nodes, when a broker reuses an address another node had before failover.
        self._links: dict[int, tuple[TemporaryQueue | TemporaryTopic, Link]] = {}

    async def _attach(self, physical: PhysicalConnection, queue: bool, name: str) -> Link:
        await self._open_session(physical)
        link = await self._begin_attach(physical, queue, name).wait()
        _created_address(physical, link)
        return link

    async def _open_session(self, physical: PhysicalConnection) -> None:
        if self._session is None:
            timeout = self._host.options.attach_timeout
            self._session = await physical.amqp.open_session(timeout=timeout)

    def _begin_attach(
        self, physical: PhysicalConnection, queue: bool, name: str
    ) -> Attaching[Sender]:
        assert self._session is not None
        capability = "temporary-queue" if queue else "temporary-topic"
        return physical.amqp.open_sender_nowait(
            Terminus(dynamic=True, capabilities=(capability,)),
            session=self._session,
            name=name,
            timeout=self._host.options.attach_timeout,
        )

    async def create(self, *, queue: bool) -> TemporaryQueue | TemporaryTopic:
        """A new temporary queue (or topic) on the connection in use."""
        physical = self._host.physical()
        link = await self._attach(physical, queue, self._host.link_name("temporary"))
        address = link.remote_target.address
        assert address is not None
        destination: TemporaryQueue | TemporaryTopic = (
            TemporaryQueue(address) if queue else TemporaryTopic(address)
        )
        self._links[id(destination)] = (destination, link)
        return destination

    def delete(self, destination: TemporaryQueue | TemporaryTopic) -> None:
        """Delete ``destination`` (its link goes, and the broker deletes the node).

        Raises:
            InvalidDestinationError: this connection did not create it.
        """
        entry = self._links.pop(id(destination), None)
        if entry is None:
            raise InvalidDestinationError(f"{destination} was not created by this connection")
        current = self._host.current
        if current is not None and current.is_open:
            current.amqp.detach(entry[1])

    def connection_lost(self, epoch: int, cause: BaseException) -> None:
        self._session = None

    async def restore(self, physical: PhysicalConnection, epoch: int) -> None:
        """Create every node again, the attaches all sent before the first answer is awaited
        (one round trip for all); one that fails does not keep the others from following
        (F6), and the first failure is raised at the end."""
        if not self._links:
            return
        await self._open_session(physical)
        attaches = [
            (
                key,
                destination,
                self._begin_attach(physical, isinstance(destination, TemporaryQueue), link.name),
            )
            for key, (destination, link) in list(self._links.items())
        ]
        failure: Exception | None = None
        for key, destination, attaching in attaches:
            try:
                fresh = await attaching.wait()
                address = _created_address(physical, fresh)
            except HAClientError as exc:
                failure = failure or exc
                continue
            self._follow(key, destination, fresh, address)
        if failure is not None:
            raise failure

    def _follow(
        self, key: int, destination: TemporaryQueue | TemporaryTopic, fresh: Link, address: str
    ) -> None:
        """``destination`` (and its copies) now names the node ``fresh`` created (F6)."""
        if address != destination.address:
            log.info("temporary destination %s is now %s", destination.address, address)
            destination._follow(address)
        self._links[key] = (destination, fresh)
        self._host.counters.temporaries_restored += 1


def _created_address(physical: PhysicalConnection, link: Link) -> str:
    """The address of the node a dynamic sender ``link`` created (none: it is detached)."""
    address = link.remote_target.address
    if not address:
        physical.amqp.detach(link)
        raise HAClientError("the broker created a temporary destination without an address")
    return address
