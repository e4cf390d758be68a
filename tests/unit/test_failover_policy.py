"""Failover policies: validation, option names (haclient's and Qpid JMS's), plans (F5)."""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from failover.policy import Attempt, FailoverMethod, FailoverPolicy
from failover.url import parse_url
from haclient.errors import ConfigurationError
from haclient.options import CLIENT_OPTIONS

A, B, C = "a", "b", "c"


def plain_policy(**fields: Any) -> FailoverPolicy:
    """A policy with constant delays, no fast phase and no jitter, unless ``fields`` say otherwise.

    What a URL that sets its own delays gets; the plan tests not about the default schedule use it.
    """
    return FailoverPolicy(**{"fast_period": 0.0, "jitter": 0.0, "backoff": 1.0, **fields})


def plan(policy: FailoverPolicy, brokers: list[str], **kwargs: object) -> list[tuple[str, float]]:
    """The plan as (broker, delay) pairs, with a fixed seed."""
    rng = random.Random(0)
    return [(a.broker, a.delay) for a in policy.attempts(brokers, rng=rng, **kwargs)]  # type: ignore[arg-type]


# --- Values --------------------------------------------------------------------------------------


def test_defaults() -> None:
    p = FailoverPolicy()
    assert p.method is FailoverMethod.ROUNDROBIN
    assert (p.retries, p.cyclecount, p.startup_cyclecount) == (None, None, 1)
    assert p.give_up_after == 120.0
    assert (p.initial_delay, p.fast_delay, p.fast_period) == (0.0, 0.025, 3.0)
    assert (p.connect_delay, p.backoff, p.max_delay, p.jitter) == (0.1, 2.0, 5.0, 0.025)
    assert p.timeout is None
    assert p.exchange_address == "amq.failover"
    assert p.randomize is False
    assert p.warn_after_attempts == 10


def test_policy_is_frozen_and_hashable() -> None:
    p = FailoverPolicy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.retries = 3  # type: ignore[misc]
    assert hash(p) == hash(FailoverPolicy())


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("method", "roundrobin"),
        ("retries", 0),
        ("retries", 1.5),
        ("retries", True),
        ("give_up_after", 0),
        ("give_up_after", -1.0),
        ("fast_delay", 0.0),
        ("fast_period", -0.1),
        ("cyclecount", -1),
        ("startup_cyclecount", -2),
        ("initial_delay", -0.1),
        ("connect_delay", -1),
        ("connect_delay", float("nan")),
        ("max_delay", float("inf")),
        ("jitter", -1e-9),
        ("backoff", 0.5),
        ("backoff", "2"),
        ("timeout", 0),
        ("timeout", -1.0),
        ("exchange_address", ""),
        ("randomize", 1),
        ("warn_after_attempts", "10"),
    ],
)
def test_invalid_field_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ConfigurationError) as info:
        FailoverPolicy(**{field: value})  # type: ignore[arg-type]
    assert info.value.option == field
    assert isinstance(info.value, ValueError)


# --- Options -------------------------------------------------------------------------------------


def test_haclient_option_names() -> None:
    p = FailoverPolicy.from_options(
        {
            "failover.method": "exchange",
            "failover.retries": "2",
            "failover.cyclecount": "3",
            "failover.connectdelay": "250",
            "failover.backoff": "1.5",
            "failover.maxdelay": "4000",
            "failover.jitter": "100",
            "failover.timeout": "5000",
            "failover.exchange.address": "membership",
            "failover.initialdelay": "20",
            "failover.startup.cyclecount": "1",
            "failover.giveupafter": "30000",
            "failover.fastdelay": "10",
            "failover.fastperiod": "500",
        }
    )
    assert p == FailoverPolicy(
        method=FailoverMethod.EXCHANGE,
        retries=2,
        cyclecount=3,
        connect_delay=0.25,
        backoff=1.5,
        max_delay=4.0,
        jitter=0.1,
        timeout=5.0,
        exchange_address="membership",
        initial_delay=0.02,
        startup_cyclecount=1,
        give_up_after=30.0,
        fast_delay=0.01,
        fast_period=0.5,
    )


@pytest.mark.parametrize(
    ("qpid", "haclient", "raw"),
    [
        ("failover.maxReconnectAttempts", "failover.cyclecount", "20"),
        ("failover.maxReconnectAttempts", "failover.cyclecount", "-1"),
        ("failover.maxReconnectAttempts", "failover.cyclecount", "0"),
        ("failover.startupMaxReconnectAttempts", "failover.startup.cyclecount", "3"),
        ("failover.initialReconnectDelay", "failover.initialdelay", "15"),
        ("failover.reconnectDelay", "failover.connectdelay", "10"),
        ("failover.maxReconnectDelay", "failover.maxdelay", "20000"),
        ("failover.reconnectBackOffMultiplier", "failover.backoff", "2.5"),
    ],
)
def test_qpid_jms_names_are_equivalent(qpid: str, haclient: str, raw: str) -> None:
    from_qpid = FailoverPolicy.from_options({qpid: raw})
    assert from_qpid == FailoverPolicy.from_options({haclient: raw})
    assert from_qpid != FailoverPolicy()  # the option took effect
    # Both names at once: fine when they agree ...
    assert FailoverPolicy.from_options({qpid: raw, haclient: raw}) == from_qpid


@pytest.mark.parametrize(
    ("qpid", "haclient"),
    [
        ("failover.maxReconnectAttempts", "failover.cyclecount"),
        ("failover.reconnectDelay", "failover.connectdelay"),
        ("failover.maxReconnectDelay", "failover.maxdelay"),
        ("failover.reconnectBackOffMultiplier", "failover.backoff"),
        ("failover.initialReconnectDelay", "failover.initialdelay"),
        ("failover.startupMaxReconnectAttempts", "failover.startup.cyclecount"),
    ],
)
def test_conflicting_names_for_one_field_raise(qpid: str, haclient: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        FailoverPolicy.from_options({qpid: "2", haclient: "3"})
    assert info.value.option == haclient
    assert qpid in str(info.value)


def test_minus_one_means_unlimited_or_same() -> None:
    p = FailoverPolicy.from_options(
        {"failover.maxReconnectAttempts": "-1", "failover.startupMaxReconnectAttempts": "-1"}
    )
    assert p.cyclecount is None
    assert p.startup_cyclecount is None
    assert p.give_up_after is None  # an explicit -1 retries forever, as in Qpid JMS ...
    budget = {"failover.cyclecount": "-1", "failover.giveupafter": "60000"}
    assert FailoverPolicy.from_options(budget).give_up_after == 60.0  # ... unless told
    assert FailoverPolicy.from_options({"failover.giveupafter": "-1"}).give_up_after is None
    assert FailoverPolicy.from_options({"failover.cyclecount": "5"}).give_up_after == 120.0


@pytest.mark.parametrize(
    "option",
    [
        "failover.initialdelay",
        "failover.initialReconnectDelay",
        "failover.connectdelay",
        "failover.reconnectDelay",
        "failover.maxdelay",
        "failover.maxReconnectDelay",
        "failover.backoff",
        "failover.reconnectBackOffMultiplier",
        "failover.useReconnectBackOff",
    ],
)
def test_F5_a_url_with_its_own_delays_gets_exactly_them(option: str) -> None:
    raw = "true" if option == "failover.useReconnectBackOff" else "3"
    p = FailoverPolicy.from_options({option: raw})
    assert (p.fast_period, p.jitter) == (0.0, 0.0)  # no fast phase, no jitter
    asked = FailoverPolicy.from_options(
        {option: raw, "failover.fastperiod": "1000", "failover.jitter": "5"}
    )
    assert (asked.fast_period, asked.jitter) == (1.0, 0.005)
    # The other options keep haclient's schedule.
    for other in ("failover.fastdelay", "failover.giveupafter", "failover.cyclecount"):
        kept = FailoverPolicy.from_options({other: "7"})
        assert (kept.fast_period, kept.jitter) == (3.0, 0.025)


def test_use_reconnect_backoff() -> None:
    on = FailoverPolicy.from_options({"failover.useReconnectBackOff": "true"})
    assert on.backoff == 2.0  # Qpid JMS's default multiplier
    given_multiplier = {"failover.useReconnectBackOff": "TRUE", "failover.backoff": "3"}
    assert FailoverPolicy.from_options(given_multiplier).backoff == 3.0
    off = FailoverPolicy.from_options({"failover.useReconnectBackOff": "false"})
    assert off.backoff == 1.0
    agree = {"failover.useReconnectBackOff": "false", "failover.reconnectBackOffMultiplier": "1"}
    assert FailoverPolicy.from_options(agree).backoff == 1.0
    with pytest.raises(ConfigurationError) as info:
        FailoverPolicy.from_options(
            {"failover.useReconnectBackOff": "false", "failover.reconnectBackOffMultiplier": "2"}
        )
    assert info.value.option == "failover.useReconnectBackOff"


def test_randomize_and_warn_after() -> None:
    p = FailoverPolicy.from_options(
        {"failover.randomize": "true", "failover.warnAfterReconnectAttempts": "0"}
    )
    assert p.randomize is True
    assert p.warn_after_attempts == 0


@pytest.mark.parametrize(
    ("option", "raw"),
    [
        ("failover.method", "failover_exchange"),
        ("failover.method", ""),
        ("failover.retries", "0"),
        ("failover.giveupafter", "0"),
        ("failover.giveupafter", "-2"),
        ("failover.fastdelay", "0"),
        ("failover.fastperiod", "-1"),
        ("failover.retries", "two"),
        ("failover.retries", "1_0"),
        ("failover.retries", " 3"),
        ("failover.retries", "+3"),
        ("failover.cyclecount", "-2"),
        ("failover.cyclecount", "1.5"),
        ("failover.connectdelay", "-5"),
        ("failover.connectdelay", "1e3"),
        ("failover.connectdelay", "nan"),
        ("failover.maxdelay", "inf"),
        ("failover.jitter", "-1"),
        ("failover.backoff", "0.5"),
        ("failover.backoff", "x"),
        ("failover.timeout", "0"),
        ("failover.timeout", "-100"),
        ("failover.exchange.address", ""),
        ("failover.randomize", "yes"),
        ("failover.useReconnectBackOff", "1"),
        ("failover.warnAfterReconnectAttempts", "ten"),
        ("failover.retrys", "2"),
        ("failover.Retries", "2"),
        ("failover.nested.amqp.idleTimeout", "5"),  # the URL layer handles nested options
    ],
)
def test_invalid_option_names_the_option(option: str, raw: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        FailoverPolicy.from_options({option: raw})
    assert info.value.option == option
    assert option in str(info.value)


def test_unknown_option_suggests_the_nearest_name() -> None:
    with pytest.raises(ConfigurationError, match=r"did you mean failover\.retries\?"):
        FailoverPolicy.from_options({"failover.retrys": "2"})


def test_to_options_prints_only_what_differs() -> None:
    assert FailoverPolicy().to_options() == {"failover.method": "roundrobin"}
    p = FailoverPolicy(cyclecount=5, give_up_after=None, fast_delay=0.01, timeout=1.5)
    assert p.to_options() == {
        "failover.method": "roundrobin",
        "failover.cyclecount": "5",
        "failover.giveupafter": "-1",
        "failover.fastdelay": "10",
        "failover.timeout": "1500",
    }
    # Own delays: the fast phase and the jitter print too, or they would read back as off.
    assert FailoverPolicy(connect_delay=0.25).to_options() == {
        "failover.method": "roundrobin",
        "failover.fastperiod": "3000",
        "failover.connectdelay": "250",
        "failover.jitter": "25",
    }


ms = st.integers(min_value=0, max_value=10**7)
policies = st.builds(
    FailoverPolicy,
    method=st.sampled_from(FailoverMethod),
    retries=st.none() | st.integers(1, 100),
    cyclecount=st.none() | st.integers(0, 1000),
    startup_cyclecount=st.none() | st.integers(0, 1000),
    give_up_after=st.none() | st.integers(1, 10**7).map(lambda v: v / 1000),
    initial_delay=ms.map(lambda v: v / 1000),
    fast_delay=st.integers(1, 10**5).map(lambda v: v / 1000),
    fast_period=ms.map(lambda v: v / 1000),
    connect_delay=ms.map(lambda v: v / 1000),
    backoff=st.integers(10, 100).map(lambda v: v / 10),
    max_delay=ms.map(lambda v: v / 1000),
    jitter=ms.map(lambda v: v / 1000),
    timeout=st.none() | st.integers(1, 10**7).map(lambda v: v / 1000),
    exchange_address=st.text(min_size=1, max_size=20),
    randomize=st.booleans(),
    warn_after_attempts=st.integers(-5, 100),
)


@given(policies)
def test_options_round_trip(p: FailoverPolicy) -> None:
    assert (
        FailoverPolicy.from_options(p.to_options(), default_method=FailoverMethod.NOFAILOVER) == p
    )


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False).filter(lambda v: v > 0))
def test_odd_durations_print_without_exponent(seconds: float) -> None:
    text = FailoverPolicy(initial_delay=seconds).to_options()["failover.initialdelay"]
    assert "e" not in text.lower()
    again = FailoverPolicy.from_options({"failover.initialdelay": text}).initial_delay
    assert again == pytest.approx(seconds, rel=1e-12)


# --- Plans (F5) ----------------------------------------------------------------------------------


def test_F5_the_default_schedule_from_a_seeded_policy() -> None:
    attempts = list(
        itertools.islice(
            FailoverPolicy().attempts([A, B], start_index=0, rng=random.Random(7)), 250
        )
    )
    draws = random.Random(7)  # the same jitter draws, in order
    # The fast phase: a pass over the list (B, then A at once), then every 25 ms + jitter
    # another, 120 of them (3 s of waiting) ...
    fast = [0.0, 0.0]
    for _ in range(120):
        fast += [0.025 + 0.025 * draws.random(), 0.0]
    # ... then each attempt waits, backing off from 100 ms to the 5 s cap.
    bases = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0)
    backoff = [base + 0.025 * draws.random() for base in bases]
    assert [a.delay for a in attempts] == [*fast, *backoff]
    assert [a.broker for a in attempts[:4]] == [B, A, B, A]
    assert all(0.025 <= d <= 0.05 for d in fast[2::2])
    assert sum(FailoverPolicy().base_delay(k) for k in range(121)) == pytest.approx(3.0)


def test_F5_the_fast_phase_is_fast_period_worth_of_fast_delay() -> None:
    p = FailoverPolicy(fast_delay=0.03, fast_period=0.1, connect_delay=0.2, jitter=0.0)
    assert p.fast_passes == 3
    assert [p.base_delay(k) for k in range(7)] == [0.0, 0.03, 0.03, 0.03, 0.2, 0.4, 0.8]
    # Two brokers: the second of each fast pass goes at once; back-off is per attempt.
    two = [p.base_delay(k, brokers=2) for k in range(10)]
    assert two == [0.0, 0.0, 0.03, 0.0, 0.03, 0.0, 0.03, 0.0, 0.2, 0.4]
    # A retry of the same broker waits; the next broker goes at once.
    retried = dataclasses.replace(p, retries=2)
    assert [retried.base_delay(k, brokers=2) for k in range(5)] == [0.0, 0.03, 0.0, 0.03, 0.03]
    assert FailoverPolicy(fast_period=0.0).fast_passes == 0
    with pytest.raises(ConfigurationError):
        p.base_delay(1, brokers=0)


def test_F5_jitter_never_delays_an_immediate_first_attempt() -> None:
    for seed in range(20):
        first = next(FailoverPolicy(jitter=1.0).attempts([A], rng=random.Random(seed)))
        assert first.delay == 0.0
    later = next(FailoverPolicy(jitter=1.0, initial_delay=0.5).attempts([A], rng=random.Random(0)))
    assert 0.5 < later.delay <= 1.5


def test_F5_a_plain_url_follows_the_default_schedule_until_the_budget() -> None:
    p = FailoverPolicy(method=FailoverMethod.SINGLEBROKER)
    assert p.total_attempts(1) is None  # only the time budget ends it
    got = list(itertools.islice(p.attempts([A], start_index=0, rng=random.Random(7)), 130))
    default = FailoverPolicy().attempts([A], start_index=0, rng=random.Random(7))
    assert [a.delay for a in got] == [a.delay for a in itertools.islice(default, 130)]
    assert p.total_attempts(1, startup=True) == 1  # a dead URL fails fast at connect
    # Qpid JMS's pass count counts attempts here, one broker per pass.
    assert (
        FailoverPolicy.from_options(
            {"failover.maxReconnectAttempts": "5"}, default_method=FailoverMethod.SINGLEBROKER
        ).total_attempts(1)
        == 5
    )


def test_F5_qpid_jms_delays_are_exactly_what_the_url_says() -> None:
    p = parse_url(
        "failover:(amqp://a,amqp://b,amqp://c)?failover.initialReconnectDelay=5"
        "&failover.reconnectDelay=10&failover.maxReconnectDelay=100"
        "&failover.useReconnectBackOff=true&failover.maxReconnectAttempts=2",
        options=CLIENT_OPTIONS,
    ).policy
    assert [d for _, d in plan(p, [A, B, C], start_index=0)] == [0.005, 0.01, 0.02, 0.04, 0.08, 0.1]
    assert [b for b, _ in plan(p, [A, B, C], start_index=0)] == [B, C, A] * 2


def test_singlebroker_retries_one_broker() -> None:
    p = plain_policy(method=FailoverMethod.SINGLEBROKER, retries=3, connect_delay=1.0)
    assert plan(p, [A]) == [(A, 0.0), (A, 1.0), (A, 1.0)]
    assert plan(p, [A], start_index=0) == [(A, 0.0), (A, 1.0), (A, 1.0)]


def test_F5_singlebroker_retries_one_broker_retries_times() -> None:
    p = FailoverPolicy(method=FailoverMethod.SINGLEBROKER, retries=2, cyclecount=3)
    assert [b for b, _ in plan(p, [A])] == [A] * 2  # cyclecount is for walking a list
    assert p.total_attempts(1) == 2


def test_roundrobin_starts_after_the_lost_broker() -> None:
    p = plain_policy(retries=2, cyclecount=2, connect_delay=0.5)
    got = plan(p, [A, B, C], start_index=0)
    assert [b for b, _ in got] == [B, B, C, C, A, A] * 2
    assert [d for _, d in got] == [0.0] + [0.5] * 11
    assert [b for b, _ in plan(p, [A, B, C], start_index=2)][:6] == [A, A, B, B, C, C]


def test_roundrobin_first_connect_starts_at_the_first_broker() -> None:
    p = FailoverPolicy(cyclecount=2)
    assert [b for b, _ in plan(p, [A, B, C])] == [A, B, C, A, B, C]


def test_attempt_values() -> None:
    p = plain_policy(cyclecount=1, connect_delay=0.1)
    got = list(p.attempts([A, B], start_index=1, rng=random.Random(1)))
    assert got == [Attempt(0, A, 0.0, 1), Attempt(1, B, 0.1, 2)]


def test_startup_cyclecount_applies_to_the_first_connect_only() -> None:
    p = FailoverPolicy(cyclecount=3, startup_cyclecount=1)
    assert len(plan(p, [A, B], startup=True)) == 2
    assert len(plan(p, [A, B])) == 6
    assert p.total_attempts(2, startup=True) == 2
    assert FailoverPolicy().total_attempts(2, startup=True) == 2  # one pass by default
    same = FailoverPolicy(cyclecount=3, startup_cyclecount=None)
    assert len(plan(same, [A, B], startup=True)) == 6


def test_unlimited_cyclecount_never_runs_out() -> None:
    p = FailoverPolicy(cyclecount=None, connect_delay=0.0)
    first = list(itertools.islice(p.attempts([A, B], start_index=0), 1001))
    assert len(first) == 1001
    assert first[-1].broker == B
    assert p.total_attempts(2) is None


@pytest.mark.parametrize(
    "policy",
    [
        FailoverPolicy(method=FailoverMethod.NOFAILOVER),
        FailoverPolicy(method=FailoverMethod.NOFAILOVER, cyclecount=None),
        FailoverPolicy(cyclecount=0),
        FailoverPolicy(startup_cyclecount=0),
    ],
)
def test_plans_that_report_at_once(policy: FailoverPolicy) -> None:
    startup = policy.startup_cyclecount == 0
    assert plan(policy, [A, B], start_index=0, startup=startup) == []
    assert policy.total_attempts(2, startup=startup) == 0


def test_empty_list_gives_up_at_once() -> None:
    assert plan(FailoverPolicy(), []) == []


def test_exchange_walks_the_list_it_is_given() -> None:
    p = FailoverPolicy(method=FailoverMethod.EXCHANGE, cyclecount=1)
    seed = [A, B]
    assert [b for b, _ in plan(p, seed, start_index=0)] == [B, A]
    learned = ["x", "y", A]  # the brokers advertised a new list; A is still the one lost
    assert [b for b, _ in plan(p, learned, start_index=2)] == ["x", "y", A]


def test_start_index_out_of_range() -> None:
    with pytest.raises(ConfigurationError) as info:
        FailoverPolicy().attempts([A], start_index=1)
    assert info.value.option == "start_index"


def test_exponential_backoff_with_cap() -> None:
    p = plain_policy(
        cyclecount=1, retries=7, initial_delay=0.05, connect_delay=0.1, backoff=2.0, max_delay=1.0
    )
    delays = [d for _, d in plan(p, [A], start_index=0)]
    assert delays == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_backoff_does_not_overflow() -> None:
    p = FailoverPolicy(connect_delay=1.0, backoff=10.0, max_delay=60.0)
    assert p.base_delay(10**6) == 60.0
    with pytest.raises(ConfigurationError):
        p.base_delay(-1)


def test_jitter_is_deterministic_with_a_seeded_rng() -> None:
    p = FailoverPolicy(cyclecount=3, connect_delay=0.1, jitter=0.05)
    one = [a.delay for a in p.attempts([A, B], rng=random.Random(42))]
    two = [a.delay for a in p.attempts([A, B], rng=random.Random(42))]
    assert one == two
    assert len(set(one)) > 1


def test_randomize_shuffles_but_the_lost_broker_goes_last() -> None:
    brokers = [str(i) for i in range(8)]
    p = FailoverPolicy(randomize=True, cyclecount=1)
    orders = {
        tuple(a.broker for a in p.attempts(brokers, start_index=3, rng=random.Random(seed)))
        for seed in range(20)
    }
    assert len(orders) > 1
    for order in orders:
        assert sorted(order) == sorted(brokers)
        assert order[-1] == "3"


def test_planning_does_not_touch_the_global_random() -> None:
    random.seed(7)
    expected = random.random()
    random.seed(7)
    p = FailoverPolicy(jitter=1.0, randomize=True, cyclecount=3)
    list(p.attempts([A, B, C], rng=random.Random(1)))
    assert random.random() == expected


@given(
    connect=st.integers(0, 10**5).map(lambda v: v / 1000),
    backoff=st.floats(1.0, 10.0),
    cap=st.integers(0, 10**5).map(lambda v: v / 1000),
    k=st.integers(1, 2000),
)
def test_backoff_is_capped_and_never_shrinks(
    connect: float, backoff: float, cap: float, k: int
) -> None:
    p = FailoverPolicy(connect_delay=connect, backoff=backoff, max_delay=cap, fast_period=0.0)
    assert 0.0 <= p.base_delay(k) <= cap
    assert p.base_delay(k) <= p.base_delay(k + 1) + 1e-12
    assert p.base_delay(1) == min(connect, cap)


@given(
    policy=policies.filter(lambda p: p.method is not FailoverMethod.NOFAILOVER),
    count=st.integers(1, 5),
    seed=st.integers(0, 2**32),
)
def test_every_delay_is_base_plus_bounded_jitter(
    policy: FailoverPolicy, count: int, seed: int
) -> None:
    brokers = list(range(count))
    attempts = list(itertools.islice(policy.attempts(brokers, rng=random.Random(seed)), 50))
    expected = policy.total_attempts(count)
    assert len(attempts) == (50 if expected is None else min(50, expected))
    for k, attempt in enumerate(attempts):
        assert attempt.number == k + 1
        assert attempt.broker == brokers[attempt.broker_index]
        visited = len(policy.broker_order(count))
        extra = attempt.delay - policy.base_delay(k, brokers=visited)
        assert -1e-9 <= extra <= policy.jitter + 1e-9


@given(
    retries=st.integers(1, 4),
    cycles=st.integers(0, 4),
    count=st.integers(1, 6),
    lost=st.integers(0, 5),
)
def test_roundrobin_shape(retries: int, cycles: int, count: int, lost: int) -> None:
    lost %= count
    p = FailoverPolicy(retries=retries, cyclecount=cycles)
    indices = [a.broker_index for a in p.attempts(list(range(count)), start_index=lost)]
    one_pass = [(lost + 1 + i) % count for i in range(count) for _ in range(retries)]
    assert indices == one_pass * cycles
    assert p.total_attempts(count) == len(indices)
