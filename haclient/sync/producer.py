"""The blocking ``MessageProducer``: ``haclient.aio.MessageProducer`` through the connection's loop.

The producer's defaults (``delivery_mode``, ``priority`` ...) are properties that read and write
the async producer's attributes; they are read by the loop when a message is sent.
"""

from __future__ import annotations

from haclient.aio.producer import CompletionListener
from haclient.aio.producer import MessageProducer as AsyncMessageProducer
from haclient.destination import Destination
from haclient.message import DeliveryMode, Message
from haclient.sync._context import SessionContext
from haclient.sync._forward import Forwarded

__all__ = ["CompletionListener", "MessageProducer"]


class MessageProducer:
    """Sends messages (JMS ``MessageProducer``); blocking. Made by ``Session.create_producer``.

    Every method may be called from any thread (JMS allows one thread at a time per session).
    """

    def __init__(self, producer: AsyncMessageProducer, context: SessionContext) -> None:
        self._producer = producer
        self._context = context
        self._loop = context.loop

    # Properties --------------------------------------------------------------------------------

    destination = Forwarded[Destination | None](
        "_producer", "The destination, or None for an anonymous producer."
    )
    is_closed = Forwarded[bool](
        "_producer", "True once closed (or its session or connection closed)."
    )
    delivery_mode = Forwarded[DeliveryMode](
        "_producer", "Default delivery mode of ``send`` (PERSISTENT).", settable=True
    )
    priority = Forwarded[int]("_producer", "Default priority, 0-9 (4).", settable=True)
    time_to_live = Forwarded[float](
        "_producer", "Default time to live in seconds (0: never expires).", settable=True
    )
    delivery_delay = Forwarded[float](
        "_producer",
        "Default delay in seconds before the broker delivers a message (0).",
        settable=True,
    )
    disable_message_id = Forwarded[bool](
        "_producer",
        "A JMS hint; ids are always set (a re-sent message is recognised by its id, F11).",
        settable=True,
    )
    preserve_message_id = Forwarded[bool](
        "_producer",
        "Keep the id a message already carries (see ``haclient.aio.MessageProducer``).",
        settable=True,
    )
    disable_message_timestamp = Forwarded[bool](
        "_producer", "A JMS hint; timestamps are always set.", settable=True
    )

    # Sending -----------------------------------------------------------------------------------

    def send(
        self,
        destination_or_message: Destination | Message,
        message: Message | None = None,
        *,
        delivery_mode: DeliveryMode | None = None,
        priority: int | None = None,
        time_to_live: float | None = None,
        delivery_delay: float | None = None,
        timeout: float | None = None,
    ) -> None:
        """Send ``message`` (``send(message)``, or ``send(destination, message)`` when anonymous).

        The message's headers are set as JMS says (id, timestamp, destination ...). A
        PERSISTENT message returns once the broker accepted it (F11: re-sent after a failover,
        same id). A NON_PERSISTENT one outside a transaction returns once queued, without
        waiting for the event loop: the loop sends the queued messages in order, waiting out
        a failover, and a refusal is raised by a later call of this producer; at most 10,000
        wait in that queue, after which ``send`` waits for room. In a transacted session the
        message becomes visible on commit. ``timeout`` bounds the wait while the connection
        fails over (None: the connection's ``send_timeout``, ``jms.sendTimeout``;
        ``failover.timeout`` bounds it too).

        Raises:
            MessageFormatError: a property or header cannot be sent.
            InvalidDestinationError: no destination, or the broker refused it.
            ResourceLimitError, AMQPError ...: the broker rejected the message.
            ClosedError: the producer, session or connection is closed.
            FailoverTimeoutError: still failing over after ``timeout`` seconds (F4).
            KeyboardInterrupt: Ctrl-C while waiting (the send is cancelled; it may have
                reached the broker).
        """
        self._loop.check_caller()
        if self._producer.post(
            destination_or_message,
            message,
            delivery_mode=delivery_mode,
            priority=priority,
            time_to_live=time_to_live,
            delivery_delay=delivery_delay,
            schedule=self._loop.call_soon,
        ):
            return
        self._loop.run(
            self._producer.send,
            destination_or_message,
            message,
            delivery_mode=delivery_mode,
            priority=priority,
            time_to_live=time_to_live,
            delivery_delay=delivery_delay,
            timeout=timeout,
        )

    def send_async(
        self,
        destination_or_message: Destination | Message,
        message: Message | None = None,
        *,
        on_completion: CompletionListener,
        delivery_mode: DeliveryMode | None = None,
        priority: int | None = None,
        time_to_live: float | None = None,
        delivery_delay: float | None = None,
        timeout: float | None = None,
    ) -> None:
        """Send without waiting for the broker; ``on_completion(message, error)`` says how it went.

        Returns once the message is queued for the socket. ``on_completion`` is called exactly
        once, on the session's dispatcher thread (not the caller's, not the event loop's), with
        ``error=None`` when the broker accepted the message (JMS 2.0 ``CompletionListener``).

        Raises:
            As ``send()``, for errors found before anything was sent.
        """
        dispatcher = self._context.dispatcher

        def complete(sent: Message, error: BaseException | None) -> None:
            dispatcher.submit(lambda: on_completion(sent, error))

        self._loop.run(
            self._producer.send_async,
            destination_or_message,
            message,
            on_completion=complete,
            delivery_mode=delivery_mode,
            priority=priority,
            time_to_live=time_to_live,
            delivery_delay=delivery_delay,
            timeout=timeout,
        )

    def flush(self) -> None:
        """Wait until the broker settled every message sent so far.

        Raises:
            The first refusal of a pipelined (NON_PERSISTENT) send not reported yet.
        """
        self._loop.run(self._producer.flush)

    def close(self) -> None:
        """Wait for the outcome of pipelined sends, then detach. Idempotent; any thread.

        Raises:
            The broker's refusal of a pipelined (NON_PERSISTENT) send not reported yet.
        """
        self._loop.run_close(self._producer.close)

    def __repr__(self) -> str:
        return f"<blocking {self._producer!r}>"
