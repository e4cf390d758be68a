"""Everything one broker run holds in memory, and the admin view of it.

How this works: a ``BrokerState`` is created by each ``Broker.start()``: the nodes (``Router``),
the open transactions and the live connections. ``Broker.kill()`` marks it dead and throws it
away, as a crash would; the next start builds a new one and reloads durable messages from the
persistence. The admin methods are plain synchronous reads and changes for tests and tools;
like everything else here they must run on the broker's event loop.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from chaos.broker.nodes import Queue, Topic
from chaos.broker.owner import LiveConnection
from chaos.broker.readiness import WARM, ColdStart, ColdStartRun
from chaos.broker.router import Router
from chaos.broker.subscriptions import SubscriptionInfo
from chaos.broker.topology import FAILOVER_TOPIC, Topology
from chaos.broker.transactions import TransactionManager

__all__ = ["ACTIVEMQ_IDLE_TIMEOUT", "ACTIVEMQ_PREFIXES", "BrokerMode", "BrokerState", "NodeInfo"]


class BrokerMode(enum.Enum):
    """Whose behaviour the broker shows a client where brokers differ.

    ``ACTIVEMQ`` behaves like ActiveMQ 5.x's AMQP transport where that matters to a client, so
    that the client's fallbacks run on a broker CI has: a requested receiver settle mode
    ``second`` is silently granted as ``first``; the Open frame announces the address prefixes
    (``ACTIVEMQ_PREFIXES``); a second connection with a connected container id is refused at
    open (an Open carrying ``amqp:connection-establishment-failed``, then a Close with
    ``amqp:invalid-field`` and info ``{invalid-field: container-id}``); and a dead connection is
    noticed only by its silence: ActiveMQ's AMQP transport advertises a 15 s idle timeout and
    drops a connection silent for 30 s (``ACTIVEMQ_IDLE_TIMEOUT``), so a client that left
    without a word still holds its container id on the broker until then.
    """

    REFERENCE = "reference"
    ACTIVEMQ = "activemq"


ACTIVEMQ_IDLE_TIMEOUT = 15.0
"""The idle timeout (seconds) ActiveMQ 5.x's AMQP transport advertises: it drops a connection
after twice this without a frame (``AmqpWireFormat.DEFAULT_IDLE_TIMEOUT``, 30 s)."""

ACTIVEMQ_PREFIXES = {"queue-prefix": "queue://", "topic-prefix": "topic://"}
"""The address prefixes ActiveMQ announces in its Open frame's properties."""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A snapshot of one node for inspection."""

    name: str
    kind: str
    depth: int
    unacked: int
    consumers: int
    temporary: bool


class BrokerState:
    """Nodes, transactions and connections of one broker run."""

    def __init__(
        self,
        router: Router,
        *,
        refuse_duplicate_container_id: bool = False,
        topology: Topology | None = None,
        mode: BrokerMode = BrokerMode.REFERENCE,
        cold_start: ColdStart = WARM,
    ) -> None:
        self.router = router
        self.mode = mode
        #: This run's cold-start delays, each handed out once.
        self.cold = ColdStartRun(cold_start)
        self.topology = topology
        self.transactions = TransactionManager(router)
        self.connections: dict[int, LiveConnection] = {}
        self.refuse_duplicate_container_id = (
            refuse_duplicate_container_id or mode is BrokerMode.ACTIVEMQ
        )
        self.alive = True
        #: The ``amqp:connection:redirect`` info new Opens are answered with (None: served).
        self.redirect: dict[Any, Any] | None = None

    # Connections -------------------------------------------------------------------------------

    def add(self, connection: LiveConnection) -> None:
        """Register an accepted connection."""
        self.connections[connection.id] = connection

    def forget(self, connection: LiveConnection) -> None:
        """A connection ended."""
        self.connections.pop(connection.id, None)

    def refuses_container(self, container_id: str | None) -> bool:
        """True when a live connection already uses ``container_id`` and that is refused."""
        if not self.refuse_duplicate_container_id or not container_id:
            return False
        return any(c.opened and c.container_id == container_id for c in self.connections.values())

    def publish_membership(self) -> None:
        """Publish the current peer list on ``amq.failover`` (dropped if nobody subscribes)."""
        topic = self.router.find(FAILOVER_TOPIC)
        if self.topology is None or not isinstance(topic, Topic):
            return
        with self.router.persistence.batch():
            self.router.route(topic, self.router.new_message(self.topology.membership_message()))
        for connection in self.connections.values():
            connection.wake()

    # Inspection --------------------------------------------------------------------------------

    def subscriptions(self) -> list[SubscriptionInfo]:
        """Snapshots of the durable and shared topic subscriptions, by queue name."""
        return self.router.subscriptions.infos()

    def _node(self, address: str) -> Queue | Topic:
        node = self.router.find(address)
        if node is None:
            raise KeyError(f"no node {address!r}")
        return node

    def queue_depth(self, address: str) -> int:
        """Messages waiting in a node (a topic: in all its subscriptions).

        Raises:
            KeyError: there is no such node.
        """
        return self._node(address).depth

    def unacked_count(self, address: str) -> int:
        """Messages delivered from a node and not yet settled or committed."""
        return self._node(address).unacked

    def consumer_count(self, address: str) -> int:
        """Consumers attached to a node."""
        return len(self._node(address).consumers)

    def node_info(self, address: str) -> NodeInfo:
        """A snapshot of one node."""
        node = self._node(address)
        return NodeInfo(
            node.name, node.kind, node.depth, node.unacked, len(node.consumers), node.temporary
        )

    def nodes(self) -> list[NodeInfo]:
        """Snapshots of every node, by name."""
        return [self.node_info(name) for name in sorted(self.router.nodes)]

    def connection_container_ids(self) -> list[str | None]:
        """The container ids of the open connections, in connection order."""
        return [c.container_id for c in self.connections.values() if c.opened]

    def open_transactions(self) -> list[bytes]:
        """Ids of the transactions declared and not yet discharged."""
        return self.transactions.open_ids

    def purge(self, address: str) -> int:
        """Drop the waiting messages of a node; return how many."""
        return self._node(address).purge()

    def delete_node(self, address: str) -> bool:
        """Delete a node (its consumers' links are closed); False if there was none."""
        deleted = self.router.delete(address)
        for connection in self.connections.values():
            connection.wake()
        return deleted
