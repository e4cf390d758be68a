"""The failover listeners (F14), and running callbacks that must not break the manager.

How this works: ``Listeners`` keeps the listeners in the order they were added and calls one
named callback on each that has it. A callback is user or upper-layer code run on the manager's
event loop: ``call_quietly`` logs what it raises and goes on (rule 5 of ``failover.manager``).
Whether an event is still reported at all (not once CLOSED) is decided by the caller
(``failover.states.reports_events``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from failover.protocols import FailoverListener

__all__ = ["Listeners", "call_quietly"]

_log = logging.getLogger("haclient.failover")


class Listeners:
    """The failover listeners of one manager, in the order they were added."""

    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: list[FailoverListener] = []

    def add(self, listener: FailoverListener) -> None:
        """Call ``listener`` from now on, after those added before it."""
        self._listeners.append(listener)

    def remove(self, listener: FailoverListener) -> None:
        """Stop calling ``listener`` (no error if unknown)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def notify(self, name: str, *args: object) -> None:
        """Call ``name`` on every listener that has it, in order; one that raises is logged.
        A listener added or removed by a callback counts from the next event on."""
        for listener in list(self._listeners):
            method = getattr(listener, name, None)
            if method is not None:
                call_quietly(method, *args)


def call_quietly(callback: Callable[..., object], *args: Any) -> None:
    """Run a callback of user or upper-layer code; an exception is logged, not raised."""
    try:
        callback(*args)
    except Exception:
        _log.exception("a failover callback raised (ignored): %r", callback)
