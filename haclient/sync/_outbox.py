"""The one boundary a blocking send crosses: from the application's thread to the event loop.

How this works: a blocking producer stamps and encodes each message in the caller's thread
(``OutgoingEncoder.snapshot``) and puts a ``Sending`` into its ``Outbox``: the encoded bytes
with their destination and message id (``haclient.outgoing.Encoded``), the send's deadline
(``time.monotonic()`` seconds, the loop's clock), where its outcome goes (a lock the caller
waits on for a send that waits, the outbox's failure slot for one that does not) and, when the
connection traces, the caller's trace context (a value). Nothing of the
application's message crosses, so the application may reuse it as soon as ``send()`` returned.

The loop drains the outbox in order and in batches: the first ``put`` into an idle outbox starts
the drain, a task of the connection's calls made in the caller's thread (``EventLoop.spawn``:
one wake-up of the loop), and the sends put meanwhile are taken by the same drain. Each goes
to the async producer's pipelined path at once when it can (``send_encoded_nowait``); the first
that cannot (it waits for its outcome, a transaction, credit, or a connection) is sent the
general way (``send_encoded``, bounded by its deadline at the gate, F4), and the drain goes on
after it. A send whose deadline passes before it could be sent fails with
``FailoverTimeoutError``; at most ``_LIMIT`` sends wait in an outbox, and a ``put`` into a full
one waits for room until its own deadline.

Outcomes (C9): a send that waits gets its error raised in its caller's thread. The first
failure of one that did not wait is kept and raised by the producer's next call (``send``,
``flush``, ``close``); when the next call is the close of the producer, its session or its
connection, that close raises it after closing (``settle``, ``settle_all``). A failure behind
one already kept, or found where no call is left to raise it (the connection closed under
queued sends), is counted in ``statistics().sends_failed`` and told to the connection's
listeners (``send_failed``).

Thread-safety: ``put``, ``wait``, ``raise_failure`` in the application's threads; the rest on
the loop. One lock guards the queue, the "drain scheduled" flag and the failure slot; a
condition on it wakes a ``put`` waiting for room. ``terms`` (what to encode for) is a frozen
value the loop replaces when the connection changes; the caller only reads the reference.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from _thread import allocate_lock, get_ident
from collections import deque
from collections.abc import Callable, Iterable

import anyio

from haclient.aio import gate
from haclient.aio.producer import CompletionListener
from haclient.aio.producer import MessageProducer as AsyncMessageProducer
from haclient.errors import ClosedError, FailoverTimeoutError
from haclient.message import Message
from haclient.outgoing import Encoded, EncodingTerms
from haclient.sync._dispatch import Dispatcher
from haclient.sync._loop import EventLoop

__all__ = ["Completion", "Outbox", "Sending", "deadline_after", "settle_all"]

log = logging.getLogger("haclient.sync")

_LIMIT = 10_000
"""Sends that may wait in one outbox; a ``put`` beyond waits for room."""
_POLL = 0.05
"""Seconds the main thread waits at a time, so that Ctrl-C is noticed promptly."""
_CANCEL_GRACE = 5.0
"""Seconds a Ctrl-C'd send waits for the loop to let go of it before re-raising."""
_MAIN_THREAD_IDENT = threading.main_thread().ident
_NOBODY_WAITS = allocate_lock()
"""The ``done`` of every send nobody waits for (never acquired)."""


def deadline_after(timeout: float | None) -> float:
    """The ``time.monotonic()`` (the event loop's clock) at which a send given ``timeout``
    seconds stops waiting (``math.inf`` for None); from the caller's thread, where the loop's
    ``anyio.current_time()`` cannot be asked.

    Raises:
        ConfigurationError: ``timeout`` is not a number >= 0 (or None).
    """
    return gate.deadline_after(timeout, now=time.monotonic)


class Completion:
    """Where a blocking ``send_async``'s outcome goes: its listener, called on the session's
    dispatcher thread with the application's message, which stays on this side. The loop
    calls ``complete(error)`` once."""

    __slots__ = ("_dispatcher", "_ended", "_listener", "_message")

    def __init__(
        self,
        listener: CompletionListener,
        message: Message,
        dispatcher: Dispatcher,
        ended: Callable[[BaseException | None], None] | None = None,
    ) -> None:
        self._listener = listener
        self._message = message
        self._dispatcher = dispatcher
        self._ended = ended  # the send's span, when the connection traces

    def complete(self, error: BaseException | None) -> None:
        """On the loop: the outcome is known (None: accepted)."""
        if self._ended is not None:
            try:
                self._ended(error)
            except Exception:
                log.exception("ending the span of a send failed")
        listener, message = self._listener, self._message
        self._dispatcher.submit(lambda: listener(message, error))


class Sending:
    """One blocking send as it crosses: the encoded message, its deadline, and where its
    outcome goes (``waits``: its caller waits on ``done`` and gets ``error``; with
    ``completion``, a ``send_async``, the broker's outcome goes there later)."""

    __slots__ = (
        "cancelled",
        "completion",
        "deadline",
        "done",
        "encoded",
        "error",
        "finished",
        "trace",
        "waits",
    )

    def __init__(
        self,
        encoded: Encoded,
        deadline: float,
        waits: bool,
        trace: object = None,
        completion: Completion | None = None,
    ) -> None:
        self.completion = completion
        self.encoded = encoded
        self.trace = trace
        """The caller's trace context (``Tracing.context_now``), when the connection traces."""
        self.deadline = deadline
        self.waits = waits
        self.cancelled = False
        self.finished = False
        self.error: BaseException | None = None
        if waits:
            self.done = allocate_lock()
            self.done.acquire()
        else:  # nobody waits on it: no lock of its own
            self.done = _NOBODY_WAITS


class Outbox:
    """One blocking producer's queue of sends into the event loop (see the module)."""

    def __init__(
        self,
        producer: AsyncMessageProducer,
        loop: EventLoop,
        terms: EncodingTerms,
        close_timeout: float,
    ) -> None:
        self._producer = producer
        self._loop = loop
        self.terms = terms
        """What a message put now is encoded for (replaced by the loop after failover)."""
        self._close_timeout = close_timeout
        self.closed = False
        """True once the loop closed the producer (set there, read by the caller)."""
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._queue: deque[Sending] = deque()
        self._scheduled = False
        self._failure: BaseException | None = None
        self._drained: anyio.Event | None = None
        self._drain_task: asyncio.Task[None] | None = None
        self._sending: Sending | None = None  # the head the drain awaits now
        self._cancels = 0  # cancels of the drain task made by _let_go, not yet seen

    def __len__(self) -> int:
        """Sends put and not yet handed to the connection."""
        return len(self._queue)

    # The application's side -------------------------------------------------------------------

    def put(self, sending: Sending) -> None:
        """Queue ``sending`` for the loop, waiting for room (until its deadline) when full.

        Raises:
            FailoverTimeoutError: no room before the send's deadline.
            ClosedError: the connection is closed (nothing was queued).
        """
        with self._lock:
            if len(self._queue) >= _LIMIT:
                self._wait_for_room(sending.deadline)
            self._queue.append(sending)
            if self._scheduled:
                return
            self._scheduled = True
        try:
            self._loop.spawn(self._drain)
        except BaseException:
            with self._lock:
                self._queue.remove(sending)
                self._scheduled = False
            raise

    def _wait_for_room(self, deadline: float) -> None:
        """With the lock held: wait until fewer than ``_LIMIT`` sends are queued."""
        while len(self._queue) >= _LIMIT:
            left = deadline - time.monotonic()
            if left <= 0:
                raise FailoverTimeoutError(
                    f"the send waited for room among {_LIMIT:,} queued sends until its "
                    "timeout: the connection is not taking them (failing over?)"
                )
            self._room.wait(min(left, _POLL))

    def wait(self, sending: Sending) -> None:
        """Block until the loop is done with ``sending`` (put, with ``waits``); raise its error.

        Raises:
            Exception: whatever the send raised on the loop.
            KeyboardInterrupt: Ctrl-C while waiting; the send is cancelled first (it may have
                reached the broker).
        """
        done = sending.done
        try:
            if get_ident() == _MAIN_THREAD_IDENT:  # Ctrl-C does not wake a blocked lock
                while not done.acquire(True, _POLL):
                    pass
            else:
                done.acquire()
        except KeyboardInterrupt:
            sending.cancelled = True
            try:
                self._loop.call_soon(self._cancel_head)
            except ClosedError:
                pass
            else:
                done.acquire(True, _CANCEL_GRACE)
            raise
        error, sending.error = sending.error, None
        if error is not None:
            raise error

    def raise_failure(self) -> None:
        """Raise the first failure of a send that did not wait, not raised yet."""
        if self._failure is not None:
            with self._lock:
                failure, self._failure = self._failure, None
            if failure is not None:
                raise failure

    # The loop's side ----------------------------------------------------------------------------

    async def _drain(self) -> None:
        """The drain: a task of the connection's calls, started from the thread of the
        ``put`` that found the outbox idle (``EventLoop.spawn``: one wake-up of the loop), that
        hands the queued sends over in order and ends when the queue is empty."""
        self._drain_task = asyncio.current_task()
        try:
            while (head := self._hand_over_nowait()) is not None:
                await self._send_head(head)
        except BaseException:  # cancelled: the connection is going away
            self._drop_all(
                ClosedError("the connection closed before the send went out"), report=True
            )  # no call is left to raise it (C9)
            raise
        finally:
            self._drain_task = None

    def _hand_over_nowait(self) -> Sending | None:
        """Hand the queued sends to the producer as long as that needs no wait; return the
        first that needs one (it stays at the head), None once the queue is empty."""
        producer = self._producer
        terms = producer.encoding_terms(self.terms)
        if terms is not None and terms is not self.terms:
            self.terms = terms  # failover: encode for the new connection from now on
        queue, lock = self._queue, self._lock
        send_now, take_failure = producer.send_encoded_nowait, producer.take_failure
        while True:
            with lock:
                if not queue:
                    self._scheduled = False
                    break
                sending = queue[0]
            if sending.cancelled:
                self._finish(sending, None)  # its caller was interrupted and let go of it
            elif producer.is_closed:
                self.closed = True
                self._drop_all(ClosedError("the producer was closed before the send went out"))
                return None
            else:
                failure = take_failure()
                if failure is not None:
                    self._note(failure)
                if sending.waits:
                    return sending
                try:
                    if not send_now(sending.encoded):
                        return sending
                except Exception as exc:
                    self._note(exc)
            with lock:
                queue.popleft()
                if len(queue) == _LIMIT - 1:
                    self._room.notify_all()
        self._wake_drained()
        return None

    async def _send_head(self, sending: Sending) -> None:
        """Send ``sending`` (the head) the general way, waiting out a failover until its
        deadline, and give its outcome where it goes. ``_let_go`` stops it by cancelling the
        drain task (asyncio's own cancellation, counted, so that the connection's cancel is
        told apart: no cancel scope per send)."""
        error: BaseException | None = None
        self._cancels = 0
        self._sending = sending
        try:
            if not sending.cancelled:
                completion = sending.completion
                sent = (
                    self._producer.send_encoded(sending.encoded, sending.deadline)
                    if completion is None
                    else self._producer.send_encoded_async(
                        sending.encoded, sending.deadline, completion.complete
                    )
                )
                tracing = self._loop.tracing
                if tracing is not None and sending.trace is not None:
                    sent = tracing.carried_from(sending.trace, sent)
                await sent
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not self._cancels or task is None or task.uncancel() > 0:
                raise  # the connection's: it is going away
            self._cancels = 0  # ours alone: the head was let go of
        except Exception as exc:
            error = exc
        finally:
            self._sending = None
        self._pop(sending)
        self._finish(sending, error)

    def _let_go(self, sending: Sending) -> None:
        """On the loop: stop sending ``sending`` if the drain is sending it now."""
        task = self._drain_task
        if self._sending is sending and task is not None:
            self._cancels += 1
            task.cancel()

    def _cancel_head(self) -> None:
        """A caller interrupted (Ctrl-C) while its send waits: stop sending it."""
        if self._queue and self._queue[0].cancelled:
            self._let_go(self._queue[0])

    def _pop(self, sending: Sending | None = None) -> None:
        """Take the head off the queue (``sending``, when given, unless it is gone already)."""
        with self._lock:
            if not self._queue or (sending is not None and self._queue[0] is not sending):
                return
            self._queue.popleft()
            if len(self._queue) == _LIMIT - 1:
                self._room.notify_all()

    def _finish(self, sending: Sending, error: BaseException | None) -> None:
        """Give ``sending``'s outcome where it goes (once)."""
        if sending.finished:
            return
        sending.finished = True
        if sending.waits:
            sending.error = error
            sending.done.release()
        elif error is not None:
            self._note(error)

    def _note(self, error: BaseException | None, message_id: str | None = None) -> None:
        """Keep ``error`` for the producer's next call, or, behind one kept already, report
        it (C9)."""
        if error is None:
            return
        with self._lock:
            kept = self._failure is None
            if kept:
                self._failure = error
        if not kept:
            self._producer.report_lost(error, message_id)

    def _drop_all(self, error: ClosedError, *, report: bool = False) -> None:
        """Give up on every queued send: the producer or the connection is gone. With
        ``report``, no call is left to raise a failure: each is reported (C9)."""
        with self._lock:
            dropped = list(self._queue)
            self._queue.clear()
            self._scheduled = False
            self._room.notify_all()
            kept, self._failure = (self._failure, None) if report else (None, self._failure)
        if kept is not None:
            self._producer.report_lost(kept)
        for sending in dropped:
            if report and not sending.waits and not sending.finished:
                sending.finished = True
                self._producer.report_lost(error, sending.encoded.message_id)
            else:
                self._finish(sending, error)
        self._wake_drained()

    def _wake_drained(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None:
            drained.set()

    async def wait_drained(self) -> None:
        """On the loop: return once every send put so far was handed over (or failed)."""
        while self._scheduled:
            if self._drained is None:
                self._drained = anyio.Event()
            await self._drained.wait()

    async def flush(self) -> None:
        """On the loop: the producer's ``flush`` after the queued sends were handed over."""
        await self.wait_drained()
        await self._producer.flush()

    async def settle(self) -> None:
        """On the loop, for a close: hand over what is queued and wait for the outcomes of
        pipelined sends (each bounded by ``close_timeout``), then close the producer; a
        failure found is kept for ``raise_failure`` (C9)."""
        with anyio.move_on_after(self._close_timeout):
            await self.wait_drained()
        try:
            await self._producer.close()
        except Exception as exc:
            self._note(exc)
        finally:
            self.closed = True
        if self._queue:  # still failing over after close_timeout: these never went out
            head = self._sending
            self._drop_all(ClosedError("the producer was closed before the send went out"))
            if head is not None:
                self._let_go(head)

    def take_failure(self) -> BaseException | None:
        """The failure kept for the next call, taken."""
        with self._lock:
            failure, self._failure = self._failure, None
        return failure

    def report(self, error: BaseException) -> None:
        """On the loop: ``error`` cannot be raised by any call (C9)."""
        self._producer.report_lost(error)


async def settle_all(outboxes: Iterable[Outbox]) -> BaseException | None:
    """On the loop, for the close of a session or connection: ``settle`` every outbox; the
    first failure found is returned (for that close to raise), the others reported (C9)."""
    first: BaseException | None = None
    for outbox in list(outboxes):
        await outbox.settle()
        failure = outbox.take_failure()
        if failure is None:
            continue
        if first is None:
            first = failure
        else:
            outbox.report(failure)
    return first
