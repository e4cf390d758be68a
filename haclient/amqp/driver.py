"""The anyio driver: pumps one ``Engine`` over a byte stream.

How this works: a reader, a writer and a timer share the engine. The reader takes what the
socket has, feeds the engine, ticks it (so the idle timeout counts from the read) and hands its
events to the handler. The writer waits until there is something to write (someone called
``wakeup()``), runs ``tick``, and writes what the engine produced. The timer wakes the writer
when the engine's next timer deadline passes. None of them polls: each waits on a socket, an
event or a deadline.

One task per connection: on asyncio with a plain TCP stream, the reader is the loop's reader
callback on the socket (``SocketWatch``) and the timer a ``call_at`` handle, so ``run()`` is the
writer's task and nothing else; a thousand idle connections are a thousand tasks, not three
thousand. Elsewhere (trio, or a stream that must see every read) the reader and the timer are
tasks of their own.

Fewer loop turns per message: the reader wakes the writer only when the engine has output, and
a task about to wait for the peer's answer calls ``write_now()``, which writes from that task
when the writer is idle (a sync send is then two loop turns: the send, and the read of its
outcome). On a plain TCP stream the driver reads and writes its own socket
(``haclient.amqp.rawsocket``: a ``PlainSocketStream``'s, else a duplicate of the stream's): every
write goes there, never through the stream's buffer, so the two ways of writing can not reorder
bytes; any other stream is used through its own calls.

The driver ends when the engine has reported ``TransportClosed`` and its last bytes are written;
``run()`` then returns that event's error (None after an orderly close). A socket error or an EOF
is handed to the engine, which turns it into that same ending. ``stop()`` (or cancelling
``run()``) ends it at once, without a Close frame.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable

import anyio
from anyio.abc import ByteStream

from haclient.amqp.engine import Engine
from haclient.amqp.events import EngineEvent, TransportClosed
from haclient.amqp.rawsocket import SocketWatch, own_socket, read_socket, send_some
from haclient.amqp.types import CONNECTION_LOST, ErrorCondition

__all__ = ["Driver", "EventHandler"]

log = logging.getLogger("haclient.amqp")

EventHandler = Callable[[list[EngineEvent]], None]
"""Called on the loop with each batch of engine events; must not block."""

_READ_SIZE = 65536
_LINGER = 0.5
"""Seconds an orderly end waits for the peer to close its side before the socket is closed."""


def _socket_error(exc: BaseException) -> BaseException:
    """The error the socket raised, looking through anyio's wrap (``BrokenResourceError``)."""
    return exc.__cause__ or exc


def _describe(exc: BaseException) -> str:
    """``socket failed: ConnectionResetError: [Errno 104] ...``."""
    return f"socket failed: {type(exc).__name__}: {exc}"


class Driver:
    """Runs one engine over one anyio byte stream until the connection ends.

    Args:
        engine: The engine to pump (client or server role).
        stream: A connected byte stream (TCP; TLS is inside the engine).
        handler: Receives the engine's events, in order, on the event loop.
    """

    def __init__(self, engine: Engine, stream: ByteStream, handler: EventHandler) -> None:
        self.engine = engine
        self._stream = stream
        self._socket = own_socket(stream)
        self._handler = handler
        self._woken = False  # a wakeup came since the writer last looked
        self._waiting: asyncio.Future[None] | anyio.Event | None = None  # the idle writer's wait
        self._writer_idle = False  # the writer waits for a wakeup (is not in the middle of a write)
        self._deadline = math.inf  # when the engine must be ticked next
        self._now: Callable[[], float] = anyio.current_time  # the loop's clock
        self._timer: anyio.CancelScope | None = None  # the timer task's wait (when it is a task)
        self._loop: asyncio.AbstractEventLoop | None = None  # set while callbacks pump
        self._timer_handle: asyncio.TimerHandle | None = None  # the timer (when callbacks pump)
        self._watch: SocketWatch | None = None
        self._scope: anyio.CancelScope | None = None  # run()'s, for stop()
        self._stopped = False
        self._result: ErrorCondition | None = None
        self._ended = anyio.Event()
        self._flush_waiters: list[anyio.Event] = []
        self._staged: list[bytes] = []  # output taken from the engine by cut(), not yet written
        self.socket_error: BaseException | None = None
        """The error the socket raised, when that is what ended the connection (the cause to
        chain to the error the connection reports)."""
        self.heard = False
        """True once a byte came from the peer (False: it never said anything)."""

    def _abort(self, exc: BaseException) -> None:
        """The socket failed: remember why, end the engine, report its ending."""
        self.socket_error = _socket_error(exc)
        self.engine.abort(ErrorCondition(CONNECTION_LOST, _describe(self.socket_error)))
        self._dispatch()

    def wakeup(self) -> None:
        """Tell the writer that the engine may have bytes to send (call after changing it)."""
        self._woken = True
        waiting = self._waiting
        if waiting is not None:
            self._waiting = None
            if isinstance(waiting, anyio.Event):
                waiting.set()
            elif not waiting.done():
                waiting.set_result(None)

    def write_now(self) -> None:
        """Write what the engine holds now from the calling task (one loop turn fewer than
        ``wakeup()``), when that keeps the order: the writer is idle (not in the middle of a
        write) and no flush waits; staged frames go first. Otherwise, or when the socket takes
        only part, the writer does it.

        For a task about to wait for the peer's answer to what it just queued.
        """
        if self._socket is not None and self._writer_idle and not self._flush_waiters:
            staged = self._staged  # staged frames first: the order holds
            self._write_directly(self._take_output() if staged else self.engine.data_to_send())
        else:
            self.wakeup()

    def _write_directly(self, data: bytes) -> None:
        """Write ``data`` (taken from the engine) now; the writer does what the socket refuses."""
        assert self._socket is not None
        try:
            sent = send_some(self._socket, data) if data else 0
        except OSError:
            sent = 0  # the writer tries again, meets the error and ends the connection
        if sent < len(data):
            self._staged.append(data[sent:])
            self.wakeup()
        elif self.engine.wants_write or self.engine.has_events:
            self.wakeup()  # the writer reports the engine's end or what writing produced

    async def flush(self) -> None:
        """Wait until every frame the engine holds now has been handed to the socket.

        Proton writes a link's flow before the session's dispositions when both are pending, so
        a caller that needs the peer to see a disposition *before* a later frame (a round trip
        that proves the disposition was processed) flushes in between. Returns at once when the
        connection has ended.
        """
        if self._ended.is_set():
            return
        waiter = anyio.Event()
        self._flush_waiters.append(waiter)
        self.wakeup()
        await waiter.wait()

    def cut(self) -> None:
        """Take the frames the engine holds now: any frame queued later goes out after them.

        The cheap form of ``flush()`` for ordering: proton writes a link's flow or attach before
        the session's dispositions when both are pending, so a confirmation request that must
        reach the peer *after* the dispositions cuts first. Nothing waits and nobody is woken:
        the frames go out first with the next write, so the caller queues its request and then
        writes (``write_now``, or ``wakeup``): both reach the socket in one ``send``.
        """
        data = self.engine.data_to_send()
        if data:
            self._staged.append(data)

    def _arm(self, deadline: float | None) -> None:
        """Have the timer wake the writer by ``deadline`` (a later one waits for that wake)."""
        if deadline is None or deadline >= self._deadline:
            return
        self._deadline = deadline
        loop = self._loop
        if loop is None:
            assert self._timer is not None  # made before the writer runs
            self._timer.deadline = deadline
            return
        if self._timer_handle is not None:
            self._timer_handle.cancel()
        self._timer_handle = loop.call_at(deadline, self._timer_fired)

    def _timer_fired(self) -> None:
        self._timer_handle = None
        self._deadline = math.inf
        self.wakeup()

    def _take_output(self) -> bytes:
        """What to write now: the staged frames first, then what the engine holds."""
        data = self.engine.data_to_send()
        if not self._staged:
            return data
        staged, self._staged = self._staged, []
        return b"".join([*staged, data])

    def _release_flushes(self) -> None:
        waiters, self._flush_waiters = self._flush_waiters, []
        for waiter in waiters:
            waiter.set()

    @property
    def ended(self) -> bool:
        """True once ``run()`` has finished."""
        return self._ended.is_set()

    async def wait_ended(self) -> ErrorCondition | None:
        """Wait until the connection has ended; return why (None: orderly close)."""
        await self._ended.wait()
        return self._result

    def stop(self) -> None:
        """End the connection now, without a Close frame (as cancelling ``run()`` does); the
        socket is closed and ``wait_ended()`` returns. Idempotent; before ``run()`` starts, it
        makes ``run()`` end at once."""
        self._stopped = True
        if self._scope is not None:
            self._scope.cancel()

    async def run(self) -> ErrorCondition | None:
        """Pump until the connection ends; returns the error that ended it, if any.

        Cancelling ``run()`` (or ``stop()``) aborts the connection without a Close frame.
        """
        try:
            with anyio.CancelScope() as self._scope:
                if self._stopped:
                    self._scope.cancel()
                await self._pump()
                if self.socket_error is None:
                    await self._linger()
        finally:
            if self._socket is not None:
                self._socket.close()
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()
            self._ended.set()
            self._release_flushes()
            self.engine.release()
        return self._result

    async def _pump(self) -> None:
        """Read, write and tick until the engine has finished and its last bytes are written."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (trio)
            loop = None
        if loop is None or self._socket is None:
            self._timer = anyio.CancelScope()  # before the writer can arm it
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._read_loop)
                tg.start_soon(self._timer_loop)
                await self._write_loop()
                tg.cancel_scope.cancel()
            return
        self._loop, self._now = loop, loop.time  # anyio's clock there, without its lookup
        self._watch = watch = SocketWatch(
            loop, self._socket, _READ_SIZE, self._take_input, self._read_failed, self._read_ended
        )
        try:
            await self._write_loop()
        finally:
            watch.stop()
            if self._timer_handle is not None:
                self._timer_handle.cancel()
            self._loop = self._timer_handle = None
        if watch.failure is not None:
            raise watch.failure

    def _read_ended(self) -> None:
        """The reader callback stopped: after an EOF or a socket error the engine has ended
        already; after a bug in handling what was read, end it here (``_pump`` raises the bug
        once the writer is done)."""
        assert self._watch is not None
        if self._watch.failure is not None and not self.engine.is_finished:
            failure = self._watch.failure
            self.engine.abort(ErrorCondition(CONNECTION_LOST, f"reading failed: {failure!r}"))
            self._dispatch()
        self.wakeup()

    async def _linger(self) -> None:
        """End our side first and read until the peer closes its own (or ``_LINGER`` passes).

        Closing a socket that still holds unread bytes makes the kernel send a reset, and a
        reset makes the peer's kernel drop what it had not read yet: a refused login's SASL
        outcome, sent just before, would be lost, and the peer would see the connection reset
        instead of the reason. Skipped when the socket failed, and cancelled with ``run()``.
        """
        with anyio.move_on_after(_LINGER):
            try:
                await self._stream.send_eof()
                while await self._stream.receive(_READ_SIZE):
                    pass
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            except (OSError, NotImplementedError):
                pass

    def _dispatch(self) -> None:
        events = self.engine.events()
        if not events:
            return
        for event in events:
            if isinstance(event, TransportClosed):
                self._result = event.error
        self._handler(events)

    async def _read_loop(self) -> None:
        """The reader as a task: on trio, or on a stream that must see every read."""
        if self._socket is not None:
            await read_socket(self._socket, _READ_SIZE, self._take_input, self._read_failed)
            return
        while True:
            try:
                data = await self._stream.receive(_READ_SIZE)
            except anyio.EndOfStream:
                data = b""
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                self._read_failed(exc)
                return
            if not self._take_input(data):
                return

    def _take_input(self, data: bytes) -> bool:
        """Feed what was read (``b""``: EOF) to the engine; False once nothing more will come."""
        engine = self.engine
        self.heard = self.heard or bool(data)
        engine.receive_data(data)
        # Tick now: proton counts the idle timeout from the first tick that sees new input, so
        # a late tick would make a silent peer's detection late (F13).
        deadline = engine.tick(self._now())
        if deadline is not None and deadline < self._deadline:  # else _arm would do nothing
            self._arm(deadline)
        self._dispatch()
        if not data:
            self.wakeup()
            return False
        if engine.wants_write:
            self.wakeup()
        return not engine.is_finished

    def _read_failed(self, exc: BaseException) -> None:
        self._abort(exc)
        self.wakeup()

    async def _timer_loop(self) -> None:
        """The timer as a task: wake the writer whenever the armed deadline passes (it ticks
        and arms the next)."""
        while True:
            assert self._timer is not None
            with self._timer:
                await anyio.sleep_forever()
            self._timer = anyio.CancelScope()
            self._deadline = math.inf
            self.wakeup()

    async def _write_loop(self) -> None:
        engine = self.engine
        while True:
            self._woken = False  # before looking, so no wakeup is lost
            flushes, self._flush_waiters = self._flush_waiters, []  # satisfied by this write
            self._arm(engine.tick(self._now()))
            data = self._take_output()
            self._dispatch()  # after both: either may end the transport
            if data:
                try:
                    await self._send(data)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                    self._abort(exc)
                    self._flush_waiters.extend(flushes)
                    return
                for waiter in flushes:
                    waiter.set()
                continue
            for waiter in flushes:
                waiter.set()
            if engine.is_finished:
                return
            if self._woken:
                continue
            self._writer_idle = True
            try:
                await self._wait_for_wakeup()
            finally:
                self._writer_idle = False
                self._waiting = None

    async def _wait_for_wakeup(self) -> None:
        """Wait until ``wakeup()``: on asyncio a bare future, made only now (one object, where
        an ``anyio.Event`` is three and two coroutines while waited on), else an event."""
        if self._loop is not None:
            future = self._waiting = self._loop.create_future()
            await future
        else:
            event = self._waiting = anyio.Event()
            await event.wait()

    async def _send(self, data: bytes) -> None:
        """Write all of ``data``: straight to the socket, waiting only while it is full."""
        sock = self._socket
        if sock is None:
            await self._stream.send(data)
            return
        view = memoryview(data)
        while True:
            view = view[send_some(sock, view) :]
            if not view:
                return
            await anyio.wait_writable(sock)
