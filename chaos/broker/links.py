"""The broker's side of each link: consumers, producers and the transaction coordinator.

How this works: the connection creates one handler per attached link and forwards that link's
events to it. A ``ConsumerLink`` (the broker sends) is a ``Consumer`` of one queue: the queue
hands it messages while it has credit, and it turns the client's dispositions into queue
outcomes. A ``BrowserLink`` (``chaos.broker.browsing``) is sent copies of a queue's waiting
messages and takes none of them. A ``ProducerLink`` (the broker receives) routes each arriving
message to its node (or, on an anonymous relay link, to the node its ``to`` names) and answers
with the outcome. A ``CoordinatorLink`` declares and discharges transactions.

Settlement (receiver settle mode ``second``): the broker applies the client's outcome first and
settles its side afterwards, so the client's ``settled=True`` confirms the outcome took effect;
it never settles a delivery before the client's disposition arrived.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from chaos.broker.browsing import BrowserLink
from chaos.broker.filters import Matcher
from chaos.broker.nodes import Node, Queue, StoredMessage
from chaos.broker.router import ACTIVEMQ_TEMPORARY_SCHEMES, NodeNotFoundError
from chaos.broker.subscriptions import SubscriptionQueue
from chaos.broker.wire import WireError, read_routing
from haclient.amqp.codec import Declare, decode_coordinator_request
from haclient.amqp.endpoints import Delivery, Receiver, Sender
from haclient.amqp.types import (
    Accepted,
    Declared,
    ErrorCondition,
    Modified,
    Outcome,
    Rejected,
    Released,
    SenderSettleMode,
    TransactionalState,
)
from haclient.errors import MessageFormatError

if TYPE_CHECKING:
    from chaos.broker.owner import LinkOwner

__all__ = ["BrowserLink", "ConsumerLink", "CoordinatorLink", "LinkHandler", "ProducerLink"]

ACCEPTED = Accepted()
CREDIT_WINDOW = 1000
"""Credit the broker keeps granted to each producer (topped up when half is used)."""

_consumer_ids = itertools.count(1)


def _condition(name: str, description: str) -> ErrorCondition:
    return ErrorCondition(name, description)


class ConsumerLink:
    """A link on which the broker sends a queue's messages to a client.

    Args:
        connection: The connection the link belongs to.
        link: The broker's sending end.
        queue: The queue it consumes (a topic subscription's queue for a topic).
        selector: Only messages it accepts are offered (a queue consumer's JMS selector; a
            subscription filters when messages are published instead).
        unsubscribes: The link attached with a null source (a JMS unsubscribe): its detach
            with ``closed=true`` removes the durable subscription if nobody else consumes it.
    """

    def __init__(
        self,
        connection: LinkOwner,
        link: Sender,
        queue: Queue,
        *,
        selector: Matcher | None = None,
        unsubscribes: bool = False,
    ) -> None:
        self.id = next(_consumer_ids)
        self.connection = connection
        self.link = link
        self.queue = queue
        self.selector = selector
        self.unsubscribes = unsubscribes
        self.presettled = link.remote_snd_settle_mode is SenderSettleMode.SETTLED
        self.unsettled: dict[Delivery, StoredMessage] = {}
        self.closed = False

    @property
    def credit(self) -> int:
        """The link's credit (0 once closed)."""
        return 0 if self.closed else self.link.credit

    def deliver(self, message: StoredMessage) -> bool:
        """Transfer ``message``; True if it went pre-settled."""
        delivery = self.link.send(message.wire_bytes(), settled=self.presettled)
        if not self.presettled:
            self.unsettled[delivery] = message
        self.connection.wake()
        return self.presettled

    def on_flow(self) -> None:
        """Credit arrived (or a drain request): send what we can, then give back the rest."""
        self.queue.dispatch()
        if self.link.drain_requested and not self.closed:
            self.link.drained()
            self.connection.wake()

    def on_update(self, delivery: Delivery, outcome: Outcome | None, settled: bool) -> None:
        """The client's disposition for one of our deliveries."""
        message = self.unsettled.get(delivery)
        if message is None:
            return
        if not self._apply(message, outcome, settled):
            return  # nothing decided yet (no state, or the non-terminal received)
        del self.unsettled[delivery]
        delivery.settle()
        self.connection.wake()

    def _apply(self, message: StoredMessage, outcome: Outcome | None, settled: bool) -> bool:
        """Apply a terminal outcome; False (nothing done) for a state that decides nothing.

        A delivery the client settled without a terminal outcome counts as accepted.
        """
        queue = self.queue
        match outcome:
            case Accepted():
                queue.acknowledge(message)
            case Released():
                queue.return_messages((message,), failed=False)
            case Modified(delivery_failed=failed, undeliverable_here=here):
                queue.modify(message, self.id, failed=failed, here=here)
            case Rejected():
                queue.reject(message)
            case TransactionalState(txn_id=txn_id, outcome=inner):
                txn = self.connection.transactions.get(txn_id)
                if txn is None:  # unknown transaction: the acknowledgement does not count
                    queue.return_messages((message,), failed=False)
                else:
                    txn.outcomes.append((queue, message, inner or ACCEPTED, self.id))
            case _:
                if not settled:
                    return False
                queue.acknowledge(message)
        return True

    def node_deleted(self) -> None:
        """The queue or topic was deleted: close the link."""
        if not self.closed and not self.link.is_closed:
            self.link.close(_condition("amqp:resource-deleted", f"{self.queue.name} was deleted"))
            self.connection.wake()
        self.closed = True

    def close(self, closed: bool = False) -> None:
        """The link or its connection went away: unsettled messages return with count + 1.

        ``closed``: the peer detached with ``closed=true`` (it may end a durable subscription).
        """
        self.closed = True
        unsettled = list(self.unsettled.values())
        self.unsettled.clear()
        self.queue.remove_consumer(self, unsettled)
        if isinstance(self.queue, SubscriptionQueue):
            registry = self.connection.router.subscriptions
            registry.released(self.queue, unsubscribe=closed and self.unsubscribes)


class ProducerLink:
    """A link on which a client sends messages to a node (or, with ``node=None``, any node)."""

    def __init__(self, connection: LinkOwner, link: Receiver, node: Node | None) -> None:
        self.connection = connection
        self.link = link
        self.node = node
        link.flow(CREDIT_WINDOW)

    def _replenish(self) -> None:
        credit = self.link.credit
        if credit < CREDIT_WINDOW // 2:
            self.link.flow(CREDIT_WINDOW - credit)

    def on_message(self, delivery: Delivery, payload: bytes) -> None:
        """Route one arrived message and answer with its outcome."""
        outcome = self._route(delivery, payload)
        if delivery.remote_settled:
            delivery.settle()
        else:
            delivery.update(outcome)  # settle mode first: the outcome settles it
        self._replenish()

    def _route(self, delivery: Delivery, payload: bytes) -> Outcome:
        router = self.connection.router
        try:
            message = router.new_message(payload, origin=self.connection.container_id)
        except WireError as exc:
            return Rejected(_condition("amqp:decode-error", str(exc)))
        node = self.node
        try:
            if node is None:
                node = self._relay_node(message)
        except NodeNotFoundError as exc:
            return Rejected(self._not_found(exc.address, str(exc)))
        if node.deleted:
            return Rejected(self._not_found(node.name, f"{node.name} was deleted"))
        state = delivery.remote_outcome
        if isinstance(state, TransactionalState):
            txn = self.connection.transactions.get(state.txn_id)
            if txn is None:
                return Rejected(
                    _condition("amqp:transaction:unknown-id", f"no transaction {state.txn_id!r}")
                )
            txn.sends.append((node, message))
            return TransactionalState(state.txn_id, ACCEPTED)
        router.route(node, message)
        if message.durable:
            self.connection.cold_start("send")
        return ACCEPTED

    def _not_found(self, address: str | None, description: str) -> ErrorCondition:
        """``amqp:not-found``; in ActiveMQ mode, for a temporary destination, what ActiveMQ 5.x
        says instead: its catch-all condition ``failed`` naming the address."""
        if self.connection.activemq and (address or "").startswith(ACTIVEMQ_TEMPORARY_SCHEMES):
            return _condition("failed", f"Cannot publish to a deleted Destination: {address}")
        return _condition("amqp:not-found", description)

    def _relay_node(self, message: StoredMessage) -> Node:
        """The node a message on an anonymous relay link goes to (its ``to``)."""
        try:
            to, jms_dest = read_routing(message.payload, message.body_offset)
        except WireError as exc:
            raise NodeNotFoundError(f"unreadable 'to' address: {exc}") from exc
        if not to:
            raise NodeNotFoundError("a message on an anonymous relay link needs a 'to' address")
        # Qpid JMS says what 'to' names in an annotation: 1 (topic) and 3 (temporary topic).
        capabilities = ("topic",) if jms_dest in (1, 3) else ()
        return self.connection.router.lookup(to, capabilities)

    def on_update(self, delivery: Delivery, settled: bool) -> None:
        """Producer deliveries are settled with their outcome: nothing left to do."""

    def close(self, closed: bool = False) -> None:
        """Nothing to give back: a producer holds no messages."""


class CoordinatorLink:
    """The transaction coordinator: declare and discharge requests arrive as messages."""

    def __init__(self, connection: LinkOwner, link: Receiver) -> None:
        self.connection = connection
        self.link = link
        link.flow(CREDIT_WINDOW)

    def on_message(self, delivery: Delivery, payload: bytes) -> None:
        """Answer a declare with ``Declared`` and a discharge with accepted or rejected."""
        transactions = self.connection.transactions
        outcome: Outcome
        try:
            request = decode_coordinator_request(payload)
        except MessageFormatError as exc:
            outcome = Rejected(_condition("amqp:decode-error", str(exc)))
        else:
            if isinstance(request, Declare):
                outcome = Declared(transactions.declare(self.connection.id).txn_id)
            elif transactions.discharge(request.txn_id, fail=request.fail):
                outcome = ACCEPTED
            else:
                outcome = Rejected(
                    _condition("amqp:transaction:unknown-id", f"no transaction {request.txn_id!r}")
                )
        delivery.update(outcome)
        if self.link.credit < CREDIT_WINDOW // 2:
            self.link.flow(CREDIT_WINDOW - self.link.credit)

    def on_update(self, delivery: Delivery, settled: bool) -> None:
        """Coordinator answers are settled at once: nothing to do."""

    def close(self, closed: bool = False) -> None:
        """Transactions outlive the coordinator link; they end with the connection."""


LinkHandler = ConsumerLink | BrowserLink | ProducerLink | CoordinatorLink
