"""The failover machine: every decision of a logical connection, as events in, actions out.

How this works: a ``FailoverMachine`` is sans-IO, as h11's ``Connection`` or tenacity's
``Retrying.iter()``. Its driver (the executor) hands it one event at a time (``handle``): what
happened (an attempt failed, a connection opened, a tier restored, the connection in use was
lost, a ready connection came or went, a timer fired, close was asked for), each carrying the
time of the driver's clock. It answers with the actions to carry out, in order: connect to a
broker after a delay, take the ready connection, adopt a connection, open or close the gate,
restore a tier, tell the resources of a loss, close a connection, keep or drop the spare, probe
the preferred brokers, start a return, log, give up with a cause, tell the listeners (F14).

It owns every counter and record those decisions need: the state (``failover.states``'
table), the epoch, the reconnect plan of the walk under way (``failover.schedule``), the
attempts made, the last failure and each broker's, the refusals of the pass (F15), the
redirects followed in a row (F18), the failures ``warn_after_attempts`` counts, the brokers
that refused a ready connection, the ready connections (the spare, the handover of a return),
the failovers completed, returns and downtime. Each decision is one of ``failover.states``'
pure functions; this module is where they are applied, one event at a time.

Rule 1: no I/O, no clock read (time comes in with the events), no callback, no anyio: the
same events with the same seed of the ``random.Random`` it is given yield the same actions.
``retriable`` is a classification of an error, given as a value (it is pure too).

Rule 2: the machine answers every event, expected or not: an event that no longer matters (an
attempt's result after close, a loss of an older epoch, a tier of a restore already ended) is
answered with no action, so that a driver whose tasks race never breaks it. Once closed or
given up, no event yields an action (``CLOSED`` absorbs everything; ``FAILED`` only closes).

The invariants it keeps, beyond ``failover.states``' 1-13 (the model check,
``tests/unit/machine_model.py``, checks them on every action of every event sequence up to a
depth: 6 in the default test run, 8 in ``make check-machine``):

14. No event after ``GiveUp`` yields an action but close (``Shutdown``), none after
    ``Shutdown``; in the answer that gives up, only what closes the other parts (drop the
    spare, refuse a return, log, tell the listeners) follows ``GiveUp``.
15. ``OpenGate(epoch)`` comes only for the connection of ``epoch`` that is in use, on the first
    connect, or once its last tier was restored: never for a connection whose restore did not
    complete.
16. Every caller waiting at the gate is released by exactly one outcome: ``OpenGate``,
    ``GiveUp`` or ``Shutdown``; ``OpenGate`` comes only while the gate is closed.
17. No broker is tried while a redirect chain exceeds its limit (``MAX_REDIRECTS``): at most
    that many ``Connect`` actions in a row follow redirects.
18. At most one ``Connect`` or ``UseReady`` is outstanding at a time, and none while a
    connection is in use.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from failover.errors import ConnectionLostError, PreferredBrokerAvailable
from failover.events import (
    Action,
    Adopt,
    AttemptFailed,
    BrokersAnnounced,
    BrokersLearned,
    CloseConnection,
    CloseGate,
    CloseRequested,
    Connect,
    ConnectionLost,
    DropSpare,
    Emit,
    Event,
    GiveUp,
    Log,
    Opened,
    OpenGate,
    ProbeFailed,
    ProbePreferred,
    ProbeSucceeded,
    ReadyGone,
    RefuseReturn,
    RestoreFailed,
    RestoreTier,
    ReturnTo,
    ScheduleProbe,
    Shutdown,
    SpareFailed,
    SpareLost,
    SpareReady,
    Start,
    StartSpare,
    TellResources,
    TierRestored,
    TimerFired,
    UseReady,
)
from failover.listeners import FailoverEvent
from failover.policy import Attempt, FailoverMethod, FailoverPolicy
from failover.schedule import ReconnectPlan, Stop, Wait
from failover.states import (
    LIVE,
    MAX_REDIRECTS,
    ConnectionState,
    ManagerEvent,
    RestoreFailure,
    announced_list,
    is_refusal,
    loss_event,
    next_state,
    preferred_brokers,
    redirect_next,
    redirect_of,
    refusal_error,
    refused_everywhere,
    restore_failure,
    return_due,
    same_broker,
    spare_target,
)
from failover.url import BrokerURL, merge_broker_lists

# The machine, and its vocabulary (defined in failover.events) for whoever drives it.
__all__ = [
    "REDIRECTED",
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
    "FailoverMachine",
    "GiveUp",
    "Log",
    "OpenGate",
    "Opened",
    "Pending",
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

#: The broker_index of an attempt that follows a redirect, outside the plan (invariant 13).
REDIRECTED: Final = -1


class Pending(enum.Enum):
    """What the walk waits for."""

    NOTHING = "nothing"  # no walk, or a connection in use
    ATTEMPT = "attempt"  # a Connect's result
    READY = "ready"  # a UseReady's result
    RESTORE = "restore"  # the tiers of the restore under way


@dataclass(slots=True)
class _Walk:
    """The record of one walk (the first connect, or one failover): its plan and counters."""

    plan: ReconnectPlan
    startup: bool
    failed: BaseException | None = None  # the last failure, which the plan's wait is told
    refused: bool = False  # the last attempt was a refusal of trust (invariant 10)
    failures: int = 0  # failed attempts in this walk
    counted: int = 0  # the failures warn_after_attempts counts (not a broker starting up)
    refusals: dict[str, BaseException] = field(default_factory=dict)  # broker -> its refusal
    hops: int = 0  # redirects followed in a row (invariant 13)
    last: BaseException | None = None  # the failure whose redirect is followed next
    attempt: Attempt[BrokerURL] | None = None  # the outstanding one


class FailoverMachine:
    """The decisions of one logical connection (see the module docstring).

    Args:
        policy: The failover policy.
        brokers: The URL's broker list (validated, not empty).
        rng: Draws the plan's shuffle and every jitter; seed it for exact actions.
        retriable: Whether another attempt may help after an error (pure).
        reconnect_wait: A tenacity wait replacing the policy's delays.
        reconnect_stop: A tenacity stop replacing the policy's pass count and time budget.
        startup_patience: How long the first connect keeps trying a broker starting up.
        max_redirects: How many redirects a walk follows in a row (invariant 13).
    """

    def __init__(
        self,
        policy: FailoverPolicy,
        brokers: Sequence[BrokerURL],
        *,
        rng: random.Random,
        retriable: Callable[[BaseException], bool],
        reconnect_wait: Wait | None = None,
        reconnect_stop: Stop | None = None,
        startup_patience: float = 0.0,
        max_redirects: int = MAX_REDIRECTS,
    ) -> None:
        self.policy = policy
        self.max_redirects = max_redirects
        self.seed = self.brokers = tuple(brokers)
        self.preferred = preferred_brokers(policy, self.brokers)
        self._rng = rng
        self._retriable = self.retriable = retriable
        self._wait_strategy = reconnect_wait
        self._stop_strategy = reconnect_stop
        self._startup_patience = startup_patience
        self.state = ConnectionState.CONNECTING
        self.epoch = 0
        self.broker: BrokerURL | None = None  # of the connection in use (also RESTORING)
        self.pending = Pending.NOTHING
        self.attempts = 0  # connection attempts made, in every walk
        self.failure: BaseException | None = None  # the last failure (F4's cause)
        self.failures: dict[str, BaseException] = {}  # broker -> its last, in the last walk
        self.failovers = 0
        self.returns = 0
        self.last_downtime: float | None = None
        self.lost_at = 0.0
        self.spare: BrokerURL | None = None  # the spare held
        self.spare_wanted: BrokerURL | None = None  # the spare asked for, not yet ready
        self._spare_failures = 0
        self.handover: BrokerURL | None = None  # the probe's connection a return takes
        self._probe = False  # a ScheduleProbe or ProbePreferred is outstanding
        self._refused_ready: set[str] = set()  # brokers whose last ready answer was a refusal
        self._returning = False  # the failover under way is a return (F16)
        self._walk: _Walk | None = None
        self._tier = -1  # the tier being restored

    # --- The one entry ---------------------------------------------------------------------

    def handle(self, event: Event) -> list[Action]:
        """The actions ``event`` calls for, in the order to carry them out (rule 2: none once
        CLOSED, none for an event that no longer matters)."""
        if self.state is ConnectionState.CLOSED:
            return []
        if isinstance(event, CloseRequested):
            return self._close()
        if self.state is ConnectionState.FAILED:
            return []
        return self._dispatch(event)

    def _dispatch(self, event: Event) -> list[Action]:
        """The handler of ``event``'s kind."""
        match event:
            case Start():
                return self._start(event)
            case AttemptFailed():
                return self._attempt_failed(event)
            case Opened():
                return self._opened(event)
            case ReadyGone():
                return self._ready_gone(event)
            case ConnectionLost():
                return self._lost(event.now, event.epoch, event.cause)
            case TierRestored():
                return self._tier_restored(event)
            case RestoreFailed():
                return self._restore_failed(event)
            case SpareReady():
                return self._spare_ready(event)
            case SpareFailed():
                return self._spare_failed(event)
            case SpareLost():
                return self._spare_lost(event)
            case TimerFired():
                return self._timer_fired(event)
            case ProbeSucceeded():
                return self._probe_succeeded(event)
            case ProbeFailed():
                return self._probe_failed(event)
            case BrokersLearned():
                return self._brokers_learned(event)
            case BrokersAnnounced():
                return self._brokers_announced(event)
            case _:  # CloseRequested, handled first
                return []

    @property
    def cause(self) -> BaseException:
        """The last failure, or an error saying that no attempt was made."""
        return self.failure or ConnectionLostError("no connection attempt was made")

    # --- The walk ---------------------------------------------------------------------------

    def _start(self, event: Start) -> list[Action]:
        if self._walk is not None or self.state is not ConnectionState.CONNECTING:
            return []
        return self._begin_walk(event.now, lost=None)

    def _begin_walk(self, now: float, lost: BrokerURL | None) -> list[Action]:
        startup = lost is None and self.state is ConnectionState.CONNECTING
        plan = ReconnectPlan(
            self.policy,
            self.brokers,
            lost,
            startup=startup,
            began=now if startup else self.lost_at,
            rng=self._rng,
            wait=self._wait_strategy,
            stop=self._stop_strategy,
            startup_patience=self._startup_patience if startup else 0.0,
        )
        self.failures = {}
        self._walk = walk = _Walk(plan, startup, last=None if startup else self.failure)
        ready = self._take_ready()
        if ready is not None:
            self.pending = Pending.READY
            return [UseReady(ready)]
        return self._next_attempt(now, walk)

    def _take_ready(self) -> BrokerURL | None:
        handover, self.handover = self.handover, None
        if handover is not None:
            return handover
        spare, self.spare = self.spare, None
        self.spare_wanted = None
        return spare

    def _next_attempt(self, now: float, walk: _Walk) -> list[Action]:
        """The next attempt: the redirect's target at once (invariant 13), else the plan's;
        none left: give up."""
        actions: list[Action] = []
        target = redirect_next(walk.last, walk.hops, self.max_redirects)
        if target is not None:
            attempt: Attempt[BrokerURL] | None = Attempt(REDIRECTED, target, 0.0, walk.plan.made)
            actions.append(Log(logging.INFO, "following the redirect to %s", (target,)))
        else:
            if redirect_of(walk.last) is not None:
                actions.append(
                    Log(
                        logging.WARNING,
                        "not following the redirect to %s: %d redirects in a row",
                        (redirect_of(walk.last), walk.hops),
                    )
                )
            attempt = walk.plan.next(now, walk.failed, refused=walk.refused)
        if attempt is None:
            actions.append(
                Log(
                    logging.INFO, "the reconnect schedule ends after %d attempts", (walk.plan.made,)
                )
            )
            return actions + self._give_up(self.failure)
        redirected = attempt.broker_index == REDIRECTED
        walk.hops = walk.hops + 1 if redirected else 0
        walk.attempt = attempt
        self.attempts += 1
        self.pending = Pending.ATTEMPT
        watch = None if redirected else walk.plan.watched(attempt)
        actions.append(Connect(attempt, watch, redirected))
        return actions

    def _attempt_failed(self, event: AttemptFailed) -> list[Action]:
        walk = self._walk
        if walk is None or self.pending not in (Pending.ATTEMPT, Pending.READY):
            return []
        error = event.error
        key = str(event.broker)  # once: a broker's text costs more than the rest of a step
        self.failure = self.failures[key] = error
        if self.pending is Pending.READY:  # the ready connection failed: as a loss in restore
            walk.failed = walk.last = error
            self.pending = Pending.NOTHING
            if not self._retriable(error):
                return self._give_up(error)
            return self._next_attempt(event.now, walk)
        attempt = walk.attempt
        assert attempt is not None
        walk.attempt = None
        self.pending = Pending.NOTHING
        walk.failed = walk.last = error
        walk.failures += 1
        due = False  # a warning every warn_after_attempts counted failures
        if not walk.plan.starting_up(event.now, error):
            walk.counted += 1
            every = self.policy.warn_after_attempts
            due = every > 0 and walk.counted % every == 0
        if attempt.broker is not event.broker:
            key = str(attempt.broker)
        refused = is_refusal(error, retriable=self._retriable(error))
        warn = due or (refused and key not in walk.refusals)
        actions: list[Action] = [
            Log(
                logging.WARNING if warn else logging.INFO,
                "attempt %d to connect to %s failed (%d failed so far): %s",
                (attempt.number, attempt.broker, walk.failures, error),
            )
        ]
        if refused:
            walk.refusals[key] = error
        else:
            walk.refusals.pop(key, None)
        walk.refused = refused
        brokers = walk.plan.brokers_of_a_pass
        if refused and refused_everywhere(walk.refusals, brokers):
            return actions + self._give_up(refusal_error(walk.refusals, brokers, error))
        if not refused and not self._retriable(error):
            return actions + self._give_up(error)
        return actions + self._next_attempt(event.now, walk)

    def _ready_gone(self, event: ReadyGone) -> list[Action]:
        walk = self._walk
        if walk is None or self.pending is not Pending.READY:
            return []
        self.pending = Pending.NOTHING
        return self._next_attempt(event.now, walk)

    def _opened(self, event: Opened) -> list[Action]:
        walk = self._walk
        if walk is None or self.pending not in (Pending.ATTEMPT, Pending.READY):
            return []
        walk.attempt = None
        self.broker = event.broker
        first = self.state is ConnectionState.CONNECTING
        self.state = next_state(self.state, ManagerEvent.OPENED)
        actions: list[Action] = [
            Adopt(self.epoch, event.broker),
            Log(logging.INFO, "connected to %s (epoch %d)", (event.broker, self.epoch)),
        ]
        if first:  # nothing to restore on the first connect (invariant 5)
            self._walk = None
            self.pending = Pending.NOTHING
            actions.append(OpenGate(self.epoch))
            actions.append(Emit(FailoverEvent.ESTABLISHED, (("broker", event.broker),)))
            return actions + self._ready_decisions(event.now)
        self.pending = Pending.RESTORE
        self._tier = 0
        actions.append(RestoreTier(self.epoch, 0))
        return actions

    # --- The restore ------------------------------------------------------------------------

    def _tier_restored(self, event: TierRestored) -> list[Action]:
        if (
            self.pending is not Pending.RESTORE
            or event.epoch != self.epoch
            or event.tier != self._tier
        ):
            return []
        if not event.last:
            self._tier += 1
            return [RestoreTier(self.epoch, self._tier)]
        self._tier = -1
        self._walk = None
        self.pending = Pending.NOTHING
        self.state = next_state(self.state, ManagerEvent.RESTORED)
        downtime = event.now - self.lost_at
        self.failovers += 1
        self.returns += self._returning
        self._returning = False
        self.last_downtime = downtime
        broker = self.broker
        actions: list[Action] = [
            OpenGate(self.epoch),
            Log(logging.INFO, "failover to %s completed after %.3f s", (broker, downtime)),
            Emit(FailoverEvent.RESTORED, (("broker", broker), ("downtime", downtime))),
        ]
        return actions + self._ready_decisions(event.now)

    def _restore_failed(self, event: RestoreFailed) -> list[Action]:
        if self.pending is not Pending.RESTORE or event.epoch != self.epoch:
            return []
        error = event.error
        meaning = restore_failure(
            error,
            lost=False,
            connection_open=event.connection_open,
            retriable=self._retriable(error),
        )
        if meaning is RestoreFailure.LOSS:
            return self._lost(event.now, event.epoch, error)
        if meaning is RestoreFailure.ENDED:
            lost = ConnectionLostError(f"the connection ended during the restore: {error}")
            lost.__cause__ = error
            return self._lost(event.now, event.epoch, lost)
        if meaning is RestoreFailure.NOT_RESTORED:
            return [
                Log(logging.ERROR, "could not restore %r: %s", (event.resource, error), error),
                Emit(FailoverEvent.NOT_RESTORED, (("resource", event.resource), ("error", error))),
            ]
        return []

    # --- A loss -----------------------------------------------------------------------------

    def _lost(self, now: float, epoch: int, cause: BaseException | None) -> list[Action]:
        """The loss of the connection of ``epoch``, noticed: close the gate, advance the epoch,
        tell resources and listeners, in one step; then the walk (or give up at once)."""
        state = self.state
        if epoch != self.epoch or self.broker is None or state not in LIVE:
            return []
        if cause is None:
            cause = ConnectionLostError("the broker closed the connection")
        lost_broker = self.broker
        self.failure = cause
        event = loss_event(state, self.policy.method, self._retriable(cause))
        self.epoch += 1
        self.broker = None
        actions: list[Action] = [CloseGate(epoch, event is ManagerEvent.LOST)]
        if isinstance(cause, PreferredBrokerAvailable):
            self._returning = True
            actions.append(
                Log(logging.INFO, "leaving %s (epoch %d): %s", (lost_broker, epoch, cause))
            )
        else:
            actions.append(
                Log(
                    logging.WARNING,
                    "lost the connection to %s (epoch %d): %s",
                    (lost_broker, epoch, cause),
                )
            )
        actions.append(TellResources(epoch, cause))
        actions.append(CloseConnection(epoch))
        if event is ManagerEvent.GAVE_UP:  # nofailover, or nothing can fix it (invariant 6)
            return actions + self._give_up(cause, at_once=True)
        self.state = next_state(state, event)
        if state is ConnectionState.CONNECTED:
            self.lost_at = now
            actions.append(
                Emit(FailoverEvent.INTERRUPTED, (("broker", lost_broker), ("cause", cause)))
            )
            return actions + self._begin_walk(now, lost_broker)
        # lost during its restore: the next attempt of the same walk
        walk = self._walk
        assert walk is not None
        self._tier = -1
        self.failures[str(lost_broker)] = cause
        walk.failed = walk.last = cause
        walk.refused = False  # it accepted the connection
        walk.refusals.pop(str(lost_broker), None)
        self.pending = Pending.NOTHING
        if not self._retriable(cause):
            return actions + self._give_up(cause)
        return actions + self._next_attempt(now, walk)

    def _give_up(self, cause: BaseException | None, *, at_once: bool = False) -> list[Action]:
        """Give up (F4) with ``cause``; ``at_once``: a loss no failover follows (the loss was
        logged already)."""
        first = self.state is ConnectionState.CONNECTING
        cause = cause or ConnectionLostError("no connection attempt was made")
        self.failure = cause
        self.state = next_state(self.state, ManagerEvent.GAVE_UP)
        self._walk = None
        self.pending = Pending.NOTHING
        actions: list[Action] = [
            GiveUp(cause, tuple(self.failures.items()), first),
            DropSpare(),
        ]
        if self.handover is not None:
            actions.append(RefuseReturn(self.handover))
            self.handover = None
        self.spare = self.spare_wanted = None
        if first:
            # start() raises it to the caller: an ERROR log would tell it twice.
            actions.append(Log(logging.INFO, "could not connect: %s", (cause,)))
            actions.append(Emit(FailoverEvent.CONNECT_FAILED, (("cause", cause),)))
        else:
            if not at_once:
                actions.append(Log(logging.ERROR, "failover gave up: %s", (cause,)))
            actions.append(Emit(FailoverEvent.FAILED, (("cause", cause),)))
        return actions

    def _close(self) -> list[Action]:
        self.state = next_state(self.state, ManagerEvent.CLOSE)
        self._walk = None
        self.pending = Pending.NOTHING
        self.broker = self.spare = self.spare_wanted = self.handover = None
        return [Shutdown()]

    # --- Ready connections: the spare (F17) and the return (F16) ----------------------------

    def _ready_decisions(self, now: float) -> list[Action]:
        """What the ready connections do now that the state, the broker in use or the list
        changed (invariant 11)."""
        actions: list[Action] = []
        due = self._return_due()
        if due and not self._probe:
            self._probe = True
            actions.append(ScheduleProbe(self._probe_delay()))
        exclude = self.preferred if due else ()
        target = spare_target(self.policy, self.brokers, self.broker, exclude)
        if self.state is not ConnectionState.CONNECTED:
            return actions
        held = self.spare or self.spare_wanted
        if held is not None and (target is None or not same_broker(held, target)):
            self.spare = self.spare_wanted = None
            self._spare_failures = 0
            actions.append(DropSpare())
            held = None
        if held is None and target is not None:
            self.spare_wanted = target
            actions.append(StartSpare(target, 0.0))
        return actions

    def _return_due(self) -> bool:
        return return_due(self.policy, self.state, self.broker, self.preferred)

    def _probe_delay(self) -> float:
        return self.policy.priority_backup_interval + self.policy.jitter * self._rng.random()

    def _spare_ready(self, event: SpareReady) -> list[Action]:
        wanted = self.spare_wanted
        if wanted is None or not same_broker(wanted, event.broker):
            return [DropSpare()] if self.spare is None and wanted is None else []
        self.spare, self.spare_wanted = event.broker, None
        self._spare_failures = 0
        self._refused_ready.discard(str(event.broker))
        return [Log(logging.DEBUG, "a spare connection to %s is ready", (event.broker,))]

    def _spare_failed(self, event: SpareFailed) -> list[Action]:
        wanted = self.spare_wanted
        if wanted is None or not same_broker(wanted, event.broker):
            return []
        actions = self._ready_failure("spare", event.broker, event.error)
        self._spare_failures += 1
        actions.append(StartSpare(wanted, self._back_off(self._spare_failures)))
        return actions

    def _spare_lost(self, event: SpareLost) -> list[Action]:
        spare = self.spare
        if spare is None or not same_broker(spare, event.broker):
            return []
        self.spare = None
        actions: list[Action] = [
            Log(logging.DEBUG, "the spare connection to %s ended", (event.broker,))
        ]
        return actions + self._ready_decisions(event.now)

    def _back_off(self, failures: int) -> float:
        policy = self.policy
        base = max(policy.connect_delay, 0.01)
        delay = min(base * 2.0 ** (failures - 1), max(policy.max_delay, base))
        return delay + policy.jitter * self._rng.random()

    def _timer_fired(self, event: TimerFired) -> list[Action]:
        if not self._probe:
            return []
        if not self._return_due():
            self._probe = False
            return []
        return [ProbePreferred(self.preferred)]

    def _probe_failed(self, event: ProbeFailed) -> list[Action]:
        if not self._probe:
            return []
        actions: list[Action] = []
        for broker, error in event.errors:
            actions.extend(self._ready_failure("preferred broker", broker, error))
        if not self._return_due():
            self._probe = False
            return actions
        actions.append(ScheduleProbe(self._probe_delay()))
        return actions

    def _probe_succeeded(self, event: ProbeSucceeded) -> list[Action]:
        self._refused_ready.discard(str(event.broker))
        if not self._probe:
            return [RefuseReturn(event.broker)]
        self._probe = False
        if not self._return_due() or self.broker is None:
            return [RefuseReturn(event.broker)]
        self.handover = event.broker
        actions: list[Action] = [
            ReturnTo(event.broker),
            Log(
                logging.INFO,
                "returning from %s to the preferred broker %s",
                (self.broker, event.broker),
            ),
        ]
        cause = PreferredBrokerAvailable(broker=str(event.broker))
        return actions + self._lost(event.now, self.epoch, cause)

    def _ready_failure(self, what: str, broker: BrokerURL, error: BaseException) -> list[Action]:
        """A ready connection's failure: a DEBUG line, but a refusal of trust a warning the
        first time that broker refuses (again after it accepted once)."""
        key = str(broker)
        if is_refusal(error, retriable=self._retriable(error)) and key not in self._refused_ready:
            self._refused_ready.add(key)
            return [Log(logging.WARNING, "%s %s refused the connection: %s", (what, broker, error))]
        return [Log(logging.DEBUG, "%s %s not reached: %s", (what, broker, error))]

    # --- The broker list (F12) --------------------------------------------------------------

    def _brokers_learned(self, event: BrokersLearned) -> list[Action]:
        if self.policy.method is not FailoverMethod.EXCHANGE:
            return [
                Log(
                    logging.DEBUG,
                    "ignoring an advertised broker list: failover.method is not exchange",
                )
            ]
        source = event.source or self.broker
        secure = source.secure if source is not None else any(b.secure for b in self.seed)
        return self._new_list(
            event.now, merge_broker_lists(self.seed, event.brokers, secure=secure)
        )

    def _brokers_announced(self, event: BrokersAnnounced) -> list[Action]:
        learned = announced_list(
            self.policy,
            brokers=self.brokers,
            seed=self.seed,
            announced=event.brokers,
            source=event.source or self.broker,
        )
        if learned is None or learned == self.brokers:
            return []
        return self._new_list(event.now, learned)

    def _new_list(self, now: float, brokers: tuple[BrokerURL, ...]) -> list[Action]:
        self.brokers = brokers
        actions: list[Action] = [
            Log(logging.INFO, "brokers for the next failover: %s", (", ".join(map(str, brokers)),))
        ]
        return actions + self._ready_decisions(now)
