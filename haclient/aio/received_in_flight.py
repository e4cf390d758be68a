"""A call whose outcome is told by a callback from the turn the broker's confirmation arrives in:
no task. A receive (``ReceiveInFlight``), and a CLIENT or INDIVIDUAL acknowledgement
(``CallInFlight``, from ``ClientAck.acknowledge_message_then``: its outcome, confirmed or what
the general path would raise, told by ``finish``).

How this works: ``MessageConsumer.receive_then`` takes a message already prefetched, when
nothing has to be waited for first (started, connected, AUTO confirmed by the broker's
settlement or by its answer to a drain of the session's probe, no other acknowledgement of the
session under way), and sends its acknowledgement at once (``AckStrategy.delivered_then``). The
message is then given from the event handler of the loop turn that brings the confirmation
(A1: confirmed before it is handed out): nobody resumes a loop turn later, as a task awaiting
``wait_settled`` or ``drain`` would. In CLIENT and INDIVIDUAL mode there is nothing to wait for:
the message is tracked for its ``acknowledge()`` and given before ``receive_then`` returns.

Every rule of the general path (``receive``) holds, because anything but the broker's
settlement hands the receive back to the general path's own code from where it is: when the
wait for the confirmation fails (the connection or the link ended), a task of the connection
runs what ``receive``'s acknowledgement would have run next (``gate.lost``; a message whose
acknowledgement went out is held, flagged in doubt, until the failover ends, F2/F9; then the
rest of the receive, within its deadline, F4). ``completed(message, error)`` is called exactly
once, on the loop; ``ClosedError`` when the connection's tasks are cancelled under it. While the
acknowledgement is in flight nothing stops it (as the general path's is shielded: a message
taken from the link must not be acknowledged and never returned); ``cancel()`` stops only the
general path's wait it was handed to (the message stays held for the next ``receive``).

Thread-safety: the loop's alone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from haclient.errors import ClosedError

if TYPE_CHECKING:
    from haclient.message import Message

__all__ = ["CallInFlight", "ReceiveInFlight"]

Completed = Callable[[Any, BaseException | None], None]
"""``completed(value, error)``: a call's outcome (a receive's message, an acknowledgement's
None), told once."""


class CallInFlight:
    """One call whose outcome comes by callback (see the module): ``completed(value, error)``
    is called exactly once, on the loop, by ``finish``, or by ``cancel``/``closed`` first."""

    __slots__ = ("_completed", "done")

    def __init__(self, completed: Completed) -> None:
        self.done = False
        self._completed = completed

    def finish(self, value: Any, error: BaseException | None) -> None:
        """The outcome came (nothing if the caller was let go already)."""
        self._complete(value, error)

    def cancel(self) -> None:
        """The caller let go (Ctrl-C): its outcome is told now, ``ClosedError``, as a cancelled
        task's is, so that the interrupted caller is let go at once even while the broker is
        silent; what went to the broker goes on."""
        self._stop()
        self._complete(None, ClosedError("the call was cancelled while it was waiting"))

    def closed(self) -> None:
        """The connection is closed under it: ``ClosedError`` now, nothing later."""
        self._stop()
        self._complete(None, ClosedError("the connection was closed while the call was waiting"))

    def _stop(self) -> None:
        """Stop what waits for the outcome in a task, if anything does."""

    def _complete(self, value: Any, error: BaseException | None) -> None:
        if not self.done:
            self.done = True
            self._completed(value, error)


class ReceiveInFlight(CallInFlight):
    """One receive whose acknowledgement is in flight, its outcome told by callback (see the
    module). ``spawn(fn, *args)`` starts a task of the connection."""

    __slots__ = ("_scope", "_spawn")

    def __init__(self, completed: Completed, spawn: Callable[..., None]) -> None:
        super().__init__(completed)
        self._spawn = spawn
        self._scope: anyio.CancelScope | None = None

    def handed_out(self, message: Message) -> None:
        """The acknowledgement was confirmed: ``message`` goes to its caller."""
        self._complete(message, None)

    def hand_back(self, resume: Callable[[], Awaitable[Message | None]]) -> None:
        """The general path takes the receive from here, in a task: ``resume()`` is what it
        runs next (and gives the receive's outcome)."""
        try:
            self._spawn(self._resumed, resume)
        except Exception:  # the connection's tasks are ending: no task will run it
            self._complete(None, ClosedError("the connection closed while the receive waited"))

    def _stop(self) -> None:
        """The general path's wait is stopped, if it was handed to it (a message held stays
        for the next ``receive``); an acknowledgement in flight goes on."""
        if self._scope is not None:
            self._scope.cancel()

    async def _resumed(self, resume: Callable[[], Awaitable[Any]]) -> None:
        message: Message | None = None
        error: BaseException | None = None
        try:
            with anyio.CancelScope() as scope:  # cancel(): the caller let go
                self._scope = scope
                try:
                    message = await resume()
                except Exception as exc:
                    error = exc
            if scope.cancelled_caught:
                error = ClosedError("the receive was cancelled while it waited")
        except BaseException:  # the connection's tasks cancelled: its close
            self._complete(None, ClosedError("the connection closed while the receive waited"))
            raise
        self._complete(message, error)
