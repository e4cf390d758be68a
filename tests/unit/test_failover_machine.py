"""The failover machine (failover.machine): events in, actions out, no event loop; and its model
check (tests/unit/machine_model.py), bounded here, in full by `make check-machine`.
"""

from __future__ import annotations

import logging
import os
import random

import pytest
from machine_model import BROKERS, Redirected, explore, scenarios
from unitkit import A, B, C, S

from failover import machine as m
from failover.errors import AuthenticationError, ConnectionLostError, PreferredBrokerAvailable
from failover.listeners import FailoverEvent
from failover.policy import FailoverPolicy
from failover.states import is_retriable_failure

QUICK = {"jitter": 0.0, "give_up_after": None, "fast_period": 0.0}


def machine(seed: int = 1, **policy: object) -> m.FailoverMachine:
    return m.FailoverMachine(
        FailoverPolicy(**{**QUICK, **policy}),  # type: ignore[arg-type]
        BROKERS,
        rng=random.Random(seed),
        retriable=is_retriable_failure,
    )


def kinds(actions: list[m.Action]) -> list[type]:
    return [type(a) for a in actions if not isinstance(a, m.Log)]


def connect_of(actions: list[m.Action]) -> m.Connect:
    (connect,) = [a for a in actions if isinstance(a, m.Connect)]
    return connect


def connected(fm: m.FailoverMachine) -> None:
    fm.handle(m.Start(0.0))
    fm.handle(m.Opened(0.0, A))


def refused(text: str = "refused") -> AuthenticationError:
    error = AuthenticationError(text)
    error.retriable = False
    return error


def test_first_connect_opens_the_gate_without_a_restore() -> None:
    fm = machine()
    assert connect_of(fm.handle(m.Start(0.0))).attempt.broker == A
    actions = fm.handle(m.Opened(0.01, A))
    assert kinds(actions) == [m.Adopt, m.OpenGate, m.Emit]
    assert m.OpenGate(0) in actions
    assert fm.state is S.CONNECTED
    assert fm.attempts == 1


def test_a_loss_closes_the_gate_tells_the_resources_and_walks_from_the_next_broker() -> None:
    fm = machine()
    connected(fm)
    cause = ConnectionLostError("gone")
    actions = fm.handle(m.ConnectionLost(1.0, 0, cause))
    assert kinds(actions) == [m.CloseGate, m.TellResources, m.CloseConnection, m.Emit, m.Connect]
    assert m.TellResources(0, cause) in actions
    assert connect_of(actions).attempt.broker == B
    assert fm.state is S.FAILING_OVER and fm.epoch == 1
    assert kinds(fm.handle(m.Opened(1.1, B))) == [m.Adopt, m.RestoreTier]
    assert fm.handle(m.TierRestored(1.2, 1, 0, False)) == [m.RestoreTier(1, 1)]
    actions = fm.handle(m.TierRestored(1.3, 1, 1, True))
    assert actions[0] == m.OpenGate(1)
    assert (fm.state, fm.failovers, fm.last_downtime) == (S.CONNECTED, 1, pytest.approx(0.3))
    emitted = [a for a in actions if isinstance(a, m.Emit)]
    assert emitted[0].event is FailoverEvent.RESTORED


def test_an_event_that_no_longer_matters_yields_nothing() -> None:
    fm = machine()
    connected(fm)
    fm.handle(m.ConnectionLost(1.0, 0, None))
    assert fm.handle(m.ConnectionLost(1.0, 0, None)) == []  # the same loss, again
    assert fm.handle(m.TierRestored(1.0, 0, 0, True)) == []  # no restore under way
    assert fm.handle(m.SpareReady(1.0, C)) == [m.DropSpare()]  # none asked for


def test_nofailover_gives_up_at_once() -> None:
    fm = m.FailoverMachine(
        FailoverPolicy.from_options({"failover.method": "nofailover"}),
        BROKERS,
        rng=random.Random(1),
        retriable=is_retriable_failure,
    )
    connected(fm)
    actions = fm.handle(m.ConnectionLost(1.0, 0, None))
    assert m.Connect not in kinds(actions)
    (give_up,) = [a for a in actions if isinstance(a, m.GiveUp)]
    assert not give_up.first_connect
    assert fm.state is S.FAILED
    assert fm.handle(m.Start(2.0)) == []
    assert fm.handle(m.CloseRequested(2.0)) == [m.Shutdown()]


def test_every_broker_refusing_gives_up_naming_each() -> None:
    fm = machine(startup_cyclecount=1)
    fm.handle(m.Start(0.0))
    fm.handle(m.AttemptFailed(0.0, A, refused("a said no")))
    actions = fm.handle(m.AttemptFailed(0.0, B, refused("b said no")))
    assert connect_of(actions).attempt.delay == 0.0  # the next broker at once
    actions = fm.handle(m.AttemptFailed(0.0, C, refused("c said no")))
    (give_up,) = [a for a in actions if isinstance(a, m.GiveUp)]
    assert isinstance(give_up.cause, AuthenticationError)
    assert all(f"{b.host} said no" in str(give_up.cause) for b in BROKERS)
    assert give_up.first_connect


def test_a_redirect_is_followed_at_once_up_to_the_limit() -> None:
    fm = m.FailoverMachine(
        FailoverPolicy(**QUICK),  # type: ignore[arg-type]
        BROKERS,
        rng=random.Random(1),
        retriable=is_retriable_failure,
        max_redirects=2,
    )
    fm.handle(m.Start(0.0))
    first = connect_of(fm.handle(m.AttemptFailed(0.0, A, Redirected(C))))
    assert (first.attempt.broker, first.redirected) == (C, True)
    second = connect_of(fm.handle(m.AttemptFailed(0.0, C, Redirected(B))))
    assert (second.attempt.broker, second.redirected) == (B, True)
    actions = fm.handle(m.AttemptFailed(0.0, B, Redirected(A)))
    assert not connect_of(actions).redirected  # the plan's next attempt
    assert any(a.level == logging.WARNING for a in actions if isinstance(a, m.Log))


def test_warn_after_attempts_warns_every_that_many_failures() -> None:
    fm = machine(warn_after_attempts=2, cyclecount=None, startup_cyclecount=None)
    fm.handle(m.Start(0.0))
    levels = []
    for broker in [A, B, C, A]:
        actions = fm.handle(m.AttemptFailed(0.0, broker, OSError("down")))
        levels.append(next(a.level for a in actions if isinstance(a, m.Log)))
    assert levels == [logging.INFO, logging.WARNING, logging.INFO, logging.WARNING]


def test_a_restore_failure_is_the_resources_own_or_a_loss() -> None:
    fm = machine()
    connected(fm)
    fm.handle(m.ConnectionLost(1.0, 0, None))
    fm.handle(m.Opened(1.0, B))
    own = fm.handle(m.RestoreFailed(1.0, 1, "consumer", ValueError("bad"), True))
    assert kinds(own) == [m.Emit] and own[-1].event is FailoverEvent.NOT_RESTORED  # type: ignore[union-attr]
    ended = fm.handle(m.RestoreFailed(1.0, 1, "consumer", ValueError("cut"), False))
    assert kinds(ended)[:3] == [m.CloseGate, m.TellResources, m.CloseConnection]
    assert connect_of(ended).attempt.broker == C  # the next attempt of the same walk
    assert fm.failures[str(B)].__cause__.args == ("cut",)  # type: ignore[union-attr]


def test_the_spare_is_the_first_attempt_of_a_failover() -> None:
    fm = machine(backup=True)
    fm.handle(m.Start(0.0))
    actions = fm.handle(m.Opened(0.0, A))
    assert m.StartSpare(B, 0.0) in actions
    fm.handle(m.SpareReady(0.1, B))
    assert fm.spare == B
    actions = fm.handle(m.ConnectionLost(1.0, 0, None))
    assert actions[-1] == m.UseReady(B)
    assert m.Connect not in kinds(actions)
    fm.handle(m.Opened(1.0, B))
    actions = fm.handle(m.TierRestored(1.0, 1, 0, True))
    assert m.StartSpare(C, 0.0) in actions  # the next broker after B


def test_a_spare_that_fails_is_opened_again_after_a_back_off() -> None:
    fm = machine(backup=True, connect_delay=0.1)
    connected(fm)
    actions = fm.handle(m.SpareFailed(0.1, B, OSError("down")))
    assert m.StartSpare(B, pytest.approx(0.1)) in actions
    actions = fm.handle(m.SpareFailed(0.2, B, OSError("down")))
    assert m.StartSpare(B, pytest.approx(0.2)) in actions


def test_a_probe_that_succeeds_starts_a_return_that_takes_its_connection() -> None:
    fm = machine(priority_backup=True, priority_backup_interval=2.0)
    fm.handle(m.Start(0.0))
    fm.handle(m.AttemptFailed(0.0, A, OSError("down")))
    actions = fm.handle(m.Opened(0.0, B))
    assert m.ScheduleProbe(2.0) in actions
    assert fm.handle(m.TimerFired(2.0)) == [m.ProbePreferred((A,))]
    actions = fm.handle(m.ProbeSucceeded(2.1, A))
    assert actions[0] == m.ReturnTo(A)
    (tell,) = [a for a in actions if isinstance(a, m.TellResources)]
    assert isinstance(tell.cause, PreferredBrokerAvailable)
    assert actions[-1] == m.UseReady(A)
    fm.handle(m.Opened(2.1, A))
    fm.handle(m.TierRestored(2.2, 1, 0, True))
    assert (fm.returns, fm.failovers) == (1, 1)
    assert fm.handle(m.TimerFired(3.0)) == []  # on the preferred broker: no probe


def test_a_probe_that_fails_is_scheduled_again_and_a_late_one_refused() -> None:
    fm = machine(priority_backup=True, priority_backup_interval=2.0)
    fm.handle(m.Start(0.0))
    fm.handle(m.AttemptFailed(0.0, A, OSError("down")))
    fm.handle(m.Opened(0.0, B))
    fm.handle(m.TimerFired(2.0))
    assert fm.handle(m.ProbeFailed(2.1, ((A, OSError("down")),)))[-1] == m.ScheduleProbe(2.0)
    fm.handle(m.TimerFired(4.1))
    fm.handle(m.ConnectionLost(4.2, 0, None))  # lost meanwhile: no return is due
    assert fm.handle(m.ProbeSucceeded(4.3, A)) == [m.RefuseReturn(A)]


def test_close_ends_everything() -> None:
    fm = machine(backup=True)
    connected(fm)
    assert fm.handle(m.CloseRequested(1.0)) == [m.Shutdown()]
    assert fm.handle(m.ConnectionLost(1.0, 0, None)) == []
    assert fm.handle(m.CloseRequested(1.0)) == []
    assert fm.state is S.CLOSED


def test_the_same_seed_makes_the_same_actions() -> None:
    def run(seed: int) -> list[m.Action]:
        fm = m.FailoverMachine(
            FailoverPolicy(randomize=True, jitter=0.05, startup_cyclecount=None),
            BROKERS,
            rng=random.Random(seed),
            retriable=is_retriable_failure,
        )
        actions = fm.handle(m.Start(0.0))
        for _ in range(5):
            broker = connect_of(actions).attempt.broker
            actions = fm.handle(m.AttemptFailed(0.1, broker, OSError("down")))
        return actions

    assert repr(run(3)) == repr(run(3))  # errors compare by identity: their words


# --- The model check, bounded (`make check-machine` goes deeper) -------------------------------

DEPTH = int(os.environ.get("HACLIENT_MACHINE_DEPTH", "6"))


@pytest.mark.parametrize("scenario", scenarios(), ids=lambda s: s.name)
def test_every_event_sequence_keeps_the_invariants(scenario: object) -> None:
    stats = explore(scenario, DEPTH)  # type: ignore[arg-type]
    print(  # `make check-machine` prints what it explored (pytest -s)
        f"\n{scenario.name}: depth {DEPTH}, {stats.sequences} sequences, "  # type: ignore[attr-defined]
        f"{stats.events} events, {len(stats.states)} distinct states"
    )
    assert stats.sequences > DEPTH
