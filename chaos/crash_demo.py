"""The application-crash part of ``make demo``: one producer and one consumer killed by SIGKILL
at their worst moment, with haclient's outbox and inbox and without them, counted.

How this works: on a reference broker of its own (``chaos.broker.BrokerThread``), for each
variant (``naive``: commit then send, commit the effect then acknowledge; ``patterns``: the
outbox and its relay, the inbox), ``python -m chaos.scenarios.apps`` runs

1. a producer making ``COUNT`` business changes, killed right after the commit of change
   ``CRASH_AT`` and before its message was sent (it says ``committed K`` and waits there),
   then started again: it goes on from the last committed change;
2. a consumer applying each message's effect, killed right after the effect of its
   ``CRASH_AT``-th message committed and before the acknowledgement (``applied <id>``), then
   started again: the broker redelivers that message.

Then the two databases are compared: a business change without an effect is a lost message,
an effect applied twice a duplicate. Every process is stopped by its pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from chaos.broker import BrokerThread
from chaos.scenarios.apps import business_of, effects_of

__all__ = ["COUNT", "CRASH_AT", "CrashOutcome", "run_crash_demo"]

COUNT = 20
CRASH_AT = 10
_WAIT = 60.0


@dataclass(frozen=True, slots=True)
class CrashOutcome:
    """What one variant kept: changes committed, effects applied, lost and duplicated."""

    variant: str
    changes: int
    effects: int
    lost: int
    duplicated: int


class _App:
    """One application process, its output read line by line; stopped by its pid."""

    def __init__(self, role: str, url: str, database: Path, queue: str, *options: str) -> None:
        where = ["--url", url, "--database", str(database), "--queue", queue]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "chaos.scenarios.apps", role, *where, *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def wait_for(self, prefix: str) -> str:
        assert self.proc.stdout is not None
        while line := self.proc.stdout.readline():
            if line.startswith(prefix):
                return line.strip()
        raise RuntimeError(f"the application ended before saying {prefix!r}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _variant(broker: BrokerThread, workdir: Path, naive: bool) -> CrashOutcome:
    name = "naive" if naive else "patterns"
    queue = f"crash-demo-{name}-{os.getpid()}"
    producer_db, consumer_db = workdir / f"{name}-producer.db", workdir / f"{name}-consumer.db"
    extra = ["--naive"] if naive else []
    count = ["--count", str(COUNT)]
    apps: list[_App] = []
    try:
        apps.append(_App("producer", broker.url, producer_db, queue, *count, *extra,
                         "--crash-after-commit", str(CRASH_AT)))  # fmt: skip
        apps[-1].wait_for("committed")
        apps[-1].kill()  # the change is committed; its message was not sent by this process
        apps.append(_App("producer", broker.url, producer_db, queue, *count, *extra))
        apps[-1].wait_for("done")
        apps.append(_App("consumer", broker.url, consumer_db, queue, *extra,
                         "--crash-at", str(CRASH_AT)))  # fmt: skip
        apps[-1].wait_for("applied")
        apps[-1].kill()  # the effect is committed; the message was not acknowledged
        apps.append(_App("consumer", broker.url, consumer_db, queue, *extra))
        apps[-1].wait_for("ready")
        _wait_drained(broker, queue)
    finally:
        for app in apps:
            app.kill()
    changes = business_of(str(producer_db))
    applied = Counter(n for n, _id in effects_of(str(consumer_db)))
    return CrashOutcome(
        variant=name,
        changes=len(changes),
        effects=sum(applied.values()),
        lost=sum(1 for n in changes if n not in applied),
        duplicated=sum(times - 1 for times in applied.values()),
    )


def _wait_drained(broker: BrokerThread, queue: str) -> None:
    """Until the queue is empty and stays so a moment (every message acknowledged)."""
    deadline = time.monotonic() + _WAIT
    empty_since: float | None = None
    while time.monotonic() < deadline:
        if broker.queue_depth(queue) == 0:
            empty_since = empty_since or time.monotonic()
            if time.monotonic() - empty_since > 0.5:
                return
        else:
            empty_since = None
        time.sleep(0.05)
    raise RuntimeError(f"the consumer did not drain {queue} in {_WAIT:.0f} s")


def run_crash_demo() -> list[CrashOutcome]:
    """Both variants, naive first; their outcomes."""
    with tempfile.TemporaryDirectory() as tmp, BrokerThread() as broker:
        return [_variant(broker, Path(tmp), naive) for naive in (True, False)]
