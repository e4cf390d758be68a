"""The faults of a chaos matrix, by name: each draws its parameters from a seeded ``Random``
and plays itself on a ``Bed`` (blocking for the fault's duration, then undoing it).

Durations are short on purpose: a matrix injects many faults, and each must leave the bed as it
found it. A silent broker or a blackhole lasts longer than twice the clients' idle timeout
(``IDLE_TIMEOUT``) so that the clients notice it (F13).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from chaos.bed import Bed, FaultRecord

__all__ = ["ALL_FAULTS", "APP_FAULTS", "FAULTS", "IDLE_TIMEOUT", "Fault"]

IDLE_TIMEOUT = 0.5
"""The idle timeout (seconds) the workloads' connections advertise: a silent peer is found
within about twice this."""

Fault = Callable[[Bed, random.Random], FaultRecord]


def _kill(bed: Bed, rng: random.Random) -> FaultRecord:
    return bed.kill(down=rng.uniform(0.0, 0.3))


def _stop(bed: Bed, rng: random.Random) -> FaultRecord:
    return bed.stop(down=rng.uniform(0.0, 0.3))


def _pause(bed: Bed, rng: random.Random) -> FaultRecord:
    return bed.pause(rng.uniform(2.5, 3.5) * IDLE_TIMEOUT)


def _blackhole(bed: Bed, rng: random.Random) -> FaultRecord:
    return bed.blackhole(rng.uniform(2.5, 3.5) * IDLE_TIMEOUT)


def _reset_peer(bed: Bed, rng: random.Random) -> FaultRecord:
    return bed.reset_peer(rng.uniform(0.2, 0.6), after_ms=rng.choice([0, 0, 20]))


def _latency(bed: Bed, rng: random.Random) -> FaultRecord:
    return bed.latency(rng.uniform(0.8, 1.5), ms=rng.randint(100, 400), jitter=rng.randint(0, 50))


def _bandwidth(bed: Bed, rng: random.Random) -> FaultRecord:
    return bed.bandwidth(rng.uniform(0.8, 1.5), rate_kb=rng.randint(4, 32))


def _slicer(bed: Bed, rng: random.Random) -> FaultRecord:
    return bed.slicer(rng.uniform(0.5, 1.0), size=rng.randint(3, 16))


def _limit_data(bed: Bed, rng: random.Random) -> FaultRecord:
    # Small enough to fall inside an AMQP frame (a transfer of a few hundred bytes).
    return bed.limit_data(rng.uniform(0.3, 0.8), nbytes=rng.randint(40, 400))


def _app_kill(bed: Bed, rng: random.Random) -> FaultRecord:
    start = time.time()
    detail = bed.apps.kill_one(rng)
    return FaultRecord("app_kill", detail, start, time.time())


def _flap(bed: Bed, rng: random.Random) -> FaultRecord:
    return bed.flap(period_ms=rng.randint(50, 200), count=rng.randint(2, 4))


FAULTS: dict[str, Fault] = {
    "kill": _kill,
    "stop": _stop,
    "pause": _pause,
    "blackhole": _blackhole,
    "reset_peer": _reset_peer,
    "latency": _latency,
    "bandwidth": _bandwidth,
    "slicer": _slicer,
    "limit_data": _limit_data,
    "flap": _flap,
}
"""Every fault the bed can play, by the name the matrix and the report use."""

APP_FAULTS: dict[str, Fault] = {
    "app_kill": _app_kill,
}
"""Faults on the applications rather than the brokers or the network: ``app_kill`` SIGKILLs
one of the application processes a workload listed in ``bed.apps`` (``chaos.applications``) and
starts it again. Not among a run's default faults: only the ``outbox_inbox`` workload runs
such processes (``--faults app_kill --workloads outbox_inbox``)."""

ALL_FAULTS: dict[str, Fault] = {**FAULTS, **APP_FAULTS}
"""Every fault a run can be asked for, by name."""
