"""The loop's half of every blocking connection's boundary: requests carried out on the loop.

How this works: a loop thread has one ``Serving``. When a boundary rings the loop's doorbell,
``Serving.drain`` takes that boundary's queued requests in one batch and gives them, in order,
to the boundary's ``Served``: the connection's objects on the loop, each under a handle (a
number: the blocking facade knows its objects by handle only), and the operations a request may
name (``Op``). A send goes to its producer's ``Lane`` (at once when it needs no wait); a
cheap read (``READ``, ``STATISTICS``) is answered inline; an AUTO receive of a prefetched
message and a CLIENT or INDIVIDUAL acknowledgement go at once when nothing has to be waited for
first (``_AT_ONCE``: the outcome comes by callback from the loop turn that brings the broker's
confirmation, ``in_flight`` keeps them meanwhile); any other operation runs as a task of the
connection's, in the caller's trace context, and gives its outcome to the request's ``Reply``.
A ``CANCEL`` cancels the task (or the send, or tells the call in flight) of the request it
names.

Everything here runs on the loop thread; nothing here is called from another thread. What goes
back is a value: a handle and a frozen record of facts (``_facts``: ``ProducerTerms`` ...),
a destination, a received message the loop no longer touches (its acknowledger bound to a
``MessageAcknowledger``: a request through the same boundary).

Closing: ``CLOSE_CONNECTION`` settles the producers' queued sends (C9), closes the connection,
cancels the connection's tasks still running, fails what is still queued with ``ClosedError``
and marks the boundary closed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import anyio

from haclient.aio.acks import TrackedAcknowledger
from haclient.aio.connection import Connection as AsyncConnection
from haclient.aio.connection import ConnectionFactory as AsyncConnectionFactory
from haclient.aio.received_in_flight import CallInFlight
from haclient.errors import ClosedError, HAClientError, IllegalStateError
from haclient.message import Message
from haclient.modes import AckMode
from haclient.sync._boundary import (
    CONNECTION,
    Boundary,
    MessageAcknowledger,
    Op,
    Request,
    timeout_left,
)
from haclient.sync._dispatch import Dispatcher, wait_for_job
from haclient.sync._facts import (
    BrowserFacts,
    ConnectionFacts,
    ConsumerFacts,
    FailoverRelay,
    SessionFacts,
    consumer_facts,
    producer_terms,
)
from haclient.sync._lane import Lane, settle_all, started_now
from haclient.sync._runtime import LoopThread

__all__ = ["Served", "Serving", "add_operations"]

log = logging.getLogger("haclient.sync")


# The loop's half ------------------------------------------------------------------------------


class Serving:
    """A loop thread's halves of the boundaries that ring it (one ``Served`` each)."""

    def __init__(self, loop_thread: LoopThread) -> None:
        self._loop_thread = loop_thread
        self._served: dict[Boundary, Served] = {}

    def drain(self, boundary: Boundary) -> None:
        """The doorbell rang for ``boundary``: carry out its queued requests."""
        served = self._served.get(boundary)
        if served is None:
            served = self._served[boundary] = Served(boundary, self._loop_thread, self)
        served.carry_out(boundary.take_all())

    def forget(self, boundary: Boundary) -> None:
        self._served.pop(boundary, None)

    @staticmethod
    def of(loop_thread: LoopThread, boundary: Boundary) -> Served | None:
        """For tests, on the loop: ``boundary``'s half."""
        serving = loop_thread.serving
        return None if serving is None else serving._served.get(boundary)


_Handler = Callable[["Served", Request, Any], Any]


class Served:
    """One blocking connection on the loop: its objects by handle, its producers' lanes, its
    requests' tasks (see the module)."""

    def __init__(self, boundary: Boundary, loop_thread: LoopThread, serving: Serving) -> None:
        self.boundary = boundary
        self.loop_thread = loop_thread
        self._serving = serving
        self.connection: AsyncConnection | None = None
        self.objects: dict[int, Any] = {}
        self.parents: dict[int, int] = {}  # a producer, consumer or browser -> its session
        self.dispatchers: dict[int, Dispatcher] = {}  # a session -> its dispatcher
        self.modes: dict[int, AckMode] = {}  # a session -> its acknowledge mode
        self.lanes: dict[int, Lane] = {}  # a producer -> its lane
        self.acks: dict[int, tuple[int, Callable[..., Awaitable[None]]]] = {}
        self.tasks: dict[int, asyncio.Task[Any]] = {}  # request number -> its task
        self.in_flight: dict[int, CallInFlight] = {}  # request number -> its call without a task
        self._handles = itertools.count(1)
        self._acks = itertools.count(1)
        self.closed: dict[int, str] = {}  # handles dropped: what they were
        self.shut = False

    # Carrying requests out ---------------------------------------------------------------------

    def carry_out(self, requests: list[Request]) -> None:
        """Each request in order (see the module)."""
        for request in requests:
            try:
                self._carry_out(request)
            except Exception as exc:  # the request's own error (a bad handle ...)
                self.give(request, None, exc)

    def _carry_out(self, request: Request) -> None:
        op = request.op
        if self.shut:
            self._refuse(request)
        elif op is Op.SEND:
            lane = self.lanes.get(request.handle)
            if lane is None:
                raise ClosedError("the producer is closed")
            lane.put(request)
        elif op is Op.CANCEL:
            self._cancel(request.handle, request.args[0])
        elif (inline := _INLINE.get(op)) is not None:
            self.give(request, inline(self, request, self.objects.get(request.handle)), None)
        elif (at_once := _AT_ONCE.get(op)) is not None and at_once(self, request):
            pass  # on its way without a task: its outcome comes by callback
        else:
            target = self.objects.get(request.handle)
            if target is None and request.handle != CONNECTION and op not in _ANY_TARGET:
                raise ClosedError(f"the {self.closed.get(request.handle, 'object')} is closed")
            coro = _ASYNC[op](self, request, target)
            tracing = self.boundary.tracing
            if tracing is not None and request.trace is not None:
                coro = tracing.carried_from(request.trace, coro)
            task = started_now(self._run(request, coro))
            if not task.done():
                self.tasks[request.number] = task

    def _receive_at_once(self, request: Request) -> bool:
        """A ``RECEIVE`` whose message is prefetched and needs no wait first: taken now, its
        reply given from the loop turn in which the broker confirms its acknowledgement
        (``MessageConsumer.receive_then``: no task, one loop turn fewer). True when it went so."""
        consumer = self.objects.get(request.handle)
        if consumer is None or request.trace is not None or request.reply is None:
            return False
        handle = request.handle
        number = request.number

        def received(message: Message | None, error: BaseException | None) -> None:
            self.in_flight.pop(number, None)
            value = None
            if message is not None:
                try:
                    value = self.handed_out(message, handle)
                except Exception as exc:
                    error = exc
            self.give(request, value, error)

        return self._in_flight(
            request, consumer.receive_then(timeout_left(request.deadline), received)
        )

    def _acknowledge_at_once(self, request: Request) -> bool:
        """An ``ACKNOWLEDGE_MESSAGE`` (CLIENT, INDIVIDUAL) that needs no wait first: settled
        now, its reply given from the loop turn in which the broker confirms it
        (``TrackedAcknowledger.then``: no task). True when it went so."""
        (number,) = request.args
        entry = self.acks.get(number)
        if entry is None or request.trace is not None or request.reply is None:
            return False
        session, acknowledger = entry
        if not isinstance(acknowledger, TrackedAcknowledger):
            return False

        def acknowledged(_: None, error: BaseException | None) -> None:
            self.in_flight.pop(request.number, None)
            if error is None:
                self.acknowledged(session, number)
            self.give(request, None, error)

        return self._in_flight(request, acknowledger.then(acknowledged))

    def _in_flight(self, request: Request, in_flight: CallInFlight | None) -> bool:
        """``request`` went without a task when ``in_flight`` is not None: kept until its
        outcome came (a ``CANCEL`` or the connection's close tells it earlier)."""
        if in_flight is None:
            return False
        if not in_flight.done:
            self.in_flight[request.number] = in_flight
        return True

    async def _run(self, request: Request, coro: Coroutine[Any, Any, Any]) -> None:
        value: Any = None
        error: BaseException | None = None
        try:
            value = await coro
        except asyncio.CancelledError:
            error = ClosedError("the connection was closed while the call was waiting")
        except BaseException as exc:
            error = exc
        finally:
            self.tasks.pop(request.number, None)
        self.give(request, value, error)

    @staticmethod
    def give(request: Request, value: Any, error: BaseException | None) -> None:
        """``request``'s outcome to its reply. An ``HAClientError`` goes without the loop
        thread's frames (the caller raises it, so its traceback starts again there)."""
        reply = request.reply
        if reply is None:
            if error is not None:
                log.debug("%r failed with nobody waiting", request, exc_info=error)
            return
        if isinstance(error, HAClientError):
            error = error.with_traceback(None)
        reply.give(value, error)

    def _refuse(self, request: Request) -> None:
        if request.op is Op.SEND and request.reply is None:
            lane = self.lanes.get(request.handle)
            if lane is not None:
                lane.producer.report_lost(
                    ClosedError("the connection closed before the send went out"),
                    request.args[0].message_id,
                )
            return
        self.give(request, None, ClosedError("the connection is closed"))

    def _cancel(self, handle: int, number: int) -> None:
        task = self.tasks.get(number)
        if task is not None:
            task.cancel()
            return
        in_flight = self.in_flight.get(number)
        if in_flight is not None:
            in_flight.cancel()
            return
        lane = self.lanes.get(handle)
        if lane is not None:
            lane.cancel(number)

    def acknowledged(self, session: int, number: int) -> None:
        """Message ``number`` of ``session`` was acknowledged: forget its acknowledger, and in
        CLIENT mode those of every message of the session so far (A2)."""
        if self.modes[session] is AckMode.CLIENT:
            for done in [n for n, (owner, _) in self.acks.items() if owner == session]:
                del self.acks[done]
        else:
            self.acks.pop(number, None)

    # Objects by handle ---------------------------------------------------------------------------

    def keep(self, target: Any, parent: int | None = None) -> int:
        handle = next(self._handles)
        self.objects[handle] = target
        if parent is not None:
            self.parents[handle] = parent
        return handle

    def drop(self, handle: int, kind: str) -> None:
        """``handle``'s object is closed: forget it (a later request on it: ``ClosedError``)."""
        if self.objects.pop(handle, None) is not None:
            self.closed[handle] = kind
        self.lanes.pop(handle, None)

    def drop_children(self, session: int) -> None:
        """``session`` is closed: forget what it made and its messages' acknowledgers (the
        session itself stays, closed: its own calls raise its own errors)."""
        for child, parent in list(self.parents.items()):
            if parent == session and child in self.objects:
                self.drop(child, type(self.objects[child]).__name__.lower().replace("message", ""))
        for number in [n for n, (owner, _) in self.acks.items() if owner == session]:
            del self.acks[number]

    def lanes_of(self, session: int | None) -> list[Lane]:
        return [
            lane
            for handle, lane in self.lanes.items()
            if session is None or self.parents.get(handle) == session
        ]

    def handed_out(self, message: Message, consumer: int) -> Message:
        """A message going to the application: its acknowledger becomes a request through
        the boundary (a handle and a number), or nothing where the session acknowledges."""
        acknowledger = message._acknowledger
        if acknowledger is not None:
            session = self.parents[consumer]
            if self.modes[session].acknowledged_by_application:
                number = next(self._acks)
                self.acks[number] = (session, acknowledger)
                message._bind_acknowledger(MessageAcknowledger(self.boundary, consumer, number))
            else:
                message._bind_acknowledger(_no_op)
        return message

    # Shutting down -------------------------------------------------------------------------------

    def shut_down(self) -> None:
        """The connection is closed: cancel its tasks, fail what is queued, forget it."""
        self.shut = True
        current = asyncio.current_task()
        for task in list(self.tasks.values()):
            if task is not current:
                task.cancel()
        for number in list(self.in_flight):  # nobody will confirm their acknowledgements now
            self.in_flight.pop(number).closed()
        for lane in self.lanes.values():
            lane.drop_all(ClosedError("the connection closed before the send went out"), True)
        self.boundary.closed = True
        for request in self.boundary.take_all():
            self._refuse(request)
        self._serving.forget(self.boundary)


_AT_ONCE: dict[Op, Callable[[Served, Request], bool]] = {
    Op.RECEIVE: Served._receive_at_once,
    Op.ACKNOWLEDGE_MESSAGE: Served._acknowledge_at_once,
}
"""Operations that may go without a task when nothing has to be waited for (True: they did)."""

_ANY_TARGET = frozenset({Op.ACKNOWLEDGE_MESSAGE})
"""Operations on a handle whose object may be closed (a message acknowledged after its
consumer was closed: C5, the session acknowledges)."""


def _no_op(*, timeout: float | None = None) -> None:
    """The acknowledger of a message whose session acknowledges by itself."""


# The operations ---------------------------------------------------------------------------------


def _read(served: Served, request: Request, target: Any) -> Any:
    if target is None:
        raise ClosedError(f"the {served.closed.get(request.handle, 'object')} is closed")
    return getattr(target, request.args[0])


def _statistics(served: Served, request: Request, target: Any) -> Any:
    assert served.connection is not None
    return served.connection.statistics()


_INLINE: dict[Op, _Handler] = {
    Op.READ: _read,
    Op.STATISTICS: _statistics,
}


async def _open(served: Served, request: Request, target: Any) -> ConnectionFacts:
    factory: AsyncConnectionFactory
    factory, client_id, username, password, notifier = request.args
    connecting = factory.create_connection(
        client_id=client_id, username=username, password=password, listener=FailoverRelay(notifier)
    )
    connection = await connecting.open_in(served.loop_thread.host_group)
    served.connection = connection
    served.objects[CONNECTION] = connection
    tracing = connection._context.tracing
    served.boundary.tracing = tracing
    return ConnectionFacts(connection.connection_id, connection.client_id, connection.url, tracing)


async def _close_connection(served: Served, request: Request, target: Any) -> Any:
    running_handle, end_private_loop = request.args
    connection = served.connection
    failure: BaseException | None = None
    statistics = None
    try:
        if connection is not None:
            running = served.objects.get(running_handle) if running_handle else None
            if running is not None:  # C4: the listener calling this must not be waited for
                await running.close(from_listener=True)
            failure = await settle_all(served.lanes_of(None))  # C9
            await connection.close()
    finally:
        if connection is not None:
            statistics = connection.statistics()
        served.shut_down()
        if end_private_loop and served.boundary.private:
            served.loop_thread.stop()
    return failure, statistics


async def _start(served: Served, request: Request, target: AsyncConnection) -> None:
    await target.start()


async def _stop(served: Served, request: Request, target: AsyncConnection) -> None:
    await target.stop()


async def _delete_temporary(served: Served, request: Request, target: AsyncConnection) -> None:
    await target.delete_temporary(*request.args)


async def _create_session(
    served: Served, request: Request, target: AsyncConnection
) -> tuple[int, SessionFacts]:
    ack_mode, dispatcher = request.args
    session = await target.create_session(ack_mode, timeout=timeout_left(request.deadline))
    handle = served.keep(session)
    served.dispatchers[handle] = dispatcher
    served.modes[handle] = session.ack_mode
    return handle, SessionFacts(session.ack_mode, session.transacted, session.transactions_emulated)


async def _create_producer(served: Served, request: Request, session: Any) -> tuple[int, Any]:
    destination, outbox = request.args
    producer = await session.create_producer(destination, timeout=timeout_left(request.deadline))
    terms = producer_terms(producer)
    assert served.connection is not None
    outbox.broker = served.connection.broker
    outbox.terms = terms.encoding
    handle = served.keep(producer, parent=request.handle)
    served.lanes[handle] = Lane(
        producer,
        served.connection,
        outbox,
        served.dispatchers[request.handle],
        served.boundary.tracing,
        terms.close_timeout,
    )
    return handle, terms


def _creating_consumer(name: str) -> _Handler:
    async def create(served: Served, request: Request, session: Any) -> tuple[int, ConsumerFacts]:
        method = getattr(session, name)
        consumer = await method(*request.args, timeout=timeout_left(request.deadline))
        return served.keep(consumer, parent=request.handle), consumer_facts(consumer)

    return create


async def _create_browser(served: Served, request: Request, session: Any) -> tuple[int, Any]:
    browser = await session.create_browser(*request.args, timeout=timeout_left(request.deadline))
    facts = BrowserFacts(browser.queue, browser.message_selector)
    return served.keep(browser, parent=request.handle), facts


def _session_call(name: str) -> _Handler:
    async def call(served: Served, request: Request, session: Any) -> Any:
        return await getattr(session, name)(*request.args, timeout=timeout_left(request.deadline))

    return call


async def _close_session(served: Served, request: Request, session: Any) -> Any:
    (running_handle,) = request.args
    try:
        running = served.objects.get(running_handle) if running_handle else None
        if running is not None:  # C4
            await running.close(from_listener=True)
        failure = await settle_all(served.lanes_of(request.handle))  # C9
        await session.close()
    finally:
        served.drop_children(request.handle)
    return failure


async def _flush(served: Served, request: Request, producer: Any) -> None:
    await served.lanes[request.handle].flush()


async def _close_producer(served: Served, request: Request, producer: Any) -> None:
    lane = served.lanes.get(request.handle)
    try:
        if lane is not None:
            await lane.settle()
        else:
            await producer.close()
    finally:
        served.drop(request.handle, "producer")


async def _receive(served: Served, request: Request, consumer: Any) -> Message | None:
    message = await consumer.receive(timeout_left(request.deadline))
    return None if message is None else served.handed_out(message, request.handle)


async def _listen(served: Served, request: Request, consumer: Any) -> None:
    (on,) = request.args
    if not on:
        await consumer.set_message_listener(None)
        return
    handle = request.handle
    dispatcher = served.dispatchers[served.parents[handle]]
    tracing = served.boundary.tracing
    waiter = anyio.CapacityLimiter(1)  # one worker thread waits for this consumer's jobs

    async def relay(message: Message) -> None:
        # Hand the message (a value now) to the dispatcher thread; wait until the listener ran.
        served.handed_out(message, handle)
        trace = None if tracing is None else tracing.context_now()
        await wait_for_job(dispatcher.deliver(handle, message, trace), waiter)

    await consumer.set_message_listener(relay)


async def _close_consumer(served: Served, request: Request, consumer: Any) -> None:
    (from_listener,) = request.args
    try:
        await consumer.close(from_listener=from_listener)
    finally:
        served.drop(request.handle, "consumer")


async def _acknowledge_message(served: Served, request: Request, consumer: Any) -> None:
    (number,) = request.args
    session = served.parents.get(request.handle)
    if session is None or session not in served.objects or served.objects[session].is_closed:
        raise IllegalStateError("the session of this message is closed")
    entry = served.acks.get(number)
    timeout = timeout_left(request.deadline)
    if entry is None:  # acknowledged already (CLIENT: with a later message)
        if served.modes[session] is AckMode.CLIENT:
            await served.objects[session].acknowledge(timeout=timeout)
        return
    await entry[1](timeout=timeout)
    served.acknowledged(session, number)


async def _acknowledge_session(served: Served, request: Request, session: Any) -> None:
    await session.acknowledge(timeout=timeout_left(request.deadline))
    for done in [n for n, (owner, _) in served.acks.items() if owner == request.handle]:
        del served.acks[done]


async def _browse(served: Served, request: Request, browser: Any) -> Message | None:
    try:
        return await browser.__anext__()  # type: ignore[no-any-return]
    except StopAsyncIteration:
        return None


async def _close_browser(served: Served, request: Request, browser: Any) -> None:
    try:
        await browser.close()
    finally:
        served.drop(request.handle, "browser")


_ASYNC: dict[Op, _Handler] = {
    Op.OPEN: _open,
    Op.CLOSE_CONNECTION: _close_connection,
    Op.START: _start,
    Op.STOP: _stop,
    Op.DELETE_TEMPORARY: _delete_temporary,
    Op.CREATE_SESSION: _create_session,
    Op.CREATE_PRODUCER: _create_producer,
    Op.CREATE_CONSUMER: _creating_consumer("create_consumer"),
    Op.CREATE_DURABLE_CONSUMER: _creating_consumer("create_durable_consumer"),
    Op.CREATE_SHARED_CONSUMER: _creating_consumer("create_shared_consumer"),
    Op.CREATE_SHARED_DURABLE_CONSUMER: _creating_consumer("create_shared_durable_consumer"),
    Op.CREATE_BROWSER: _create_browser,
    Op.CREATE_TEMPORARY_QUEUE: _session_call("create_temporary_queue"),
    Op.CREATE_TEMPORARY_TOPIC: _session_call("create_temporary_topic"),
    Op.UNSUBSCRIBE: _session_call("unsubscribe"),
    Op.ACKNOWLEDGE: _acknowledge_session,
    Op.RECOVER: _session_call("recover"),
    Op.COMMIT: _session_call("commit"),
    Op.ROLLBACK: _session_call("rollback"),
    Op.CLOSE_SESSION: _close_session,
    Op.FLUSH: _flush,
    Op.CLOSE_PRODUCER: _close_producer,
    Op.RECEIVE: _receive,
    Op.LISTEN: _listen,
    Op.CLOSE_CONSUMER: _close_consumer,
    Op.ACKNOWLEDGE_MESSAGE: _acknowledge_message,
    Op.BROWSE: _browse,
    Op.CLOSE_BROWSER: _close_browser,
}


def add_operations(operations: dict[Op, _Handler]) -> None:
    """At import, by a module of a higher layer (``haclient.exactly_once.blocking``): the
    loop's handlers of that module's operations."""
    _ASYNC.update(operations)
