"""``QueueBrowser``: look at a queue's messages without consuming them.

How this works: a browser is a receiver link whose source has distribution mode ``copy``: the
broker sends copies and leaves the queue alone. Its credit is the connection's prefetch (at
least 1). When the messages already here run out, the browser drains the link: the broker sends
what it has for the credit, or answers that it has nothing; nothing after a drain means the end
of the enumeration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from failover.manager import RestoreOrder
from haclient.amqp.codec import MessageView
from haclient.amqp.endpoints import Receiver
from haclient.amqp.types import SenderSettleMode, Terminus
from haclient.destination import Queue, TemporaryQueue
from haclient.errors import BrowserFailoverError, HAClientError, MessageFormatError
from haclient.mapping import from_amqp
from haclient.message import Message

if TYPE_CHECKING:
    from haclient.aio.context import SessionContext
    from haclient.aio.gate import Connected
    from haclient.aio.physical import PhysicalConnection

__all__ = ["QueueBrowser"]


class QueueBrowser:
    """Iterates over the messages of a queue (JMS ``QueueBrowser``): ``async for m in browser``.

    Iteration ends when the queue has no more messages for it (each message is seen once per
    browser); it never removes or acknowledges anything.
    """

    def __init__(
        self,
        context: SessionContext,
        queue: Queue | TemporaryQueue,
        source: Terminus,
        *,
        selector: str | None,
        link_name: str,
    ) -> None:
        self._context = context
        self._queue = queue
        self._source = source
        self._selector = selector
        self._link_name = link_name
        self._receiver: Receiver | None = None
        self._at: Connected | None = None  # the connection the link was attached on
        self._credit = max(1, min(context.options.prefetch_for(queue, browser=True), 1000))
        self._closed = False
        self._exhausted = False
        self._interrupted = False

    # Failover ----------------------------------------------------------------------------------

    restore_order: int = RestoreOrder.BROWSER

    def connection_lost(self, epoch: int, cause: BaseException) -> None:
        """An enumeration cannot go on over another connection: the next step raises (F10)."""
        if not self._exhausted:
            self._interrupted = True

    async def restore(self, physical: PhysicalConnection, epoch: int) -> None:
        """Nothing to restore: the interrupted enumeration raises ``BrowserFailoverError``."""

    @property
    def queue(self) -> Queue | TemporaryQueue:
        """The queue browsed."""
        return self._queue

    @property
    def message_selector(self) -> str | None:
        """The JMS selector, if any."""
        return self._selector

    async def _attach(self, at: Connected) -> None:
        """Attach the link on ``at``'s connection (the one its call was admitted on), in the
        session begun on it.

        Raises:
            ReplacedError: failover replaced ``at``'s connection (``SessionContext.session_on``).
        """
        amqp_session = self._context.session_on(at)
        self._receiver = await at.amqp.open_receiver(
            self._source,
            session=amqp_session,
            name=self._link_name,
            credit=self._credit,
            snd_settle_mode=SenderSettleMode.SETTLED,
            timeout=self._context.options.attach_timeout,
        )
        self._at = at

    def __aiter__(self) -> QueueBrowser:
        return self

    async def __anext__(self) -> Message:
        """The next message of the queue.

        Raises:
            StopAsyncIteration: no more messages (or the browser is closed).
            BrowserFailoverError: the connection failed over during the enumeration (F10);
                deliberately not a StopIteration, which would look like the end of the queue.
        """
        message = await self._next()
        if message is None:
            raise StopAsyncIteration
        return message

    async def _next(self) -> Message | None:
        while not self._closed and not self._exhausted:
            if self._interrupted:
                raise BrowserFailoverError(
                    f"the connection failed over while browsing {self._queue}: browse again"
                )
            receiver, at = self._receiver, self._at
            assert receiver is not None and at is not None
            amqp = at.amqp  # the enumeration's connection: the link's, never another's
            raw = amqp.receive_nowait(receiver)
            if raw is None:
                try:
                    await amqp.drain(receiver)
                except HAClientError:
                    if self._interrupted or not amqp.is_open:
                        self._interrupted = True
                        continue
                    raise
                raw = amqp.receive_nowait(receiver)
                if raw is None:
                    self._exhausted = True
                    return None
            if receiver.credit + amqp.queued(receiver) <= self._credit // 2:
                amqp.flow(receiver, self._credit - receiver.credit - amqp.queued(receiver))
            raw.delivery.settle()
            try:
                return from_amqp(
                    MessageView(raw.payload),
                    prefixes=at.physical.prefixes,
                    consumer_destination=self._queue,
                )
            except MessageFormatError:
                continue  # not a message we can show; browsing skips it
        return None

    async def close(self) -> None:
        """Detach the browser. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._context.forget(self)
        at = self._at
        if self._receiver is not None and at is not None and at.amqp.is_open:
            at.amqp.detach(self._receiver)  # on its own connection, never the next one

    def _session_closed(self) -> None:
        self._closed = True

    def __repr__(self) -> str:
        return f"<QueueBrowser of {self._queue} ({'closed' if self._closed else 'open'})>"
