"""The reconnect schedule as tenacity strategies (failover.schedule): the policy's own wait and
stop give exactly the policy's plan, a tenacity wait or stop given instead changes it, and the
retry state they see is the manager's. No event loop: a plan is told the time.
"""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest
import tenacity
from unitkit import A, B, C

import failover.schedule
from failover.policy import Attempt, FailoverMethod, FailoverPolicy
from failover.schedule import (
    PolicyWait,
    ReconnectPlan,
    checked_strategies,
    policy_stop,
    policy_stops,
)
from failover.states import plan
from failover.url import BrokerURL
from haclient.errors import AuthenticationError, BrokerNotReadyError, ConfigurationError

REFUSED = OSError("refused")


def walk(
    schedule: ReconnectPlan, *, took: float = 0.0, limit: int = 10_000
) -> list[Attempt[BrokerURL]]:
    """Every attempt of ``schedule``, each failing ``took`` seconds after it starts; the time
    of each is the sum of the delays and the times taken before it."""
    attempts: list[Attempt[BrokerURL]] = []
    now, failure = 0.0, None
    while len(attempts) < limit and (attempt := schedule.next(now, failure)) is not None:
        now += attempt.delay + took
        failure = REFUSED
        attempts.append(attempt)
    return attempts


def starts(attempts: list[Attempt[BrokerURL]], took: float = 0.0) -> list[float]:
    times, now = [], 0.0
    for attempt in attempts:
        now += attempt.delay
        times.append(now)
        now += took
    return times


@pytest.mark.parametrize(
    "policy",
    [
        FailoverPolicy(cyclecount=3, give_up_after=None),
        FailoverPolicy(cyclecount=2, retries=2, give_up_after=None, initial_delay=0.2),
        FailoverPolicy(cyclecount=4, randomize=True, give_up_after=None),
        FailoverPolicy(method=FailoverMethod.SINGLEBROKER, retries=5, give_up_after=None),
        FailoverPolicy(cyclecount=200, connect_delay=0.5, backoff=1.5, give_up_after=None),
    ],
)
@pytest.mark.parametrize("lost", [None, B])
def test_F5_the_policys_wait_and_stop_give_exactly_the_policys_plan(
    policy: FailoverPolicy, lost: BrokerURL | None
) -> None:
    brokers = [A] if policy.method is FailoverMethod.SINGLEBROKER else [A, B, C]
    lost = None if lost not in brokers else lost
    startup = lost is None
    expected = list(plan(policy, brokers, lost, startup=startup, rng=random.Random(5)))
    schedule = ReconnectPlan(
        policy, brokers, lost, startup=startup, began=0.0, rng=random.Random(5)
    )
    assert walk(schedule) == expected


def test_F5_the_default_schedule_ends_at_the_budget_with_a_cut_last_wait() -> None:
    schedule = ReconnectPlan(
        FailoverPolicy(jitter=0.0), [A, B], A, startup=False, began=0.0, rng=random.Random(1)
    )
    times = starts(walk(schedule))
    # As failover.states.budget_delay says: the attempt due at 124.3 s is made at 120 s.
    assert len(times) == 242 + 6 + 22 + 1
    assert times[240:249] == pytest.approx([3.0, 3.0, 3.1, 3.3, 3.7, 4.5, 6.1, 9.3, 14.3])
    assert times[-1] == pytest.approx(120.0)


def test_the_policy_wait_is_a_tenacity_wait_of_the_attempts_made() -> None:
    policy = FailoverPolicy(fast_period=0.0, jitter=0.0, connect_delay=1.0, max_delay=4.0)
    wait = PolicyWait(policy, brokers=1, rng=random.Random(1))
    assert isinstance(wait, tenacity.wait.wait_base)
    state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})
    delays = []
    for made in range(1, 6):
        state.attempt_number = made
        delays.append(wait(state))
    assert delays == [1.0, 2.0, 4.0, 4.0, 4.0]


def test_the_policy_stop_is_the_pass_count_or_the_budget() -> None:
    retrying = tenacity.Retrying()
    state = tenacity.RetryCallState(retrying, None, (), {})
    stop = policy_stop(FailoverPolicy(cyclecount=2, give_up_after=10.0), 3, startup=False)
    state.start_time, state.outcome_timestamp = 0.0, 1.0
    state.attempt_number = 5
    assert not stop(state)
    state.attempt_number = 6  # two passes over three brokers
    assert stop(state)
    state.attempt_number, state.outcome_timestamp = 1, 10.0  # the budget spent
    assert stop(state)
    forever = policy_stop(FailoverPolicy(give_up_after=None), 3, startup=False)
    state.attempt_number, state.outcome_timestamp = 10**6, 10.0**6
    assert not forever(state)


@pytest.mark.parametrize(
    "policy",
    [
        FailoverPolicy(cyclecount=2, give_up_after=10.0),
        FailoverPolicy(give_up_after=None),
        FailoverPolicy(cyclecount=None, give_up_after=3.5),
        FailoverPolicy(cyclecount=0),
    ],
)
@pytest.mark.parametrize("startup", [False, True])
def test_F4_the_plans_own_stop_answers_as_the_policy_stop(
    policy: FailoverPolicy, startup: bool
) -> None:
    """The plan asks the policy's own stop without a retry state (``policy_stops``): the same
    answer as the tenacity strategy ``policy_stop`` at every count and time."""
    stop = policy_stop(policy, 3, startup=startup)
    total = policy.total_attempts(3, startup=startup)
    state = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})
    state.start_time = 100.0
    for made in range(0, 12):
        for elapsed in (0.0, 1.0, 3.4999, 3.5, 9.99, 10.0, 10.01, 1e6):
            state.attempt_number, state.outcome_timestamp = made, 100.0 + elapsed
            assert policy_stops(policy, total, made, elapsed) == stop(state), (made, elapsed)


def test_F5_a_tenacity_wait_replaces_the_delays_but_not_the_broker_order() -> None:
    policy = FailoverPolicy(cyclecount=2, give_up_after=None, initial_delay=0.3, jitter=0.0)
    schedule = ReconnectPlan(
        policy,
        [A, B, C],
        A,
        startup=False,
        began=0.0,
        rng=random.Random(1),
        wait=tenacity.wait_fixed(2) + tenacity.wait_incrementing(start=0, increment=1),
    )
    attempts = walk(schedule)
    assert [a.broker.host for a in attempts] == ["b", "c", "a", "b", "c", "a"]  # 2 passes
    # The first after the policy's initial delay, then 2 s + 0, 1, 2 ... (attempts made - 1).
    assert [a.delay for a in attempts] == [0.3, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_F5_a_tenacity_stop_replaces_the_pass_count_and_the_budget() -> None:
    policy = FailoverPolicy(cyclecount=1, give_up_after=1.0)  # one pass, one second
    schedule = ReconnectPlan(
        policy,
        [A, B],
        None,
        startup=True,
        began=0.0,
        rng=random.Random(1),
        wait=tenacity.wait_fixed(1),
        stop=tenacity.stop_after_attempt(5),
    )
    attempts = walk(schedule)
    assert [a.broker.host for a in attempts] == ["a", "b", "a", "b", "a"]
    assert starts(attempts) == [0.0, 1.0, 2.0, 3.0, 4.0]  # no cut: the budget is not the stop


def test_stop_before_delay_sees_the_upcoming_sleep() -> None:
    schedule = ReconnectPlan(
        FailoverPolicy(),
        [A],
        None,
        startup=True,
        began=0.0,
        rng=random.Random(1),
        wait=tenacity.wait_fixed(4),
        stop=tenacity.stop_before_delay(10),
    )
    assert starts(walk(schedule, took=1.0), took=1.0) == [0.0, 5.0]  # the third would be at 10


def test_a_failover_asks_the_stop_before_its_first_attempt_the_first_connect_does_not() -> None:
    never = FailoverPolicy(cyclecount=0, startup_cyclecount=0)
    failover = ReconnectPlan(never, [A, B], A, startup=False, began=0.0, rng=random.Random(1))
    assert walk(failover) == []
    first = ReconnectPlan(never, [A, B], None, startup=True, began=0.0, rng=random.Random(1))
    assert walk(first) == [Attempt(0, A, 0.0, 1)]
    given = ReconnectPlan(
        never,
        [A, B],
        A,
        startup=False,
        began=0.0,
        rng=random.Random(1),
        stop=tenacity.stop_after_attempt(3),
    )
    assert [a.broker.host for a in walk(given)] == ["b", "a", "b"]


def test_nofailover_makes_one_first_attempt_whatever_the_stop() -> None:
    policy = FailoverPolicy(method=FailoverMethod.NOFAILOVER)
    stop = tenacity.stop_never
    first = ReconnectPlan(policy, [A, B], None, startup=True, began=0.0, rng=random.Random(1))
    assert walk(first) == [Attempt(0, A, 0.0, 1)]
    given = ReconnectPlan(
        policy, [A, B], None, startup=True, began=0.0, rng=random.Random(1), stop=stop
    )
    assert walk(given) == [Attempt(0, A, 0.0, 1)]


def test_F15_after_a_refusal_the_next_broker_goes_at_once_a_retry_of_the_same_waits() -> None:
    policy = FailoverPolicy(
        retries=2, connect_delay=1.0, backoff=1.0, fast_period=0.0, jitter=0.0, cyclecount=2
    )
    schedule = ReconnectPlan(policy, [A, B], None, startup=False, began=0.0, rng=random.Random(1))
    refusal = AuthenticationError("refused")
    got = [schedule.next(0.0)]
    for _ in range(4):
        got.append(schedule.next(0.0, refusal, refused=True))
    got.append(schedule.next(0.0, REFUSED))
    assert [(a.broker.host, a.delay) for a in got if a is not None] == [
        ("a", 0.0),
        ("a", 1.0),  # the same broker again (retries=2): the wait
        ("b", 0.0),  # another broker after a refusal: at once
        ("b", 1.0),
        ("a", 0.0),
        ("a", 1.0),  # after a failure that is no refusal: the wait
    ]


def _after_loss_of_a(
    policy: FailoverPolicy, failures: list[BaseException], *, wait: object = None
) -> list[tuple[str, float]]:
    """The attempts of a failover from A to [A, B], each failing with the next of
    ``failures`` 1 ms after it starts: (broker, delay) of each."""
    schedule = ReconnectPlan(
        policy,
        [A, B],
        A,
        startup=False,
        began=0.0,
        rng=random.Random(1),
        wait=wait,  # type: ignore[arg-type]
    )
    got, now, failure = [], 0.0, None
    for next_failure in [*failures, REFUSED]:
        attempt = schedule.next(now, failure)
        assert attempt is not None
        got.append((attempt.broker.host, attempt.delay))
        now += attempt.delay + 0.001
        failure = next_failure
    return got


def test_F5_a_broker_that_dropped_the_attempt_before_answering_is_tried_again_within_2_ms() -> None:
    not_ready = BrokerNotReadyError("accepted, then closed before answering")
    got = _after_loss_of_a(FailoverPolicy(), [not_ready, REFUSED, not_ready, REFUSED])
    assert [host for host, _ in got] == ["b", "a", "b", "a", "b"]  # the order is the policy's
    assert got[0][1] == got[1][1] == 0.0 and got[3][1] == 0.0  # a new broker: at once
    assert all(0.001 <= delay <= 0.002 for _, delay in (got[2], got[4]))  # not 25-50 ms
    refused = _after_loss_of_a(FailoverPolicy(), [REFUSED, REFUSED])
    assert 0.025 <= refused[2][1] <= 0.050  # a broker that refused: the fast delay


def test_F5_the_quick_retry_ends_after_its_patience_and_outside_the_fast_phase() -> None:
    not_ready = BrokerNotReadyError("accepted, then closed before answering")
    patience = failover.schedule.NotReadyRetry().patience
    schedule = ReconnectPlan(
        FailoverPolicy(), [A, B], A, startup=False, began=0.0, rng=random.Random(1)
    )
    schedule.next(0.0)  # b
    schedule.next(0.0, not_ready)  # a
    late = schedule.next(patience + 0.1, REFUSED)
    assert late is not None and late.broker == B and late.delay >= 0.025
    own = FailoverPolicy(connect_delay=0.2, backoff=1.0, fast_period=0.0, jitter=0.0)
    assert _after_loss_of_a(own, [not_ready, REFUSED])[2] == ("b", 0.2)
    given = _after_loss_of_a(FailoverPolicy(), [not_ready, REFUSED], wait=tenacity.wait_fixed(1))
    assert given[2] == ("b", 1.0)  # a wait given to connect() is kept


def test_F5_the_quick_retry_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(failover.schedule, "NOT_READY_RETRY", None)
    not_ready = BrokerNotReadyError("accepted, then closed before answering")
    got = _after_loss_of_a(FailoverPolicy(), [not_ready, REFUSED])
    assert 0.025 <= got[2][1] <= 0.050


def _first_connect(
    policy: FailoverPolicy, brokers: list[BrokerURL], failures: list[BaseException], **plan: object
) -> list[tuple[str, float]]:
    """The attempts of a first connect to ``brokers``, each failing with the next of
    ``failures`` (then refused) 10 ms after it starts: (broker, delay) of each."""
    schedule = ReconnectPlan(
        policy,
        brokers,
        None,
        startup=True,
        began=0.0,
        rng=random.Random(1),
        **plan,  # type: ignore[arg-type]
    )
    got, now, failure = [], 0.0, None
    pending = iter(failures)
    while (attempt := schedule.next(now, failure)) is not None and len(got) < 1000:
        got.append((attempt.broker.host, attempt.delay))
        now += attempt.delay + 0.010
        failure = next(pending, REFUSED)
    return got


def test_F1_the_first_connect_retries_a_broker_starting_up_within_its_patience() -> None:
    not_ready = BrokerNotReadyError("accepted, then closed before answering")
    plain = FailoverPolicy(method=FailoverMethod.SINGLEBROKER)
    got = _first_connect(plain, [A], [not_ready] * 5, startup_patience=1.0)
    assert [host for host, _ in got] == ["a"] * 6  # five drops, then refused: the end
    assert all(0.005 <= delay <= 0.010 for _, delay in got[1:])
    dropping = _first_connect(plain, [A], [not_ready] * 1000, startup_patience=1.0)
    assert 40 <= len(dropping) <= 70  # tried every 15-20 ms for the patience after its first drop
    for policy in (FailoverPolicy(), FailoverPolicy(method=FailoverMethod.NOFAILOVER)):
        assert len(_first_connect(policy, [A], [not_ready] * 3, startup_patience=1.0)) == 4
    # a list: the pass as it was, then only the broker that is starting up
    listed = _first_connect(FailoverPolicy(), [A, B], [not_ready, REFUSED, not_ready])
    assert [host for host, _ in listed] == ["a", "b"]  # no patience given: no quick retry
    listed = _first_connect(
        FailoverPolicy(), [A, B], [not_ready, REFUSED, not_ready], startup_patience=1.0
    )
    assert [host for host, _ in listed] == ["a", "b", "a", "a"]


def test_F1_the_first_connect_gives_a_dead_or_refusing_broker_one_attempt() -> None:
    for policy in (FailoverPolicy(), FailoverPolicy(method=FailoverMethod.NOFAILOVER)):
        assert _first_connect(policy, [A], [REFUSED], startup_patience=10.0) == [("a", 0.0)]
        refusal = AuthenticationError("refused")
        assert len(_first_connect(policy, [A], [refusal], startup_patience=10.0)) == 1
    budget = FailoverPolicy(give_up_after=0.1)
    not_ready = BrokerNotReadyError("accepted, then closed before answering")
    short = _first_connect(budget, [A], [not_ready] * 1000, startup_patience=10.0)
    assert 4 <= len(short) <= 8  # the time budget still ends it


def test_F15_the_brokers_of_a_pass() -> None:
    policy = FailoverPolicy()
    after_b = ReconnectPlan(policy, [A, B, C], B, startup=False, began=0.0, rng=random.Random(1))
    assert after_b.brokers_of_a_pass == (C, A, B)
    single = FailoverPolicy(method=FailoverMethod.SINGLEBROKER)
    assert ReconnectPlan(
        single, [A], None, startup=True, began=0.0, rng=random.Random(1)
    ).brokers_of_a_pass == (A,)
    off = FailoverPolicy(method=FailoverMethod.NOFAILOVER)
    assert ReconnectPlan(
        off, [A, B], None, startup=True, began=0.0, rng=random.Random(1)
    ).brokers_of_a_pass == (A,)  # the one try of the first connect


def test_the_retry_state_is_the_plans() -> None:
    schedule = ReconnectPlan(
        FailoverPolicy(), [A, B], None, startup=True, began=100.0, rng=random.Random(1)
    )
    schedule.next(100.0)
    state = schedule.retry_state(102.5, REFUSED, 0.25)
    assert (state.attempt_number, state.seconds_since_start) == (1, 2.5)
    assert (state.idle_for, state.upcoming_sleep) == (0.0, 0.25)
    assert state.outcome is not None and state.outcome.exception() is REFUSED


def test_random_jitter_of_the_policy_is_exact_under_a_seed() -> None:
    def delays(seed: int) -> list[float]:
        policy = FailoverPolicy(cyclecount=50, give_up_after=None)
        schedule = ReconnectPlan(
            policy, [A, B], None, startup=False, began=0.0, rng=random.Random(seed)
        )
        return [a.delay for a in walk(schedule)]

    assert delays(3) == delays(3)
    assert delays(3) != delays(4)


def test_strategies_are_checked() -> None:
    wait, stop = tenacity.wait_fixed(1), tenacity.stop_after_attempt(2)
    assert checked_strategies(wait, stop) == (wait, stop)
    assert checked_strategies(None, None) == (None, None)
    with pytest.raises(ConfigurationError, match="reconnect_wait") as info:
        checked_strategies(1.5, None)
    assert info.value.option == "reconnect_wait"
    with pytest.raises(ConfigurationError, match="reconnect_stop"):
        checked_strategies(None, "60s")


def test_the_schedule_never_sleeps_reads_a_clock_or_does_io() -> None:
    """Like the pure decisions (tests/unit/test_layers.py), but it may import tenacity: its
    strategies are pure; its retrying loops, which sleep, are never used."""
    source = Path(failover.schedule.__file__).read_text()
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    banned = {"time", "asyncio", "anyio", "trio", "socket", "threading", "logging"}
    assert not names & banned
    assert ".sleep" not in source and "Retrying(" in source  # the retrying object: only a label
