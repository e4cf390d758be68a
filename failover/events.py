"""The vocabulary of the failover machine: the events its executor reports, the actions it
returns (``failover.machine``).

An event says what happened, stamped with the time of the executor's clock (``now``): the
machine reads no clock. An action says what to do; the executor (``failover.supervisor`` and
its parts: ``failover.walk``, ``failover.restore``, ``failover.standby``) carries it out and
reports its outcome as the next event. All are frozen values: what crosses between the machine
and its executor is never a callable or a mutable object of either.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from failover.listeners import FailoverEvent
from failover.policy import Attempt
from failover.ports import PortWatch
from failover.url import BrokerURL

__all__ = [
    "Action",
    "Adopt",
    "AttemptFailed",
    "BrokersAnnounced",
    "BrokersLearned",
    "CloseConnection",
    "CloseGate",
    "CloseRequested",
    "Connect",
    "ConnectionLost",
    "DropSpare",
    "Emit",
    "Event",
    "GiveUp",
    "Log",
    "OpenGate",
    "Opened",
    "ProbeFailed",
    "ProbePreferred",
    "ProbeSucceeded",
    "ReadyGone",
    "RefuseReturn",
    "RestoreFailed",
    "RestoreTier",
    "ReturnTo",
    "ScheduleProbe",
    "Shutdown",
    "SpareFailed",
    "SpareLost",
    "SpareReady",
    "Start",
    "StartSpare",
    "TellResources",
    "TierRestored",
    "TimerFired",
    "UseReady",
]

# --- Events: what the driver reports ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    """Begin the first connect."""

    now: float


@dataclass(frozen=True, slots=True)
class AttemptFailed:
    """The outstanding ``Connect`` (or ``UseReady``) failed with ``error``; a redirect is an
    error whose ``redirect_to`` names the broker (``failover.states.redirect_of``)."""

    now: float
    broker: BrokerURL
    error: BaseException


@dataclass(frozen=True, slots=True)
class Opened:
    """The outstanding ``Connect`` (or ``UseReady``) gave a connection to ``broker``."""

    now: float
    broker: BrokerURL


@dataclass(frozen=True, slots=True)
class ReadyGone:
    """The ready connection ``UseReady`` named had closed already: the plan goes on."""

    now: float


@dataclass(frozen=True, slots=True)
class ConnectionLost:
    """The connection of ``epoch`` ended (``cause`` None: closed by the broker, no reason)."""

    now: float
    epoch: int
    cause: BaseException | None


@dataclass(frozen=True, slots=True)
class TierRestored:
    """Tier ``tier`` of the restore on the connection of ``epoch`` is done; ``last``: it was
    the last tier (or there was none)."""

    now: float
    epoch: int
    tier: int
    last: bool


@dataclass(frozen=True, slots=True)
class RestoreFailed:
    """A resource's restore on the connection of ``epoch`` raised ``error``;
    ``connection_open``: whether that connection was still open then."""

    now: float
    epoch: int
    resource: object
    error: Exception
    connection_open: bool


@dataclass(frozen=True, slots=True)
class SpareReady:
    """The spare asked for by ``StartSpare`` is open to ``broker``."""

    now: float
    broker: BrokerURL


@dataclass(frozen=True, slots=True)
class SpareFailed:
    """Opening the spare to ``broker`` failed with ``error``."""

    now: float
    broker: BrokerURL
    error: BaseException


@dataclass(frozen=True, slots=True)
class SpareLost:
    """The spare held to ``broker`` ended."""

    now: float
    broker: BrokerURL


@dataclass(frozen=True, slots=True)
class TimerFired:
    """The delay of the last ``ScheduleProbe`` ran out."""

    now: float


@dataclass(frozen=True, slots=True)
class ProbeSucceeded:
    """A preferred broker accepted the probe's connection, and a return may start (no commit
    on its way): the driver holds the connection until ``ReturnTo`` or ``RefuseReturn``."""

    now: float
    broker: BrokerURL


@dataclass(frozen=True, slots=True)
class ProbeFailed:
    """No preferred broker accepted (``errors``: broker -> why), or the return could not start
    within a probe interval."""

    now: float
    errors: tuple[tuple[BrokerURL, BaseException], ...] = ()


@dataclass(frozen=True, slots=True)
class BrokersLearned:
    """The broker list a broker advertised (F12, ``exchange`` only), from ``source``."""

    now: float
    brokers: tuple[BrokerURL, ...]
    source: BrokerURL | None


@dataclass(frozen=True, slots=True)
class BrokersAnnounced:
    """The broker list a broker's Open announced (``amqpOpenServerListAction``)."""

    now: float
    brokers: tuple[BrokerURL, ...]
    source: BrokerURL | None


@dataclass(frozen=True, slots=True)
class CloseRequested:
    """The application closed the connection."""

    now: float


Event: TypeAlias = (
    Start
    | AttemptFailed
    | Opened
    | ReadyGone
    | ConnectionLost
    | TierRestored
    | RestoreFailed
    | SpareReady
    | SpareFailed
    | SpareLost
    | TimerFired
    | ProbeSucceeded
    | ProbeFailed
    | BrokersLearned
    | BrokersAnnounced
    | CloseRequested
)

# --- Actions: what the driver carries out -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class Connect:
    """Wait ``attempt.delay`` (watching the port as ``watch`` says, if given), then connect to
    ``attempt.broker``; report ``Opened`` or ``AttemptFailed``. ``redirected``: the attempt
    follows a redirect, outside the plan."""

    attempt: Attempt[BrokerURL]
    watch: PortWatch | None = None
    redirected: bool = False


@dataclass(frozen=True, slots=True)
class UseReady:
    """Take the ready connection to ``broker`` (the handover of a return, or the spare) as the
    walk's first attempt; report ``Opened``, or ``ReadyGone`` when it closed meanwhile."""

    broker: BrokerURL


@dataclass(frozen=True, slots=True)
class Adopt:
    """Make the connection just opened to ``broker`` the one in use, numbered ``epoch``; watch
    its end (``ConnectionLost``)."""

    epoch: int
    broker: BrokerURL


@dataclass(frozen=True, slots=True)
class OpenGate:
    """Let callers through on the connection of ``epoch``."""

    epoch: int


@dataclass(frozen=True, slots=True)
class CloseGate:
    """The connection of ``epoch`` is lost: callers wait (until ``OpenGate`` or ``GiveUp``);
    ``failing_over``: a failover follows (else ``GiveUp`` does, at once)."""

    epoch: int
    failing_over: bool = True


@dataclass(frozen=True, slots=True)
class RestoreTier:
    """Restore tier ``tier`` on the connection of ``epoch`` (tier 0: take the tiers now)."""

    epoch: int
    tier: int


@dataclass(frozen=True, slots=True)
class TellResources:
    """Tell every resource the connection of ``epoch`` was lost, for ``cause``; cancel what
    restores on it."""

    epoch: int
    cause: BaseException


@dataclass(frozen=True, slots=True)
class CloseConnection:
    """Close the connection of ``epoch`` (quietly, bounded)."""

    epoch: int


@dataclass(frozen=True, slots=True)
class StartSpare:
    """Open a spare to ``broker`` after ``delay`` seconds (replacing any spare held or being
    opened); report ``SpareReady`` or ``SpareFailed``."""

    broker: BrokerURL
    delay: float = 0.0


@dataclass(frozen=True, slots=True)
class DropSpare:
    """Close the spare held or being opened, if any."""


@dataclass(frozen=True, slots=True)
class ScheduleProbe:
    """Report ``TimerFired`` after ``delay`` seconds."""

    delay: float


@dataclass(frozen=True, slots=True)
class ProbePreferred:
    """Try ``brokers`` in turn; the first that accepts is ``ProbeSucceeded``, none
    ``ProbeFailed``."""

    brokers: tuple[BrokerURL, ...]


@dataclass(frozen=True, slots=True)
class ReturnTo:
    """The return to ``broker`` starts (F16): keep the probe's connection as the handover."""

    broker: BrokerURL


@dataclass(frozen=True, slots=True)
class RefuseReturn:
    """No return is due any more: close the probe's connection to ``broker``."""

    broker: BrokerURL


@dataclass(frozen=True, slots=True)
class Log:
    """Log ``message % args`` at ``level`` (``logging`` levels), with ``error``'s traceback
    when given."""

    level: int
    message: str
    args: tuple[object, ...] = ()
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Failover gave up (F4): callers raise ``ConnectionFailedError`` with ``cause`` and
    ``failures``; ``first_connect``: the first connect is what failed."""

    cause: BaseException
    failures: tuple[tuple[str, BaseException], ...]
    first_connect: bool


@dataclass(frozen=True, slots=True)
class Emit:
    """Tell the listeners ``event`` with ``facts`` (F14)."""

    event: FailoverEvent
    facts: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True, slots=True)
class Shutdown:
    """The connection closed: end every task, close every connection (in use, spare,
    handover)."""


Action: TypeAlias = (
    Connect
    | UseReady
    | Adopt
    | OpenGate
    | CloseGate
    | RestoreTier
    | TellResources
    | CloseConnection
    | StartSpare
    | DropSpare
    | ScheduleProbe
    | ProbePreferred
    | ReturnTo
    | RefuseReturn
    | Log
    | GiveUp
    | Emit
    | Shutdown
)
