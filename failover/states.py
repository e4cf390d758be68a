"""The state machine of the logical connection, and every decision the manager takes on it.

Rule 1: everything that decides the state lives here: the transition table, what an event does
once CLOSED (``state_after``), which event a loss is (fail over, or give up at once), what a
failed restore means (``restore_failure``), whether the listeners still hear of it
(``reports_events``), when refusals of trust end a walk (``is_refusal``,
``refused_everywhere``, ``refusal_error``), and the policy's plan. The failover machine
(``failover.machine``) applies them, event by event, and holds the counters they read; its
executor (``failover.supervisor`` and its parts) and the gate only feed events in and act on
what comes out: they keep no rule of their own about states. When to try again and when to
give up between two attempts is the reconnect schedule, a pair of tenacity strategies
(``failover.schedule``).

Rule 2: nothing here does I/O, sleeps, reads a clock or imports anyio: every function is pure
(a plan draws from the ``random.Random`` it is given), so the table and the decisions are
tested one pair, one case at a time, without an event loop.

The machine (``TRANSITIONS``)::

    CONNECTING --OPENED--> CONNECTED --LOST--> FAILING_OVER --OPENED--> RESTORING
                               ^                   ^      |                 |
                               |                   +------+---LOST----------+
                               +-------------------------RESTORED-----------+
    CONNECTING, CONNECTED, FAILING_OVER --GAVE_UP--> FAILED;  any --CLOSE--> CLOSED

Invariants it keeps (a unit test walks every (state, event) pair and random event sequences):

1. A pair missing from the table is a bug of the caller: ``next_state`` raises
   ``IllegalStateError`` for it rather than guess.
2. CLOSED is final: only CLOSE leads out of it, back to CLOSED (``close()`` is idempotent).
   FAILED is final but for CLOSE.
3. The gate is open exactly in CONNECTED; it is closed (callers wait) in ``IN_TRANSIT``
   (CONNECTING, FAILING_OVER, RESTORING), and callers raise in FAILED and CLOSED.
4. Only ``LIVE`` states (CONNECTED, RESTORING) have a physical connection that can be lost.
5. The first connect has nothing to restore (CONNECTING --OPENED--> CONNECTED); a reconnect
   always restores (FAILING_OVER --OPENED--> RESTORING), even with no resource registered.
6. A loss while CONNECTED gives up at once (GAVE_UP, not LOST) when failover is off
   (``nofailover``) or the cause is one no reconnect can fix (``retriable`` says no); a loss
   while RESTORING is always LOST. After any failed attempt (or a loss during restore) the
   walk asks ``retriable`` before the next attempt: False gives up, attempts left or not,
   unless the failure is a refusal of trust by the broker tried (invariant 10).
7. The plan of a failover starts after the lost broker (roundrobin, exchange); the first
   connect makes at least one attempt on the first broker, even under ``nofailover`` or
   ``cyclecount=0`` (which make no *re*connect at all).
8. The time budget (``policy.give_up_after``) ends a plan: no attempt starts later than the
   budget after the plan began (the loss, or the start of the first connect). An attempt due
   later is made at the end of the budget instead, and is the last one (``budget_delay``).
9. A restore that raises ends the restore and starts the next attempt when it is a loss: a
   ``ConnectionLostError``, any error once the connection has ended, or a retriable
   ``TimeoutError`` (the broker stopped answering). Anything else is the resource's own
   failure: reported to the listeners while the others restore (``restore_failure``).
10. A refusal of trust (``is_refusal``: an ``AuthenticationError`` that ``retriable`` says no
   reconnect fixes, such as refused credentials or a failed TLS handshake) from a connection
   attempt is one broker's answer, not the end: the walk goes on to the next broker, at once.
   It gives up, with an ``AuthenticationError`` naming each broker and its reason
   (``refusal_error``), when every broker of a pass refused at its last attempt
   (``refused_everywhere``); one broker that failed otherwise (unreachable, say) keeps the
   walk going, by the plan, until it ends. A loss of a connection that was accepted is not a
   refusal: invariant 6 holds for it, whatever its cause.
11. A *ready* connection (opened beside the one in use, never through the plan) is one of
   two: the warm spare (``spare_target``: the next broker of the plan after the one in use,
   never that broker itself, never one a return is due to) or a preferred broker's probe
   (``return_due``: only while CONNECTED to a broker that is not preferred). Neither opens,
   fails or dies with any event of the table: only a failover takes a ready connection, as its
   first attempt, and a probe that succeeds starts one, as a loss (CONNECTED --LOST-->
   FAILING_OVER) whose cause is ``PreferredBrokerAvailable``, so that F2-F11 hold as for any
   loss.
12. The broker list a broker's Open announces changes the list the next failover walks only
   as ``announced_list`` says: unset, only with ``exchange`` (F12); ``replace`` makes it the
   broker connected to and the announced ones, ``add`` appends those not in it yet,
   ``ignore`` leaves it. An ``amqps`` source never adds an ``amqp`` broker; an empty
   announcement changes nothing.
13. A failure that redirects (``redirect_of``: an error whose ``redirect_to`` is a
   ``BrokerURL``, set by the connector, e.g. from AMQP's ``amqp:connection:redirect``), of an
   attempt or of the connection in use, makes the redirect's target the walk's next attempt,
   at once and outside the plan (F18; ``redirect_next``). At most ``MAX_REDIRECTS`` are
   followed in a row; the next redirect then waits for the plan's next attempt, so that a loop
   of brokers redirecting to each other is bounded by the plan's attempts and time budget.
"""

from __future__ import annotations

import enum
import itertools
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from failover.errors import (
    AuthenticationError,
    ConnectionLostError,
    HAClientError,
    IllegalStateError,
)
from failover.policy import Attempt, FailoverMethod, FailoverPolicy
from failover.url import BrokerURL, brokers_named, merge_broker_lists

__all__ = [
    "IN_TRANSIT",
    "LIVE",
    "MAX_REDIRECTS",
    "TRANSITIONS",
    "ConnectionState",
    "ManagerEvent",
    "ManagerStatistics",
    "RestoreFailure",
    "announced_list",
    "budget_delay",
    "index_of",
    "is_refusal",
    "is_retriable_failure",
    "loss_event",
    "next_state",
    "plan",
    "preferred_brokers",
    "redirect_next",
    "redirect_of",
    "refusal_error",
    "refused_everywhere",
    "reports_events",
    "restore_failure",
    "return_due",
    "same_broker",
    "spare_target",
    "state_after",
]


class ConnectionState(enum.Enum):
    """The state of the logical connection."""

    CONNECTING = "connecting"  # before and during the first connect
    CONNECTED = "connected"  # the gate is open
    FAILING_OVER = "failing_over"  # the connection was lost; walking the plan
    RESTORING = "restoring"  # a new physical connection is open; resources are restored
    FAILED = "failed"  # failover gave up (F4); final but for CLOSE
    CLOSED = "closed"  # the application closed it; final


class ManagerEvent(enum.Enum):
    """What can happen to the logical connection."""

    OPENED = "opened"  # the connector opened a physical connection
    RESTORED = "restored"  # every registered resource had its turn to restore
    LOST = "lost"  # the physical connection ended, and failover may help
    GAVE_UP = "gave_up"  # the plan ran out, or the failure is one no reconnect can fix
    CLOSE = "close"  # the application closed the connection


_S, _E = ConnectionState, ManagerEvent

TRANSITIONS: Final[Mapping[tuple[ConnectionState, ManagerEvent], ConnectionState]] = (
    MappingProxyType(
        {
            (_S.CONNECTING, _E.OPENED): _S.CONNECTED,  # nothing to restore on the first connect
            (_S.CONNECTING, _E.GAVE_UP): _S.FAILED,
            (_S.CONNECTING, _E.CLOSE): _S.CLOSED,
            (_S.CONNECTED, _E.LOST): _S.FAILING_OVER,
            (_S.CONNECTED, _E.GAVE_UP): _S.FAILED,  # nofailover, or a loss nothing can fix
            (_S.CONNECTED, _E.CLOSE): _S.CLOSED,
            (_S.FAILING_OVER, _E.OPENED): _S.RESTORING,
            (_S.FAILING_OVER, _E.GAVE_UP): _S.FAILED,
            (_S.FAILING_OVER, _E.CLOSE): _S.CLOSED,
            (_S.RESTORING, _E.RESTORED): _S.CONNECTED,
            (_S.RESTORING, _E.LOST): _S.FAILING_OVER,  # the next attempt of the same plan
            (_S.RESTORING, _E.CLOSE): _S.CLOSED,
            (_S.FAILED, _E.CLOSE): _S.CLOSED,
            (_S.CLOSED, _E.CLOSE): _S.CLOSED,  # close() is idempotent
        }
    )
)

#: States in which the gate is closed: a waiter waits for one of the others (invariant 3).
IN_TRANSIT: Final = frozenset({_S.CONNECTING, _S.FAILING_OVER, _S.RESTORING})

#: States in which there is a physical connection that can be lost (invariant 4).
LIVE: Final = frozenset({_S.CONNECTED, _S.RESTORING})


def next_state(state: ConnectionState, event: ManagerEvent) -> ConnectionState:
    """The state ``event`` leads to from ``state``, per ``TRANSITIONS``.

    Raises:
        IllegalStateError: The pair is not in the table.
    """
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalStateError(f"{event.name} is not allowed in state {state.name}") from None


def state_after(state: ConnectionState, event: ManagerEvent) -> ConnectionState:
    """The state the manager is in after ``event``: CLOSED absorbs every event, otherwise
    ``next_state``. Once CLOSED, the supervisor may run on until its next checkpoint, where its
    cancellation lands: what it reports meanwhile no longer matters (invariant 2).

    Raises:
        IllegalStateError: The pair is not in the table (and the state is not CLOSED).
    """
    if state is ConnectionState.CLOSED:
        return ConnectionState.CLOSED
    return next_state(state, event)


def reports_events(state: ConnectionState) -> bool:
    """Whether failover events (started, completed, failed, a resource not restored) still go
    to the listeners in ``state`` (F14): not once CLOSED, where only the change of state to
    CLOSED itself is reported."""
    return state is not ConnectionState.CLOSED


# --- Giving up ---------------------------------------------------------------------------------


def is_retriable_failure(error: BaseException) -> bool:
    """The default ``retriable``: whether another connection attempt may succeed after
    ``error``. An ``HAClientError`` says so itself (``retriable``, from the condition table);
    anything else (a refused socket, a timeout) is worth another try."""
    return error.retriable if isinstance(error, HAClientError) else True


def loss_event(state: ConnectionState, method: FailoverMethod, retriable: bool) -> ManagerEvent:
    """The event a loss of the physical connection is in ``state`` (one of ``LIVE``): GAVE_UP
    when it was CONNECTED and failover is off, or the cause is one no reconnect can fix
    (``retriable`` False); LOST otherwise (invariant 6)."""
    connected = state is ConnectionState.CONNECTED
    if connected and (method is FailoverMethod.NOFAILOVER or not retriable):
        return ManagerEvent.GAVE_UP
    return ManagerEvent.LOST


def is_refusal(error: BaseException, *, retriable: bool) -> bool:
    """Whether ``error``, raised by a connection attempt, is the broker's refusal of trust
    (invariant 10): an ``AuthenticationError`` (the broker refused the credentials, or the TLS
    handshake failed: an untrusted or misnamed certificate, or our certificate refused) that
    no reconnect to that broker fixes (``retriable`` False). Another broker of the list, with
    its own certificate and user store, may still accept."""
    return isinstance(error, AuthenticationError) and not retriable


def refused_everywhere(refusals: Mapping[str, BaseException], brokers: Iterable[BrokerURL]) -> bool:
    """Whether every broker of a pass (``brokers``) refused at its last attempt: ``refusals``
    holds, by broker (``str(broker)``), the refusal of each broker whose last attempt was one
    (invariant 10)."""
    return all(str(broker) in refusals for broker in brokers)


def refusal_error(
    refusals: Mapping[str, BaseException], brokers: Iterable[BrokerURL], last: BaseException
) -> AuthenticationError:
    """The error failover gives up with when every broker of a pass refused (invariant 10):
    an ``AuthenticationError`` whose message names each broker of ``brokers`` and its reason
    (from ``refusals``, in the order of the pass), raised from ``last``, the last refusal, and
    carrying its condition. With one broker in the pass, ``last`` itself: nothing to add."""
    brokers = tuple(brokers)
    if len(brokers) == 1 and isinstance(last, AuthenticationError):
        return last
    reasons = []
    for broker in brokers:
        error = refusals.get(str(broker))
        if error is not None:
            text = str(error)
            reasons.append(text if str(broker) in text else f"{broker}: {text}")
    fields = last if isinstance(last, HAClientError) else None
    summary = AuthenticationError(
        f"every broker refused the connection: {'; '.join(reasons)}",
        condition=None if fields is None else fields.condition,
        description=None if fields is None else fields.description,
        info=None if fields is None else fields.info,
    )
    summary.__cause__ = last
    return summary


class RestoreFailure(enum.Enum):
    """What a resource's failed ``restore`` means (``restore_failure``)."""

    LOSS = "loss"  # the connection is lost, and the error says why: the next attempt
    ENDED = "ended"  # the connection ended under the restore: a loss, whatever the error says
    KNOWN_LOSS = "known_loss"  # a symptom of a loss already noticed: nothing more to do
    NOT_RESTORED = "not_restored"  # the resource itself: reported (F14), the others go on


def restore_failure(
    error: BaseException, *, lost: bool, connection_open: bool, retriable: bool
) -> RestoreFailure:
    """What ``error``, raised by a resource's restore, means (invariant 9).

    Args:
        error: What the restore raised.
        lost: Whether the loss of the connection being restored was already noticed.
        connection_open: Whether that connection is still open.
        retriable: Whether another attempt may help after ``error`` (the manager's
            ``retriable``).
    """
    if isinstance(error, ConnectionLostError):
        return RestoreFailure.LOSS
    if lost:
        return RestoreFailure.KNOWN_LOSS
    if not connection_open:
        # Raised before the task watching ``wait_closed`` reported the end (the broker's
        # reason for closing, an attach cut off): the loss is the cause, not what the restore
        # met, which may be an error no reconnect fixes.
        return RestoreFailure.ENDED
    if isinstance(error, TimeoutError) and retriable:
        return RestoreFailure.LOSS  # the broker stopped answering (a Begin left unanswered)
    return RestoreFailure.NOT_RESTORED


def plan(
    policy: FailoverPolicy,
    brokers: Sequence[BrokerURL],
    lost: BrokerURL | None,
    *,
    startup: bool,
    rng: random.Random,
) -> Iterator[Attempt[BrokerURL]]:
    """The attempts of the first connect (``startup``) or of the failover after losing
    ``lost``: the policy's plan (``FailoverPolicy.attempts``), starting after ``lost`` when it is
    still in ``brokers``. When it runs out, failover gives up (F4).

    The first connect makes at least one attempt, on the first broker, at once (invariant 7).
    """
    start = None if lost is None else index_of(brokers, lost)
    attempts = policy.attempts(brokers, start_index=start, startup=startup, rng=rng)
    first = next(attempts, None)
    if first is None:
        # nofailover, or cyclecount=0: no *re*connect, but the first connect is one try.
        return iter([Attempt(0, brokers[0], 0.0, 1)] if startup else [])
    return itertools.chain([first], attempts)


def budget_delay(policy: FailoverPolicy, delay: float, elapsed: float) -> float | None:
    """How long to sleep before an attempt the plan puts ``delay`` seconds from now,
    ``elapsed`` seconds after the plan began: ``delay``, cut to what is left of
    ``policy.give_up_after``; None when the budget is spent (give up, invariant 8).

    Once an attempt has been cut to the end of the budget, the next call sees nothing left,
    so the plan ends even when attempts take no time at all (a virtual clock).
    """
    budget = policy.give_up_after
    if budget is None:
        return delay
    left = budget - elapsed
    if left <= 0.0:
        return None
    return min(delay, left)


def index_of(brokers: Sequence[BrokerURL], broker: BrokerURL) -> int | None:
    """Where ``broker`` is in ``brokers`` (same scheme, host and port), if it is."""
    key = (broker.scheme, broker.host.lower(), broker.port)
    for i, other in enumerate(brokers):
        if (other.scheme, other.host.lower(), other.port) == key:
            return i
    return None


def same_broker(one: BrokerURL, other: BrokerURL) -> bool:
    """Whether two broker URLs name the same broker: scheme, host and port."""
    return (one.scheme, one.host.lower(), one.port) == (
        other.scheme,
        other.host.lower(),
        other.port,
    )


# --- Ready connections: the return to a preferred broker (F16), the warm spare (F17) ---------


def preferred_brokers(
    policy: FailoverPolicy, brokers: Sequence[BrokerURL]
) -> tuple[BrokerURL, ...]:
    """The brokers of ``brokers`` (the URL's list) a connection returns to with
    ``priority_backup`` (F16), in the order ``priority_uris`` names them: each matched by host
    and port (the scheme and port of a URL without one are its broker's defaults); the first
    broker of the list when ``priority_uris`` is None.

    Raises:
        ConfigurationError: A priority URI names no broker of the list.
    """
    if policy.priority_uris is None:
        return tuple(brokers[:1])
    preferred: list[BrokerURL] = []
    for text in policy.priority_uris:
        preferred.extend(b for b in brokers_named(text, brokers) if b not in preferred)
    return tuple(preferred)


def return_due(
    policy: FailoverPolicy,
    state: ConnectionState,
    current: BrokerURL | None,
    preferred: Sequence[BrokerURL],
) -> bool:
    """Whether the preferred brokers are to be probed now (F16, invariant 11): with
    ``priority_backup``, while CONNECTED to a broker that is not preferred; never under
    ``nofailover`` (a return is a loss, which would end the connection there)."""
    if not policy.priority_backup or policy.method is FailoverMethod.NOFAILOVER:
        return False
    if state is not ConnectionState.CONNECTED or current is None:
        return False
    return not any(same_broker(current, broker) for broker in preferred)


def spare_target(
    policy: FailoverPolicy,
    brokers: Sequence[BrokerURL],
    current: BrokerURL | None,
    exclude: Sequence[BrokerURL] = (),
) -> BrokerURL | None:
    """The broker the warm spare is kept to (F17, invariant 11): with ``backup``, the first
    broker after ``current`` in ``brokers`` (wrapping round) that is neither ``current`` nor
    in ``exclude`` (the preferred brokers while a return is due: the probe is for them).
    None without ``backup``, under ``singlebroker`` and ``nofailover``, or when no broker is
    left."""
    single = (FailoverMethod.SINGLEBROKER, FailoverMethod.NOFAILOVER)
    if not policy.backup or policy.method in single or current is None or not brokers:
        return None
    start = index_of(brokers, current)
    order = list(brokers) if start is None else [*brokers[start + 1 :], *brokers[: start + 1]]
    for broker in order:
        if not same_broker(broker, current) and not any(same_broker(broker, e) for e in exclude):
            return broker
    return None


#: How many redirects a walk follows in a row (invariant 13).
MAX_REDIRECTS = 8


def redirect_of(error: BaseException | None) -> BrokerURL | None:
    """The broker ``error`` redirects the connection to (invariant 13): its ``redirect_to``
    attribute when that is a ``BrokerURL``; None for any other error."""
    target = getattr(error, "redirect_to", None)
    return target if isinstance(target, BrokerURL) else None


def redirect_next(
    failure: BaseException | None, followed: int, limit: int = MAX_REDIRECTS
) -> BrokerURL | None:
    """The broker the walk's next attempt goes to, outside its plan, after ``failure`` when
    ``followed`` redirects were followed in a row just before (invariant 13), at most
    ``limit`` in a row; None: the plan's next attempt."""
    target = redirect_of(failure)
    return target if target is not None and followed < limit else None


def announced_list(
    policy: FailoverPolicy,
    *,
    brokers: Sequence[BrokerURL],
    seed: Sequence[BrokerURL],
    announced: Sequence[BrokerURL],
    source: BrokerURL | None,
) -> tuple[BrokerURL, ...] | None:
    """The list the next failover walks after a broker's Open (from ``source``) announced
    ``announced``, when the walked list is ``brokers`` and the URL's is ``seed`` (invariant 12,
    ``failover.amqpOpenServerListAction``); None: unchanged.

    Qpid JMS's meanings: ``replace`` keeps the broker connected to, first, and the announced
    ones; ``add`` appends the announced ones not in the list yet. Unset, the list is
    followed only with ``exchange``: the announced ones, then the seed (F12).
    """
    if not announced:
        return None
    secure = source.secure if source is not None else any(b.secure for b in seed)
    action = policy.open_server_list_action
    if action is None:
        if policy.method is not FailoverMethod.EXCHANGE:
            return None
        return merge_broker_lists(seed, announced, secure=secure)
    if action == "ignore":
        return None
    head = ([source] if source is not None else []) if action == "replace" else list(brokers)
    fresh = [
        broker
        for broker in merge_broker_lists((), announced, secure=secure)
        if not any(same_broker(broker, kept) for kept in head)
    ]
    return (*head, *fresh)


# --- The snapshot ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ManagerStatistics:
    """A snapshot of the manager.

    Attributes:
        state: The state when the snapshot was taken.
        broker: The broker of the current physical connection; None when there is none.
        epoch: The current epoch (the number of losses so far).
        failovers: Failovers completed (resources restored, gate open again).
        last_downtime: Seconds from loss to reconnection of the last completed failover.
        attempts: Connection attempts made in all (the first connect's included).
        brokers: The list the next failover walks (learned for ``exchange``).
        returns: Completed failovers that were returns to a preferred broker (F16); also
            counted in ``failovers``.
        standby: The broker of the warm spare held now (F17); None when there is none.
    """

    state: ConnectionState
    broker: BrokerURL | None
    epoch: int
    failovers: int
    last_downtime: float | None
    attempts: int
    brokers: tuple[BrokerURL, ...]
    returns: int = 0
    standby: BrokerURL | None = None
