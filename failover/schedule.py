"""The reconnect schedule: how long to wait before the next attempt, and when to give up, as
tenacity wait and stop strategies.

How this works: one connect or failover is a series of attempts, one broker each, in the order
of the policy's passes (``FailoverPolicy.broker_order``, each broker ``retries`` times in a row,
pass after pass: ``FailoverPolicy.broker_cycle``). A ``ReconnectPlan`` hands them out one at a
time. Before every attempt but the first it fills in a ``tenacity.RetryCallState`` and asks a
tenacity *wait* how long to sleep, then a tenacity *stop* whether to give up (tenacity's own
order, so ``stop_before_delay`` sees the upcoming sleep). In that state:

- ``attempt_number`` is the number of attempts made so far in this connect or failover: one
  attempt is one broker, not one pass (a pass over ``n`` brokers is ``n * retries`` attempts);
- ``seconds_since_start`` is the time since the plan began (the loss, or the start of the first
  connect) and ``idle_for`` the time slept so far, both of the manager's injected clock, so a
  test drives them with a virtual one;
- ``outcome`` holds the last failure, ``upcoming_sleep`` the wait just computed.

The first attempt of a plan is made after ``policy.initial_delay`` (0 by default: at once),
whatever the wait; a failover also asks the stop before it (``attempt_number`` 0), so that a
policy that allows no reconnect makes none, while the first connect always makes one attempt
(``failover.states`` invariant 7).

After a refusal of trust (``failover.states.is_refusal``: the broker refused our credentials or
its TLS handshake failed), the next attempt, when it is on another broker, goes at once: the
wait is not asked (the stop still is), since the refusal was an answer, not a broker that may
be on its way back. A retry of the same broker (``retries`` > 1) waits as usual.

A broker that accepted the TCP connection and closed it before answering
(``BrokerNotReadyError``) listens but does not serve yet: a new master of a shared-store pair
in its first milliseconds (ActiveMQ 5.17 answers the protocol header 60-80 ms after its port
opens, and drops or holds what comes before). During the fast phase of the policy's own wait,
the next attempt on that broker waits ``NOT_READY_RETRY`` (1-2 ms) instead of the fast delay,
for ``patience`` after the first such drop in the plan; a broker that keeps dropping longer
(a proxy with nothing behind it) gets the fast delay again. The broker order and the attempt
count do not change, only that wait.

A broker whose port refused the last attempt's TCP connection (nothing listens there yet: a
standby not yet taken over, a broker restarting) is watched, during the fast phase, while the
plan waits before its next attempt: ``PORT_WATCH`` says how often its port is probed (a TCP
connect closed at once, ``failover.ports``), and the wait ends as soon as the port accepts, so
that the attempt comes within a probe interval of the port opening instead of up to a fast
delay plus its jitter (25-50 ms) later. ``watched`` says which waits; the walk probes. The
broker order, the attempt count and the waits' upper bounds do not change.

The first connect meets such a broker too: applications start together with their brokers
(compose files, pods), and a broker that accepts TCP is not dead. A first connect's plan given
a ``startup_patience`` (seconds; the client passes its connect timeout) does not end while a
broker of its list is starting up: once its own attempts are spent (one pass by default, or the
one try of ``nofailover``), it tries again, every ``STARTUP_RETRY`` delay (5-10 ms), each
broker whose last attempt it dropped before answering, round the list, for ``startup_patience``
after that broker's first drop, within the time budget. A broker that refused the TCP
connection, or answered with a failure, gets no such retry: a dead URL still fails at once.
Only the policy's own stop allows these attempts; a stop given to the manager is the end.

The policy's own schedule is one such pair: ``PolicyWait`` (the delays of the module docstring
of ``failover.policy``, jitter drawn from the injected ``random.Random``, so a seed makes the
plan exact) and ``policy_stop`` (the pass count as ``stop_after_attempt``, the time budget
``give_up_after`` as ``stop_after_delay``). With the policy's stop, a wait that would start an
attempt after the budget is cut to its end, and that attempt is the last (invariant 8). A wait
or stop given to the manager (``connect(url, reconnect_wait=..., reconnect_stop=...)``) replaces
the policy's; the broker order stays the policy's.

Nothing here sleeps, reads a clock or does I/O: the manager's supervisor tells the plan the time
and the failure, sleeps what it says and connects.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, cast

import tenacity
from tenacity import RetryCallState, stop_after_attempt, stop_after_delay, stop_never

from failover.errors import BrokerNotReadyError, ConfigurationError
from failover.policy import Attempt, FailoverPolicy
from failover.ports import PortWatch, tcp_refused
from failover.states import budget_delay, index_of
from failover.url import BrokerURL

__all__ = [
    "NOT_READY_RETRY",
    "PORT_WATCH",
    "STARTUP_RETRY",
    "NotReadyRetry",
    "PolicyWait",
    "ReconnectPlan",
    "Stop",
    "Wait",
    "checked_strategies",
    "policy_stop",
    "policy_stops",
]

#: A tenacity wait strategy: seconds to sleep before the next attempt (``tenacity.wait_*``).
Wait = Callable[[RetryCallState], float]
#: A tenacity stop strategy: whether to give up instead (``tenacity.stop_*``).
Stop = Callable[[RetryCallState], bool]


@dataclass(frozen=True, slots=True)
class NotReadyRetry:
    """How soon a broker that dropped an attempt before answering is tried again: after
    ``delay`` plus up to ``jitter`` (seconds), for ``patience`` seconds after its first drop in
    a plan (see the module docstring)."""

    delay: float = 0.005
    jitter: float = 0.005
    patience: float = 0.5


NOT_READY_RETRY: NotReadyRetry | None = NotReadyRetry(delay=0.001, jitter=0.001)
"""A failover's quick retry of a broker not ready yet (1-2 ms: the attempt that finds it ready
comes at most that long after it became ready), read by each new plan (None: none)."""

STARTUP_RETRY = NotReadyRetry()
"""The first connect's retry of a broker starting up (5-10 ms), once its own attempts are
spent: for up to the connect timeout, so a little slower than a failover's."""


PORT_WATCH: PortWatch | None = PortWatch()
"""The watch of a refused port during the fast phase's waits, read by each new plan (None:
none; the failover bench turns it off to measure the schedule without it)."""


class PolicyWait(tenacity.wait.wait_base):
    """The delays of ``policy`` (``FailoverPolicy.delay``) as a tenacity wait: the delay before
    attempt ``attempt_number`` (0-based: the attempts made so far) of a plan whose passes visit
    ``brokers`` brokers, jitter drawn from ``rng``."""

    def __init__(self, policy: FailoverPolicy, *, brokers: int, rng: random.Random) -> None:
        self.policy = policy
        self.brokers = max(brokers, 1)
        self.rng = rng

    def __call__(self, retry_state: RetryCallState) -> float:
        return self.policy.delay(retry_state.attempt_number, brokers=self.brokers, rng=self.rng)


def policy_stop(policy: FailoverPolicy, broker_count: int, *, startup: bool) -> Stop:
    """The end of ``policy``'s plan over ``broker_count`` brokers as a tenacity stop: after its
    attempts (``total_attempts``: the passes of a failover, or of the first connect with
    ``startup``), or once ``give_up_after`` is spent (``policy_stops``, as tenacity's
    strategies)."""
    total = policy.total_attempts(broker_count, startup=startup)
    stop: tenacity.stop.stop_base = stop_never if total is None else stop_after_attempt(total)
    if policy.give_up_after is not None:
        stop = stop | stop_after_delay(policy.give_up_after)
    return stop


def policy_stops(policy: FailoverPolicy, total: int | None, made: int, elapsed: float) -> bool:
    """``policy_stop``'s answer without a retry state: whether a plan that made ``made`` of
    its ``total`` attempts (None: no limit), ``elapsed`` seconds after it began, stops
    (``stop_after_attempt(total) | stop_after_delay(give_up_after)``)."""
    if total is not None and made >= total:
        return True
    budget = policy.give_up_after
    return budget is not None and elapsed >= budget


def checked_strategies(wait: object, stop: object) -> tuple[Wait | None, Stop | None]:
    """``wait`` and ``stop`` as given to ``connect()``: each None or a callable of the retry
    state (any tenacity strategy is).

    Raises:
        ConfigurationError: Naming the argument, for anything else (a number, say).
    """
    for name, value in (("reconnect_wait", wait), ("reconnect_stop", stop)):
        if value is not None and not callable(value):
            raise ConfigurationError(
                f"{name} must be a tenacity {name.split('_')[1]} strategy such as "
                f"{_EXAMPLES[name]}, not {value!r}",
                option=name,
            )
    return cast("Wait | None", wait), cast("Stop | None", stop)


_EXAMPLES: Final = {
    "reconnect_wait": "tenacity.wait_exponential(max=5)",
    "reconnect_stop": "tenacity.stop_after_delay(60)",
}


class ReconnectPlan:
    """The attempts of one connect or failover, one at a time (see the module docstring).

    Args:
        policy: The broker order, the first delay and, unless given, the wait and the stop.
        brokers: The list to walk.
        lost: The broker lost (a failover starts after it), or None (the first connect).
        startup: True for the first connect (at least one attempt; the startup pass count).
        began: When the plan began, on the caller's clock.
        rng: Draws the ``randomize`` shuffle and the policy's jitter.
        wait: A tenacity wait replacing the policy's delays (but the first).
        stop: A tenacity stop replacing the policy's pass count and time budget.
        startup_patience: For the first connect, how long (seconds) after its first drop a
            broker starting up is tried again once the plan's own attempts are spent (0: not
            at all; see the module docstring).
    """

    def __init__(
        self,
        policy: FailoverPolicy,
        brokers: Sequence[BrokerURL],
        lost: BrokerURL | None,
        *,
        startup: bool,
        began: float,
        rng: random.Random,
        wait: Wait | None = None,
        stop: Stop | None = None,
        startup_patience: float = 0.0,
    ) -> None:
        start = None if lost is None else index_of(brokers, lost)
        order = policy.broker_order(len(brokers), start_index=start, rng=rng)
        self._policy, self._brokers, self._order = policy, brokers, order
        self._cycle: Iterator[int] = policy.broker_cycle(order)
        self._startup, self._began, self._rng = startup, began, rng
        self._wait = wait or PolicyWait(policy, brokers=len(order), rng=rng)
        self._stop = stop or policy_stop(policy, len(brokers), startup=startup)
        # The policy's own wait and stop are asked directly, without a tenacity retry state
        # (the same answers; a fresh state and tenacity's calls were a third of a failed
        # attempt's step, measured cold: bench/README.md, issue 39 item 14).
        self._own = wait is None and stop is None
        self._total = policy.total_attempts(len(brokers), startup=startup)
        self._pass = tuple(brokers[i] for i in order) or tuple(brokers[:1])
        # The time budget cuts the last wait only when it is the stop (invariant 8).
        self._cut = stop is None
        self._retrying = tenacity.Retrying(wait=self._wait, stop=self._stop)
        self._made = 0
        self._slept = 0.0
        self._last: int | None = None  # the broker index of the last attempt handed out
        self._quick = NOT_READY_RETRY if wait is None else None  # only the policy's own wait
        self._not_ready_since: dict[int, float] = {}  # broker index -> its first drop
        self._port_watch = PORT_WATCH if wait is None else None  # only the policy's own wait
        self._refused: set[int] = set()  # broker indices whose last attempt's port refused
        self._noted: tuple[int | None, BaseException | None] = (None, None)  # _note_not_ready's
        # Only a wait or stop given to the manager may read the retry state's outcome.
        self._outcome = wait is not None or stop is not None
        # The first connect's retry of a broker starting up: only with the policy's own stop.
        self._startup_patience = startup_patience if startup and stop is None else 0.0

    @property
    def made(self) -> int:
        """The attempts handed out so far."""
        return self._made

    def starting_up(self, now: float, failure: BaseException) -> bool:
        """Whether the last attempt's ``failure`` is its broker starting up, retried quickly by
        this plan: a ``BrokerNotReadyError`` within the quick retry's patience of that broker's
        first such drop (recorded now, as ``next`` records it)."""
        self._note_not_ready(now, failure)
        since = None if self._last is None else self._not_ready_since.get(self._last)
        if since is None:
            return False
        quick = self._quick
        patience = max(self._startup_patience, 0.0 if quick is None else quick.patience)
        return patience > 0.0 and now - since <= patience

    @property
    def brokers_of_a_pass(self) -> tuple[BrokerURL, ...]:
        """The brokers one pass of this plan visits, in its order (the first broker alone when
        the plan makes no pass: the one try of a first connect without failover)."""
        return self._pass

    def next(
        self, now: float, failure: BaseException | None = None, *, refused: bool = False
    ) -> Attempt[BrokerURL] | None:
        """The next attempt, ``now`` being the time of the caller's clock and ``failure`` what
        made the last attempt fail (``refused``: a refusal of trust, after which another broker
        is tried at once); None when the plan ends (give up, F4)."""
        self._note_not_ready(now, failure)
        attempt = self._first(now) if self._made == 0 else self._after(now, failure, refused)
        if attempt is None and self._made > 0:
            attempt = self._starting_broker(now)
        if attempt is not None:
            self._made += 1
            self._slept += attempt.delay
            self._last = attempt.broker_index
        return attempt

    def _first(self, now: float) -> Attempt[BrokerURL] | None:
        index = next(self._cycle, None)
        if index is None or self._stop(self.retry_state(now, None, 0.0)):
            # No reconnect at all (nofailover, no pass): the first connect is one try at once.
            return Attempt(0, self._brokers[0], 0.0, 1) if self._startup else None
        delay = self._policy.delay(0, brokers=len(self._order), rng=self._rng)
        return Attempt(index, self._brokers[index], delay, 1)

    def _after(
        self, now: float, failure: BaseException | None, refused: bool
    ) -> Attempt[BrokerURL] | None:
        index = next(self._cycle, None)
        if index is None:
            return None
        # A refusal was an answer, not a broker on its way back: another broker goes at once.
        at_once = refused and index != self._last
        if self._own:
            state = None
            delay = 0.0
            if not at_once:
                brokers = max(len(self._order), 1)  # as PolicyWait counts them
                delay = self._policy.delay(self._made, brokers=brokers, rng=self._rng)
        else:
            state = self.retry_state(now, failure, 0.0, outcome=self._outcome)
            delay = 0.0 if at_once else max(0.0, float(self._wait(state)))
        delay = self._sooner_if_not_ready(index, now, delay)
        if self._cut:  # the policy's stop: no attempt after the time budget (invariant 8)
            cut = budget_delay(self._policy, delay, now - self._began)
            delay = delay if cut is None else cut  # None: spent, and the stop says so
        if state is None:
            if policy_stops(self._policy, self._total, self._made, now - self._began):
                return None
        else:
            state.upcoming_sleep = delay
            if self._stop(state):
                return None
        return Attempt(index, self._brokers[index], delay, self._made + 1)

    def _starting_broker(self, now: float) -> Attempt[BrokerURL] | None:
        """After the first connect's own attempts, the next attempt on a broker starting up:
        the next after the last one tried, round the list, of the brokers whose last attempt
        dropped before answering within ``startup_patience`` of their first drop; None when
        there is none, or the time budget is spent (see the module docstring)."""
        patience = self._startup_patience
        if patience <= 0.0:
            return None
        waiting = sorted(
            index for index, since in self._not_ready_since.items() if now - since <= patience
        )
        if not waiting:
            return None
        last = -1 if self._last is None else self._last
        index = next((i for i in waiting if i > last), waiting[0])
        quick = STARTUP_RETRY
        delay = budget_delay(
            self._policy, quick.delay + quick.jitter * self._rng.random(), now - self._began
        )
        if delay is None:
            return None
        return Attempt(index, self._brokers[index], delay, self._made + 1)

    def watched(self, attempt: Attempt[BrokerURL]) -> PortWatch | None:
        """How the wait before ``attempt`` watches its broker's port (None: it is not watched):
        in the fast phase, when the broker's last attempt in this plan found its port refusing
        TCP connections (see the module docstring)."""
        watch = self._port_watch
        if watch is None or attempt.delay <= 0 or attempt.broker_index not in self._refused:
            return None
        return watch if self._fast(attempt.number - 1) else None

    def _fast(self, made: int) -> bool:
        """Whether the attempt after ``made`` attempts belongs to the fast phase."""
        policy = self._policy
        per_pass = max(len(self._order), 1) * (policy.retries or 1)
        return policy.fast_period > 0.0 and made // per_pass <= policy.fast_passes

    def _note_not_ready(self, now: float, failure: BaseException | None) -> None:
        """Remember when the broker of the last attempt first dropped it before answering (and
        forget it once it failed otherwise), and whether its port refused the connection."""
        if self._last is None or failure is None or self._noted == (self._last, failure):
            return  # nothing to note, or noted already (``starting_up`` then ``next``)
        self._noted = (self._last, failure)
        if tcp_refused(failure):
            self._refused.add(self._last)
        else:
            self._refused.discard(self._last)
        if isinstance(failure, BrokerNotReadyError):
            self._not_ready_since.setdefault(self._last, now)
        else:
            self._not_ready_since.pop(self._last, None)

    def _sooner_if_not_ready(self, index: int, now: float, delay: float) -> float:
        """``delay``, cut to the quick retry's when broker ``index`` dropped an attempt before
        answering, within the patience, in the fast phase (see the module docstring)."""
        quick, since = self._quick, self._not_ready_since.get(index)
        if quick is None or since is None or now - since > quick.patience:
            return delay
        if not self._fast(self._made):
            return delay
        return min(delay, quick.delay + quick.jitter * self._rng.random())

    def retry_state(
        self, now: float, failure: BaseException | None, upcoming: float, *, outcome: bool = True
    ) -> RetryCallState:
        """The retry state of this plan at ``now`` (of the caller's clock) after ``failure``
        (in ``outcome``, unless told not to: the policy's own wait and stop never read it)."""
        state = RetryCallState(self._retrying, None, (), {})
        state.attempt_number = self._made
        state.start_time = self._began
        state.idle_for = self._slept
        state.upcoming_sleep = upcoming
        if failure is not None and outcome:
            future = tenacity.Future(self._made)
            future.set_exception(failure)
            state.outcome = future
        state.outcome_timestamp = now
        return state
