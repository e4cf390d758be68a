"""Issue 42 in the chaos matrix: the ``app_kill`` fault and the ``outbox_inbox`` workload, run as
``haclient-chaos run --faults app_kill,kill --workloads outbox_inbox`` runs them, and the
audit's effects check (X1-X3) in the report's promises table.

A small run: application kills mixed with a broker kill on the embedded shared-store pair. Every
process it starts (brokers, the two applications) is stopped by its pid.
"""

from __future__ import annotations

import pytest

from chaos.audit import audit
from chaos.bed import Bed
from chaos.cli import _parser
from chaos.postgresql import PostgresServer
from chaos.report import summary_markdown
from chaos.scenarios import Schedule, run_matrix
from chaos.scenarios.runner import MatrixRun

pytestmark = [pytest.mark.timeout(120)]


def test_X3_app_kills_in_the_matrix_leave_every_effect_applied_once() -> None:
    with Bed(ha=True) as bed:
        schedule = Schedule(["app_kill", "app_kill", "kill", "app_kill"], seed=3, per_round=4)
        run = run_matrix(bed, schedule, workloads=["outbox_inbox"])
    result = audit(run.ledger.snapshot())
    assert [f.name for f in run.faults].count("app_kill") == 3
    assert all("killed with SIGKILL" in f.detail for f in run.faults if f.name == "app_kill")
    assert result.ok, result.violations
    [stream] = result.streams
    assert stream.accepted > 0 and stream.consumed == stream.accepted
    page = summary_markdown(run, result)
    assert "| every committed change takes effect (outbox, inbox) | X1-X3 | 0 |" in page
    assert "| no effect is applied twice (inbox) | X3 | 0 |" in page


def test_X3_app_kills_with_postgresql_databases_leave_every_effect_applied_once(
    postgres_server: PostgresServer,
) -> None:
    """The same with the applications' databases in PostgreSQL (``--database postgresql``)."""
    with Bed(ha=True) as bed:
        schedule = Schedule(["app_kill", "kill", "app_kill"], seed=5, per_round=3)
        run = run_matrix(
            bed, schedule, workloads=["outbox_inbox"], databases=postgres_server.create_database
        )
    result = audit(run.ledger.snapshot())
    assert [f.name for f in run.faults].count("app_kill") == 2
    assert result.ok, result.violations
    [stream] = result.streams
    assert stream.accepted > 0 and stream.consumed == stream.accepted


def test_the_app_fault_and_workload_are_selectable_but_not_in_the_defaults() -> None:
    args = _parser().parse_args(["run", "--faults", "app_kill,kill", "--workloads", "outbox_inbox"])
    assert args.faults == ["app_kill", "kill"] and args.workloads == ["outbox_inbox"]
    assert args.database == "sqlite"
    assert _parser().parse_args(["run", "--database", "postgresql"]).database == "postgresql"
    defaults = _parser().parse_args(["run"])
    assert "app_kill" not in defaults.faults and "outbox_inbox" not in defaults.workloads
    assert "app_kill" not in Schedule().faults
    page = summary_markdown(MatrixRun(workloads=["client"], started=1.0, ended=2.0), audit([]))
    assert "outbox, inbox" not in page  # no row for a check that never ran
