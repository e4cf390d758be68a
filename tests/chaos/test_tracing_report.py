"""Rule O3 in the chaos report: a traced run lists the trace ids of the messages a fault hit."""

from __future__ import annotations

from chaos.audit import audit
from chaos.bed import FaultRecord
from chaos.cli import _parser
from chaos.report import hit_by_faults, summary_markdown
from chaos.scenarios.runner import MatrixRun

HIT = "0af7651916cd43dd8448eb211c80319c"
SPARED = "4bf92f3577b34da6a3ce929d0e0e4736"


def _run(*, traced: bool) -> MatrixRun:
    run = MatrixRun(workloads=["auto"], seed=1, started=100.0, ended=120.0, run_id="r1")
    run.faults.append(FaultRecord("kill", "a down; b took over", start=105.0, end=105.2))
    add = run.ledger.add
    for message, t, trace in (("ID:spared", 102.0, SPARED), ("ID:hit", 105.1, HIT)):
        fields = {"trace": trace} if traced else {}
        add("sent", stream="auto-r0", actor="producer", mode="AUTO", ids=[message], t=t, **fields)
        add("accepted", stream="auto-r0", actor="producer", mode="AUTO", ids=[message], t=t)
        add("received", stream="auto-r0", actor="consumer", mode="AUTO", ids=[message], t=t + 8)
    return run


def test_O3_the_report_lists_the_trace_ids_of_the_messages_a_fault_hit() -> None:
    run = _run(traced=True)
    hit = hit_by_faults(run, run.ledger.snapshot())
    assert [(event.ids, fault.name) for event, fault in hit] == [(("ID:hit",), "kill")]
    report = summary_markdown(run, audit(run.ledger.snapshot()))
    assert "## Traces of the messages a fault hit" in report
    assert f"| `ID:hit` | auto-r0 | sent | kill | `{HIT}` |" in report
    assert SPARED not in report


def test_O3_an_untraced_run_has_no_trace_table_and_run_takes_trace() -> None:
    run = _run(traced=False)
    assert "Traces of the messages" not in summary_markdown(run, audit(run.ledger.snapshot()))
    assert _parser().parse_args(["run", "--count", "1", "--trace"]).trace is True
