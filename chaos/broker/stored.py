"""A message as the broker keeps it: its bytes, its parsed header and its times.

It sits below everything that handles messages (queues and topics in ``chaos.broker.nodes``,
filters, timers, the router), so that none of them needs another to name it.
"""

from __future__ import annotations

import math

from chaos.broker.wire import (
    MessageHeader,
    WireError,
    add_delivery_time,
    read_timing,
    set_absolute_expiry,
)

__all__ = ["StoredMessage"]


class StoredMessage:
    """A message as the broker keeps it: the bytes it arrived in and its parsed header.

    ``excluded`` holds the ids of consumers it must not go to again (modified with
    undeliverable-here). ``origin`` is the container id of the connection that published it
    (None when unknown: recovered or made by the broker itself); no-local filters compare it.
    ``browsed`` holds the ids of the browsers that were sent a copy of it (in its queue).
    """

    __slots__ = (
        "_arrival_count",
        "_relative_due",
        "_relative_expiry",
        "body_offset",
        "browsed",
        "due_at",
        "excluded",
        "expires_at",
        "header",
        "id",
        "origin",
        "payload",
        "seq",
        "timed",
    )

    def __init__(
        self,
        message_id: int,
        payload: bytes,
        header: MessageHeader,
        body_offset: int,
        origin: str | None = None,
    ) -> None:
        self.id = message_id
        self.origin = origin
        self.payload = payload
        self.header = header
        self.body_offset = body_offset
        self._arrival_count = header.delivery_count
        self.excluded: set[int] | None = None
        self.browsed: set[int] | None = None
        self.seq = 0  # its place in its queue (FIFO order within a priority)
        self.timed = False  # due_at and expires_at were worked out (read_timing)
        self.due_at: float | None = None
        self.expires_at: float | None = None
        self._relative_due = False
        self._relative_expiry = False

    def read_timing(self, arrival: float) -> None:
        """Work out when the message may be delivered (``due_at``) and when it expires
        (``expires_at``), in ms since the epoch, for an arrival at ``arrival``.

        ``expires_at`` is the earlier of arrival + header ttl and the properties'
        absolute-expiry-time; ``due_at`` is the ``x-opt-delivery-time`` annotation or else
        arrival + ``x-opt-delivery-delay``. Unreadable sections count as absent.
        """
        self.timed = True
        ttl = self.header.ttl
        expires = arrival + ttl if ttl is not None else None
        self._relative_expiry = expires is not None
        try:
            timing = read_timing(self.payload, self.body_offset)
        except WireError:
            timing = None
        if timing is not None:
            absolute = timing.absolute_expiry
            if absolute and (expires is None or absolute <= expires):
                expires = absolute
                self._relative_expiry = False
            if timing.delivery_time is not None:
                self.due_at = timing.delivery_time
            elif timing.delivery_delay is not None and timing.delivery_delay > 0:
                self.due_at = arrival + timing.delivery_delay
                self._relative_due = True
        self.expires_at = expires

    def has_relative_times(self) -> bool:
        """Whether its due time or expiry comes from a relative delay or ttl, which would count
        again from a restart if the message were stored as it arrived."""
        return self._relative_due or self._relative_expiry

    def fix_times(self) -> None:
        """Write the due time and the ttl's expiry into the message as absolute times (the
        ``x-opt-delivery-time`` annotation, the ``absolute-expiry-time`` property), so that a
        stored copy keeps them across a restart. Consumers see these fields from then on."""
        payload = self.payload
        try:
            if self._relative_due and self.due_at is not None:
                payload = add_delivery_time(payload, self.body_offset, int(self.due_at))
            if self._relative_expiry and self.expires_at is not None:
                payload = set_absolute_expiry(payload, self.body_offset, math.ceil(self.expires_at))
        except WireError:
            return  # unreadable sections: stored as they came (times count from a restart)
        self.payload = payload
        self._relative_due = self._relative_expiry = False

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

    def copy(self, message_id: int | None = None) -> StoredMessage:
        """An independent copy sharing the payload bytes (for a topic's subscribers), with the
        same id unless ``message_id`` gives it a new one (a copy that may be stored next to
        another copy of the same message, such as a dead-lettered one, needs its own)."""
        header = self.header
        clone = MessageHeader(
            header.durable, header.priority, header.ttl, header.first_acquirer,
            header.delivery_count,
        )  # fmt: skip
        twin_id = self.id if message_id is None else message_id
        twin = StoredMessage(twin_id, self.payload, clone, self.body_offset, self.origin)
        twin._arrival_count = self._arrival_count
        twin.timed = self.timed
        twin.due_at = self.due_at
        twin.expires_at = self.expires_at
        twin._relative_due = self._relative_due
        twin._relative_expiry = self._relative_expiry
        return twin
