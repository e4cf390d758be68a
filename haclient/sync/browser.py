"""The blocking ``QueueBrowser``: ``haclient.aio.QueueBrowser`` through the connection's loop."""

from __future__ import annotations

from collections.abc import Iterator

from haclient.aio.browser import QueueBrowser as AsyncQueueBrowser
from haclient.destination import Queue, TemporaryQueue
from haclient.message import Message
from haclient.sync._forward import Forwarded
from haclient.sync._loop import EventLoop

__all__ = ["QueueBrowser"]


async def _next_or_none(browser: AsyncQueueBrowser) -> Message | None:
    try:
        return await browser.__anext__()
    except StopAsyncIteration:
        return None


class QueueBrowser:
    """Iterates over the messages of a queue without consuming them (JMS ``QueueBrowser``):
    ``for msg in browser``. Iteration ends when the queue has no more messages for it; it
    never removes or acknowledges anything. Every method may be called from any thread.
    """

    def __init__(self, browser: AsyncQueueBrowser, loop: EventLoop) -> None:
        self._browser = browser
        self._loop = loop

    queue = Forwarded[Queue | TemporaryQueue]("_browser", "The queue browsed.")
    message_selector = Forwarded[str | None]("_browser", "The JMS selector, if any.")

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        """The next message of the queue.

        Raises:
            StopIteration: no more messages (or the browser is closed).
            BrowserFailoverError: the connection failed over during the enumeration (F10).
        """
        message = self._loop.run(_next_or_none, self._browser)
        if message is None:
            raise StopIteration
        return message

    def close(self) -> None:
        """Detach the browser. Idempotent; callable from any thread."""
        self._loop.run_close(self._browser.close)

    def __repr__(self) -> str:
        return f"<blocking {self._browser!r}>"
