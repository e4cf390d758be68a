"""The demo behind ``make demo``: applications keep their promises through a kill, a blackhole
and a latency spike, and an audit proves it.

On the chaos bed (``chaos.bed``): a shared-store HA pair of reference brokers (one serves, the
other waits on the store's lock and takes over, with every stored message, when the first dies),
each behind a proxy of the embedded Toxiproxy. Three applications connect with a ``failover:``
URL over both proxies:

- a transacted producer (batches of 5 sends, then ``commit()``) feeding a CLIENT_ACKNOWLEDGE
  consumer (``acknowledge()`` every 5 messages);
- a requester asking questions over a temporary queue and a service answering them.

While they run, the bed kills the serving broker (hard), blackholes the network (the proxies
hold every byte the broker sends; the clients notice by their idle timeout) and adds a latency
spike, twice each. Then it prints what happened in plain words, the audit (``chaos.audit``:
nothing committed lost, no duplicate the rules forbid, every rolled-back transaction and failed
acknowledge reported), and writes the report (HTML with plots, Markdown, the ledger).

Last, an application crash (``chaos.crash_demo``): a producer killed by SIGKILL between its
database commit and its send, a consumer killed between its effect's commit and its
acknowledgement, each started again; once as applications without haclient's outbox and
inbox (what that crash costs, counted: a message lost, an effect applied twice), once with
them (nothing lost, nothing twice).

Run: ``python -m chaos.demo [--out DIR] [--quick]``. Exit status 0 only when the audit holds.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import haclient.metrics
from chaos.audit import AuditResult, Event, audit
from chaos.bed import Bed, FaultRecord
from chaos.crash_demo import COUNT, CRASH_AT, CrashOutcome, run_crash_demo
from chaos.report import PROMISE_NAMES, figures, ms, write_report
from chaos.scenarios.runner import MatrixRun, Schedule, run_matrix
from chaos.scrape import Scrape

FAULTS = ["kill", "blackhole", "latency"]
WORKLOADS = ["tx_to_client", "request_reply"]
SAYINGS = {
    "kill": "killed the serving broker (no goodbye)",
    "blackhole": "blackholed the network: the proxies held every byte from the broker",
    "latency": "slowed the network down: every byte from the broker waited",
}


def _say(step: str, detail: str = "") -> None:
    print(f"  {step:<28} {detail}", flush=True)


def _on_fault(started: float) -> Callable[[FaultRecord], None]:
    def report(record: FaultRecord) -> None:
        _say(
            f"{record.start - started:5.1f} s  {record.name}",
            f"{SAYINGS[record.name]} ({record.detail})",
        )

    return report


def _tell(run: MatrixRun, result: AuditResult) -> None:
    events = run.ledger.snapshot()
    told = figures(events)  # the report's figures, from the same ledger
    print("\nwhat the applications saw")
    _say("failovers", f"{told.failovers} (each connection on its own)")
    if told.failovers:
        _say(
            "downtime per failover",
            f"median {ms(told.downtime_median)}, max {ms(told.downtime_max)}",
        )
    _say("transactions committed", str(told.committed))
    _say(
        "transactions rolled back",
        f"{told.rolled_back} (F7: commit() said so; the producer went on with the next), "
        f"in doubt {told.in_doubt}",
    )
    _say(
        "acknowledges refused",
        f"{told.acknowledges_refused} (F8: recover() and the broker redelivered)",
    )
    _say(
        "questions answered",
        f"{told.questions_answered}, {told.questions_asked_again} asked again (F6)",
    )
    slow = [e for e in events if e.kind == "call"]
    if slow:
        longest = max(slow, key=lambda e: e.duration)
        _say(
            "longest blocked call",
            f"{longest.call} by the {longest.actor}, {longest.duration:.2f} s (F2)",
        )
    print("\naudit")
    summaries = {s.stream.rsplit("-r", 1)[0]: s for s in result.streams}
    tx = summaries.get("tx_to_client")
    if tx is not None:
        _say("messages committed", f"{_committed(events)}")
        _say("messages acknowledged", f"{tx.consumed} distinct")
    _say("committed but lost", str(result.lost()))
    for violation in result.violations[:20]:
        promise = PROMISE_NAMES.get(violation.promise, violation.promise)
        _say("BROKEN", f"{promise} ({violation.rule}): {violation.detail}")


def _committed(events: list[Event]) -> int:
    return len(
        {i for e in events if e.kind == "committed" and e.actor == "producer" for i in e.ids}
    )


def _tell_metrics(metrics: Scrape | None) -> None:
    """What the metrics endpoint said at the end, in a few of its own series."""
    if metrics is None:
        return
    shown = ", ".join(
        f"{name.removeprefix('haclient_')} {metrics.total(name):g}" for name in _SHOWN
    )
    _say("metrics at the end", shown)


_SHOWN = (
    "haclient_failovers_total",
    "haclient_failover_duration_seconds_count",
    "haclient_messages_sent_total",
    "haclient_duplicates_suppressed_total",
)


def _tell_crashes(outcomes: list[CrashOutcome]) -> bool:
    """Print what each variant kept; True when the patterns lost and doubled nothing."""
    print(
        f"\napplication crash: {COUNT} business changes; SIGKILL for the producer after "
        f"committing change {CRASH_AT}\n(before its send), for the consumer after committing "
        f"the effect of message {CRASH_AT} (before its\nacknowledgement); both started again"
    )
    labels = {"naive": "without outbox and inbox", "patterns": "with haclient.exactly_once"}
    for outcome in outcomes:
        _say(
            labels[outcome.variant],
            f"{outcome.changes} changes, {outcome.effects} effects: {outcome.lost} lost, "
            f"{outcome.duplicated} applied twice",
        )
    kept = [o for o in outcomes if o.variant == "patterns"]
    return bool(kept) and all(o.lost == 0 and o.duplicated == 0 for o in kept)


def main(argv: list[str] | None = None) -> int:
    """Run the demo; exit status 0 when the audit holds."""
    parser = argparse.ArgumentParser(
        prog="python -m chaos.demo", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", type=Path, default=Path("demo-report"), help="report directory")
    parser.add_argument("--quick", action="store_true", help="one of each fault, short gaps")
    args = parser.parse_args(argv)
    gap = 1.0 if args.quick else 6.0
    count = len(FAULTS) * (1 if args.quick else 2)
    print(
        "haclient demo: a transacted producer, a CLIENT_ACKNOWLEDGE consumer and a request/reply "
        "pair\non an HA pair of brokers behind Toxiproxy, through a kill, a blackhole and a "
        "latency spike\n"
    )
    started = time.time()
    metrics = haclient.metrics.serve(0)
    _say("metrics", f"{metrics.url} (Prometheus text; scrape it while the demo runs)")
    with metrics, Bed(ha=True) as bed:
        master = bed.master()
        _say(
            "HA pair started",
            f"master {master.name}, standby waiting on the shared store; "
            f"proxies {', '.join(m.listen for m in bed.members)}",
        )
        schedule = Schedule(FAULTS, count=count, per_round=count, gap=gap, shuffle=False)
        run = run_matrix(
            bed, schedule, workloads=WORKLOADS, on_fault=_on_fault(started), metrics=metrics
        )
        _tell_metrics(run.metrics)
    result = audit(run.ledger.snapshot())
    _tell(run, result)
    page = write_report(run, result, args.out)
    print(f"report: {page.resolve()} (summary: {(args.out / 'report.md').resolve()})")
    crashes_ok = _tell_crashes(run_crash_demo())
    ok = result.ok and crashes_ok
    verdict = "every promise kept, nothing committed was lost" if ok else "AUDIT FAILED"
    print(f"\nverdict: {verdict} ({time.time() - started:.0f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
