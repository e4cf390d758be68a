"""The one thread boundary of a blocking connection: requests in, outcomes back.

How this works: the async core (``haclient.aio``, ``haclient.amqp``) runs on an event-loop
thread and is single-threaded: no other thread calls a method of it or reads its state. A
blocking call reaches it in one way only: it makes a ``Request`` and puts it into its
connection's ``Boundary``. A request is plain data: the operation it names (``Op``), the handle
(a number) of the object it acts on, its arguments as values (an encoded message, a timeout, a
destination ...), its deadline, and where its outcome goes (a ``Reply`` the caller waits on,
or none). It never carries a function, a coroutine, or the application's objects.

The boundary is a queue and a doorbell. ``put`` appends to the queue; the first request into an
idle queue rings the loop thread's doorbell (``_runtime.Doorbell``: an eventfd, or a socket
pair where there is none, that the loop watches), and the loop takes every request queued by
then in one batch (``take_all``) and carries them out in order (``haclient.sync._served``, the
loop's half). A burst of sends thus costs the loop one wake-up, not one per send.

The loop gives a request's outcome to its ``Reply``: a value or an error, then releases the lock
the caller waits on. What comes back is a value too: a handle, a frozen record of facts, a
received message that the loop no longer touches (``_served`` binds its acknowledger to a
``MessageAcknowledger``: a handle and a number, answered through this same boundary).

A ``KeyboardInterrupt`` in the caller (Ctrl-C) anywhere between queueing a request and its
outcome (``put_and_wait``) withdraws the request before it is raised again: taken back from the
queue if the loop has not taken it, else cancelled by a ``CANCEL`` request naming it, waiting
briefly until the loop let go of it; no request of an interrupted caller goes on without it.
The main thread waits in short slices, because an interrupt does not wake a thread blocked on
a lock.
A call from the loop thread itself raises ``IllegalStateError``; one from a process forked
after the connection was opened raises it too (``LoopThread.forked``), and nothing is written
to the parent's doorbell.

Thread-safety: every method except ``take_all`` (the loop's) may be called from any thread.
"""

from __future__ import annotations

import enum
import itertools
import threading
import time
from _thread import allocate_lock, get_ident
from collections import deque
from contextlib import suppress
from typing import Any

from haclient.aio import gate
from haclient.errors import ClosedError, IllegalStateError
from haclient.sync._runtime import LoopThread

__all__ = ["CONNECTION", "Boundary", "MessageAcknowledger", "Op", "Reply", "Request"]

CONNECTION = 0
"""The handle of the connection itself."""
_POLL = 0.05
"""Seconds the main thread waits at a time, so that Ctrl-C is noticed promptly."""
_CANCEL_GRACE = 5.0
"""Seconds a Ctrl-C'd call waits for the loop to let go of it before re-raising."""
_MAIN_THREAD_IDENT = threading.main_thread().ident


class Op(enum.Enum):
    """What a request asks the loop to do (``haclient.sync._served`` carries each out)."""

    # The connection (handle CONNECTION)
    OPEN = enum.auto()
    CLOSE_CONNECTION = enum.auto()
    START = enum.auto()
    STOP = enum.auto()
    STATISTICS = enum.auto()
    DELETE_TEMPORARY = enum.auto()
    CREATE_SESSION = enum.auto()
    # Any object: read one attribute, a value
    READ = enum.auto()
    # A session
    CREATE_PRODUCER = enum.auto()
    CREATE_CONSUMER = enum.auto()
    CREATE_DURABLE_CONSUMER = enum.auto()
    CREATE_SHARED_CONSUMER = enum.auto()
    CREATE_SHARED_DURABLE_CONSUMER = enum.auto()
    CREATE_BROWSER = enum.auto()
    CREATE_TEMPORARY_QUEUE = enum.auto()
    CREATE_TEMPORARY_TOPIC = enum.auto()
    UNSUBSCRIBE = enum.auto()
    ACKNOWLEDGE = enum.auto()
    RECOVER = enum.auto()
    COMMIT = enum.auto()
    ROLLBACK = enum.auto()
    CLOSE_SESSION = enum.auto()
    # A producer
    SEND = enum.auto()
    FLUSH = enum.auto()
    CLOSE_PRODUCER = enum.auto()
    # A consumer
    RECEIVE = enum.auto()
    LISTEN = enum.auto()
    CLOSE_CONSUMER = enum.auto()
    ACKNOWLEDGE_MESSAGE = enum.auto()
    # A browser
    BROWSE = enum.auto()
    CLOSE_BROWSER = enum.auto()
    # An outbox relay (haclient.exactly_once)
    OPEN_RELAY = enum.auto()
    START_RELAY = enum.auto()
    RELAY_WAIT_EMPTY = enum.auto()
    RELAY_STATISTICS = enum.auto()
    CLOSE_RELAY = enum.auto()
    # A request already put: stop carrying it out (its caller was interrupted)
    CANCEL = enum.auto()


class Reply:
    """Where a request's outcome goes: the loop stores a value or an error and releases
    ``done``, which the caller waits on."""

    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = done = allocate_lock()
        done.acquire()
        self.value: Any = None
        self.error: BaseException | None = None

    def give(self, value: Any, error: BaseException | None) -> None:
        """On the loop: the outcome (once)."""
        self.value = value
        self.error = error
        self.done.release()


class Request:
    """One blocking call as it crosses: plain data (see the module).

    Attributes:
        number: Its number on its boundary (a ``CANCEL`` names it).
        op: What to do.
        handle: The object it acts on (``CONNECTION``, or a number the loop gave out).
        args: Its arguments, values.
        deadline: ``time.monotonic()`` seconds at which it stops waiting; None: the
            connection's default for the call (``failover.timeout`` ...).
        reply: Where its outcome goes; None when nobody waits (a queued send: its failure goes
            to its producer's ``Outbox``).
        trace: The caller's trace context (a value), when the connection traces.
    """

    __slots__ = ("args", "deadline", "handle", "number", "op", "queued", "reply", "trace")

    def __init__(
        self,
        number: int,
        op: Op,
        handle: int,
        args: tuple[Any, ...],
        deadline: float | None,
        reply: Reply | None,
        trace: object = None,
    ) -> None:
        self.number = number
        self.op = op
        self.handle = handle
        self.args = args
        self.deadline = deadline
        self.reply = reply
        self.trace = trace
        self.queued = False
        """Set (under the boundary's lock) once ``put`` queued it, and cleared if it is taken
        back before the loop took it (``withdraw``): True afterwards means it crossed."""

    def __repr__(self) -> str:
        return f"<Request {self.number} {self.op.name} on {self.handle}>"


def timeout_left(deadline: float | None) -> float | None:
    """On the loop: a request's deadline as the timeout the async API takes (None stays)."""
    if deadline is None:
        return None
    return max(0.0, deadline - time.monotonic())


class Boundary:
    """A blocking connection's one way into its event loop (see the module)."""

    def __init__(self, loop_thread: LoopThread, *, private: bool) -> None:
        self.loop_thread = loop_thread
        self.private = private
        self._queue: deque[Request] = deque()
        self._lock = threading.Lock()
        self._rung = False
        self._numbers = itertools.count(1)
        self.closed = False
        """True once the connection was closed (set by the closing caller, or by the loop
        when it shut the connection down)."""
        self.tracing: Any = None
        """The connection's tracing (``haclient.aio.tracing.Tracing``), when it traces: a
        blocking call carries the caller's trace context (``context_now``) as a value."""

    # The callers' side ------------------------------------------------------------------------

    def check_caller(self) -> None:
        """Raise unless a blocking call may be made from this thread now.

        Raises:
            IllegalStateError: this is the loop thread, or a process forked after the
                connection was opened.
            ClosedError: the connection is closed.
        """
        if self.loop_thread.forked:  # first: closed or not, it is the parent's
            raise IllegalStateError(
                "this connection was opened before the process forked: its event-loop thread "
                "and its sockets belong to the parent process; open a new connection in the "
                "child (multiprocessing: in each worker, or use the 'spawn' start method)"
            )
        if self.closed:
            raise ClosedError("the connection is closed")
        if self.loop_thread.in_thread():
            raise IllegalStateError(
                "a blocking haclient call was made from the connection's own event-loop thread, "
                "where it would wait for itself forever: use haclient.aio on the loop, or make "
                "the call from another thread"
            )

    def request(
        self,
        op: Op,
        handle: int,
        args: tuple[Any, ...] = (),
        deadline: float | None = None,
        reply: Reply | None = None,
    ) -> Request:
        """A request numbered on this boundary, with the caller's trace context."""
        tracing = self.tracing
        trace = None if tracing is None else tracing.context_now()
        return Request(next(self._numbers), op, handle, args, deadline, reply, trace)

    def put(self, request: Request) -> None:
        """Queue ``request`` for the loop; ring its doorbell if the queue was idle.

        Raises:
            ClosedError: the connection is closed (nothing was queued).
            KeyboardInterrupt: Ctrl-C meanwhile; the request may be queued (``queued``) and the
                doorbell was rung all the same.
        """
        try:
            with self._lock:
                if self.closed:
                    raise ClosedError("the connection is closed")
                self._queue.append(request)
                request.queued = True
                if self._rung:
                    return
                self._rung = True
            self.loop_thread.doorbell.ring(self)
        except RuntimeError:  # the loop stopped
            with self._lock:
                if request in self._queue:
                    self._queue.remove(request)
                    request.queued = False
                self._rung = False
            raise ClosedError("the connection is closed") from None
        except KeyboardInterrupt:  # Ctrl-C between the queue and the doorbell: ring anyway,
            with suppress(RuntimeError):  # or the loop would never look at this queue again
                self.loop_thread.doorbell.ring(self)
            raise

    def call(
        self, op: Op, handle: int, *args: Any, timeout: float | None = None, close: bool = False
    ) -> Any:
        """Put a request and wait for its outcome; return its value.

        ``timeout`` becomes the request's deadline (None: the connection's default). With
        ``close``, a closed (or forked) connection is no error: None is returned, because
        closing the connection closed everything with it.

        Raises:
            IllegalStateError: called from the loop thread, or in a forked process.
            ClosedError: the connection is closed, before or during the call.
            KeyboardInterrupt: Ctrl-C while waiting; the request was withdrawn first.
            Exception: whatever the operation raised on the loop.
        """
        if close and (self.closed or self.loop_thread.forked):
            return None
        self.check_caller()
        deadline = None if timeout is None else _deadline_after(timeout)
        request = self.request(op, handle, args, deadline, Reply())
        try:
            return self.put_and_wait(request)
        except ClosedError:
            if close and self.closed:
                return None
            raise

    def put_and_wait(self, request: Request) -> Any:
        """``put`` then ``wait``, one step for Ctrl-C: wherever the interrupt falls once
        ``request`` was queued (in ``put``, or before ``wait`` began), it is withdrawn first
        (``withdraw``), so that no request of an interrupted caller goes on without it (a
        receive that went on would take the next message for nobody).

        Raises:
            KeyboardInterrupt: Ctrl-C; the request was withdrawn.
            Exception: what ``put`` or the operation raised.
        """
        try:
            self.put(request)
            return self._outcome(request)
        except KeyboardInterrupt:
            self.withdraw(request)
            raise

    def withdraw(self, request: Request) -> None:
        """After Ctrl-C: take ``request`` back if the loop has not taken it yet (``queued``
        is False again: nothing crossed); else put a ``CANCEL`` naming it and wait briefly
        until the loop let go of it."""
        with self._lock:
            if request in self._queue:
                self._queue.remove(request)
                request.queued = False
                return
        if not request.queued:
            return
        try:
            self.put(self.request(Op.CANCEL, request.handle, (request.number,)))
        except ClosedError:
            return
        if request.reply is not None:
            request.reply.done.acquire(True, _CANCEL_GRACE)

    @staticmethod
    def _outcome(request: Request) -> Any:
        """Wait for ``request``'s outcome (the main thread in short slices: Ctrl-C does not wake
        a thread blocked on a lock); its value, or raise its error."""
        reply = request.reply
        assert reply is not None
        done = reply.done
        if get_ident() == _MAIN_THREAD_IDENT:
            while not done.acquire(True, _POLL):
                pass
        else:
            done.acquire()
        error = reply.error
        if error is not None:
            reply.error = None  # no cycle through the traceback
            raise error
        return reply.value

    def post(self, op: Op, handle: int, *args: Any) -> None:
        """Put a request nobody waits for (a close from the garbage collector).

        Raises:
            ClosedError: the connection is closed.
        """
        self.put(self.request(op, handle, args))

    # The loop's side ---------------------------------------------------------------------------

    def take_all(self) -> list[Request]:
        """On the loop: every request queued, in order; the next ``put`` rings again."""
        with self._lock:
            taken = list(self._queue)
            self._queue.clear()
            self._rung = False
        return taken


def _deadline_after(timeout: float) -> float:
    """The ``time.monotonic()`` at which a call given ``timeout`` seconds stops waiting.

    Raises:
        ConfigurationError: ``timeout`` is not a number >= 0.
    """
    return gate.deadline_after(timeout, now=time.monotonic)


class MessageAcknowledger:
    """The ``acknowledge()`` of a message a blocking consumer received in a mode where the
    application acknowledges: a request through the connection's boundary naming the
    consumer's handle and the message's number (a value), answered on the loop."""

    __slots__ = ("_boundary", "_handle", "_number")

    def __init__(self, boundary: Boundary, handle: int, number: int) -> None:
        self._boundary = boundary
        self._handle = handle
        self._number = number

    def __call__(self, *, timeout: float | None = None) -> None:
        self._boundary.call(Op.ACKNOWLEDGE_MESSAGE, self._handle, self._number, timeout=timeout)
