"""The blocking ``MessageProducer``: its sends cross into the event loop as snapshots.

Where the thread boundary is: ``send()`` runs in the application's thread up to a snapshot of the
message. It resolves the destination, stamps the headers on the application's message (JMS: they
are visible on it afterwards), and encodes it there, with this producer's own encoder, ids and
defaults (``delivery_mode``, ``priority`` ...: kept here, read by no other thread). What crosses
to the loop is one ``SEND`` request through the connection's boundary
(``haclient.sync._boundary``): that snapshot (``haclient.outgoing.Encoded``: bytes, destination,
message id), the send's deadline and where its outcome goes (a ``Reply`` its caller waits on,
or this producer's ``Outbox``); never the message object. ``send_async`` crosses the same way,
with a number naming its completion, which stays on this side (the session's dispatcher calls
it). ``flush`` and ``close`` are requests through the same boundary, after the sends put before
them (the boundary keeps their order).
"""

from __future__ import annotations

import itertools
import logging

from haclient.aio.producer import CompletionListener
from haclient.destination import Destination
from haclient.errors import ClosedError
from haclient.message import DeliveryMode, Message
from haclient.outgoing import OutgoingEncoder, resolve_send, stamp_send
from haclient.sync._boundary import Op, Reply
from haclient.sync._context import SessionContext
from haclient.sync._facts import ProducerTerms
from haclient.sync._forward import Forwarded
from haclient.sync._outbox import Outbox, deadline_after

__all__ = ["CompletionListener", "MessageProducer", "ProducerTerms"]


class _Defaults:
    """A blocking producer's send defaults (JMS), read and written in the application's
    threads only."""

    __slots__ = (
        "delivery_delay",
        "delivery_mode",
        "disable_message_id",
        "disable_message_timestamp",
        "preserve_message_id",
        "priority",
        "time_to_live",
    )

    def __init__(self) -> None:
        self.delivery_mode = DeliveryMode.PERSISTENT
        self.priority = 4
        self.time_to_live = 0.0
        self.delivery_delay = 0.0
        self.disable_message_id = False
        self.preserve_message_id = False
        self.disable_message_timestamp = False


class MessageProducer:
    """Sends messages (JMS ``MessageProducer``); blocking. Made by ``Session.create_producer``.

    Every method may be called from any thread (JMS allows one thread at a time per session).
    """

    def __init__(
        self, handle: int, terms: ProducerTerms, outbox: Outbox, context: SessionContext
    ) -> None:
        self._handle = handle
        self._context = context
        self._boundary = context.boundary
        self._destination = terms.destination  # fixed for its life
        self._defaults = _Defaults()
        self._ids = terms.ids
        self._pipelined = terms.pipelined
        self._send_timeout = terms.send_timeout
        self._encoder = OutgoingEncoder(validate_names=terms.validate_names)
        self._outbox = outbox
        self._closed = False

    # Properties --------------------------------------------------------------------------------

    @property
    def destination(self) -> Destination | None:
        """The destination, or None for an anonymous producer."""
        return self._destination

    @property
    def is_closed(self) -> bool:
        """True once closed (or its session or connection closed)."""
        if self._closed or self._outbox.closed or self._boundary.closed:
            return True
        try:
            return self._boundary.call(Op.READ, self._handle, "is_closed")  # type: ignore[no-any-return]
        except ClosedError:
            return True

    delivery_mode = Forwarded[DeliveryMode](
        "_defaults", "Default delivery mode of ``send`` (PERSISTENT).", settable=True
    )
    priority = Forwarded[int]("_defaults", "Default priority, 0-9 (4).", settable=True)
    time_to_live = Forwarded[float](
        "_defaults", "Default time to live in seconds (0: never expires).", settable=True
    )
    delivery_delay = Forwarded[float](
        "_defaults",
        "Default delay in seconds before the broker delivers a message (0).",
        settable=True,
    )
    disable_message_id = Forwarded[bool](
        "_defaults",
        "A JMS hint; ids are always set (a re-sent message is recognised by its id, F11).",
        settable=True,
    )
    preserve_message_id = Forwarded[bool](
        "_defaults",
        "Keep the id a message already carries (see ``haclient.aio.MessageProducer``).",
        settable=True,
    )
    disable_message_timestamp = Forwarded[bool](
        "_defaults", "A JMS hint; timestamps are always set.", settable=True
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

        The message's headers are set as JMS says (id, timestamp, destination ...), and it is
        encoded in this thread: what is sent is the message as it is now, and the object may be
        changed and sent again once this returned (M11). A PERSISTENT message returns once the
        broker accepted it (F11: re-sent after a failover, same id). A NON_PERSISTENT one
        outside a transaction returns once queued, without waiting for the event loop: the
        loop sends the queued messages in order, waiting out a failover within each one's
        deadline, and a refusal or ``FailoverTimeoutError`` is raised by a later call of this
        producer (C9); at most 10,000 wait in that queue, after which ``send`` waits for room
        until its deadline. In a transacted session the message becomes visible on commit.
        ``timeout`` bounds the wait while the connection fails over (None: the connection's
        ``send_timeout``, ``jms.sendTimeout``; ``failover.timeout`` bounds it too).

        Raises:
            MessageFormatError: a property or header cannot be sent.
            InvalidDestinationError: no destination, or the broker refused it.
            ResourceLimitError, AMQPError ...: the broker rejected the message (this one, or
                an earlier queued one not reported yet).
            ClosedError: the producer, session or connection is closed.
            FailoverTimeoutError: still failing over after ``timeout`` seconds (F4), for this
                send or an earlier queued one.
            IllegalStateError: the event-loop thread, or a process forked after the
                connection was opened (C8).
            KeyboardInterrupt: Ctrl-C while waiting (the send is cancelled; it may have
                reached the broker).
        """
        destination, message, deadline = self._prepare(
            destination_or_message,
            message,
            delivery_mode,
            priority,
            time_to_live,
            delivery_delay,
            timeout,
        )
        tracing = self._boundary.tracing
        if tracing is None:
            self._hand_over(message, deadline)
        else:  # the trace context goes into the properties before the message is encoded
            tracing.posted(
                destination,
                message,
                None,
                lambda: self._hand_over(message, deadline),
                self._broker_now,
            )

    def _broker_now(self) -> object:
        """The broker in use as the loop last told this producer (for a traced send's span)."""
        return self._outbox.broker

    def _prepare(
        self,
        destination_or_message: Destination | Message,
        message: Message | None,
        delivery_mode: DeliveryMode | None,
        priority: int | None,
        time_to_live: float | None,
        delivery_delay: float | None,
        timeout: float | None,
    ) -> tuple[Destination, Message, float]:
        """In the caller's thread: check, resolve and stamp a send; its deadline."""
        self._boundary.check_caller()
        self._outbox.raise_failure()
        if self._outbox.closed or self._closed:
            raise ClosedError("the producer is closed")
        deadline = deadline_after(self._send_timeout if timeout is None else timeout)
        destination, message = resolve_send(self._destination, destination_or_message, message)
        stamp_send(
            message,
            destination,
            self._defaults,
            self._ids,
            delivery_mode=delivery_mode,
            priority=priority,
            time_to_live=time_to_live,
            delivery_delay=delivery_delay,
        )
        return destination, message, deadline

    def _hand_over(
        self,
        message: Message,
        deadline: float,
        completion: CompletionListener | None = None,
        ended: object = None,
    ) -> None:
        """Encode ``message`` here and put the snapshot through the boundary; for a send that
        waits (PERSISTENT, in a transaction ..., or a ``send_async`` until queued for the
        socket), wait for the loop's outcome."""
        encoded = self._encoder.snapshot(message, self._outbox.terms)
        waits = completion is not None or message.delivery_mode not in self._pipelined
        boundary = self._boundary
        if completion is None:
            args: tuple[object, ...] = (encoded,)
        else:  # the listener and the message stay here; a number names them
            number = next(_completions)
            self._context.dispatcher.completions[number] = _Completion(completion, message, ended)
            args = (encoded, number)
        request = boundary.request(
            Op.SEND, self._handle, args, deadline, Reply() if waits else None
        )
        self._outbox.reserve(deadline)
        try:
            if waits:
                boundary.put_and_wait(request)
            else:
                boundary.put(request)
        except BaseException:
            if not request.queued:  # it never reached the loop, which hands over the rest
                self._outbox.unreserve()
            raise

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
        The message crosses to the event loop as ``send()``'s does, encoded here; what goes
        with it is where its outcome goes (``haclient.sync._outbox.Completion``), and the
        message object given to ``on_completion`` never leaves this side.

        Raises:
            MessageFormatError: a property or header cannot be sent (found before anything
                was sent, as ``send()``).
            InvalidDestinationError: no destination.
            ClosedError: the producer, session or connection is closed.
            IllegalStateError: the event-loop thread, or a process forked after the
                connection was opened (C8).
        """
        destination, message, deadline = self._prepare(
            destination_or_message,
            message,
            delivery_mode,
            priority,
            time_to_live,
            delivery_delay,
            timeout,
        )
        tracing = self._boundary.tracing
        if tracing is None:
            self._hand_over(message, deadline, on_completion)
            return
        sent = message
        tracing.posted_async(  # the span lasts until the outcome (``ended``)
            destination,
            sent,
            lambda ended: self._hand_over(sent, deadline, on_completion, ended),
            self._broker_now,
        )

    def flush(self) -> None:
        """Wait until the broker settled every message sent so far.

        Raises:
            AMQPError: the first refusal of a pipelined (NON_PERSISTENT) send not reported
                yet (``ResourceLimitError`` ... as ``send()`` raises it).
        """
        self._outbox.raise_failure()
        self._boundary.call(Op.FLUSH, self._handle)
        self._outbox.raise_failure()  # a queued send's, found while flushing

    def close(self) -> None:
        """Wait for the outcome of pipelined sends, then detach. Idempotent; any thread.

        Raises:
            AMQPError: the broker's refusal, or the failure, of a queued (NON_PERSISTENT)
                send not reported yet, once closed (C9; ``FailoverTimeoutError`` ... as
                ``send()`` raises it).
        """
        if not self._closed:
            try:
                self._boundary.call(Op.CLOSE_PRODUCER, self._handle, close=True)
            except ClosedError:
                pass  # closed with its session: its failure, if any, is raised below
            finally:
                self._closed = True
        self._outbox.raise_failure()

    def __repr__(self) -> str:
        return f"<blocking producer {self._handle} to {self._destination}>"


class _Completion:
    """A ``send_async``'s outcome on this side: called on the session's dispatcher thread
    with the error (None: accepted), it calls the application's listener with its message."""

    __slots__ = ("_ended", "_listener", "_message")

    def __init__(self, listener: CompletionListener, message: Message, ended: object) -> None:
        self._listener = listener
        self._message = message
        self._ended = ended  # the send's span, when the connection traces

    def __call__(self, error: BaseException | None) -> None:
        if self._ended is not None:
            try:
                self._ended(error)  # type: ignore[operator]
            except Exception:
                log.exception("ending the span of a send failed")
        self._listener(self._message, error)


_completions = itertools.count(1)
log = logging.getLogger("haclient.sync")
