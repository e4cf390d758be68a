"""Addresses to nodes: lookup, creation on first use, temporary nodes and the dead-letter queue.

How this works: every node lives in one namespace keyed by its name. An address names its node
either plainly (a queue unless the terminus capabilities say ``topic``) or with a ``queue://`` /
``topic://`` prefix (ActiveMQ's convention), so ``queue://orders`` and ``orders`` with the
``queue`` capability are the same node. Nodes are created on first use, except temporary ones:
their names start with ``TEMPORARY_PREFIX`` (``temp-queue://`` or ``temp-topic://`` when named as
ActiveMQ names them) and only ``create_temporary`` makes them, so an address of a deleted
temporary node is ``amqp:not-found``.

Topics are ``SubscriptionTopic``s and their subscriptions live in ``subscriptions`` (a
``SubscriptionRegistry``, see ``chaos.broker.subscriptions``): subscription queues are not nodes
of this namespace, so no address routes to them directly. ``amq.failover`` (the broker's
membership announcements) is a topic even when the address does not say so.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections.abc import Callable, Iterable

from chaos.broker.nodes import Node, Queue, StoredMessage, Topic
from chaos.broker.persistence import MemoryPersistence, Persistence
from chaos.broker.schedule import NodePolicy
from chaos.broker.subscriptions import (
    SUBSCRIPTION_PREFIX,
    SubscriptionQueue,
    SubscriptionRegistry,
    SubscriptionTopic,
)
from chaos.broker.topology import FAILOVER_TOPIC
from chaos.broker.wire import parse_header

__all__ = [
    "ACTIVEMQ_TEMPORARY_SCHEMES",
    "TEMPORARY_PREFIX",
    "NodeNotFoundError",
    "Router",
    "expire_to",
    "kind_of",
]

log = logging.getLogger("chaos.broker")

TEMPORARY_PREFIX = "haclient.tmp."
ACTIVEMQ_TEMPORARY_SCHEMES = ("temp-queue://", "temp-topic://")
"""How ActiveMQ's dynamic addresses begin (``temp-queue://ID:host-port-time-n:1:1``)."""
_PREFIXES = (("queue://", "queue"), ("topic://", "topic"))


class NodeNotFoundError(LookupError):
    """No node has this address and none may be created for it.

    Attributes:
        address: The address looked up, when there was one.
    """

    def __init__(self, message: str, address: str | None = None) -> None:
        super().__init__(message)
        self.address = address


def kind_of(address: str, capabilities: Iterable[str] = ()) -> tuple[str, str | None]:
    """``(node name, "queue" | "topic" | None)`` for an address and terminus capabilities."""
    for prefix, kind in _PREFIXES:
        if address.startswith(prefix):
            return address[len(prefix) :], kind
    caps = set(capabilities)
    if caps & {"topic", "temporary-topic"}:
        return address, "topic"
    if caps & {"queue", "temporary-queue"}:
        return address, "queue"
    return address, None


class Router:
    """The broker's nodes.

    Args:
        persistence: Where durable messages of durable queues are recorded.
        dead_letter_queue: The queue rejected messages move to.
        policy: Timers, expiry and redelivery limits, passed to every queue the router creates
            (temporary ones, the dead-letter queue and subscription queues included); default:
            a ``NodePolicy()`` (no timers, no expiry address, no redelivery limit).
        activemq_names: Name temporary nodes as ActiveMQ does (``temp-queue://ID:...``, the
            scheme inside the address) instead of ``TEMPORARY_PREFIX``.
    """

    def __init__(
        self,
        persistence: Persistence | None = None,
        dead_letter_queue: str = "DLQ",
        *,
        policy: NodePolicy | None = None,
        activemq_names: bool = False,
    ) -> None:
        self.activemq_names = activemq_names
        self.persistence = persistence or MemoryPersistence()
        self.dead_letter_queue = dead_letter_queue
        self.policy = policy if policy is not None else NodePolicy()
        self.nodes: dict[str, Node] = {}
        self._message_ids = itertools.count(1)
        self.subscriptions = SubscriptionRegistry(
            self.persistence, self.dead_letter, lambda name: self._topic(name), self.policy
        )

    # Messages ----------------------------------------------------------------------------------

    def new_message(self, payload: bytes, origin: str | None = None) -> StoredMessage:
        """Wrap arrived bytes (reads the header only); ``origin``: the publisher's container id.

        Raises:
            WireError: the message does not start with well-formed sections.
        """
        header, offset = parse_header(payload)
        return StoredMessage(next(self._message_ids), payload, header, offset, origin)

    def recover(self) -> int:
        """Load the durable messages and subscriptions the persistence kept; messages count."""
        count = 0
        recovered_messages = list(self.persistence.recover())
        for name, kind in self.persistence.recovered_nodes():
            if name not in self.nodes:
                self.nodes[name] = self._topic(name) if kind == "topic" else self._queue(name)
        subscriptions = self.subscriptions.recover()
        for recovered in recovered_messages:
            message = self.new_message(recovered.payload)
            message.header.delivery_count = recovered.delivery_count
            queue: Queue | None = subscriptions.get(recovered.queue)
            if queue is None:
                queue = self._queue(recovered.queue)
            queue.messages.append(message)  # already recorded: no enqueue notification
            count += 1
        next_id = getattr(self.persistence, "next_message_id", None)
        if callable(next_id):  # a store numbers recovered messages 1..N and knows what follows
            self._message_ids = itertools.count(max(int(next_id()), count + 1))
        return count

    def route(self, node: Node, message: StoredMessage) -> None:
        """Deliver ``message`` into ``node``."""
        if isinstance(node, Queue):
            node.enqueue(message)
        else:
            node.publish(message)

    def dead_letter(self, message: StoredMessage) -> None:
        """Move a rejected message to the dead-letter queue: a copy with a fresh id (the same
        topic message may be dead-lettered from several subscriptions, and each copy is stored
        under its own id), keeping its header, delivery-count and times."""
        copy = message.copy(next(self._message_ids))
        self._queue(self.dead_letter_queue).enqueue(copy)

    # Nodes -------------------------------------------------------------------------------------

    def _queue(self, name: str) -> Queue:
        node = self.nodes.get(name)
        if isinstance(node, Queue):
            return node
        queue = Queue(
            name, persistence=self.persistence, dead_letter=self.dead_letter, policy=self.policy
        )
        self.nodes[name] = queue
        self.persistence.node_created(name, "queue")
        return queue

    def _topic(self, name: str) -> Topic:
        node = self.nodes.get(name)
        if isinstance(node, Topic):
            return node
        topic = SubscriptionTopic(name)
        self.nodes[name] = topic
        self.persistence.node_created(name, "topic")
        return topic

    def lookup(self, address: str, capabilities: Iterable[str] = ()) -> Node:
        """The node an address names, created (a queue by default) if it does not exist.

        Raises:
            NodeNotFoundError: a temporary node that does not exist (any more), or an empty name.
        """
        name, kind = kind_of(address, capabilities)
        node = self.nodes.get(name)
        if node is not None:
            return node
        if not name or name.startswith(
            (TEMPORARY_PREFIX, SUBSCRIPTION_PREFIX, *ACTIVEMQ_TEMPORARY_SCHEMES)
        ):
            raise NodeNotFoundError(f"no node {address!r}", address)
        if kind == "topic" or (kind is None and name == FAILOVER_TOPIC):
            return self._topic(name)
        return self._queue(name)

    def create_temporary(self, kind: str, owner: int) -> Node:
        """A new uniquely named temporary queue or topic owned by connection ``owner``."""
        if self.activemq_names:
            name = f"temp-{kind}://ID:haclient-broker-{uuid.uuid4().hex}:1:1"
        else:
            name = f"{TEMPORARY_PREFIX}{kind}.{uuid.uuid4().hex}"
        node: Node
        if kind == "topic":
            node = SubscriptionTopic(name, temporary=True, owner=owner)
        else:
            node = Queue(
                name, dead_letter=self.dead_letter, temporary=True, owner=owner, policy=self.policy
            )
        self.nodes[name] = node
        return node

    def subscribe(self, topic: Topic) -> SubscriptionQueue:
        """A new non-durable, unfiltered subscription queue on ``topic``."""
        return self.subscriptions.volatile(topic)

    def delete(self, address: str) -> bool:
        """Delete a node with everything in it; False if there is none."""
        name, _kind = kind_of(address)
        node = self.nodes.pop(name, None)
        if node is None:
            return False
        node.delete()
        if node.owner is None:
            self.persistence.node_deleted(name)
        return True

    def delete_owned(self, owner: int) -> list[str]:
        """Delete the temporary nodes connection ``owner`` created; return their names."""
        names = [name for name, node in self.nodes.items() if node.owner == owner]
        for name in names:
            self.delete(name)
        return names

    def find(self, address: str) -> Node | None:
        """The node an address names, or None (never creates one)."""
        name, _kind = kind_of(address)
        return self.nodes.get(name)


def expire_to(router: Router, address: str | None) -> Callable[[StoredMessage], None] | None:
    """What ``NodePolicy.expire`` should be for a broker whose expiry address is ``address``:
    route a fresh copy of the expired message (a new id, no expiry or delay of its own) there.
    """
    if address is None:
        return None

    def expire(message: StoredMessage) -> None:
        copy = router.new_message(message.wire_bytes())
        copy.timed = True  # due_at and expires_at stay None: it must not expire again
        try:
            node = router.lookup(address)
        except LookupError:
            log.warning("expiry address %r does not exist: an expired message is dropped", address)
            return
        router.route(node, copy)

    return expire
