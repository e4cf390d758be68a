"""The blocking ``MessageConsumer``: requests about one ``haclient.aio.MessageConsumer``
through the connection's boundary.

How this works: ``receive()`` is one ``RECEIVE`` request (its timeout as its deadline); the
message that comes back is the loop's no more: its ``acknowledge()`` is a request through the
same boundary naming the consumer's handle and a number (``MessageAcknowledger``). A listener
set with ``set_message_listener(fn)`` stays on this side, registered with the session's
dispatcher under the consumer's handle; the request (``LISTEN``) only says "on" or "off", and
the loop hands each message to the dispatcher thread and waits until ``fn`` returned, so the
async layer acknowledges after it (AUTO) or redelivers when it raised. ``close()`` knows when
it is called from inside its own listener (the dispatcher thread runs that listener) and then
does not wait for the listener (C4).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from haclient.destination import Destination
from haclient.errors import ClosedError
from haclient.message import Message
from haclient.sync._boundary import Op
from haclient.sync._context import SessionContext
from haclient.sync._facts import ConsumerFacts

__all__ = ["MessageConsumer", "MessageListener"]

MessageListener = Callable[[Message], object]
"""A blocking message listener: a plain function taking the message (its result is ignored)."""


class MessageConsumer:
    """Receives messages from a destination (JMS ``MessageConsumer``); blocking.

    Made by ``Session.create_consumer`` and friends. Iterate it (``for msg in consumer``) to
    receive until it is closed. Every method may be called from any thread; ``close()`` also
    from inside this consumer's own listener.
    """

    def __init__(self, handle: int, facts: ConsumerFacts, context: SessionContext) -> None:
        self._handle = handle
        self._facts = facts
        self._context = context
        self._boundary = context.boundary
        self._listener: MessageListener | None = None
        self._closed = False
        self._receiving = 0
        self._receivers_done = threading.Condition()

    # Properties --------------------------------------------------------------------------------

    @property
    def destination(self) -> Destination:
        """The destination messages come from."""
        return self._facts.destination

    @property
    def message_selector(self) -> str | None:
        """The JMS selector, if any."""
        return self._facts.message_selector

    @property
    def no_local(self) -> bool:
        """Whether messages published by this connection's client id are withheld."""
        return self._facts.no_local

    @property
    def subscription_name(self) -> str | None:
        """The durable or shared subscription's name, if this consumes one."""
        return self._facts.subscription_name

    def _read(self, name: str, closed: bool) -> bool:
        if self._boundary.closed or self._boundary.loop_thread.forked:
            return closed
        try:
            return self._boundary.call(Op.READ, self._handle, name)  # type: ignore[no-any-return]
        except ClosedError:
            return closed

    @property
    def no_local_emulated(self) -> bool:
        """Whether this client withholds its own messages because the broker does not (E2)."""
        return self._read("no_local_emulated", False)

    @property
    def selector_emulated(self) -> bool:
        """Whether this client evaluates the selector because the broker does not (E1, E5)."""
        return self._read("selector_emulated", False)

    @property
    def is_closed(self) -> bool:
        """True once ``close()`` was called (or the session or connection closed)."""
        return self._closed or self._read("is_closed", True)

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
            message = self._boundary.call(Op.RECEIVE, self._handle, timeout=timeout)
        finally:
            with self._receivers_done:
                self._receiving -= 1
                self._receivers_done.notify_all()
        return message  # type: ignore[no-any-return]

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
        if self._closed:
            raise StopIteration
        try:
            message = self.receive()
        except ClosedError:  # closed with its session or connection
            raise StopIteration from None
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
        listeners = self._context.dispatcher.listeners
        if listener is None:
            self._boundary.call(Op.LISTEN, self._handle, False)
            listeners.pop(self._handle, None)
            self._listener = None
            return
        listeners[self._handle] = listener  # it stays here; the loop names the handle
        self._listener = listener
        try:
            self._boundary.call(Op.LISTEN, self._handle, True)
        except BaseException:
            listeners.pop(self._handle, None)
            self._listener = None
            raise

    # Closing -----------------------------------------------------------------------------------

    def close(self, *, from_listener: bool = False) -> None:
        """Close the consumer (C1-C5). Idempotent; callable from any thread.

        A ``receive()`` blocked in another thread returns None, and this returns after it has
        (C2), or after the connection's ``close_timeout`` at most: a ``receive()`` that already
        took its message and waits for the broker to confirm its acknowledgement (AUTO, A1)
        goes on waiting (a silent broker: until the connection fails over) and then returns
        the message or raises, as A1 says. A listener running on the dispatcher thread is
        waited for (C3), unless this is called from inside that listener (C4: detected;
        ``from_listener=True`` says so explicitly). Nothing is acknowledged or rolled back
        (C5).

        Raises:
            IllegalStateError: called from the event-loop thread.
        """
        inside = from_listener or self._context.dispatcher.running() == self._handle
        try:
            self._boundary.call(Op.CLOSE_CONSUMER, self._handle, inside, close=True)
        except ClosedError:
            pass  # closed with its session
        finally:
            self._closed = True
        with self._receivers_done:
            self._receivers_done.wait_for(
                lambda: self._receiving == 0, timeout=self._context.close_timeout
            )

    def __repr__(self) -> str:
        return f"<blocking consumer {self._handle} of {self._facts.destination}>"
