"""The failover listeners (F14): which names a listener is called by, and running callbacks
that must not break the manager.

How this works: ``Listeners`` keeps the listeners in the order they were added. The supervisor
tells it of each ``FailoverEvent`` with the event's facts (``broker``, ``cause``,
``downtime`` ...); ``CALLS`` says, for each event, which methods a listener may have for it and
which facts each gets, in order: haclient's own name (``failover_started(cause)``) and the name
Qpid JMS's ``JmsConnectionListener`` gives it, in snake case (``on_connection_interrupted(broker)``,
see ``ConnectionListener``). Every listener, in order, is called by each name it has, haclient's
first. A callback is user or upper-layer code run on the manager's event loop: ``call_quietly``
logs what it raises and goes on (rule 5 of ``failover.manager``). Whether an event is still
reported at all (not once CLOSED) is decided by the caller (``failover.states.reports_events``).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from failover.protocols import FailoverListener
from failover.url import BrokerURL

__all__ = [
    "CALLS",
    "AnyListener",
    "ConnectionListener",
    "FailoverEvent",
    "Listeners",
    "call_quietly",
]

_log = logging.getLogger("haclient.failover")


class ConnectionListener(Protocol):
    """The failover events under the names of Qpid JMS's ``JmsConnectionListener``, in snake
    case, so that a port of a Java application maps one to one (F14). Subclass it and
    override what you need; any object will do, and a method it lacks is not called. It may
    have ``FailoverListener``'s methods too: both are called, those first.

    ``broker`` is the ``BrokerURL`` the other listeners get (``str(broker)`` is the URL with
    the password masked), where Qpid JMS gives a ``URI``.
    """

    def on_connection_established(self, broker: BrokerURL) -> None:
        """The first connect succeeded, to ``broker``; never called again (later connects
        are ``on_connection_restored``). Only a listener given before the connect hears it
        (``connect(..., listener=obj)``)."""
        return None

    def on_connection_interrupted(self, broker: BrokerURL) -> None:
        """The connection to ``broker`` was lost and failover began (``failover_started``)."""
        return None

    def on_connection_restored(self, broker: BrokerURL) -> None:
        """Failover completed: connected to ``broker``, resources restored
        (``failover_completed``)."""
        return None

    def on_connection_failure(self, error: BaseException) -> None:
        """The connection failed for good: failover gave up or is off (``failover_failed``),
        or the first connect gave up (``connect()`` raises too)."""
        return None


#: What ``add_listener`` takes: an object with some of either protocol's methods, or both.
AnyListener = FailoverListener | ConnectionListener


class FailoverEvent(enum.Enum):
    """What the supervisor tells the listeners of (F14)."""

    ESTABLISHED = "established"  # the first connect succeeded: broker
    INTERRUPTED = "interrupted"  # the connection in use was lost, failover began: broker, cause
    RESTORED = "restored"  # failover completed: broker, downtime
    FAILED = "failed"  # failover gave up, or is off: cause
    CONNECT_FAILED = "connect_failed"  # the first connect gave up: cause
    NOT_RESTORED = "not_restored"  # a resource's restore raised: resource, error


#: For each event, the listener methods called for it, in order, and the facts each gets.
CALLS: Final[Mapping[FailoverEvent, tuple[tuple[str, tuple[str, ...]], ...]]] = {
    FailoverEvent.ESTABLISHED: (("on_connection_established", ("broker",)),),
    FailoverEvent.INTERRUPTED: (
        ("failover_started", ("cause",)),
        ("on_connection_interrupted", ("broker",)),
    ),
    FailoverEvent.RESTORED: (
        ("failover_completed", ("broker", "downtime")),
        ("on_connection_restored", ("broker",)),
    ),
    FailoverEvent.FAILED: (
        ("failover_failed", ("cause",)),
        ("on_connection_failure", ("cause",)),
    ),
    FailoverEvent.CONNECT_FAILED: (("on_connection_failure", ("cause",)),),
    FailoverEvent.NOT_RESTORED: (("resource_not_restored", ("resource", "error")),),
}


class Listeners:
    """The failover listeners of one manager, in the order they were added."""

    __slots__ = ("_listeners",)

    def __init__(self) -> None:
        self._listeners: list[AnyListener] = []

    def add(self, listener: AnyListener) -> None:
        """Call ``listener`` from now on, after those added before it."""
        self._listeners.append(listener)

    def remove(self, listener: AnyListener) -> None:
        """Stop calling ``listener`` (no error if unknown)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def tell(self, event: FailoverEvent, **facts: object) -> None:
        """Call every listener, in order, by each name ``CALLS`` gives ``event`` that it has,
        with the facts that name takes; one that raises is logged. A listener added or removed
        by a callback counts from the next event on.

        Raises:
            KeyError: ``facts`` lacks one that a name of ``event`` takes (a caller's bug).
        """
        calls = [(name, tuple(facts[fact] for fact in takes)) for name, takes in CALLS[event]]
        for listener in list(self._listeners):
            for name, args in calls:
                call_quietly(_call_if_present, listener, name, *args)

    def notify(self, name: str, *args: object) -> None:
        """Call ``name`` on every listener that has it, in order; one that raises is logged.
        A listener added or removed by a callback counts from the next event on."""
        for listener in list(self._listeners):
            call_quietly(_call_if_present, listener, name, *args)


def _call_if_present(listener: object, name: str, *args: object) -> None:
    """Call ``listener.name(*args)`` if it has that name; looking it up is the listener's code
    too (a property, a proxy's ``__getattr__``), so what it raises is treated alike."""
    method = getattr(listener, name, None)
    if method is not None:
        method(*args)


def call_quietly(callback: Callable[..., object], *args: Any) -> None:
    """Run a callback of user or upper-layer code; an exception is logged, not raised."""
    try:
        callback(*args)
    except Exception:
        if callback is _call_if_present:  # the listener's repr may raise too: its type's name
            kind, name = type(args[0]).__qualname__, args[1]
            _log.exception("a failover listener raised (ignored): %s of a %s", name, kind)
        else:
            _log.exception("a failover callback raised (ignored): %r", callback)
