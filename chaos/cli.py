"""``haclient-chaos run``: a matrix of faults x workloads, a report, and the audit's verdict.

    haclient-chaos run --count 50 --seed 7 --out chaos-report
    haclient-chaos run --duration 600 --faults kill,blackhole --workloads client,transacted
    haclient-chaos run --broker amqp://10.0.0.1:5672 --broker amqp://10.0.0.2:5672 \\
        --toxiproxy http://127.0.0.1:8474

Embedded by default: a shared-store HA pair of reference brokers behind an embedded Toxiproxy
(``chaos.bed``); ``--broker`` (twice or more) and ``--toxiproxy`` (or ``$TOXIPROXY_URL``) use
real ones. Exit status: 0 when every promise held, 1 when one broke, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from chaos.audit import audit
from chaos.bed import Bed, FaultRecord
from chaos.faults import FAULTS
from chaos.report import write_report
from chaos.scenarios.runner import Schedule, run_matrix
from chaos.scenarios.workloads import WORKLOADS

__all__ = ["main"]


def _names(text: str, known: Mapping[str, object], what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})"
        )
    return names


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="haclient-chaos", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run a matrix of faults x workloads")
    amount = run.add_mutually_exclusive_group()
    amount.add_argument("--count", type=int, help="faults to inject (default: one of each)")
    amount.add_argument("--duration", type=float, help="inject faults for this many seconds")
    run.add_argument("--seed", type=int, default=0, help="makes the run repeatable (default 0)")
    run.add_argument(
        "--faults",
        type=lambda t: _names(t, FAULTS, "fault"),
        default=list(FAULTS),
        help=f"comma-separated (default all: {','.join(FAULTS)})",
    )
    run.add_argument(
        "--workloads",
        type=lambda t: _names(t, WORKLOADS, "workload"),
        default=list(WORKLOADS),
        help=f"comma-separated (default all: {','.join(WORKLOADS)})",
    )
    run.add_argument(
        "--per-round", type=int, default=10, help="faults per round (fresh queues each)"
    )
    run.add_argument("--broker", action="append", help="an external broker URL (repeat)")
    run.add_argument(
        "--toxiproxy", help="an external Toxiproxy API URL (else $TOXIPROXY_URL or embedded)"
    )
    run.add_argument("--out", type=Path, default=Path("chaos-report"), help="report directory")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command; the exit status says whether every promise held."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        schedule = Schedule(
            args.faults,
            seed=args.seed,
            count=args.count,
            duration=args.duration,
            per_round=args.per_round,
        )
    except ValueError as exc:
        parser.error(str(exc))  # exits with status 2
    total = None if schedule.duration else schedule.count or len(schedule.faults)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with (
        Progress(*columns) as progress,
        Bed(broker_urls=args.broker, toxiproxy_url=args.toxiproxy) as bed,
    ):
        task = progress.add_task("injecting faults", total=total)

        def advance(record: FaultRecord) -> None:
            progress.update(task, advance=1, description=f"{record.name:<11}")

        run = run_matrix(bed, schedule, workloads=args.workloads, on_fault=advance)
    result = audit(run.ledger.snapshot())
    page = write_report(run, result, args.out)
    print((args.out / "report.md").read_text())
    print(f"report: {page}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
