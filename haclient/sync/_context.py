"""What a blocking producer or consumer needs of its session, and nothing more.

The session makes one ``SessionContext`` and hands it to each producer and consumer it creates,
so they never hold (or import) the session: the blocking classes import downwards only
(connection -> session -> producer, consumer, browser -> this module).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from haclient.modes import AckMode
from haclient.sync._dispatch import Dispatcher
from haclient.sync._loop import EventLoop

if TYPE_CHECKING:
    from haclient.sync._outbox import Outbox

__all__ = ["SessionContext"]


@dataclass(frozen=True, slots=True)
class SessionContext:
    """A session's share with its producers and consumers.

    Attributes:
        loop: The connection's way into the event-loop thread.
        dispatcher: The session's dispatcher thread, where listeners and completion callbacks
            run.
        ack_mode: The session's acknowledge mode (fixed for the session's life).
        outboxes: The outboxes of its open producers, which its close settles (C9).
    """

    loop: EventLoop
    dispatcher: Dispatcher
    ack_mode: AckMode
    outboxes: list[Outbox] = field(default_factory=list)
