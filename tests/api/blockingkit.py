"""What the blocking API's tests share: a failover listener that a test can wait on."""

from __future__ import annotations

import threading


class FailoverSeen:
    """A failover listener whose ``started`` event is set once the connection lost its broker."""

    def __init__(self) -> None:
        self.started = threading.Event()

    def failover_started(self, cause: BaseException) -> None:
        self.started.set()
