"""The matrix runner's own bookkeeping (``chaos.scenarios.runner``)."""

from __future__ import annotations

from chaos.audit import audit
from chaos.report import summary_markdown
from chaos.scenarios.runner import MatrixRun, _leaves
from haclient.errors import InvalidDestinationError


def test_a_dead_workload_is_written_down_by_the_exceptions_inside_its_task_group() -> None:
    inner = InvalidDestinationError("amqp:not-found: no node 'tmp-1'")
    group = ExceptionGroup("outer", [ExceptionGroup("inner", [inner]), KeyError("k")])
    assert [type(leaf) for leaf in _leaves(group)] == [InvalidDestinationError, KeyError]
    assert _leaves(group)[0] is inner
    assert _leaves(inner) == [inner]


def test_the_report_has_no_row_for_a_stream_whose_workload_died_before_its_first_message() -> None:
    run = MatrixRun(workloads=["auto", "request_reply"], seed=1, started=0.0, ended=1.0)
    run.ledger.add("sent", stream="auto-r1", actor="producer", mode="AUTO", ids=["m1"])
    run.ledger.add("accepted", stream="auto-r1", actor="producer", mode="AUTO", ids=["m1"])
    run.ledger.add("received", stream="auto-r1", actor="consumer", mode="AUTO", ids=["m1"])
    run.ledger.add("acknowledged", stream="auto-r1", actor="consumer", mode="AUTO", ids=["m1"])
    run.ledger.add(
        "error", stream="request_reply-r1", actor="workload", mode="", call="run", error="E"
    )
    rows = summary_markdown(run, audit(run.ledger.snapshot())).splitlines()
    assert "| auto AUTO | 1 | 1 | 1 | 0 | 0 | 0 | 0 |" in rows
    assert not any(row.startswith("| request_reply ") for row in rows)
    assert any("request_reply-r1" in row and "unexpected_error" in row for row in rows)
