"""The anyio driver: pumps one ``Engine`` over a byte stream.

How this works: two tasks share the engine. The reader waits on the socket, feeds the engine and
hands its events to the handler. The writer waits until there is something to write (someone
called ``wakeup()``) or the engine's next timer deadline comes, runs ``tick``, and writes what the
engine produced. Neither polls nor sleeps: each waits on a socket, an event or a deadline.

The driver ends when the engine has reported ``TransportClosed`` and its last bytes are written;
``run()`` then returns that event's error (None after an orderly close). A socket error or an EOF
is handed to the engine, which turns it into that same ending.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
from anyio.abc import ByteStream

from haclient.amqp.engine import Engine
from haclient.amqp.events import EngineEvent, TransportClosed
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
        self._handler = handler
        self._wake = anyio.Event()
        self._result: ErrorCondition | None = None
        self._ended = anyio.Event()
        self._flush_waiters: list[anyio.Event] = []
        self._staged: list[bytes] = []  # output taken from the engine by cut(), not yet written
        self.socket_error: BaseException | None = None
        """The error the socket raised, when that is what ended the connection (the cause to
        chain to the error the connection reports)."""

    def _abort(self, exc: BaseException) -> None:
        """The socket failed: remember why, end the engine, report its ending."""
        self.socket_error = _socket_error(exc)
        self.engine.abort(ErrorCondition(CONNECTION_LOST, _describe(self.socket_error)))
        self._dispatch()

    def wakeup(self) -> None:
        """Tell the writer that the engine may have bytes to send (call after changing it)."""
        self._wake.set()

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
        reach the peer *after* the dispositions cuts first. Nothing waits; the writer is woken.
        """
        data = self.engine.data_to_send()
        if data:
            self._staged.append(data)
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

    async def run(self) -> ErrorCondition | None:
        """Pump until the connection ends; returns the error that ended it, if any.

        Cancelling ``run()`` aborts the connection without a Close frame.
        """
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._read_loop)
                await self._write_loop()
                tg.cancel_scope.cancel()
            if self.socket_error is None:
                await self._linger()
        finally:
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()
            self._ended.set()
            self._release_flushes()
        return self._result

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
        engine = self.engine
        stream = self._stream
        while not engine.is_finished:
            try:
                data = await stream.receive(_READ_SIZE)
            except anyio.EndOfStream:
                data = b""
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                self._abort(exc)
                self.wakeup()
                return
            engine.receive_data(data)
            self._dispatch()
            # Even with nothing to write, the writer ticks the engine again: what arrived moved
            # the idle-timeout deadline it sleeps until (skipping this made a silent peer's
            # detection up to twice as late, F13).
            self.wakeup()
            if not data:
                return

    async def _write_loop(self) -> None:
        engine = self.engine
        stream = self._stream
        while True:
            if self._wake.is_set():  # fresh before looking, so no wakeup is lost
                self._wake = anyio.Event()
            flushes, self._flush_waiters = self._flush_waiters, []  # satisfied by this write
            now = anyio.current_time()
            deadline = engine.tick(now)
            data = self._take_output()
            self._dispatch()  # after both: either may end the transport
            if data:
                try:
                    await stream.send(data)
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
            if deadline is None:  # no timer: no cancel scope either (one per wait adds up)
                await self._wake.wait()
                continue
            with anyio.move_on_after(max(0.0, deadline - now)):
                await self._wake.wait()
