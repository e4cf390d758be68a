"""The blocking ``MessageConsumer``: ``haclient.aio.MessageConsumer`` through the connection's loop.

How this works: ``receive()`` is one call into the loop. A listener set with
``set_message_listener(fn)`` is registered with the async consumer as a small coroutine that
hands the message to the session's dispatcher thread and waits until ``fn`` returned, so the
async layer acknowledges after it (AUTO) or redelivers when it raised. ``close()`` knows when it
is called from inside its own listener (the dispatcher thread runs that listener) and then
does not wait for the listener (C4).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import anyio

from haclient.aio.consumer import MessageConsumer as AsyncMessageConsumer
from haclient.destination import Destination
from haclient.message import Message
from haclient.modes import AckMode
from haclient.sync._context import SessionContext
from haclient.sync._dispatch import run_listener_job, wait_for_job
from haclient.sync._forward import Forwarded
from haclient.sync._loop import EventLoop, partial_run

__all__ = ["MessageConsumer", "MessageListener"]

MessageListener = Callable[[Message], object]
"""A blocking message listener: a plain function taking the message (its result is ignored)."""

_CLOSE_WAIT = 30.0
"""Seconds ``close()`` waits for blocked ``receive()`` calls to return (they return at once)."""


def _no_op(*, timeout: float | None = None) -> None:
    """The blocking acknowledger of a message whose session acknowledges by itself."""


def make_acknowledge_blocking(message: Message, loop: EventLoop, ack_mode: AckMode) -> Message:
    """Replace the async acknowledger the async layer gave ``message`` by a blocking one."""
    acknowledger = message._acknowledger
    if acknowledger is not None:
        if ack_mode.acknowledged_by_application:
            message._bind_acknowledger(partial_run(loop, acknowledger))
        else:  # the session acknowledges: the async acknowledger does nothing
            message._bind_acknowledger(_no_op)
    return message


class MessageConsumer:
    """Receives messages from a destination (JMS ``MessageConsumer``); blocking.

    Made by ``Session.create_consumer`` and friends. Iterate it (``for msg in consumer``) to
    receive until it is closed. Every method may be called from any thread; ``close()`` also
    from inside this consumer's own listener.
    """

    def __init__(self, consumer: AsyncMessageConsumer, context: SessionContext) -> None:
        self._consumer = consumer
        self._context = context
        self._loop = context.loop
        self._listener: MessageListener | None = None
        self._receiving = 0
        self._receivers_done = threading.Condition()

    # Properties --------------------------------------------------------------------------------

    destination = Forwarded[Destination]("_consumer", "The destination messages come from.")
    message_selector = Forwarded[str | None]("_consumer", "The JMS selector, if any.")
    no_local_emulated = Forwarded[bool](
        "_consumer",
        "Whether this client withholds its own messages because the broker does not (E2).",
    )
    selector_emulated = Forwarded[bool](
        "_consumer",
        "Whether this client evaluates the selector because the broker does not (E1, E5).",
    )
    no_local = Forwarded[bool](
        "_consumer", "Whether messages published by this connection's client id are withheld."
    )
    subscription_name = Forwarded[str | None](
        "_consumer", "The durable or shared subscription's name, if this consumes one."
    )
    is_closed = Forwarded[bool](
        "_consumer", "True once ``close()`` was called (or the session or connection closed)."
    )

    @property
    def message_listener(self) -> MessageListener | None:
        """The listener set with ``set_message_listener``, if any."""
        return self._listener

    # Receiving ---------------------------------------------------------------------------------

    def receive(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to ``timeout`` seconds (None: until one comes).

        Returns None on timeout (having asked the broker for a message it still has, M9) and
        once the consumer is closed, also when another thread calls ``close()`` while this
        waits (C2). In AUTO mode the message is acknowledged, and
        the broker confirmed it, before it is returned (A1). The message's ``acknowledge()``
        blocks until the broker confirmed (CLIENT, A2).

        Raises:
            ClosedError: the consumer, its session or its connection was closed before the call.
            IllegalStateError: the consumer has a message listener, or this is the loop thread.
            KeyboardInterrupt: Ctrl-C while waiting (the wait on the loop is cancelled).
            InvalidDestinationError ...: the broker closed the link, with its reason.
        """
        with self._receivers_done:
            self._receiving += 1
        try:
            message = self._loop.run(self._consumer.receive, timeout)
        finally:
            with self._receivers_done:
                self._receiving -= 1
                self._receivers_done.notify_all()
        if message is None:
            return None
        return make_acknowledge_blocking(message, self._loop, self._context.ack_mode)

    def receive_nowait(self) -> Message | None:
        """A message if one is already here (prefetched); else, unless
        ``receive_no_wait_local_only``, one the broker sends when asked (a drain, one round
        trip: M9); else None.

        Raises:
            ClosedError: the consumer, its session or its connection was closed before the
                call (as ``receive()``).
            IllegalStateError: the consumer has a message listener, or this is the loop thread.
            InvalidDestinationError ...: the broker closed the link, with its reason.
        """
        return self.receive(timeout=0)

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        """The next message; iteration ends when the consumer is closed.

        Raises:
            StopIteration: the consumer is closed.
        """
        if self._consumer.is_closed:
            raise StopIteration
        message = self.receive()
        if message is None:
            raise StopIteration
        return message

    # Listener ----------------------------------------------------------------------------------

    def set_message_listener(self, listener: MessageListener | None) -> None:
        """Deliver messages to ``listener(message)`` from now on; None stops it.

        The listener runs on the session's dispatcher thread (never on the event-loop thread),
        one listener of the session at a time, once the connection is started. In AUTO mode a
        message is acknowledged right after the listener returned (A1); if it raises, the
        message is redelivered. The listener may call ``close()`` on this consumer (C4), and
        ``acknowledge()`` on the message (it blocks until the broker confirmed, CLIENT).

        Raises:
            ClosedError: the consumer is closed.
        """
        if listener is None:
            self._loop.run(self._consumer.set_message_listener, None)
            self._listener = None
            return
        dispatcher = self._context.dispatcher
        loop = self._loop
        ack_mode = self._context.ack_mode
        waiter = anyio.CapacityLimiter(1)  # one worker thread waits for this consumer's jobs

        async def relay(message: Message) -> None:
            # On the loop: hand over to the dispatcher thread and wait until the listener ran.
            make_acknowledge_blocking(message, loop, ack_mode)
            run = listener if loop.tracing is None else loop.tracing.bound(listener)
            await wait_for_job(run_listener_job(dispatcher, self, run, message), waiter)

        self._listener = listener
        self._loop.run(self._consumer.set_message_listener, relay)

    # Closing -----------------------------------------------------------------------------------

    def close(self, *, from_listener: bool = False) -> None:
        """Close the consumer (C1-C5). Idempotent; callable from any thread.

        A ``receive()`` blocked in another thread returns None, and this returns after it has
        (C2). A listener running on the dispatcher thread is waited for (C3), unless this is
        called from inside that listener (C4: detected; ``from_listener=True`` says so
        explicitly). Nothing is acknowledged or rolled back (C5).

        Raises:
            IllegalStateError: called from the event-loop thread.
        """
        inside = from_listener or self._context.dispatcher.running() is self
        self._loop.run_close(self._consumer.close, from_listener=inside)
        with self._receivers_done:
            self._receivers_done.wait_for(lambda: self._receiving == 0, timeout=_CLOSE_WAIT)

    def __repr__(self) -> str:
        return f"<blocking {self._consumer!r}>"
