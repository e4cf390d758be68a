"""A send whose outcome is told by a callback from the turn its settlement arrives: no task.

How this works: ``MessageProducer.send_encoded_then`` transfers a message that waits for the
broker's outcome (PERSISTENT ...) at once, when nothing has to be waited for first (connected,
an attached link with credit, no transaction), and asks the AMQP connection to call back when
the broker settles it (``AmqpConnection.when_settled``). The outcome is then given from that
event handler: nobody resumes a loop turn later, as a task awaiting ``wait_settled`` would.

Every rule of the general path (``send_encoded``) holds, because anything but the broker's
outcome on the connection the message went out on hands the send back to the general path's
own code from where it is: when waiting for the outcome fails (the connection or the link
ended, or a refusal came while the connection was already down), a task of the connection runs
what ``send_encoded``'s attempt would have run next (``gate.lost``, then the message sent again
with the same id on the next connection, F11, waiting at the gate until the send's deadline,
F4). ``completed(error)`` is called exactly once (C9), on the loop: with None (accepted), the
refusal, or the general path's error; ``ClosedError`` when the connection's tasks are cancelled
under it; never after ``cancel()``.

Thread-safety: the loop's alone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import anyio

from haclient.amqp.endpoints import Delivery
from haclient.amqp.types import Outcome
from haclient.errors import ClosedError, HAClientError

if TYPE_CHECKING:
    from haclient.aio.gate import Connected

__all__ = ["InFlight"]

Completed = Callable[[BaseException | None], None]


class InFlight:
    """One send transferred at once, its outcome awaited by callback (see the module).

    Given by the producer: ``unconfirmed``, its map of sends awaiting an outcome (this one is
    taken out of it once its wait ends, as the general path's wait takes it out);
    ``check(outcome)`` raises the refusal an outcome means; ``resume(error)`` is the general
    path from a failed wait; ``spawn(fn, *args)`` starts a task of the connection."""

    __slots__ = (
        "_check",
        "_completed",
        "_resume",
        "_scope",
        "_spawn",
        "_unconfirmed",
        "at",
        "delivery",
        "done",
        "handed_back",
    )

    def __init__(
        self,
        at: Connected,
        delivery: Delivery,
        completed: Completed,
        *,
        unconfirmed: MutableMapping[Delivery, Any],
        check: Callable[[Outcome | None], None],
        resume: Callable[[BaseException], Awaitable[None]],
        spawn: Callable[..., None],
    ) -> None:
        self.at = at
        self.delivery = delivery
        self.done = False
        self.handed_back = False
        """True once the general path took it over (its outcome then comes from there: after
        a failover, from another connection)."""
        self._completed = completed
        self._unconfirmed = unconfirmed
        self._check = check
        self._resume = resume
        self._spawn = spawn
        self._scope: anyio.CancelScope | None = None

    def settled(self, outcome: Outcome | None, error: BaseException | None) -> None:
        """``when_settled``'s callback, in the event handler."""
        if self.done:
            return
        self._unconfirmed.pop(self.delivery, None)
        if error is None:
            try:
                self._check(outcome)
            except HAClientError as exc:
                if self.at.physical.is_open:
                    self._complete(exc)
                else:  # as the general path: a loss first (gate.lost decides, F11)
                    self._hand_back(exc)
            else:
                self._complete(None)
            return
        self._hand_back(error)

    def cancel(self) -> None:
        """Stop: its outcome is not told (its caller let go of it; it may have arrived)."""
        if self.done:
            return
        self.done = True
        self.at.amqp.forget_when_settled(self.delivery)
        self._unconfirmed.pop(self.delivery, None)
        if self._scope is not None:
            self._scope.cancel()

    def _complete(self, error: BaseException | None) -> None:
        if not self.done:
            self.done = True
            self._completed(error)

    def _hand_back(self, error: BaseException) -> None:
        """The wait for its outcome failed: the general path takes it from here, in a task."""
        self.handed_back = True
        try:
            self._spawn(self._resumed, error)
        except Exception:  # the connection's tasks are ending: no task will run it
            self._complete(ClosedError("the connection closed while the send waited"))

    async def _resumed(self, error: BaseException) -> None:
        if self.done:
            return
        outcome: BaseException | None = None
        try:
            with anyio.CancelScope() as scope:  # cancel(): then nobody is told (done)
                self._scope = scope
                try:
                    await self._resume(error)
                except Exception as exc:
                    outcome = exc
        except BaseException:  # the connection's tasks cancelled: its close
            self._complete(ClosedError("the connection closed while the send waited"))
            raise
        self._complete(outcome)
