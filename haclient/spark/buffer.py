"""The stream reader's driver-side buffer: a queue read at least once, with sequence offsets.

A queue cannot be replayed, so the stream reader keeps what Spark has not finished here, on the
driver, in one long-lived Python process (Spark's streaming source runner), and numbers every
message it takes with its own sequence number: Spark's offsets are ``{"seq": n}``. Invariants:

1. The buffer holds only messages of the batch being planned or run; nothing is received beyond
   it before it is done. So a CLIENT acknowledge (which confirms everything the session
   delivered) confirms exactly the finished batch.
2. A batch is acknowledged in ``commit(end)``, and again in ``latestOffset(start)`` for what is
   below ``start`` (Spark asks for the next offset only once the previous batch is in its commit
   log). A failover in between makes the acknowledge fail (F8): the broker redelivers, and the
   duplicate window (message ids seen lately) drops those messages, and acknowledges them.
3. After a restart Spark may run the last batch again with its logged offsets: the buffer,
   empty then, receives up to that many messages (the broker redelivers what the old process
   left unacknowledged) and numbers them from the batch's start.

Closing the connection (the process ends; Spark does not call ``stop()``) releases whatever is
not acknowledged, so nothing is lost and at worst the last batch comes again.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from haclient.errors import AcknowledgeFailedError
from haclient.message import Message
from haclient.modes import AckMode
from haclient.spark.options import SparkOptions
from haclient.spark.schema import row_from_message
from haclient.sync import Connection, MessageConsumer, Session

__all__ = ["MessageBuffer"]

log = logging.getLogger("haclient.spark")

# Seconds to wait for more messages once a batch has begun to fill.
_NEXT_MESSAGE_WAIT = 0.2


class MessageBuffer:
    """Messages taken from a queue and not yet acknowledged, numbered from ``next_seq``.

    Opens its connection on first use (no I/O in ``__init__``); ``close()`` releases the
    unacknowledged messages. Not thread-safe: Spark calls a stream reader from one thread.
    """

    def __init__(self, options: SparkOptions) -> None:
        self._options = options
        self._connection: Connection | None = None
        self._session: Session | None = None
        self._consumer: MessageConsumer | None = None
        self._rows: dict[int, tuple[Any, ...]] = {}
        self._unacknowledged = False
        self._seen: OrderedDict[str, None] = OrderedDict()
        self.next_seq = 0

    def _open(self) -> MessageConsumer:
        if self._consumer is None:
            limit = self._options.max_rows_per_batch
            self._connection = self._options.connect(prefetch=min(limit, 1000))
            self._session = self._connection.create_session(AckMode.CLIENT)
            self._consumer = self._session.create_consumer(
                self._options.destination, selector=self._options.selector
            )
            self._connection.start()
        return self._consumer

    def fill(self, start: int, limit: int, *, wait: float | None = None) -> int:
        """Receive up to ``limit`` messages numbered from ``start`` (unless some are buffered
        already); return the end offset. Waits ``wait`` (``receiveTimeout``) for the first."""
        buffered = [seq for seq in self._rows if seq >= start]
        if buffered:
            return max(buffered) + 1
        if not self._rows:
            self.next_seq = max(self.next_seq, start)
        consumer = self._open()
        first_wait = self._options.receive_timeout if wait is None else wait
        while self.next_seq - start < limit:
            # The long wait holds until a new row came: a run of replays (the redelivery that
            # follows a failover) must not look like an empty queue, which ends availableNow.
            timeout = _NEXT_MESSAGE_WAIT if self.next_seq > start else first_wait
            message = consumer.receive(timeout=timeout)
            if message is None:
                break
            self._unacknowledged = True
            if self._duplicate(message):
                continue
            options = self._options
            self._rows[self.next_seq] = row_from_message(
                message, options.body_format, options.trace_context
            )
            self.next_seq += 1
        return self.next_seq

    def _duplicate(self, message: Message) -> bool:
        """True for a message whose id the window holds (a replay); remembers it otherwise."""
        window = self._options.dedup_window
        if window == 0 or not message.message_id:
            return False
        if message.message_id in self._seen:
            log.debug("dropping %s: already read", message.message_id)
            return True
        self._seen[message.message_id] = None
        while len(self._seen) > window:
            self._seen.popitem(last=False)
        return False

    def rows(self, start: int, end: int) -> list[tuple[Any, ...]]:
        """The rows numbered ``start`` to ``end - 1``; after a restart (empty buffer) the
        messages are received again first (invariant 3), and may be fewer."""
        if start < end and not any(start <= seq < end for seq in self._rows):
            self.next_seq = start
            self.fill(start, end - start)
        return [self._rows[seq] for seq in range(start, end) if seq in self._rows]

    def acknowledge_below(self, end: int) -> None:
        """Acknowledge every message numbered below ``end`` and forget it. Deferred while the
        buffer still holds later messages (they would be acknowledged too)."""
        if any(seq >= end for seq in self._rows):
            return
        self._rows.clear()
        if not self._unacknowledged or self._session is None:
            return
        try:
            self._session.acknowledge()
        except AcknowledgeFailedError as exc:
            log.info("acknowledge lost to failover (%s): the broker redelivers", exc)
        self._unacknowledged = False

    def close(self) -> None:
        """Close the connection; what is not acknowledged goes back to the queue. Idempotent."""
        connection, self._connection, self._consumer, self._session = (
            self._connection,
            None,
            None,
            None,
        )
        if connection is not None:
            connection.close()
