"""Queue browsing: a receiver link whose source says ``distribution-mode copy`` (a JMS
``QueueBrowser``, as Qpid JMS attaches it).

How this works: a ``BrowserLink`` is one of its queue's *browsers*, not one of its consumers. It
keeps a cursor, for each priority level the highest sequence number it has passed, and sends a
copy of each waiting message beyond it in the queue's dispatch order (higher priority
first, FIFO within a priority), as its credit allows. Messages acquired by a consumer, scheduled
for later or expired are not waiting, so they are not shown; messages that arrive later are
shown as they come. The queue calls ``pump`` whenever messages may have become waiting (new,
due, or given back) and ``returned`` for each message that comes back to its place: one the
browser passed while a consumer held it moves the cursor back, so it is shown after all.

A drain (the client's way to find the end of the enumeration) is answered while the flow that
asked for it is handled: the copies go out, then the rest of the credit is given back.

Copies go unsettled (sender settle mode ``unsettled``, whatever the client asked), and any
disposition the client sends for one settles it with no effect on the queue. Pre-settled copies
would need no disposition, but with them the engine never answers a drain: proton 0.40 posts the
drain's flow only once the link's last unsettled delivery is no longer buffered, and a
pre-settled delivery the engine still references counts as buffered forever.

Invariants:
    Rule 1: browsing changes nothing in the queue: no message is removed, acquired or counted as
        delivered, and a client's disposition on a browse delivery is ignored.
    Rule 2: a browser link is shown each message at most once (``StoredMessage.browsed`` holds
        the ids of the browsers that saw it; a cursor moved back skips them).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from chaos.broker.nodes import PRIORITY_LEVELS, Queue, StoredMessage
from haclient.amqp.endpoints import Delivery, Sender
from haclient.amqp.types import ErrorCondition

if TYPE_CHECKING:
    from chaos.broker.filters import Matcher
    from chaos.broker.owner import Waker

__all__ = ["BrowserLink"]

_browser_ids = itertools.count(1)


class BrowserLink:
    """A link on which the broker sends copies of a queue's waiting messages to a client.

    Args:
        connection: The connection the link belongs to.
        link: The broker's sending end (opened with sender settle mode ``unsettled``).
        queue: The queue it browses.
        selector: Only messages it accepts are shown (a JMS selector, as for consumers).
    """

    def __init__(
        self,
        connection: Waker,
        link: Sender,
        queue: Queue,
        *,
        selector: Matcher | None = None,
    ) -> None:
        self.id = next(_browser_ids)
        self.connection = connection
        self.link = link
        self.queue = queue
        self.selector = selector
        self.closed = False
        self._passed = [0] * PRIORITY_LEVELS  # per level: the highest seq looked at

    @property
    def credit(self) -> int:
        """The link's credit (0 once closed)."""
        return 0 if self.closed else self.link.credit

    def pump(self) -> None:
        """Send copies of the waiting messages not shown yet, in queue order, as credit allows."""
        if self.credit <= 0:
            return
        link = self.link
        passed = self._passed
        sent = False
        for level, message in self.queue.waiting_after(passed):
            if link.credit <= 0:
                break
            passed[level] = message.seq
            if not self._shows(message):
                continue
            if message.browsed is None:
                message.browsed = set()
            message.browsed.add(self.id)
            link.send(message.wire_bytes())
            sent = True
        if sent:
            self.connection.wake()

    def _shows(self, message: StoredMessage) -> bool:
        if message.browsed is not None and self.id in message.browsed:
            return False  # seen before a consumer took it and gave it back
        if self.queue.expired(message):
            return False
        return self.selector is None or self.selector(message)

    def returned(self, message: StoredMessage) -> None:
        """A message is back in its place: if the cursor went past it unseen, go back to it."""
        level = min(message.header.priority, PRIORITY_LEVELS - 1)
        seen = message.browsed is not None and self.id in message.browsed
        if not seen and message.seq <= self._passed[level]:
            self._passed[level] = message.seq - 1

    def on_flow(self) -> None:
        """Credit arrived (or a drain request): show what we can, then give back the rest."""
        self.pump()
        if self.link.drain_requested and not self.closed:
            self.link.drained()
            self.connection.wake()

    def on_update(self, delivery: Delivery, settled: bool) -> None:
        """A disposition on a browse delivery: whatever it says, settle the copy (and only it)."""
        delivery.settle()
        self.connection.wake()

    def node_deleted(self) -> None:
        """The queue was deleted: close the link."""
        if not self.closed and not self.link.is_closed:
            condition = ErrorCondition("amqp:resource-deleted", f"{self.queue.name} was deleted")
            self.link.close(condition)
            self.connection.wake()
        self.closed = True

    def close(self, closed: bool = False) -> None:
        """The link or its connection went away: nothing to give back."""
        self.closed = True
        self.queue.remove_browser(self)
