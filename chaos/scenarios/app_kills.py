"""Application crashes mixed with broker faults: the outbox and inbox audited by their effects.

    python -m chaos.scenarios.app_kills --kills 200 --seed 1

How this works: an embedded shared-store pair of reference brokers behind proxies
(``chaos.bed.Bed``), a producer process and a consumer process (``chaos.scenarios.apps``: an
outbox with its relay, an inbox) on one queue. The main thread SIGKILLs one of the two, chosen
at random, 0-400 ms after it said it is at work (connected), and starts it again (each by its
pid); a second thread plays broker faults (``kill``, ``stop``, ``reset_peer``, ``latency``,
``blackhole``) all along. After
the last kill the producer finishes its changes and the consumer applies what is left; both
are then stopped by their pids. The audit reads the two databases (``effects_check``): every
committed business change must have been applied exactly once (none lost, none twice, none
invented) and the outbox must be empty.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from chaos.applications import AppProcess
from chaos.bed import Bed
from chaos.faults import FAULTS, IDLE_TIMEOUT
from chaos.scenarios.apps import business_of, effects_of, read_rows

__all__ = ["AppKillRun", "effects_check", "finish", "run_app_kills"]

BROKER_FAULTS = ("kill", "stop", "reset_peer", "latency", "blackhole")


@dataclass
class AppKillRun:
    """What a run did and what its audit found."""

    kills: dict[str, int] = field(default_factory=dict)
    broker_faults: dict[str, int] = field(default_factory=dict)
    business_changes: int = 0
    effects_applied: int = 0
    lost: int = 0
    duplicated: int = 0
    invented: int = 0
    outbox_left: int = 0
    seconds: float = 0.0

    @property
    def verdict(self) -> str:
        """PASS when every change was applied exactly once, else FAIL."""
        broken = self.lost or self.duplicated or self.invented or self.outbox_left
        return "FAIL" if broken else "PASS"


def effects_check(producer_db: str, consumer_db: str, run: AppKillRun) -> None:
    """Fill ``run``'s audit from the two applications' databases."""
    business = business_of(producer_db)
    applied = Counter(message_id for _n, message_id in effects_of(consumer_db))
    committed = set(business.values())
    run.business_changes = len(business)
    run.effects_applied = sum(applied.values())
    run.lost = len(committed - set(applied))
    run.duplicated = sum(1 for count in applied.values() if count > 1)
    run.invented = len(set(applied) - committed)
    [(run.outbox_left,)] = read_rows(producer_db, "SELECT count(*) FROM haclient_outbox")


def run_app_kills(kills: int, seed: int, count: int, out: Path) -> AppKillRun:
    """Run ``kills`` application kills with broker faults alongside; audit the effects."""
    rng = random.Random(seed)
    run = AppKillRun()
    started = time.monotonic()
    queue = f"app-kills-{uuid.uuid4().hex[:8]}"
    producer_db, consumer_db = str(out / "producer.db"), str(out / "consumer.db")
    with Bed(ha=True) as bed:
        url = bed.url() + f"&amqp.idleTimeout={int(IDLE_TIMEOUT * 1000)}"
        common = ["--url", url, "--queue", queue]
        producer = AppProcess(
            "producer",
            [*common, "--database", producer_db, "--count", str(count), "--pace", "0.01"],
            out / "producer.log",
        )
        consumer = AppProcess(
            "consumer", [*common, "--database", consumer_db], out / "consumer.log"
        )
        apps = [producer, consumer]
        stop = threading.Event()
        faults = threading.Thread(target=_broker_faults, args=(bed, rng, stop, run), daemon=True)
        try:
            for app in apps:
                app.start()
            faults.start()
            for _ in range(kills):
                app = rng.choice(apps)
                app.wait_ready()
                time.sleep(rng.uniform(0.0, 0.4))
                app.kill()
                run.kills[app.role] = run.kills.get(app.role, 0) + 1
                app.start()
            stop.set()
            faults.join()
            finish(producer, consumer, producer_db, consumer_db)
        finally:
            stop.set()
            for app in apps:
                app.kill()
    effects_check(producer_db, consumer_db, run)
    run.seconds = time.monotonic() - started
    return run


def _broker_faults(bed: Bed, rng: random.Random, stop: threading.Event, run: AppKillRun) -> None:
    while not stop.wait(rng.uniform(0.5, 2.0)):
        name = rng.choice(BROKER_FAULTS)
        FAULTS[name](bed, rng)
        run.broker_faults[name] = run.broker_faults.get(name, 0) + 1


def finish(
    producer: AppProcess,
    consumer: AppProcess,
    producer_db: str,
    consumer_db: str,
    timeout: float = 300.0,
) -> bool:
    """Let the producer finish its changes and the consumer apply them, ``timeout`` seconds at
    most; True when they did. A producer that died on its own (a failover that gave up) is
    started again."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if producer.died():
            producer.start()
        if consumer.died():
            consumer.start()
        if producer.finished():
            applied = {message_id for _n, message_id in effects_of(consumer_db)}
            if set(business_of(producer_db).values()) <= applied:
                time.sleep(1.0)  # copies still on their way would show as duplicates
                return True
        time.sleep(0.2)
    return False


def main(argv: list[str] | None = None) -> int:
    """Run, print the audit as JSON; exit 0 on PASS, 1 on FAIL."""
    parser = argparse.ArgumentParser(prog="python -m chaos.scenarios.app_kills")
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=3000, help="business changes to make")
    parser.add_argument("--out", type=Path, default=None, help="where the databases and logs go")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="app-kills-"))
    out.mkdir(parents=True, exist_ok=True)
    run = run_app_kills(args.kills, args.seed, args.count, out)
    print(json.dumps({**asdict(run), "verdict": run.verdict, "out": str(out)}, indent=2))
    return 0 if run.verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
