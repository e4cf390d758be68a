"""What a blocking producer or consumer needs of its session, and nothing more.

The session makes one ``SessionContext`` and hands it to each producer and consumer it creates,
so they never hold (or import) the session: the blocking classes import downwards only
(connection -> session -> producer, consumer, browser -> this module).
"""

from __future__ import annotations

from dataclasses import dataclass

from haclient.modes import AckMode
from haclient.sync._boundary import Boundary
from haclient.sync._dispatch import Dispatcher

__all__ = ["SessionContext"]


@dataclass(frozen=True, slots=True)
class SessionContext:
    """A session's share with its producers and consumers.

    Attributes:
        boundary: The connection's one way into the event-loop thread.
        handle: The session's handle there.
        dispatcher: The session's dispatcher thread, where listeners and completion callbacks
            run.
        ack_mode: The session's acknowledge mode (fixed for the session's life).
        close_timeout: The connection's ``close_timeout``: how long a ``close()`` waits for
            what it waits for (a consumer's blocked ``receive()`` calls).
    """

    boundary: Boundary
    handle: int
    dispatcher: Dispatcher
    ack_mode: AckMode
    close_timeout: float
