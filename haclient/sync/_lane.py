"""A blocking producer's sends on the loop: in order, in batches, each within its deadline.

How this works: the loop's half of a blocking producer (``haclient.sync._served`` makes one per
producer). Each ``SEND`` request taken from the connection's boundary comes here with the
message encoded in its caller's thread (``haclient.outgoing.Encoded``), its deadline and where
its outcome goes. While nothing waits before it, a send goes to the async producer's pipelined
path at once (``send_encoded_nowait``), inside the drain of the boundary's batch: no task, no
further wake-up. A send whose caller waits for its outcome (PERSISTENT ...) goes at once too
when nothing has to be waited for first (``send_encoded_then``: connected, a link with credit,
no transaction): its outcome goes to its ``Reply`` from the loop turn the broker's settlement
arrives in, with no task to resume a turn later; a loss of the connection before that hands
it to the general path (``haclient.aio.in_flight``), and sends put meanwhile queue behind it.
The first that cannot (a transaction, credit, a connection to wait for) starts the lane's task,
which sends it the general way (``send_encoded``, bounded by its deadline at the gate, F4) and
the ones queued behind it in order.

Outcomes (C9): a send whose caller waits gets its error in its ``Reply``. The first failure of
one that did not wait is kept in the producer's ``Outbox`` (the caller's side) and raised by
the producer's next call; one behind it, or one found where no call is left to raise it (the
connection closed under queued sends), is reported (``report_lost``: counted in
``statistics().sends_failed`` and told to the connection's listeners). A ``send_async``'s
outcome goes to the session's dispatcher thread as a record (its number and the error), where
its completion listener is called.

Thread-safety: the loop's alone, except what it tells the ``Outbox`` (which locks).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Coroutine
from functools import partial
from typing import Any

import anyio

from haclient.aio.connection import Connection as AsyncConnection
from haclient.aio.in_flight import InFlight
from haclient.aio.producer import MessageProducer as AsyncMessageProducer
from haclient.errors import ClosedError
from haclient.outgoing import Encoded
from haclient.sync._boundary import Request
from haclient.sync._dispatch import Dispatcher
from haclient.sync._outbox import Outbox

__all__ = ["Lane", "settle_all", "started_now"]

log = logging.getLogger("haclient.sync")


class Lane:
    """The loop's half of one blocking producer (see the module)."""

    def __init__(
        self,
        producer: AsyncMessageProducer,
        connection: AsyncConnection,
        outbox: Outbox,
        dispatcher: Dispatcher,
        tracing: object,
        close_timeout: float,
    ) -> None:
        self._producer = producer
        self._connection = connection
        self._outbox = outbox
        self._dispatcher = dispatcher
        self._tracing = tracing
        self._close_timeout = close_timeout
        self._queue: deque[Request] = deque()
        self._task: asyncio.Task[None] | None = None
        self._sending: Request | None = None  # the head the task awaits now
        self._cancels = 0  # cancels of the task made by ``cancel``, not yet seen
        self._drained: anyio.Event | None = None
        self._terms = outbox.terms
        # A send whose caller waits, transferred at once; its outcome comes by callback
        self._in_flight: tuple[Request, InFlight] | None = None

    @property
    def producer(self) -> AsyncMessageProducer:
        return self._producer

    @property
    def sending(self) -> Request | None:
        """The send whose outcome is awaited now (in flight, or the task's head), or None."""
        return self._sending if self._in_flight is None else self._in_flight[0]

    def put(self, request: Request) -> None:
        """A ``SEND`` request from the boundary, in order."""
        if self._task is None and self._in_flight is None and not self._queue:
            # one or the other: _send_now takes the sends nobody waits for, _send_at_once
            # those whose caller waits
            sent = self._send_now(request) if request.reply is None else self._send_at_once(request)
            if sent:
                return
        self._queue.append(request)
        if self._task is None and self._in_flight is None:
            task = started_now(self._drain())
            if not task.done():
                self._task = task

    def _send_now(self, request: Request) -> bool:
        """Send ``request`` at once if it needs no wait; True when it is done with."""
        producer = self._producer
        if request.reply is not None or len(request.args) > 1:
            return False  # its caller waits (or a send_async): the general way
        if producer.is_closed:
            self._outbox.closed = True
            self._outbox.handed_over()
            self._note(ClosedError("the producer was closed before the send went out"))
            return True
        self._refresh_terms()
        failure = producer.take_failure()
        if failure is not None:
            self._note(failure)
        encoded: Encoded = request.args[0]
        try:
            if not producer.send_encoded_nowait(encoded):
                return False
        except Exception as exc:
            self._note(exc, encoded.message_id)
        self._outbox.handed_over()
        return True

    def _send_at_once(self, request: Request) -> bool:
        """Send ``request``, whose caller waits for its outcome, at once when that needs no
        wait first: its outcome goes to its ``Reply`` from the loop turn that brings it
        (``send_encoded_then``: no task, one loop turn fewer); the sends put meanwhile queue
        behind it. True when it went so."""
        if request.reply is None or len(request.args) > 1 or request.trace is not None:
            return False
        assert request.deadline is not None
        in_flight = self._producer.send_encoded_then(
            request.args[0], request.deadline, partial(self._sent_at_once, request)
        )
        if in_flight is None:
            return False
        self._in_flight = (request, in_flight)
        return True

    def _sent_at_once(self, request: Request, error: BaseException | None) -> None:
        """The outcome of the send in flight (on the loop; in the AMQP event handler when it
        came from the broker): to its caller; then the sends queued behind it, by the task."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is None or in_flight[1].handed_back:
            self._refresh_terms()  # it went out again after a failover: on a new connection
        self._outbox.handed_over()
        self._finish(request, error)
        if self._queue and self._task is None:  # not run here: this may be an event handler
            self._task = asyncio.get_running_loop().create_task(self._drain())
        self._wake_drained()

    def _refresh_terms(self) -> None:
        terms = self._producer.encoding_terms(self._terms)
        if terms is not None and terms is not self._terms:
            self._terms = terms
            self._outbox.broker = self._connection.broker
            self._outbox.terms = terms  # failover: the caller encodes for the new connection

    async def _drain(self) -> None:
        """The lane's task: the queued sends in order, the pipelined ones at once, the others
        the general way; it ends when the queue is empty."""
        self._task = asyncio.current_task()
        try:
            queue = self._queue
            while queue:
                head = queue[0]
                if self._send_now(head):
                    queue.popleft()
                    continue
                await self._send_head(head)
                if queue and queue[0] is head:
                    queue.popleft()
        except BaseException:  # cancelled: the connection is going away
            self.drop_all(ClosedError("the connection closed before the send went out"), True)
            raise
        finally:
            self._task = None
            self._wake_drained()

    async def _send_head(self, request: Request) -> None:
        """Send ``request`` the general way, waiting out a failover until its deadline, and
        give its outcome where it goes. ``cancel`` stops it by cancelling the lane's task
        (counted, so that the connection's cancel is told apart)."""
        error: BaseException | None = None
        self._cancels = 0
        self._sending = request
        producer = self._producer
        encoded: Encoded = request.args[0]
        deadline = request.deadline
        assert deadline is not None
        try:
            if len(request.args) > 1:
                number: int = request.args[1]
                dispatcher = self._dispatcher
                sent = producer.send_encoded_async(
                    encoded, deadline, lambda error: dispatcher.completed(number, error)
                )
            else:
                sent = producer.send_encoded(encoded, deadline)
            tracing = self._tracing
            if tracing is not None and request.trace is not None:
                sent = tracing.carried_from(request.trace, sent)  # type: ignore[attr-defined]
            await sent
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not self._cancels or task is None or task.uncancel() > 0:
                raise  # the connection's: it is going away
            self._cancels = 0  # ours alone: the caller let go of it, or a close dropped it
            if not (self._queue and self._queue[0] is request):
                return  # dropped: ``drop_all`` gave its outcome (once: C9)
        except Exception as exc:
            error = exc
        finally:
            self._sending = None
        self._refresh_terms()  # it may have gone out after a failover: on a new connection
        self._outbox.handed_over()
        self._finish(request, error)

    def cancel(self, number: int) -> bool:
        """A caller interrupted (Ctrl-C) while its send waits: stop sending it. True when
        that send is this lane's."""
        if self._in_flight is not None and self._in_flight[0].number == number:
            self._in_flight[1].cancel()
            self._sent_at_once(self._in_flight[0], None)
            return True
        for request in self._queue:
            if request.number == number:
                break
        else:
            return False
        if self._sending is request and self._task is not None:
            self._cancels += 1
            self._task.cancel()
        elif request in self._queue:
            self._queue.remove(request)
            self._outbox.handed_over()
            self._finish(request, None)
        return True

    def _finish(self, request: Request, error: BaseException | None) -> None:
        """Give ``request``'s outcome where it goes."""
        reply = request.reply
        if reply is not None:
            reply.give(None, error)
        elif error is not None:
            if len(request.args) > 1:
                return  # a send_async: its completion listener was told
            self._note(error, request.args[0].message_id)

    def _note(self, error: BaseException, message_id: str | None = None) -> None:
        """Keep ``error`` for the producer's next call, or, behind one kept, report it (C9)."""
        if not self._outbox.keep(error):
            self._producer.report_lost(error, message_id)

    def drop_all(self, error: ClosedError, report: bool = False) -> None:
        """Give up on every queued send: the producer or the connection is gone. With
        ``report``, no call is left to raise a failure: each is reported (C9)."""
        dropped = list(self._queue)
        self._queue.clear()
        if self._in_flight is not None:  # first in order: it went before the queued ones
            request, in_flight = self._in_flight
            self._in_flight = None
            in_flight.cancel()
            dropped.insert(0, request)
        if report:
            kept = self._outbox.take_failure()
            if kept is not None:
                self._producer.report_lost(kept)
        for request in dropped:
            self._outbox.handed_over()
            if request.reply is not None:
                request.reply.give(None, error)
            elif len(request.args) > 1:
                self._dispatcher.completed(request.args[1], error)
            elif report:
                self._producer.report_lost(error, request.args[0].message_id)
            else:
                self._note(error, request.args[0].message_id)
        self._wake_drained()

    def _wake_drained(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None:
            drained.set()

    async def wait_drained(self) -> None:
        """Return once every send put so far was handed over (or failed)."""
        while self._queue or self._task is not None or self._in_flight is not None:
            if self._drained is None:
                self._drained = anyio.Event()
            await self._drained.wait()

    async def flush(self) -> None:
        """The producer's ``flush`` after the queued sends were handed over."""
        await self.wait_drained()
        await self._producer.flush()

    async def settle(self) -> None:
        """For a close: hand over what is queued and wait for the outcomes of pipelined
        sends (each bounded by ``close_timeout``), then close the producer; a failure found
        is kept in the outbox for the close to raise (C9)."""
        with anyio.move_on_after(self._close_timeout):
            await self.wait_drained()
        try:
            await self._producer.close()
        except Exception as exc:
            self._note(exc)
        finally:
            self._outbox.closed = True
        if self._queue or self._in_flight is not None:  # still waiting after close_timeout
            head = self._sending
            task = self._task
            self.drop_all(ClosedError("the producer was closed before the send went out"))
            if head is not None and task is not None:
                self._cancels += 1
                task.cancel()


def started_now(coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """A task of ``coro`` whose first step runs now, in the doorbell's callback, rather than
    in the loop's next turn (one turn fewer per blocking call: the send is written, the
    receive takes its prefetched message, before the loop polls again).

    How: ``create_task`` appends the task's first step to the loop's ready queue (asyncio's
    ``BaseEventLoop._ready``, a deque) as its last entry; it is taken back and run here. This
    runs in a plain callback of the loop (no task is current), so the step runs as it would
    in the next turn. Where the loop is not asyncio's own, or that entry is not the task's
    step, the task starts in the next turn as usual.
    """
    loop = asyncio.get_running_loop()
    task = loop.create_task(coro)
    ready = getattr(loop, "_ready", None)
    if type(ready) is deque and ready and asyncio.current_task() is None:
        step = ready[-1]
        if (
            getattr(step, "_callback", None) is not None
            and getattr(step._callback, "__self__", None) is task
        ):
            ready.pop()
            step._run()
    return task


async def settle_all(lanes: list[Lane]) -> BaseException | None:
    """For the close of a session or connection: ``settle`` every lane; the first failure
    found is returned (for that close to raise), the others reported (C9)."""
    first: BaseException | None = None
    for lane in lanes:
        await lane.settle()
        failure = lane._outbox.take_failure()
        if failure is None:
            continue
        if first is None:
            first = failure
        else:
            lane.producer.report_lost(failure)
    return first
