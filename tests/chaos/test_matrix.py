"""The CI-sized chaos matrix: every fault x every workload on the embedded bed (a shared-store HA
pair behind the embedded Toxiproxy), fixed seed, judged by the audit.

Two passes over the ten faults, all workloads running through each fault. The audit must find
no broken promise beyond the two known haclient defects this bed found (``KNOWN``, reported to
the lead with their reproduction); ``test_the_audit_holds`` is the plain verdict and is marked
xfail until they are fixed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from chaoskit import known

from chaos.audit import AuditResult, audit
from chaos.bed import Bed
from chaos.faults import FAULTS
from chaos.scenarios import WORKLOADS, MatrixRun, run_matrix

SEED = 14
PASSES = 2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def matrix() -> Iterator[tuple[MatrixRun, AuditResult]]:
    with Bed(ha=True) as bed:
        run = run_matrix(bed, seed=SEED, count=PASSES * len(FAULTS), per_round=len(FAULTS))
    yield run, audit(run.ledger.snapshot())


def test_every_fault_hits_every_workload(matrix: tuple[MatrixRun, AuditResult]) -> None:
    run, result = matrix
    assert sorted({f.name for f in run.faults}) == sorted(FAULTS)
    assert len(run.faults) == PASSES * len(FAULTS)
    for name in WORKLOADS:
        streams = [s for s in result.streams if s.stream.startswith(f"{name}-r")]
        assert len(streams) == PASSES, name
        assert all(s.consumed > 0 for s in streams), name


def test_F2_F3_F7_F8_F9_F11_no_promise_broken_but_the_known_defects(
    matrix: tuple[MatrixRun, AuditResult],
) -> None:
    run, result = matrix
    events = run.ledger.snapshot()
    unknown = [v for v in result.violations if not known(result, events, v)]
    assert unknown == [], "\n".join(
        f"{v.stream} {v.promise} ({v.rule}): {v.detail}" for v in unknown
    )


@pytest.mark.xfail(reason="known haclient defects (chaoskit.known); not strict: they are racy")
def test_the_audit_holds(matrix: tuple[MatrixRun, AuditResult]) -> None:
    _, result = matrix
    assert result.ok, result.violations
