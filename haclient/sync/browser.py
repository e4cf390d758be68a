"""The blocking ``QueueBrowser``: requests about one ``haclient.aio.QueueBrowser`` through the
connection's boundary."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import suppress

from haclient.destination import Queue, TemporaryQueue
from haclient.errors import ClosedError
from haclient.message import Message
from haclient.sync._boundary import Boundary, Op
from haclient.sync._facts import BrowserFacts

__all__ = ["QueueBrowser"]


class QueueBrowser:
    """Iterates over the messages of a queue without consuming them (JMS ``QueueBrowser``):
    ``for msg in browser``. Iteration ends when the queue has no more messages for it; it
    never removes or acknowledges anything. Every method may be called from any thread.
    """

    def __init__(self, boundary: Boundary, handle: int, facts: BrowserFacts) -> None:
        self._boundary = boundary
        self._handle = handle
        self._facts = facts

    @property
    def queue(self) -> Queue | TemporaryQueue:
        """The queue browsed."""
        return self._facts.queue

    @property
    def message_selector(self) -> str | None:
        """The JMS selector, if any."""
        return self._facts.message_selector

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        """The next message of the queue.

        Raises:
            StopIteration: no more messages (or the browser is closed).
            BrowserFailoverError: the connection failed over during the enumeration (F10).
        """
        try:
            message = self._boundary.call(Op.BROWSE, self._handle)
        except ClosedError:
            raise StopIteration from None
        if message is None:
            raise StopIteration
        return message  # type: ignore[no-any-return]

    def close(self) -> None:
        """Detach the browser. Idempotent; callable from any thread."""
        with suppress(ClosedError):  # closed with its session
            self._boundary.call(Op.CLOSE_BROWSER, self._handle, close=True)

    def __repr__(self) -> str:
        return f"<blocking browser {self._handle} of {self._facts.queue}>"
