"""Queues and topics: where messages wait, and how they are handed to consumers.

How this works: a ``Queue`` holds the messages ready for delivery in one deque per priority
level (0-9; higher first, FIFO within a level) and a list of consumers served round-robin. Every
message that becomes ready gets the queue's next sequence number; a message that comes back goes
to its old place (ahead of the newer messages of its priority). A message handed to a consumer
that is not pre-settled counts as *unacked* until the consumer's outcome arrives: then it is
removed (accepted), put back (released, modified, or its link went away) or dead-lettered
(rejected, or its delivery failed for the ``max_deliveries``-th time). A ``Topic`` gives each
subscriber its own non-durable subscription queue and copies every message it is sent into each
of them that accepts it (a subscription may have an ``accepts(message) -> bool``; one without
accepts everything).

Time (milliseconds since the epoch; see ``chaos.broker.schedule`` for the timers): a message
with an ``x-opt-delivery-time`` or ``x-opt-delivery-delay`` annotation in the future waits in a
heap of scheduled messages, invisible to consumers, until a timer (or the next dispatch after its
time) makes it ready, behind the messages already waiting. A message expires at the earlier of
its arrival + header ttl and its ``absolute-expiry-time``; an expired message is never delivered:
dispatch drops it when it meets it, and a timer sweeps the ready messages (at most once per
``EXPIRY_SWEEP_INTERVAL``), dropping it or handing a copy to the expiry address.

Consumer selectors: a consumer with a ``selector`` is offered only what it accepts. When the
head of the queue fits no consumer with credit, one pass hands out whatever later messages fit
and marks the queue *stalled*: until credit, consumers or returned messages change (each calls
``dispatch()``), a new message is offered alone instead of rescanning the queue.

Browsers (``chaos.broker.browsing``): a queue also serves browsers, which are not consumers:
they read the ready messages (``waiting_after``) and send copies, never taking one out. The queue
calls their ``pump`` after each change that may make messages waiting (``enqueue``, ``dispatch``)
and ``returned`` for each message that comes back to its place.

Invariants:
    Rule 1: a message is in exactly one place: a queue's ready levels or scheduled heap, a
        consumer's unsettled map, a transaction, or nowhere (gone). ``depth`` counts the ready
        and scheduled ones, ``unacked`` the rest.
    Rule 2: the delivery-count only grows: by one when a delivery failed (modified with
        delivery-failed, rolled back, or its link or connection went away); never on release.
    Rule 3: ``dispatch()`` never re-enters itself and never calls back into a connection's
        event handling: consumers only queue transfers on their engine.
    Rule 4: a durable message is stored with absolute times (``StoredMessage.fix_times``), so
        its due time and expiry mean the same after a restart.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

from chaos.broker.persistence import MemoryPersistence, Persistence, StoredRef
from chaos.broker.schedule import NodePolicy
from chaos.broker.stored import StoredMessage

__all__ = [
    "PRIORITY_LEVELS",
    "Browser",
    "Consumer",
    "Node",
    "Queue",
    "Selector",
    "StoredMessage",
    "Topic",
]


Selector = Callable[[StoredMessage], bool]
"""A consumer's filter: True for the messages it may be offered."""


class Consumer(Protocol):
    """A link the broker sends messages on (implemented by the connection's consumer links).

    ``selector``: when not None, the consumer is offered only messages it accepts; the others
    are skipped, not removed: they keep their place for other consumers.
    """

    id: int
    selector: Selector | None

    @property
    def credit(self) -> int:
        """How many more messages the link may take now."""

    def deliver(self, message: StoredMessage) -> bool:
        """Transfer ``message``; return True when it went pre-settled (it is gone)."""

    def node_deleted(self) -> None:
        """The node was deleted: close the link with ``amqp:resource-deleted``."""


class Browser(Protocol):
    """A link that is sent copies of a queue's waiting messages (``chaos.broker.browsing``)."""

    def pump(self) -> None:
        """Send copies of the waiting messages not shown yet, as credit allows."""

    def returned(self, message: StoredMessage) -> None:
        """``message`` is back in its place (the browser may have passed it while it was out)."""

    def node_deleted(self) -> None:
        """The node was deleted: close the link with ``amqp:resource-deleted``."""


DeadLetter = Callable[[StoredMessage], None]


PRIORITY_LEVELS = 10
# The levels of a queue that never held a message: read and cleared, never added to.
_NO_LEVELS: tuple[deque[StoredMessage], ...] = tuple(deque() for _ in range(PRIORITY_LEVELS))
"""Priorities 0-9 are distinct levels; a higher header priority counts as 9."""
EXPIRY_SWEEP_INTERVAL = 1000.0
"""Milliseconds between two sweeps of one queue for expired messages (the first one after a
quiet spell runs as soon as a message expires)."""


class _Waiting:
    """A queue's ready messages in dispatch order, as a small read-mostly sequence.

    ``append`` puts a message in without recording or dispatching it (recovery uses it).
    """

    __slots__ = ("_queue",)

    def __init__(self, queue: Queue) -> None:
        self._queue = queue

    def __len__(self) -> int:
        return self._queue._ready

    def __iter__(self) -> Iterator[StoredMessage]:
        for level in reversed(self._queue._levels):
            yield from level

    def __bool__(self) -> bool:
        return self._queue._ready > 0

    def append(self, message: StoredMessage) -> None:
        self._queue._stalled = None
        self._queue._accept(message)


class Queue:
    """A queue with competing consumers: priority order, FIFO within a priority.

    Args:
        name: The queue's address (for a subscription: a generated name, not routable).
        persistence: Told about durable messages when ``persistent`` is True.
        dead_letter: Where rejected messages go (None: they are dropped).
        temporary: A dynamic node (deleted with its connection; never persisted).
        owner: The connection id that created a temporary node.
        policy: Timers, expiry and redelivery limit (default: a ``NodePolicy()`` of its own).
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
        policy: NodePolicy | None = None,
    ) -> None:
        self.name = name
        self.temporary = temporary
        self.owner = owner
        self.persistent = (not temporary) if persistent is None else persistent
        self._persistence = persistence or MemoryPersistence()
        self._dead_letter = dead_letter
        self.policy = policy = policy if policy is not None else NodePolicy()
        self._clock = policy.clock
        self.max_deliveries = policy.max_deliveries(name)
        self._expires = policy.expiry_address != name  # the expiry queue keeps what it gets
        # Shared empty levels until the first message: failover to a fresh broker creates
        # thousands of queues at once, most of which stay empty (see _level).
        self._levels: Sequence[deque[StoredMessage]] = _NO_LEVELS
        self._ready = 0
        self._seq = 0
        self._delayed: list[tuple[float, int, StoredMessage]] = []  # heap by (due, seq)
        self._wake_at: float | None = None
        self._sweep_at: float | None = None
        self._last_sweep = -math.inf
        self.consumers: list[Consumer] = []
        self.browsers: list[Browser] = []
        self.unacked = 0
        self.deleted = False
        self._next = 0
        self._dispatching = False
        self._stalled: set[int] | None = None  # ids of consumers no waiting message fits

    def __repr__(self) -> str:
        return f"<Queue {self.name!r} depth={self.depth} unacked={self.unacked}>"

    def _level(self, priority: int) -> deque[StoredMessage]:
        """The level for messages of ``priority``, to add one to (the levels made first)."""
        if self._levels is _NO_LEVELS:
            self._levels = [deque() for _ in range(PRIORITY_LEVELS)]
        return self._levels[min(priority, PRIORITY_LEVELS - 1)]

    @property
    def messages(self) -> _Waiting:
        """The messages ready for delivery, in dispatch order (``append`` is for recovery)."""
        return _Waiting(self)

    @property
    def depth(self) -> int:
        """Messages waiting: ready for delivery, or scheduled for later."""
        return self._ready + len(self._delayed)

    @property
    def scheduled(self) -> int:
        """Messages whose delivery time has not come yet."""
        return len(self._delayed)

    def ref(self, message: StoredMessage) -> StoredRef:
        """The store's view of ``message`` in this queue (relative times made absolute first,
        see ``StoredMessage.fix_times``)."""
        if not message.timed:
            message.read_timing(self._clock())
        if message.has_relative_times():
            message.fix_times()
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

    def add_browser(self, browser: Browser) -> None:
        """Start showing ``browser`` the waiting messages (it takes none of them)."""
        self.browsers.append(browser)
        browser.pump()

    def remove_browser(self, browser: Browser) -> None:
        """Stop showing ``browser`` anything (it held nothing: nothing comes back)."""
        if browser in self.browsers:
            self.browsers.remove(browser)

    def waiting_after(self, passed: Sequence[int]) -> Iterator[tuple[int, StoredMessage]]:
        """The ready messages in dispatch order, with their priority level, leaving out at each
        level ``i`` those with a sequence number up to ``passed[i]``.

        The caller must not change the queue while it iterates (browsers only send copies).
        """
        for index in range(PRIORITY_LEVELS - 1, -1, -1):
            level = self._levels[index]
            after = passed[index]
            if not level or level[-1].seq <= after:
                continue
            start = 0 if level[0].seq > after else bisect.bisect_right(level, after, key=_seq_of)
            for message in itertools.islice(level, start, None):
                yield index, message

    def expired(self, message: StoredMessage) -> bool:
        """Whether ``message`` has expired (and is only waiting for a sweep to drop it)."""
        return message.expires_at is not None and self._expired(message, self._clock())

    def _feed_browsers(self) -> None:
        for browser in list(self.browsers):
            browser.pump()

    # Messages in -------------------------------------------------------------------------------

    def enqueue(self, message: StoredMessage, *, record: bool = True) -> None:
        """Add a message (behind those of its priority); ``record=False`` when a transaction
        records it."""
        if self.deleted:
            return
        if not message.timed:
            message.read_timing(self._clock())
        if record and self._records(message):
            self._persistence.enqueued(self.ref(message))
        ready = self._accept(message)
        if ready and self.consumers:
            if self._stalled is not None:
                self._offer(message)
            else:
                self.dispatch()
        if ready and self.browsers:
            self._feed_browsers()  # what the consumers left waiting

    def _accept(self, message: StoredMessage) -> bool:
        """Put a new message in its place; False if it is scheduled for later."""
        if not message.timed:
            message.read_timing(self._clock())
        due = message.due_at
        if due is not None and due > self._clock():
            self._seq += 1
            heapq.heappush(self._delayed, (due, self._seq, message))
            self._wake_for(due)
            return False
        self._seq += 1
        message.seq = self._seq
        self._level(message.header.priority).append(message)
        self._ready += 1
        if message.expires_at is not None:
            self._sweep_for(message.expires_at)
        return True

    def _put_back(self, message: StoredMessage) -> None:
        """Return a message to its old place: ahead of the newer messages of its priority."""
        level = self._level(message.header.priority)
        seq = message.seq
        if not level or level[0].seq > seq:
            level.appendleft(message)
        elif level[-1].seq < seq:
            level.append(message)
        else:
            level.insert(bisect.bisect_left(level, seq, key=_seq_of), message)
        self._ready += 1
        self._stalled = None
        if message.expires_at is not None:
            self._sweep_for(message.expires_at)
        for browser in self.browsers:
            browser.returned(message)

    def return_messages(self, messages: Iterable[StoredMessage], *, failed: bool) -> None:
        """Put unacked messages back in their places; count + 1 when ``failed``.

        A failed message that reaches the queue's redelivery limit goes to the dead-letter
        queue instead (see ``NodePolicy.max_deliveries``).
        """
        batch = sorted(messages, key=_seq_of, reverse=True)
        if not batch:
            return
        self.unacked -= len(batch)
        if self.deleted:
            return
        limit = self.max_deliveries
        for message in batch:
            if failed:
                message.header.delivery_count += 1
                if limit is not None and message.header.delivery_count >= limit:
                    self._drop(message, self._dead_letter)
                    continue
                if self._records(message):
                    self._persistence.delivery_count_changed(self.ref(message))
            self._put_back(message)
        self.dispatch()

    def _drop(self, message: StoredMessage, to: DeadLetter | None) -> None:
        """A waiting or returned message leaves the queue for good (to ``to``, if given)."""
        if self._records(message):
            self._persistence.removed(self.ref(message))
        if to is not None:
            to(message)

    # Outcomes ----------------------------------------------------------------------------------

    def acknowledge(self, message: StoredMessage, *, record: bool = True) -> None:
        """An unacked message was accepted: it is gone."""
        self.unacked -= 1
        if record and self._records(message) and not self.deleted:
            self._persistence.removed(self.ref(message))

    def modify(self, message: StoredMessage, consumer_id: int, *, failed: bool, here: bool) -> None:
        """Modified: back in its place, count + 1 if ``failed``, never again to the consumer;
        with ``here`` under ``NodePolicy.poison_undeliverable`` (ActiveMQ mode), dead-lettered
        as rejected."""
        if here and self.policy.poison_undeliverable:
            self.reject(message)
            return
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

    # Time --------------------------------------------------------------------------------------

    def _wake_for(self, due: float) -> None:
        """Make sure ``release_due`` runs at ``due`` (or earlier)."""
        scheduler = self.policy.scheduler
        if scheduler is None or (self._wake_at is not None and self._wake_at <= due):
            return
        self._wake_at = due
        scheduler.call_at(due, functools.partial(self._on_wake, due))

    def _on_wake(self, due: float) -> None:
        if due != self._wake_at:
            return  # superseded by an earlier wake-up
        self._wake_at = None
        if self.deleted:
            return
        with self._persistence.batch():  # one commit for what the deliveries change
            self.release_due()
        if self._delayed:
            self._wake_for(self._delayed[0][0])

    def _sweep_for(self, expires: float) -> None:
        """Make sure a sweep for expired messages runs at ``expires`` (or soon after: sweeps of
        one queue are ``EXPIRY_SWEEP_INTERVAL`` apart)."""
        scheduler = self.policy.scheduler
        if scheduler is None or not self._expires:
            return
        when = max(expires, self._last_sweep + EXPIRY_SWEEP_INTERVAL)
        if self._sweep_at is not None and self._sweep_at <= when:
            return
        self._sweep_at = when
        scheduler.call_at(when, functools.partial(self._on_sweep, when))

    def _on_sweep(self, when: float) -> None:
        if when != self._sweep_at:
            return
        self._sweep_at = None
        if not self.deleted:
            with self._persistence.batch():  # one commit for every expired message
                self.expire_now()

    def expire_now(self) -> int:
        """Drop (or move) every expired ready message now; return how many."""
        now = self._clock()
        self._last_sweep = now
        expired: list[StoredMessage] = []
        soonest = math.inf
        for level in self._levels:
            if not level:
                continue
            keep: list[StoredMessage] = []
            for message in level:
                expires = message.expires_at
                if expires is None:
                    keep.append(message)
                elif expires <= now:
                    expired.append(message)
                else:
                    soonest = min(soonest, expires)
                    keep.append(message)
            if len(keep) != len(level):
                level.clear()
                level.extend(keep)
        self._ready -= len(expired)
        for message in expired:
            self._expire(message)
        if soonest != math.inf:
            self._sweep_for(soonest)
        return len(expired)

    def release_due(self) -> int:
        """Make the scheduled messages whose time has come ready and dispatch; return how many."""
        released = self._move_due()
        if released:
            self.dispatch()
        return released

    def _move_due(self) -> int:
        """Scheduled messages whose time has come join the ready ones: behind those already
        waiting, in order of due time (they count as arriving when they become due)."""
        delayed = self._delayed
        now = self._clock()
        moved = 0
        while delayed and delayed[0][0] <= now:
            _due, _seq, message = heapq.heappop(delayed)
            message.due_at = None
            self._accept(message)
            moved += 1
        if moved:
            self._stalled = None
        return moved

    def _expire(self, message: StoredMessage) -> None:
        """``message`` (out of the ready levels) expired: drop it or hand it to the policy."""
        self._drop(message, self.policy.expire)

    def _expired(self, message: StoredMessage, now: float) -> bool:
        expires = message.expires_at
        return expires is not None and expires <= now and self._expires

    # Dispatch ----------------------------------------------------------------------------------

    def dispatch(self) -> None:
        """Hand waiting messages to consumers with credit, round-robin, highest priority first,
        FIFO within a priority. Expired messages found on the way are dropped (or moved).
        Browsers are then shown what is left waiting."""
        if self._dispatching or self.deleted:
            return
        self._dispatch()
        if self.browsers:
            self._feed_browsers()

    def _dispatch(self) -> None:
        if self._delayed and self._delayed[0][0] <= self._clock():
            self._move_due()  # no scheduler, or its timer is late: catch up now
        stalled = self._stalled
        if stalled is not None and all(c.id in stalled for c in self.consumers if c.credit > 0):
            return  # e.g. more credit for a consumer that no waiting message fits
        self._stalled = None
        self._dispatching = True
        try:
            levels = self._levels
            now = self._clock()
            while self._ready and self.consumers:
                for level in reversed(levels):
                    if level:
                        break
                message = level[0]
                if message.expires_at is not None and self._expired(message, now):
                    level.popleft()
                    self._ready -= 1
                    self._expire(message)
                    continue
                consumer = self._pick(message)
                if consumer is not None:
                    level.popleft()
                    self._ready -= 1
                    self._hand(consumer, message)
                else:
                    self._dispatch_past_head(now)
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
                selector = consumer.selector
                if selector is None or selector(message):
                    self._next = index + 1
                    return consumer
        return None

    def _dispatch_past_head(self, now: float) -> None:
        """The head may not go to any consumer with credit (excluded, or no selector takes it):
        one pass over the waiting messages in order hands out every one a consumer with credit
        may take. Afterwards nothing waiting fits the consumers that still have credit: they are
        ``_stalled``, and until another consumer gets credit or messages come back, only new
        messages need a look (``_offer``)."""
        if not any(c.credit > 0 for c in self.consumers):
            return
        expired: list[StoredMessage] = []  # dropped after the pass: expiring may route messages
        try:
            for level in reversed(self._levels):
                if not level:
                    continue
                keep: list[StoredMessage] = []
                taken = 0
                for index, message in enumerate(level):
                    if message.expires_at is not None and self._expired(message, now):
                        taken += 1
                        expired.append(message)
                        continue
                    consumer = self._pick(message)
                    if consumer is None:
                        keep.append(message)
                        continue
                    taken += 1
                    self._hand(consumer, message)
                    if not any(c.credit > 0 for c in self.consumers):
                        keep.extend(itertools.islice(level, index + 1, None))
                        self._replace(level, keep, taken)
                        return
                if taken:
                    self._replace(level, keep, taken)
            self._stalled = {c.id for c in self.consumers if c.credit > 0}
        finally:
            for message in expired:
                self._expire(message)

    def _replace(self, level: deque[StoredMessage], keep: list[StoredMessage], taken: int) -> None:
        level.clear()
        level.extend(keep)
        self._ready -= taken

    def _offer(self, message: StoredMessage) -> None:
        """A new message in a stalled queue: only it may go to a consumer now."""
        if self._dispatching or self.deleted:
            self._stalled = None  # not looked at: the next dispatch must
            return
        expired = message.expires_at is not None and self._expired(message, self._clock())
        consumer = None if expired else self._pick(message)
        if consumer is None and not expired:
            stalled = self._stalled
            if stalled is not None:  # it was not offered to those without credit
                self._stalled = {c.id for c in self.consumers if c.credit > 0 and c.id in stalled}
            return
        level = self._levels[min(message.header.priority, PRIORITY_LEVELS - 1)]
        if level and level[-1] is message:
            level.pop()
        else:
            level.remove(message)
        self._ready -= 1
        self._dispatching = True
        try:
            if consumer is None:
                self._expire(message)
            else:
                self._hand(consumer, message)
        finally:
            self._dispatching = False

    def _hand(self, consumer: Consumer, message: StoredMessage) -> None:
        if consumer.deliver(message):
            if self._records(message):
                self._persistence.removed(self.ref(message))
        else:
            self.unacked += 1

    # Administration ----------------------------------------------------------------------------

    def purge(self) -> int:
        """Drop every waiting message, scheduled ones included (unacked ones stay); return how
        many."""
        dropped = list(self.messages) + [entry[2] for entry in self._delayed]
        for level in self._levels:
            level.clear()
        self._ready = 0
        self._delayed.clear()
        for message in dropped:
            if self._records(message):
                self._persistence.removed(self.ref(message))
        return len(dropped)

    def delete(self) -> None:
        """Delete the queue: drop its messages and close its consumers' links."""
        if self.deleted:
            return
        for level in self._levels:
            level.clear()
        self._ready = 0
        self._delayed.clear()
        self.deleted = True
        if self.persistent:
            self._persistence.queue_deleted(self.name)
        for consumer in list(self.consumers):
            consumer.node_deleted()
        self.consumers.clear()
        for browser in list(self.browsers):
            browser.node_deleted()
        self.browsers.clear()


def _seq_of(message: StoredMessage) -> int:
    return message.seq


def _accepts(sub: Queue, message: StoredMessage) -> bool:
    """Whether ``sub`` takes ``message`` (its ``accepts``, if it has one, decides)."""
    accepts: Callable[[StoredMessage], bool] | None = getattr(sub, "accepts", None)
    return accepts is None or accepts(message)


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
        """Copy ``message`` into every subscription that accepts it: one whose optional
        ``accepts(message)`` returns False is skipped (none left: it is dropped, as JMS says)."""
        subscriptions = [sub for sub in self.subscriptions if _accepts(sub, message)]
        if subscriptions and not message.timed:  # one arrival time for every copy
            message.read_timing(subscriptions[0].policy.clock())
        for index, sub in enumerate(subscriptions):
            sub.enqueue(message if index == len(subscriptions) - 1 else message.copy())

    def subscribe(
        self, name: str, dead_letter: DeadLetter | None, policy: NodePolicy | None = None
    ) -> Queue:
        """A new non-durable subscription queue (``policy``: as ``Queue``'s)."""
        sub = Queue(name, dead_letter=dead_letter, persistent=False, policy=policy)
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
