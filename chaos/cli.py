"""``haclient-chaos run``: a matrix of faults x workloads, a report, and the audit's verdict.

    haclient-chaos run --count 50 --seed 7 --out chaos-report
    haclient-chaos run --duration 600 --faults kill,blackhole --workloads client,transacted
    HACLIENT_CHAOS_PASSWORD=... haclient-chaos run --broker amqp://10.0.0.1:5672 \\
        --broker amqp://10.0.0.2:5672 --username app --toxiproxy http://127.0.0.1:8474

Embedded by default: a shared-store HA pair of reference brokers behind an embedded Toxiproxy
(``chaos.bed``); ``--broker`` (twice or more) and ``--toxiproxy`` (or ``$TOXIPROXY_URL``) use
real ones. Every argument is checked, the Toxiproxy asked for its version and the brokers
connected to once through the proxies before any fault: what fails there is a set-up failure,
never a broken promise. Exit status: 0 when every promise held, 1 when one broke, 2 on a bad
argument or a failed set-up (nothing was judged).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import haclient
from chaos.args import non_negative_seconds, positive_seconds
from chaos.audit import audit
from chaos.bed import Bed, FaultRecord
from chaos.faults import ALL_FAULTS, APP_FAULTS, FAULTS
from chaos.postgresql import PostgresServer, PostgresServerError
from chaos.report import write_report
from chaos.scenarios.runner import ALL_WORKLOADS, APP_WORKLOADS, MatrixRun, Schedule, run_matrix
from chaos.scenarios.workloads import WORKLOADS
from chaos.toxiproxy.client import TOXIPROXY_URL, ToxiproxyClient, ToxiproxyError
from haclient.errors import AuthenticationError, ClientIdInUseError, HAClientError

__all__ = ["PASSWORD_ENV", "main"]

#: The environment variable the password of ``--username`` is read from (see ``_password``).
PASSWORD_ENV = "HACLIENT_CHAOS_PASSWORD"

DESCRIPTION = "Run a matrix of faults x workloads, write a report, and judge every promise."
EPILOG = """\
examples:
  haclient-chaos run --count 50 --seed 7 --out chaos-report
  haclient-chaos run --duration 600 --faults kill,blackhole --workloads client,transacted
  HACLIENT_CHAOS_PASSWORD=... haclient-chaos run --broker amqp://10.0.0.1:5672 \\
      --broker amqp://10.0.0.2:5672 --username app --toxiproxy http://127.0.0.1:8474

The password: $HACLIENT_CHAOS_PASSWORD or --password-file (--password works, with a warning:
other users of the machine can read a command line).
Without --broker: a shared-store HA pair of reference brokers behind an embedded Toxiproxy.
Exit status: 0 every promise held, 1 a promise broke, 2 a bad argument or a failed set-up.
"""
PREFLIGHT_ATTACH_TIMEOUT = 10.0
SETUP_TIMEOUT = 60.0
PREFLIGHT_CONNECT_TIMEOUT = 10.0
"""Each connect of the set-up: a broker that accepts and drops it is retried that long (F1)."""
"""How long the set-up waits for brokers that do not answer yet (seconds)."""


class SetupFailed(Exception):
    """The bed could not be set up (a Toxiproxy or broker that does not answer, credentials
    refused): nothing was run, so nothing can be judged."""


@dataclass
class _Plan:
    """What the arguments asked for, checked, before anything starts."""

    schedule: Schedule
    bed: Bed
    out: Path
    trace: bool = False
    setup_timeout: float = 60.0
    database: str = "sqlite"


def _names(text: str, known: Mapping[str, object], what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"name at least one {what} (known: {', '.join(known)})")
    unknown = [n for n in names if n not in known]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})"
        )
    return names


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="haclient-chaos",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "run",
        help="run a matrix of faults x workloads",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.set_defaults(command_parser=run)  # so that main() says "haclient-chaos run: error"
    amount = run.add_mutually_exclusive_group()
    amount.add_argument(
        "--count", type=int, metavar="N", help="faults to inject (default: each of --faults once)"
    )
    amount.add_argument(
        "--duration",
        type=positive_seconds,
        metavar="SECONDS",
        help="inject faults for this many seconds",
    )
    run.add_argument(
        "--seed", type=int, default=0, metavar="N", help="makes the run repeatable (default: 0)"
    )
    run.add_argument(
        "--faults",
        type=lambda t: _names(t, ALL_FAULTS, "fault"),
        default=list(FAULTS),
        metavar="NAMES",
        help=f"comma-separated (default: {', '.join(FAULTS)}; also: {', '.join(APP_FAULTS)}, "
        "which kills the outbox_inbox workload's application processes)",
    )
    run.add_argument(
        "--workloads",
        type=lambda t: _names(t, ALL_WORKLOADS, "workload"),
        default=list(WORKLOADS),
        metavar="NAMES",
        help=f"comma-separated (default: {', '.join(WORKLOADS)}; also: "
        f"{', '.join(APP_WORKLOADS)}, an outbox and an inbox in processes of their own)",
    )
    run.add_argument(
        "--per-round",
        type=int,
        default=10,
        metavar="N",
        help="faults per round, fresh queues each (default: 10)",
    )
    run.add_argument(
        "--broker",
        action="append",
        metavar="URL",
        help="an external broker, amqp://[user:password@]host:port (repeat; default: embedded)",
    )
    run.add_argument(
        "--username",
        metavar="NAME",
        help="the user to log in as where a --broker URL names none (default: none)",
    )
    run.add_argument(
        "--password",
        metavar="SECRET",
        help=f"that user's password; other users can read a command line: prefer "
        f"${PASSWORD_ENV} or --password-file",
    )
    run.add_argument(
        "--password-file",
        type=Path,
        metavar="FILE",
        help="read that user's password from the first line of FILE",
    )
    run.add_argument(
        "--broker-mode",
        choices=("reference", "activemq"),
        default="reference",
        help="the embedded brokers behave as the reference broker, or as ActiveMQ 5.x where a "
        "client can tell (a dead connection noticed only after twice the idle timeout, its "
        "client id refused meanwhile) (default: %(default)s)",
    )
    run.add_argument(
        "--broker-idle-timeout",
        type=non_negative_seconds,
        metavar="SECONDS",
        help="the embedded brokers' idle timeout: a connection silent for twice this is "
        "dropped (default: 1, or ActiveMQ's 15 with --broker-mode activemq; 0: never)",
    )
    run.add_argument(
        "--setup-timeout",
        type=positive_seconds,
        default=SETUP_TIMEOUT,
        metavar="SECONDS",
        help="how long to wait for brokers that are starting up (default: %(default)s)",
    )
    run.add_argument(
        "--toxiproxy",
        metavar="URL",
        help=f"an external Toxiproxy API (default: ${TOXIPROXY_URL}, else an embedded one)",
    )
    run.add_argument(
        "--database",
        choices=("sqlite", "postgresql"),
        default="sqlite",
        help="the outbox_inbox workload's applications keep their databases in SQLite files, "
        "or in a private PostgreSQL server the run starts (Debian's postgresql and psycopg) "
        "(default: sqlite)",
    )
    run.add_argument(
        "--trace",
        action="store_true",
        help="trace the workloads with OpenTelemetry; the report lists the trace ids of the "
        "messages a fault hit",
    )
    run.add_argument(
        "--out",
        type=Path,
        default=Path("chaos-report"),
        metavar="DIR",
        help="report directory (default: %(default)s)",
    )
    return parser


def _password(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The password of ``--username`` and where it came from: ``--password`` (with a warning
    on stderr: ``ps`` and shell histories show a command line), ``--password-file`` (its first
    line), else ``$HACLIENT_CHAOS_PASSWORD``; ``(None, None)`` without one.

    Raises:
        ValueError: Naming the argument: both given, or a file that cannot be read or is empty.
    """
    if args.password is not None and args.password_file is not None:
        raise ValueError("--password and --password-file: give one")
    if args.password is not None:
        print(
            "haclient-chaos: warning: a --password on the command line can be read by other "
            f"users of this machine (ps, shell history); use ${PASSWORD_ENV} or "
            "--password-file FILE",
            file=sys.stderr,
        )
        return args.password, "--password"
    if args.password_file is not None:
        path: Path = args.password_file
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or exc
            raise ValueError(f"--password-file: cannot read {str(path)!r}: {reason}") from None
        if not lines or not lines[0]:
            raise ValueError(f"--password-file: {str(path)!r} is empty")
        return lines[0], "--password-file"
    from_env = os.environ.get(PASSWORD_ENV)
    return (from_env, f"${PASSWORD_ENV}") if from_env else (None, None)


def _plan(args: argparse.Namespace, password: str | None) -> _Plan:
    """Check every argument, without starting anything.

    Raises:
        ValueError: naming the argument at fault.
    """
    schedule = Schedule(
        args.faults,
        seed=args.seed,
        count=args.count,
        duration=args.duration,
        per_round=args.per_round,
    )
    toxiproxy = args.toxiproxy or os.environ.get(TOXIPROXY_URL, "").strip() or None
    if toxiproxy is not None:
        _check_toxiproxy(toxiproxy, "--toxiproxy" if args.toxiproxy else f"${TOXIPROXY_URL}")
    if args.broker and (args.broker_mode != "reference" or args.broker_idle_timeout is not None):
        given = "--broker-mode" if args.broker_mode != "reference" else "--broker-idle-timeout"
        raise ValueError(f"{given} sets up the embedded brokers: not with --broker")
    try:
        bed = Bed(
            broker_urls=args.broker,
            toxiproxy_url=toxiproxy,
            username=args.username,
            password=password,
            broker_mode=args.broker_mode,
            broker_idle_timeout=args.broker_idle_timeout,
        )
    except HAClientError as exc:
        raise ValueError(f"--broker: {exc}") from None
    return _Plan(
        schedule,
        bed,
        _out_directory(args.out),
        trace=args.trace,
        setup_timeout=args.setup_timeout,
        database=args.database,
    )


def _check_toxiproxy(url: str, given_by: str) -> None:
    """A Toxiproxy answers at ``url``. Raises ValueError naming it (and ``given_by``, where
    the URL came from) when none does."""
    try:
        ToxiproxyClient(url).version()
    except ValueError as exc:
        raise ValueError(f"{given_by}: {exc}") from None
    except ToxiproxyError as exc:
        said = "no answer" if exc.status == 0 else f"answered {exc.status} {exc.message}"
        raise ValueError(f"{given_by}: no Toxiproxy at {url} ({said})") from None


def _out_directory(path: Path) -> Path:
    """``path`` created, and writable. Raises ValueError naming it when it cannot be."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--out: cannot create {str(path)!r}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"--out: cannot write to {str(path)!r}")
    return path


def _one_line(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0] if first else '(no detail)'}"


def _preflight(
    bed: Bed,
    *,
    setup_timeout: float = SETUP_TIMEOUT,
    connect_timeout: float = PREFLIGHT_CONNECT_TIMEOUT,
) -> None:
    """Connect once through the proxies, as the workloads will: one pass over the brokers,
    then, when none answered (brokers starting up: through a proxy, one that is not ready
    looks the same as one that is down), again and again for up to ``setup_timeout`` seconds,
    saying so on standard error. A refused login ends the wait at once.

    Raises:
        SetupFailed: no broker answered in time, or they refused the login.
    """
    try:
        _connect_once(bed.url(**{"startup.cyclecount": 1}), connect_timeout)
        return
    except (AuthenticationError, ClientIdInUseError) as exc:
        raise SetupFailed(f"the brokers refused the connection: {_one_line(exc)}") from exc
    except HAClientError as exc:
        first = exc
    print(
        f"haclient-chaos: no broker answered through the proxies yet ({_one_line(first)}); "
        f"waiting up to {setup_timeout:.0f} s for them to start",
        file=sys.stderr,
    )
    started = time.monotonic()
    budget = {"startup.cyclecount": -1, "giveupafter": max(1, round(setup_timeout * 1000))}
    try:
        _connect_once(bed.url(**budget), connect_timeout)
    except HAClientError as exc:
        reason = (
            f"cannot connect to the brokers through the proxies within {setup_timeout:.0f} s: "
            f"{_one_line(exc)}"
        )
        raise SetupFailed(reason) from exc
    print(
        f"haclient-chaos: the brokers answered after {time.monotonic() - started:.1f} s",
        file=sys.stderr,
    )


def _connect_once(url: str, connect_timeout: float) -> None:
    """One connect through the proxies (a broker that accepts and drops the connection, as one
    starting up does, is tried again for ``connect_timeout``: F1), closed at once."""
    with haclient.connect(
        url,
        connect_timeout=connect_timeout,
        attach_timeout=PREFLIGHT_ATTACH_TIMEOUT,
        close_timeout=1.0,
    ):
        pass


def _run(plan: _Plan, workloads: list[str]) -> MatrixRun:
    """Set the bed up, check it serves, then run the matrix with a progress bar.

    Raises:
        SetupFailed: the bed could not be set up.
    """
    schedule = plan.schedule
    total = None if schedule.duration else schedule.count or len(schedule.faults)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with ExitStack() as stack:
        try:
            bed = stack.enter_context(plan.bed)
        except (ToxiproxyError, OSError, TimeoutError) as exc:
            raise SetupFailed(f"cannot start the bed: {_one_line(exc)}") from exc
        _preflight(
            bed,
            setup_timeout=plan.setup_timeout,
            connect_timeout=min(PREFLIGHT_CONNECT_TIMEOUT, plan.setup_timeout),
        )
        progress = stack.enter_context(Progress(*columns, TimeElapsedColumn()))
        task = progress.add_task("injecting faults", total=total)

        def advance(record: FaultRecord) -> None:
            progress.update(task, advance=1, description=f"{record.name:<11}")

        provider = _tracer_provider() if plan.trace else None
        databases = None
        if plan.database == "postgresql":
            try:
                databases = stack.enter_context(PostgresServer()).create_database
            except (PostgresServerError, ImportError) as exc:
                raise SetupFailed(f"cannot start PostgreSQL: {_one_line(exc)}") from exc
        return run_matrix(
            bed,
            schedule,
            workloads=workloads,
            on_fault=advance,
            tracer_provider=provider,
            databases=databases,
        )


def _tracer_provider() -> Any:
    """An OpenTelemetry SDK tracer provider for a traced run: the spans get their ids (which
    the ledger notes); exporting them is the application's business, not the bed's."""
    from opentelemetry.sdk.trace import TracerProvider

    return TracerProvider()


def main(argv: list[str] | None = None) -> int:
    """Run the command; the exit status says whether every promise held (see the module
    docstring)."""
    args = _parser().parse_args(argv)
    parser: argparse.ArgumentParser = args.command_parser
    try:
        password, source = _password(args)
    except ValueError as exc:
        parser.error(str(exc))  # exits with status 2
    if password is not None and args.username is None:
        parser.error(f"{source} needs --username")
    try:
        plan = _plan(args, password)
    except ValueError as exc:
        parser.error(str(exc))  # exits with status 2
    try:
        run = _run(plan, args.workloads)
    except SetupFailed as exc:
        print(f"haclient-chaos: set-up failed, nothing was run: {exc}", file=sys.stderr)
        return 2
    result = audit(run.ledger.snapshot())
    page = write_report(run, result, plan.out)
    print((plan.out / "report.md").read_text())
    print(f"report: {page}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
