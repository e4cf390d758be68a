"""A blocking producer's side of its sends: room, kept failures, and what to encode for.

How this works: a blocking producer stamps and encodes each message in the caller's thread
(``OutgoingEncoder.snapshot``) and puts a ``SEND`` request into its connection's boundary
(``haclient.sync._boundary``): the encoded bytes with their destination and message id
(``haclient.outgoing.Encoded``), the send's deadline (``time.monotonic()`` seconds, the loop's
clock) and where its outcome goes (a ``Reply`` for a send that waits; this outbox for one that
does not). Nothing of the application's message crosses, so the application may reuse it as
soon as ``send()`` returned. The loop carries the sends out in order (``haclient.sync._lane``).

The ``Outbox`` is what comes back to the producer's caller: at most ``_LIMIT`` sends of one
producer wait to be handed to the connection, and a ``send`` beyond waits for room until its
own deadline (F4, raising ``FailoverTimeoutError``), room meaning half of them handed over (a
caller woken for each send handed over would take turns with the loop thread, for the GIL and
the lock, at every message: a fifth more CPU per pipelined send, measured); the first failure
of a send that did not wait is kept here and raised by the producer's next call (``send``,
``flush``, ``close``: C9); ``terms`` says what a message is encoded for (the loop replaces it, a
frozen value, after a failover); ``closed`` says that the loop closed the producer.

Thread-safety: every method from any thread, but ``handed_over`` from the loop's thread only
(the one writer of the count handed over: it takes no lock unless a caller waits for room);
one lock, with a condition for room.
"""

from __future__ import annotations

import threading
import time

from haclient.aio import gate
from haclient.destination import NO_PREFIXES
from haclient.errors import FailoverTimeoutError
from haclient.outgoing import EncodingTerms

__all__ = ["Outbox", "deadline_after"]

_LIMIT = 10_000
"""Sends of one producer that may wait to be handed over; a ``send`` beyond waits for room."""
_ROOM = _LIMIT // 2
"""Sends left to hand over when a ``send`` that found the outbox full goes on."""
_POLL = 0.05
"""Seconds a send waiting for room waits at a time (Ctrl-C, the deadline)."""


def deadline_after(timeout: float | None) -> float:
    """The ``time.monotonic()`` (the event loop's clock) at which a send given ``timeout``
    seconds stops waiting (``math.inf`` for None); from the caller's thread, where the loop's
    ``anyio.current_time()`` cannot be asked.

    Raises:
        ConfigurationError: ``timeout`` is not a number >= 0 (or None).
    """
    return gate.deadline_after(timeout, now=time.monotonic)


class Outbox:
    """One blocking producer's sends as its callers see them (see the module)."""

    def __init__(self, terms: EncodingTerms | None = None) -> None:
        self.terms = terms or EncodingTerms(-1, NO_PREFIXES, None)
        """What a message put now is encoded for (replaced by the loop after failover)."""
        self.closed = False
        """True once the loop closed the producer."""
        self.broker: object = None
        """The broker in use when ``terms`` was last replaced (a value the loop gives: a
        traced send's span names it, never read from the connection in this thread)."""
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._reserved = 0  # written under the lock (callers)
        self._handed = 0  # written by the loop's thread only
        self._waiting = 0  # callers waiting for room
        self._failure: BaseException | None = None

    def __len__(self) -> int:
        """Sends put and not yet handed to the connection."""
        return self._reserved - self._handed

    # The application's side -------------------------------------------------------------------

    def reserve(self, deadline: float) -> None:
        """Count one more send to hand over, waiting for room (until ``deadline``) when full.

        Raises:
            FailoverTimeoutError: no room before the deadline.
        """
        with self._lock:
            if self._reserved - self._handed >= _LIMIT:
                self._wait_for_room(deadline)
            self._reserved += 1

    def unreserve(self) -> None:
        """Count one send less: reserved, and never put through the boundary."""
        with self._lock:
            self._reserved -= 1

    def _wait_for_room(self, deadline: float) -> None:
        """Wait (holding the lock) until no more than ``_ROOM`` sends are left to hand over."""
        self._waiting += 1
        try:
            while self._reserved - self._handed > _ROOM:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise FailoverTimeoutError(
                        f"the send waited for room among {_LIMIT:,} queued sends until its "
                        "timeout: the connection is not taking them (failing over?)"
                    )
                self._room.wait(min(left, _POLL))
        finally:
            self._waiting -= 1

    def raise_failure(self) -> None:
        """Raise the first failure of a send that did not wait, not raised yet."""
        if self._failure is not None:
            failure = self.take_failure()
            if failure is not None:
                raise failure

    def take_failure(self) -> BaseException | None:
        """The failure kept for the next call, taken."""
        with self._lock:
            failure, self._failure = self._failure, None
        return failure

    # The loop's side ----------------------------------------------------------------------------

    def handed_over(self) -> None:
        """One send was handed to the connection (or failed): room for another. From the
        loop's thread only."""
        self._handed += 1
        if self._waiting and self._reserved - self._handed <= _ROOM:
            with self._lock:  # a caller waits: it holds the lock from its look to its wait
                self._room.notify_all()

    def keep(self, error: BaseException) -> bool:
        """Keep ``error`` for the producer's next call; False when one is kept already."""
        with self._lock:
            if self._failure is not None:
                return False
            self._failure = error
            return True
