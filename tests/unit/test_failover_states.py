"""The state machine of the logical connection and the pure decisions on it (failover.states),
and the restore tiers (failover.protocols): no event loop, no manager, one case at a time.
"""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st
from unitkit import A, B, C, E, S

from failover import states
from failover.policy import FailoverMethod, FailoverPolicy
from failover.protocols import RestoreOrder, restore_tiers
from failover.states import (
    RestoreFailure,
    budget_delay,
    loss_event,
    next_state,
    plan,
    reports_events,
    restore_failure,
    state_after,
)
from failover.url import BrokerURL
from haclient.errors import (
    AttachTimeoutError,
    AuthenticationError,
    ConnectionLostError,
    IllegalStateError,
    OpenTimeoutError,
    ResourceLockedError,
)

# --- The state machine -------------------------------------------------------------------------

EXPECTED = {
    (S.CONNECTING, E.OPENED): S.CONNECTED,
    (S.CONNECTING, E.GAVE_UP): S.FAILED,
    (S.CONNECTING, E.CLOSE): S.CLOSED,
    (S.CONNECTED, E.LOST): S.FAILING_OVER,
    (S.CONNECTED, E.GAVE_UP): S.FAILED,
    (S.CONNECTED, E.CLOSE): S.CLOSED,
    (S.FAILING_OVER, E.OPENED): S.RESTORING,
    (S.FAILING_OVER, E.GAVE_UP): S.FAILED,
    (S.FAILING_OVER, E.CLOSE): S.CLOSED,
    (S.RESTORING, E.RESTORED): S.CONNECTED,
    (S.RESTORING, E.LOST): S.FAILING_OVER,
    (S.RESTORING, E.CLOSE): S.CLOSED,
    (S.FAILED, E.CLOSE): S.CLOSED,
    (S.CLOSED, E.CLOSE): S.CLOSED,
}


@pytest.mark.parametrize(("state", "event"), list(itertools.product(S, E)))
def test_every_state_event_pair(state: S, event: E) -> None:
    if (state, event) in EXPECTED:
        assert next_state(state, event) is EXPECTED[(state, event)]
    else:
        with pytest.raises(IllegalStateError, match=f"{event.name} is not allowed in state"):
            next_state(state, event)


def test_the_table_is_exactly_the_expected_one() -> None:
    assert dict(states.TRANSITIONS) == EXPECTED
    with pytest.raises(TypeError):
        states.TRANSITIONS[(S.CLOSED, E.OPENED)] = S.CONNECTED  # type: ignore[index]


@given(st.lists(st.sampled_from(list(E)), max_size=30))
def test_walks_never_leave_closed_and_leave_failed_only_to_closed(
    events: list[E],
) -> None:
    state = S.CONNECTING
    for event in events:
        before = state
        if (state, event) not in states.TRANSITIONS:
            with pytest.raises(IllegalStateError):
                next_state(state, event)
            continue
        state = next_state(state, event)
        if before is S.CLOSED:
            assert state is S.CLOSED
        if before is S.FAILED:
            assert state is S.CLOSED
        if event is E.LOST:  # only a live connection can be lost
            assert before in states.LIVE
        if event is E.OPENED:  # a connection opens only where none is live
            assert before not in states.LIVE
        if event is E.RESTORED:  # the gate opens after a restore, and only then
            assert (before, state) == (S.RESTORING, S.CONNECTED)


@pytest.mark.parametrize(("state", "event"), list(itertools.product(S, E)))
def test_closed_absorbs_every_event_and_the_rest_follow_the_table(state: S, event: E) -> None:
    if state is S.CLOSED:
        assert state_after(state, event) is S.CLOSED
    elif (state, event) in EXPECTED:
        assert state_after(state, event) is EXPECTED[(state, event)]
    else:
        with pytest.raises(IllegalStateError):
            state_after(state, event)


def test_events_are_reported_in_every_state_but_closed() -> None:
    assert [state for state in S if not reports_events(state)] == [S.CLOSED]


def test_retriable_failures() -> None:
    assert states.is_retriable_failure(OSError("refused"))
    assert states.is_retriable_failure(ConnectionLostError())
    assert not states.is_retriable_failure(AuthenticationError("no"))
    assert not states.is_retriable_failure(ResourceLockedError("taken"))


def test_the_gate_and_live_sets() -> None:
    assert frozenset({S.CONNECTING, S.FAILING_OVER, S.RESTORING}) == states.IN_TRANSIT
    assert frozenset({S.CONNECTED, S.RESTORING}) == states.LIVE


# --- Giving up -----------------------------------------------------------------------------------


@pytest.mark.parametrize("method", list(FailoverMethod))
@pytest.mark.parametrize("retriable", [True, False])
def test_a_loss_while_restoring_is_always_lost(method: FailoverMethod, retriable: bool) -> None:
    assert loss_event(S.RESTORING, method, retriable) is E.LOST


@pytest.mark.parametrize("method", list(FailoverMethod))
@pytest.mark.parametrize("retriable", [True, False])
def test_a_loss_while_connected_gives_up_without_failover_or_hope(
    method: FailoverMethod, retriable: bool
) -> None:
    gives_up = method is FailoverMethod.NOFAILOVER or not retriable
    assert loss_event(S.CONNECTED, method, retriable) is (E.GAVE_UP if gives_up else E.LOST)


# --- Refusals of trust (F15) --------------------------------------------------------------------


def test_F15_a_refusal_is_an_authentication_error_no_reconnect_fixes() -> None:
    assert states.is_refusal(AuthenticationError("unknown CA"), retriable=False)
    assert not states.is_refusal(AuthenticationError("unknown CA"), retriable=True)
    assert not states.is_refusal(ResourceLockedError("taken"), retriable=False)
    assert not states.is_refusal(OSError("refused"), retriable=True)


def test_F15_every_broker_of_the_pass_must_have_refused_at_its_last_attempt() -> None:
    refusals = {str(A): AuthenticationError("a"), str(C): AuthenticationError("c")}
    assert not states.refused_everywhere(refusals, [A, B, C])
    assert states.refused_everywhere(refusals, [A, C])
    assert states.refused_everywhere({**refusals, str(B): AuthenticationError("b")}, [A, B, C])


def test_F15_the_error_names_each_broker_in_pass_order_and_is_raised_from_the_last() -> None:
    last = AuthenticationError("refused: no", condition="amqp:unauthorized-access")
    refusals = {str(B): last, str(A): AuthenticationError(f"{A} refused the login of 'u'")}
    error = states.refusal_error(refusals, [A, B], last)
    assert str(error) == (
        "every broker refused the connection: amqp://a:5672 refused the login of 'u'; "
        "amqp://b:5672: refused: no"  # a reason that names its broker is not told it twice
    )
    assert error.__cause__ is last
    assert (error.condition, error.retriable) == ("amqp:unauthorized-access", False)


def test_F15_with_one_broker_the_error_is_its_own_refusal() -> None:
    last = AuthenticationError("refused")
    assert states.refusal_error({str(A): last}, [A], last) is last


# --- A failed restore ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "lost", "connection_open", "meaning"),
    [
        (ConnectionLostError("gone"), False, True, RestoreFailure.LOSS),
        (ConnectionLostError("gone"), True, False, RestoreFailure.LOSS),
        (ResourceLockedError("taken"), True, True, RestoreFailure.KNOWN_LOSS),
        (ResourceLockedError("taken"), False, False, RestoreFailure.ENDED),
        (AttachTimeoutError("refused in silence"), False, True, RestoreFailure.NOT_RESTORED),
        (OpenTimeoutError("no answer"), False, True, RestoreFailure.LOSS),
        (ResourceLockedError("taken"), False, True, RestoreFailure.NOT_RESTORED),
        (ValueError("a bug"), False, True, RestoreFailure.NOT_RESTORED),
    ],
)
def test_what_a_failed_restore_means(
    error: Exception, lost: bool, connection_open: bool, meaning: RestoreFailure
) -> None:
    retriable = states.is_retriable_failure(error)
    assert (
        restore_failure(error, lost=lost, connection_open=connection_open, retriable=retriable)
        is meaning
    )


def test_a_timeout_no_reconnect_can_fix_is_the_resources_own() -> None:
    error = TimeoutError("the resource's own")
    assert restore_failure(error, lost=False, connection_open=True, retriable=False) is (
        RestoreFailure.NOT_RESTORED
    )


# --- The plan ------------------------------------------------------------------------------------


def _hosts(policy: FailoverPolicy, lost: BrokerURL | None, *, startup: bool) -> list[str]:
    attempts = plan(policy, [A, B, C], lost, startup=startup, rng=random.Random(1))
    return [attempt.broker.host for attempt in attempts]


def test_the_plan_of_a_failover_starts_after_the_lost_broker() -> None:
    policy = FailoverPolicy(cyclecount=1)
    assert _hosts(policy, B, startup=False) == ["c", "a", "b"]
    assert _hosts(policy, BrokerURL("amqp", "B"), startup=False) == ["c", "a", "b"]  # host case
    assert _hosts(policy, BrokerURL("amqp", "x"), startup=False) == ["a", "b", "c"]  # not listed
    assert _hosts(policy, BrokerURL("amqps", "b"), startup=False) == ["a", "b", "c"]  # scheme


def test_the_plan_follows_the_policy_delays() -> None:
    policy = FailoverPolicy(
        cyclecount=1, initial_delay=0.5, connect_delay=2.0, backoff=1.0, fast_period=0.0, jitter=0.0
    )
    attempts = plan(policy, [A, B, C], A, startup=False, rng=random.Random(1))
    assert [a.delay for a in attempts] == [0.5, 2.0, 2.0]


@pytest.mark.parametrize(
    "policy",
    [
        FailoverPolicy(method=FailoverMethod.NOFAILOVER),
        FailoverPolicy(cyclecount=0, startup_cyclecount=None),
    ],
    ids=["nofailover", "cyclecount=0"],
)
def test_no_reconnect_but_the_first_connect_is_one_try_at_once(policy: FailoverPolicy) -> None:
    assert _hosts(policy, A, startup=False) == []
    first = list(plan(policy, [A, B, C], None, startup=True, rng=random.Random(1)))
    assert [(a.broker, a.delay, a.number) for a in first] == [(A, 0.0, 1)]


def test_the_first_connect_has_its_own_budget() -> None:
    policy = FailoverPolicy(cyclecount=3, startup_cyclecount=1)
    assert _hosts(policy, None, startup=True) == ["a", "b", "c"]
    assert len(_hosts(policy, A, startup=False)) == 9


def test_budget_delay_cuts_the_last_delay_to_the_end_of_the_budget() -> None:
    policy = FailoverPolicy(give_up_after=10.0)
    assert budget_delay(policy, 0.0, 0.0) == 0.0
    assert budget_delay(policy, 5.0, 4.0) == 5.0
    assert budget_delay(policy, 5.0, 8.0) == 2.0  # due at 13 s: made at 10 s, the last one
    assert budget_delay(policy, 0.0, 10.0) is None
    assert budget_delay(policy, 5.0, 12.5) is None
    forever = FailoverPolicy(give_up_after=None)
    assert budget_delay(forever, 5.0, 10**9) == 5.0


def test_F5_the_default_plan_ends_at_the_budget() -> None:
    # Attempts that take no time: the plan's start times, as the manager walks it.
    policy = FailoverPolicy(jitter=0.0)
    times, elapsed = [], 0.0
    for attempt in plan(policy, [A, B], A, startup=False, rng=random.Random(1)):
        delay = budget_delay(policy, attempt.delay, elapsed)
        if delay is None:
            break
        elapsed += delay
        times.append(elapsed)
    # 121 passes of two attempts (3 s), back-off to 9.3 s (6), 5 s each (22: up to 119.3 s),
    # then the next one, due at 124.3 s, at the end of the budget instead.
    assert len(times) == 242 + 6 + 22 + 1
    assert times[:5] == [0.0, 0.0, 0.025, 0.025, 0.05]
    assert times[240:249] == pytest.approx([3.0, 3.0, 3.1, 3.3, 3.7, 4.5, 6.1, 9.3, 14.3])
    assert times[-1] == pytest.approx(120.0)


# --- Restore tiers -------------------------------------------------------------------------------


class Res:
    def __init__(self, name: str, order: int) -> None:
        self.name = name
        self.restore_order = order

    async def restore(self, connection: object, epoch: int) -> None:
        return None

    def connection_lost(self, epoch: int, cause: BaseException) -> None:
        return None

    def __repr__(self) -> str:
        return self.name


def test_one_tier_per_restore_order_lowest_first_ties_in_registration_order() -> None:
    consumer, session1 = Res("consumer", RestoreOrder.CONSUMER), Res("s1", RestoreOrder.SESSION)
    temp, producer = Res("temp", RestoreOrder.TEMPORARY_DESTINATION), Res("p", 2)
    session2, custom = Res("s2", RestoreOrder.SESSION), Res("custom", 7)
    tiers = restore_tiers([consumer, session1, custom, temp, producer, session2])
    assert tiers == ((temp,), (session1, session2), (producer,), (consumer,), (custom,))
    assert restore_tiers([]) == ()


@given(st.lists(st.integers(min_value=-3, max_value=5), max_size=20))
def test_tiers_are_a_stable_sort_cut_at_each_new_order(orders: list[int]) -> None:
    resources = [Res(str(i), order) for i, order in enumerate(orders)]
    tiers = restore_tiers(resources)
    flat = [r for tier in tiers for r in tier]
    assert flat == sorted(resources, key=lambda r: r.restore_order)  # sorted() is stable
    assert all(tier and len({r.restore_order for r in tier}) == 1 for tier in tiers)
    firsts = [tier[0].restore_order for tier in tiers]
    assert firsts == sorted(set(orders))
