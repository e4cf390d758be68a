"""Failover policies: validation, option names (haclient's and Qpid JMS's), plans (F5)."""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from failover.policy import Attempt, FailoverMethod, FailoverPolicy
from haclient.errors import ConfigurationError

A, B, C = "a", "b", "c"


def plan(policy: FailoverPolicy, brokers: list[str], **kwargs: object) -> list[tuple[str, float]]:
    """The plan as (broker, delay) pairs, with a fixed seed."""
    rng = random.Random(0)
    return [(a.broker, a.delay) for a in policy.attempts(brokers, rng=rng, **kwargs)]  # type: ignore[arg-type]


# --- Values --------------------------------------------------------------------------------------


def test_defaults() -> None:
    p = FailoverPolicy()
    assert p.method is FailoverMethod.ROUNDROBIN
    assert (p.retries, p.cyclecount, p.startup_cyclecount) == (1, 10, None)
    assert (p.initial_delay, p.connect_delay, p.backoff, p.max_delay, p.jitter) == (
        0.0,
        1.0,
        1.0,
        30.0,
        0.0,
    )
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
    p = FailoverPolicy(cyclecount=None, connect_delay=0.25, backoff=2.0, timeout=1.5)
    assert p.to_options() == {
        "failover.method": "roundrobin",
        "failover.cyclecount": "-1",
        "failover.connectdelay": "250",
        "failover.backoff": "2",
        "failover.timeout": "1500",
    }


ms = st.integers(min_value=0, max_value=10**7)
policies = st.builds(
    FailoverPolicy,
    method=st.sampled_from(FailoverMethod),
    retries=st.integers(1, 100),
    cyclecount=st.none() | st.integers(0, 1000),
    startup_cyclecount=st.none() | st.integers(0, 1000),
    initial_delay=ms.map(lambda v: v / 1000),
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
    text = FailoverPolicy(jitter=seconds).to_options()["failover.jitter"]
    assert "e" not in text.lower()
    again = FailoverPolicy.from_options({"failover.jitter": text}).jitter
    assert again == pytest.approx(seconds, rel=1e-12)


# --- Plans (F5) ----------------------------------------------------------------------------------


def test_singlebroker_retries_one_broker() -> None:
    p = FailoverPolicy(method=FailoverMethod.SINGLEBROKER, retries=3, cyclecount=1)
    assert plan(p, [A]) == [(A, 0.0), (A, 1.0), (A, 1.0)]
    assert plan(p, [A], start_index=0) == [(A, 0.0), (A, 1.0), (A, 1.0)]


def test_F5_singlebroker_retries_one_broker_retries_times() -> None:
    p = FailoverPolicy(method=FailoverMethod.SINGLEBROKER, retries=2, cyclecount=3)
    assert [b for b, _ in plan(p, [A])] == [A] * 2  # cyclecount is for walking a list
    assert p.total_attempts(1) == 2


def test_roundrobin_starts_after_the_lost_broker() -> None:
    p = FailoverPolicy(retries=2, cyclecount=2, connect_delay=0.5)
    got = plan(p, [A, B, C], start_index=0)
    assert [b for b, _ in got] == [B, B, C, C, A, A] * 2
    assert [d for _, d in got] == [0.0] + [0.5] * 11
    assert [b for b, _ in plan(p, [A, B, C], start_index=2)][:6] == [A, A, B, B, C, C]


def test_roundrobin_first_connect_starts_at_the_first_broker() -> None:
    p = FailoverPolicy(cyclecount=2)
    assert [b for b, _ in plan(p, [A, B, C])] == [A, B, C, A, B, C]


def test_attempt_values() -> None:
    p = FailoverPolicy(cyclecount=1, connect_delay=0.1)
    got = list(p.attempts([A, B], start_index=1, rng=random.Random(1)))
    assert got == [Attempt(0, A, 0.0, 1), Attempt(1, B, 0.1, 2)]


def test_startup_cyclecount_applies_to_the_first_connect_only() -> None:
    p = FailoverPolicy(cyclecount=3, startup_cyclecount=1)
    assert len(plan(p, [A, B], startup=True)) == 2
    assert len(plan(p, [A, B])) == 6
    assert p.total_attempts(2, startup=True) == 2
    same = FailoverPolicy(cyclecount=3)
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
    p = FailoverPolicy(
        cyclecount=1, retries=7, initial_delay=0.05, connect_delay=0.1, backoff=2.0, max_delay=1.0
    )
    assert [d for _, d in plan(p, [A], start_index=0)] == [
        0.05,
        0.1,
        0.2,
        0.4,
        0.8,
        1.0,
        1.0,
    ]


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
    p = FailoverPolicy(jitter=1.0, randomize=True)
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
    p = FailoverPolicy(connect_delay=connect, backoff=backoff, max_delay=cap)
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
        extra = attempt.delay - policy.base_delay(k)
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
