"""Queues and topics: where messages wait, and how they are handed to consumers.

How this works: a ``Queue`` holds the messages ready for delivery in a deque (FIFO; messages that
come back go to the front, oldest first) and a list of consumers served round-robin. A message
handed to a consumer that is not pre-settled counts as *unacked* until the consumer's outcome
arrives: then it is removed (accepted), put back (released, modified, or its link went away) or
dead-lettered (rejected). A ``Topic`` gives each subscriber its own non-durable subscription queue
and copies every message it is sent into each of them.

Invariants:
    Rule 1: a message is in exactly one place: a queue's deque, a consumer's unsettled map, a
        transaction, or nowhere (gone). ``depth`` counts the deque, ``unacked`` the rest.
    Rule 2: the delivery-count only grows: by one when a delivery failed (modified with
        delivery-failed, rolled back, or its link or connection went away); never on release.
    Rule 3: ``dispatch()`` never re-enters itself and never calls back into a connection's
        event handling: consumers only queue transfers on their engine.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Protocol

from chaos.broker.persistence import MemoryPersistence, Persistence, StoredRef
from chaos.broker.wire import MessageHeader

__all__ = ["Consumer", "Node", "Queue", "StoredMessage", "Topic"]


class StoredMessage:
    """A message as the broker keeps it: the bytes it arrived in and its parsed header.

    ``excluded`` holds the ids of consumers it must not go to again (modified with
    undeliverable-here).
    """

    __slots__ = ("_arrival_count", "body_offset", "excluded", "header", "id", "payload")

    def __init__(
        self, message_id: int, payload: bytes, header: MessageHeader, body_offset: int
    ) -> None:
        self.id = message_id
        self.payload = payload
        self.header = header
        self.body_offset = body_offset
        self._arrival_count = header.delivery_count
        self.excluded: set[int] | None = None

    @property
    def durable(self) -> bool:
        """The header's durable flag."""
        return self.header.durable

    @property
    def delivery_count(self) -> int:
        """The current delivery-count."""
        return self.header.delivery_count

    def wire_bytes(self) -> bytes:
        """The message to transfer: the original bytes, with a new header if the count changed."""
        if self.header.delivery_count == self._arrival_count:
            return self.payload
        return self.header.encode() + self.payload[self.body_offset :]

    def copy(self) -> StoredMessage:
        """An independent copy sharing the payload bytes (for a topic's subscribers)."""
        header = self.header
        clone = MessageHeader(
            header.durable, header.priority, header.ttl, header.first_acquirer,
            header.delivery_count,
        )  # fmt: skip
        twin = StoredMessage(self.id, self.payload, clone, self.body_offset)
        twin._arrival_count = self._arrival_count
        return twin


class Consumer(Protocol):
    """A link the broker sends messages on (implemented by the connection's consumer links)."""

    id: int

    @property
    def credit(self) -> int:
        """How many more messages the link may take now."""

    def deliver(self, message: StoredMessage) -> bool:
        """Transfer ``message``; return True when it went pre-settled (it is gone)."""

    def node_deleted(self) -> None:
        """The node was deleted: close the link with ``amqp:resource-deleted``."""


DeadLetter = Callable[[StoredMessage], None]


class Queue:
    """A FIFO queue with competing consumers.

    Args:
        name: The queue's address (for a subscription: a generated name, not routable).
        persistence: Told about durable messages when ``persistent`` is True.
        dead_letter: Where rejected messages go (None: they are dropped).
        temporary: A dynamic node (deleted with its connection; never persisted).
        owner: The connection id that created a temporary node.
    """

    kind = "queue"

    def __init__(
        self,
        name: str,
        *,
        persistence: Persistence | None = None,
        dead_letter: DeadLetter | None = None,
        temporary: bool = False,
        owner: int | None = None,
        persistent: bool | None = None,
    ) -> None:
        self.name = name
        self.temporary = temporary
        self.owner = owner
        self.persistent = (not temporary) if persistent is None else persistent
        self._persistence = persistence or MemoryPersistence()
        self._dead_letter = dead_letter
        self.messages: deque[StoredMessage] = deque()
        self.consumers: list[Consumer] = []
        self.unacked = 0
        self.deleted = False
        self._next = 0
        self._dispatching = False

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} depth={len(self.messages)} unacked={self.unacked}>"

    @property
    def depth(self) -> int:
        """Messages waiting for delivery."""
        return len(self.messages)

    def ref(self, message: StoredMessage) -> StoredRef:
        """The store's view of ``message`` in this queue."""
        return StoredRef(self.name, message.id, message.payload, message.delivery_count)

    def _records(self, message: StoredMessage) -> bool:
        return self.persistent and message.header.durable

    # Consumers ---------------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        """Start serving ``consumer`` (round-robin with the others)."""
        self.consumers.append(consumer)
        self.dispatch()

    def remove_consumer(self, consumer: Consumer, unsettled: Iterable[StoredMessage]) -> None:
        """Stop serving ``consumer``; its unsettled messages come back with count + 1."""
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self.return_messages(unsettled, failed=True)

    # Messages in -------------------------------------------------------------------------------

    def enqueue(self, message: StoredMessage, *, record: bool = True) -> None:
        """Add a message at the tail; ``record=False`` when a transaction records it."""
        if self.deleted:
            return
        if record and self._records(message):
            self._persistence.enqueued(self.ref(message))
        self.messages.append(message)
        if self.consumers:
            self.dispatch()

    def return_messages(self, messages: Iterable[StoredMessage], *, failed: bool) -> None:
        """Put unacked messages back at the front, oldest first; count + 1 when ``failed``."""
        batch = sorted(messages, key=lambda m: m.id)
        if not batch:
            return
        self.unacked -= len(batch)
        if self.deleted:
            return
        for message in batch:
            if failed:
                message.header.delivery_count += 1
                if self._records(message):
                    self._persistence.delivery_count_changed(self.ref(message))
        self.messages.extendleft(reversed(batch))
        self.dispatch()

    # Outcomes ----------------------------------------------------------------------------------

    def acknowledge(self, message: StoredMessage, *, record: bool = True) -> None:
        """An unacked message was accepted: it is gone."""
        self.unacked -= 1
        if record and self._records(message) and not self.deleted:
            self._persistence.removed(self.ref(message))

    def modify(self, message: StoredMessage, consumer_id: int, *, failed: bool, here: bool) -> None:
        """Modified: back to the front, count + 1 if ``failed``, never again to the consumer."""
        if here:
            if message.excluded is None:
                message.excluded = set()
            message.excluded.add(consumer_id)
        self.return_messages((message,), failed=failed)

    def reject(self, message: StoredMessage) -> None:
        """Rejected: the message moves to the dead-letter queue."""
        self.acknowledge(message)
        if self._dead_letter is not None and not self.deleted:
            self._dead_letter(message)

    # Dispatch ----------------------------------------------------------------------------------

    def dispatch(self) -> None:
        """Hand waiting messages to consumers with credit, round-robin, in FIFO order."""
        if self._dispatching or self.deleted:
            return
        self._dispatching = True
        try:
            messages = self.messages
            while messages and self.consumers:
                consumer = self._pick(messages[0])
                if consumer is not None:
                    self._hand(consumer, messages.popleft())
                elif messages[0].excluded is None or not self._skip_excluded_head():
                    return
        finally:
            self._dispatching = False

    def _pick(self, message: StoredMessage) -> Consumer | None:
        consumers = self.consumers
        count = len(consumers)
        excluded = message.excluded
        start = self._next % count
        for step in range(count):
            index = (start + step) % count
            consumer = consumers[index]
            if consumer.credit > 0 and (excluded is None or consumer.id not in excluded):
                self._next = index + 1
                return consumer
        return None

    def _skip_excluded_head(self) -> bool:
        """The head may not go to any consumer with credit: deliver a later message instead."""
        if not any(c.credit > 0 for c in self.consumers):
            return False
        for index, message in enumerate(self.messages):
            if index == 0:
                continue
            consumer = self._pick(message)
            if consumer is not None:
                del self.messages[index]
                self._hand(consumer, message)
                return True
        return False

    def _hand(self, consumer: Consumer, message: StoredMessage) -> None:
        if consumer.deliver(message):
            if self._records(message):
                self._persistence.removed(self.ref(message))
        else:
            self.unacked += 1

    # Administration ----------------------------------------------------------------------------

    def purge(self) -> int:
        """Drop every waiting message (unacked ones stay); return how many."""
        dropped = list(self.messages)
        self.messages.clear()
        for message in dropped:
            if self._records(message):
                self._persistence.removed(self.ref(message))
        return len(dropped)

    def delete(self) -> None:
        """Delete the queue: drop its messages and close its consumers' links."""
        if self.deleted:
            return
        self.messages.clear()
        self.deleted = True
        if self.persistent:
            self._persistence.queue_deleted(self.name)
        for consumer in list(self.consumers):
            consumer.node_deleted()
        self.consumers.clear()


class Topic:
    """A publish-subscribe node: each subscriber gets a copy of every message sent to it."""

    kind = "topic"

    def __init__(self, name: str, *, temporary: bool = False, owner: int | None = None) -> None:
        self.name = name
        self.temporary = temporary
        self.owner = owner
        self.subscriptions: list[Queue] = []
        self.deleted = False

    def __repr__(self) -> str:
        return f"<Topic {self.name!r} subscriptions={len(self.subscriptions)}>"

    @property
    def depth(self) -> int:
        """Messages waiting in all subscriptions."""
        return sum(sub.depth for sub in self.subscriptions)

    @property
    def unacked(self) -> int:
        """Messages delivered and not yet settled, over all subscriptions."""
        return sum(sub.unacked for sub in self.subscriptions)

    @property
    def consumers(self) -> list[Consumer]:
        """Every subscription's consumers."""
        return [c for sub in self.subscriptions for c in sub.consumers]

    def publish(self, message: StoredMessage) -> None:
        """Copy ``message`` into every subscription (none: it is dropped, as JMS says)."""
        subscriptions = self.subscriptions
        for index, sub in enumerate(subscriptions):
            sub.enqueue(message if index == len(subscriptions) - 1 else message.copy())

    def subscribe(self, name: str, dead_letter: DeadLetter | None) -> Queue:
        """A new non-durable subscription queue."""
        sub = Queue(name, dead_letter=dead_letter, persistent=False)
        self.subscriptions.append(sub)
        return sub

    def unsubscribe(self, sub: Queue) -> None:
        """Drop a subscription and whatever waits in it."""
        if sub in self.subscriptions:
            self.subscriptions.remove(sub)
        sub.delete()

    def purge(self) -> int:
        """Drop every waiting message in every subscription."""
        return sum(sub.purge() for sub in self.subscriptions)

    def delete(self) -> None:
        """Delete the topic and its subscriptions."""
        self.deleted = True
        for sub in list(self.subscriptions):
            self.unsubscribe(sub)


Node = Queue | Topic
