"""A model check of the failover machine (``failover.machine``): every event sequence, to a depth.

How this works: ``explore`` plays the executor. From a machine just started it keeps what the
actions asked for and not yet answered (an attempt, a ready connection, a tier, a spare, a
probe) and, at every step, tries each event that could come next: each answer to what is
outstanding (an attempt opens, or fails in one of five ways: unreachable, refused, redirected,
a broker not ready, a failure no reconnect fixes), a loss of the connection in use (plain, or
redirected), a loss of an older epoch (stale), the spare's end, the probe's timer, a resource
that fails its restore, close. Each branch is a replay of the events before it on a new
machine with the same seed (the machine is deterministic), and the search is depth first to
``depth`` events; every sequence is also closed at its end, so that every waiting caller is
accounted for.

Every action is checked against the machine's invariants 14-18 and ``failover.states``' 2-4 (a
``ModelError`` names the sequence that broke one):

- nothing after ``GiveUp`` but ``Shutdown``, nothing after ``Shutdown``, and once given up or
  closed every event (of every kind) yields no action;
- ``OpenGate(e)`` only for the connection in use, numbered ``e``, on the first connect or once
  its last tier was restored, and only while the gate is closed;
- every waiting caller (one arrives at each step the gate is closed) is released by exactly one
  outcome (``OpenGate``, ``GiveUp`` or ``Shutdown``);
- no ``Connect`` while a redirect chain exceeds the machine's limit, none while an attempt or a
  connection is outstanding, none while a connection is in use;
- the gate is open exactly while the state is CONNECTED, a connection is in use exactly in
  ``LIVE`` states, the epoch counts the losses.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from failover import machine as m
from failover.errors import (
    AuthenticationError,
    BrokerNotReadyError,
    ConnectionLostError,
    HAClientError,
)
from failover.policy import FailoverPolicy
from failover.states import LIVE, ConnectionState, is_retriable_failure
from failover.url import BrokerURL

__all__ = ["BROKERS", "ModelError", "Scenario", "Stats", "explore", "scenarios"]

A, B, C = BrokerURL("amqp", "a"), BrokerURL("amqp", "b"), BrokerURL("amqp", "c")
BROKERS = (A, B, C)


class ModelError(AssertionError):
    """An invariant broken, with the events that led there."""


class Redirected(ConnectionLostError):
    """A failure that redirects to ``target``, as the connector reports one (F18)."""

    def __init__(self, target: BrokerURL) -> None:
        super().__init__(f"redirected to {target}")
        self.redirect_to = target


class Fatal(HAClientError):
    """A failure no reconnect fixes."""

    retriable = False


def _refused() -> AuthenticationError:
    error = AuthenticationError("refused")
    error.retriable = False
    return error


def _redirect_target(broker: BrokerURL) -> BrokerURL:
    return BROKERS[(BROKERS.index(broker) + 1) % len(BROKERS)] if broker in BROKERS else A


@dataclass(frozen=True)
class Scenario:
    """A policy to explore, and the redirect limit."""

    name: str
    policy: FailoverPolicy
    max_redirects: int = 2


def scenarios() -> list[Scenario]:
    """Three brokers: the spare and the return together (each failover one pass), plain
    round-robin with a warning every two failures, and no failover at all."""
    quick = {"jitter": 0.0, "give_up_after": None, "cyclecount": 1, "fast_period": 0.0}
    return [
        Scenario(
            "spare+return",
            FailoverPolicy(
                backup=True,
                priority_backup=True,
                priority_backup_interval=1.0,
                warn_after_attempts=2,
                **quick,  # type: ignore[arg-type]
            ),
        ),
        Scenario("roundrobin", FailoverPolicy(warn_after_attempts=2, **quick)),  # type: ignore[arg-type]
        Scenario("nofailover", FailoverPolicy.from_options({"failover.method": "nofailover"})),
    ]


@dataclass
class Stats:
    """What an exploration saw."""

    sequences: int = 0  # complete sequences (each ended by close)
    events: int = 0  # events handed to a machine
    states: set[tuple[object, ...]] = field(default_factory=set)  # distinct abstract states


@dataclass
class _Model:
    """What the executor knows: what was asked and not yet answered, the gate, the waiters."""

    trace: list[str] = field(default_factory=list)
    now: float = 0.0
    connect: BrokerURL | None = None  # an outstanding Connect
    ready: BrokerURL | None = None  # an outstanding UseReady
    live: tuple[int, BrokerURL] | None = None  # the connection in use
    tier: tuple[int, int] | None = None  # the tier restoring
    restored: set[int] = field(default_factory=set)  # epochs whose last tier was restored
    losses: int = 0
    spare_opening: BrokerURL | None = None
    spare: BrokerURL | None = None
    handover: BrokerURL | None = None
    timer: bool = False
    probing: bool = False
    gate_open: bool = False
    gave_up: bool = False
    shut: bool = False
    hops: int = 0  # redirected Connects in a row
    waiting: list[int] = field(default_factory=list)  # callers at the closed gate
    released: dict[int, int] = field(default_factory=dict)  # caller -> outcomes seen
    callers: int = 0


def _check(cond: bool, model: _Model, what: str) -> None:
    if not cond:
        raise ModelError(f"{what}\n  after: " + "\n         ".join(model.trace))


def _release(model: _Model) -> None:
    for caller in model.waiting:
        model.released[caller] = model.released.get(caller, 0) + 1
    model.waiting = []


def _apply(machine: m.FailoverMachine, model: _Model, action: m.Action) -> None:
    """Check ``action`` against the invariants and carry it out on the model."""
    _check(not model.shut, model, f"{action} after Shutdown")
    if model.gave_up:  # in the same answer, only what ends the connection's other parts
        cleanup = (m.DropSpare, m.RefuseReturn, m.Log, m.Emit, m.Shutdown)
        _check(isinstance(action, cleanup), model, f"{action} after GiveUp")
    if isinstance(action, m.Connect):
        _check(model.connect is None and model.ready is None, model, "two attempts at once")
        _check(model.live is None, model, "an attempt while a connection is in use")
        model.hops = model.hops + 1 if action.redirected else 0
        _check(model.hops <= machine.max_redirects, model, "a redirect chain over its limit")
        model.connect = action.attempt.broker
    elif isinstance(action, m.UseReady):
        _check(model.connect is None and model.ready is None, model, "two attempts at once")
        _check(model.live is None, model, "a ready connection while one is in use")
        held = model.handover or model.spare
        _check(held is not None and held == action.broker, model, "no such ready connection")
        if model.handover is not None:
            model.handover = None
        else:
            model.spare = None
        model.ready = action.broker
    elif isinstance(action, m.Adopt):
        _check(model.live is None, model, "adopted beside a connection in use")
        _check(action.epoch == model.losses, model, "the epoch is not the count of losses")
        model.live = (action.epoch, action.broker)
    elif isinstance(action, m.OpenGate):
        _check(model.live is not None and model.live[0] == action.epoch, model, "gate on no link")
        first = action.epoch == 0 and model.losses == 0
        _check(first or action.epoch in model.restored, model, "gate open before its restore")
        _check(not model.gate_open, model, "the gate opened twice")
        model.gate_open = True
        model.hops = 0  # a connection in use ends the chain
        _release(model)
    elif isinstance(action, m.CloseGate):
        _check(model.live is not None and model.live[0] == action.epoch, model, "lost no link")
        model.gate_open = False
        model.live = None
        model.tier = None
        model.losses += 1
    elif isinstance(action, m.RestoreTier):
        on_link = model.live is not None and model.live[0] == action.epoch
        _check(on_link, model, "restore on no link")
        model.tier = (action.epoch, action.tier)
    elif isinstance(action, m.StartSpare):
        model.spare_opening, model.spare = action.broker, None
    elif isinstance(action, m.DropSpare):
        model.spare_opening = model.spare = None
    elif isinstance(action, m.ScheduleProbe):
        _check(not model.timer and not model.probing, model, "two probes at once")
        model.timer = True
    elif isinstance(action, m.ProbePreferred):
        model.probing = True
    elif isinstance(action, m.ReturnTo):
        model.handover = action.broker
    elif isinstance(action, m.GiveUp):
        model.gave_up = True
        model.gate_open = False
        _release(model)
    elif isinstance(action, m.Shutdown):
        model.shut = True
        model.gate_open = False
        _release(model)


def _after(machine: m.FailoverMachine, model: _Model) -> None:
    """The state invariants after an event (``failover.states`` 2-4)."""
    state = machine.state
    if state is not ConnectionState.CLOSED:
        _check(model.gate_open == (state is ConnectionState.CONNECTED), model, "gate vs state")
        _check((model.live is not None) == (state in LIVE), model, "connection vs state")
        _check(machine.epoch == model.losses, model, "epoch vs losses")
    if model.gave_up:
        _check(state in (ConnectionState.FAILED, ConnectionState.CLOSED), model, "not FAILED")
    if not model.gate_open and not model.shut and not model.gave_up:
        model.callers += 1  # a call arrives at the closed gate
        model.waiting.append(model.callers)


def _events(model: _Model) -> Iterator[tuple[str, Callable[[float], m.Event]]]:
    """The events that may come next, each a label and a maker of the event at a time."""
    if model.connect is not None:
        b = model.connect
        yield f"opened {b.host}", lambda t: m.Opened(t, b)
        yield f"unreachable {b.host}", lambda t: m.AttemptFailed(t, b, OSError("refused"))
        yield f"refused {b.host}", lambda t: m.AttemptFailed(t, b, _refused())
        yield f"redirect {b.host}", lambda t: m.AttemptFailed(t, b, Redirected(_redirect_target(b)))
        yield f"not ready {b.host}", lambda t: m.AttemptFailed(t, b, BrokerNotReadyError("early"))
        yield f"fatal {b.host}", lambda t: m.AttemptFailed(t, b, Fatal("no"))
    if model.ready is not None:
        r = model.ready
        yield f"ready opened {r.host}", lambda t: m.Opened(t, r)
        yield "ready gone", lambda t: m.ReadyGone(t)
    if model.tier is not None:
        epoch, tier = model.tier
        yield f"tier {tier}", lambda t: m.TierRestored(t, epoch, tier, tier >= 1)
        error = ValueError("bad selector")
        yield "not restored", lambda t: m.RestoreFailed(t, epoch, "res", error, True)
    if model.live is not None:
        epoch, broker = model.live
        yield "lost", lambda t: m.ConnectionLost(t, epoch, None)
        target = _redirect_target(broker)
        yield "lost, redirected", lambda t: m.ConnectionLost(t, epoch, Redirected(target))
        if epoch > 0:
            yield "stale loss", lambda t: m.ConnectionLost(t, epoch - 1, None)
    if model.spare_opening is not None:
        s = model.spare_opening
        yield f"spare ready {s.host}", lambda t: m.SpareReady(t, s)
    if model.spare is not None:
        s2 = model.spare
        yield f"spare lost {s2.host}", lambda t: m.SpareLost(t, s2)
    if model.timer:
        yield "timer", lambda t: m.TimerFired(t)
    if model.probing:
        yield "probe ok", lambda t: m.ProbeSucceeded(t, A)
        yield "probe failed", lambda t: m.ProbeFailed(t, ((A, OSError("down")),))


def _consume(model: _Model, event: m.Event) -> None:
    """What an event answers, before the machine's actions."""
    if isinstance(event, (m.Opened, m.AttemptFailed, m.ReadyGone)):
        model.connect = model.ready = None
    elif isinstance(event, m.TierRestored):
        model.tier = None
        if event.last:
            model.restored.add(event.epoch)
    elif isinstance(event, m.SpareReady):
        model.spare_opening, model.spare = None, event.broker
    elif isinstance(event, m.SpareLost):
        model.spare = None
    elif isinstance(event, m.TimerFired):
        model.timer = False
    elif isinstance(event, (m.ProbeSucceeded, m.ProbeFailed)):
        model.probing = False


_EVERY_KIND: tuple[Callable[[float], m.Event], ...] = (
    lambda t: m.Start(t),
    lambda t: m.Opened(t, A),
    lambda t: m.AttemptFailed(t, A, OSError("x")),
    lambda t: m.ReadyGone(t),
    lambda t: m.ConnectionLost(t, 0, None),
    lambda t: m.TierRestored(t, 1, 0, True),
    lambda t: m.SpareReady(t, B),
    lambda t: m.SpareLost(t, B),
    lambda t: m.TimerFired(t),
    lambda t: m.ProbeSucceeded(t, A),
    lambda t: m.ProbeFailed(t),
    lambda t: m.BrokersLearned(t, (C,), None),
)


def _step(machine: m.FailoverMachine, model: _Model, label: str, event: m.Event) -> None:
    model.trace.append(label)
    _consume(model, event)
    ended = model.gave_up or model.shut
    actions = machine.handle(event)
    if ended:  # invariant 14: nothing after GiveUp but Shutdown on close, nothing after it
        allowed = [m.Shutdown()] if isinstance(event, m.CloseRequested) and not model.shut else []
        _check(actions == allowed, model, f"{actions} after the end")
    for action in actions:
        _apply(machine, model, action)
    _after(machine, model)


def _finish(machine: m.FailoverMachine, model: _Model, stats: Stats) -> None:
    """Close the sequence and check that every caller got exactly one outcome, and that
    nothing more comes once closed."""
    if model.gave_up:  # nothing but close once given up
        for make in _EVERY_KIND:
            _check(machine.handle(make(model.now)) == [], model, "an action after GiveUp")
    _step(machine, model, "close", m.CloseRequested(model.now))
    for make in _EVERY_KIND:
        _check(machine.handle(make(model.now)) == [], model, "an action after close")
    _check(machine.handle(m.CloseRequested(model.now)) == [], model, "close twice acted")
    _check(not model.waiting, model, "a caller left waiting")
    for caller, outcomes in model.released.items():
        _check(outcomes == 1, model, f"caller {caller} released {outcomes} times")
    stats.sequences += 1


def _key(machine: m.FailoverMachine, model: _Model) -> tuple[object, ...]:
    return (
        machine.state,
        machine.pending,
        machine.broker,
        machine.spare,
        machine.spare_wanted,
        machine.handover,
        model.connect,
        model.ready,
        model.tier,
        model.timer,
        model.probing,
        model.hops,
    )


def explore(scenario: Scenario, depth: int, *, seed: int = 7) -> Stats:
    """Every event sequence of ``scenario`` up to ``depth`` events after the start."""
    stats = Stats()
    _walk(scenario, seed, [], depth, stats)
    return stats


def _replay(scenario: Scenario, seed: int, path: list[int]) -> tuple[m.FailoverMachine, _Model]:
    """A machine and its model after the start and the events ``path`` chooses (each an index
    into ``_events``): the same seed makes the same machine, so a branch is a replay."""
    machine = m.FailoverMachine(
        scenario.policy,
        BROKERS,
        rng=random.Random(seed),
        retriable=is_retriable_failure,
        max_redirects=scenario.max_redirects,
    )
    model = _Model()
    _step(machine, model, "start", m.Start(0.0))
    for index in path:
        label, make = list(_events(model))[index]
        model.now += 0.01
        _step(machine, model, label, make(model.now))
    return machine, model


def _walk(scenario: Scenario, seed: int, path: list[int], depth: int, stats: Stats) -> None:
    machine, model = _replay(scenario, seed, path)
    stats.states.add(_key(machine, model))
    options = len(list(_events(model))) if depth > 0 and not model.gave_up else 0
    _finish(machine, model, stats)  # the sequence may end here: closed now
    for index in range(options):
        stats.events += 1
        _walk(scenario, seed, [*path, index], depth - 1, stats)
