"""The matrix runner's own bookkeeping (``chaos.scenarios.runner``)."""

from __future__ import annotations

import random

import pytest

from chaos.audit import audit
from chaos.faults import FAULTS
from chaos.report import summary_markdown
from chaos.scenarios.runner import MatrixRun, Schedule, _leaves, run_matrix
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
    assert "| auto (AUTO) | 1 | 1 | 1 | 0 | 0 | 0 | 0 | 0 |" in rows
    assert not any(row.startswith("| request_reply ") for row in rows)
    assert any("request_reply-r1" in row and "unexpected_error" in row for row in rows)


def test_a_schedule_by_default_injects_every_fault_once_in_an_order_its_seed_repeats() -> None:
    rounds = Schedule(per_round=4).rounds(random.Random(7))
    order = [name for faults in rounds for name in faults]
    assert sorted(order) == sorted(FAULTS)
    assert [len(faults) for faults in rounds[:-1]] == [4] * (len(rounds) - 1)
    assert rounds == Schedule(per_round=4).rounds(random.Random(7))


def test_a_schedule_counts_faults_over_whole_passes_and_keeps_the_order_when_not_shuffled() -> None:
    schedule = Schedule(["kill", "latency"], count=5, per_round=2, shuffle=False)
    assert schedule.rounds(random.Random(0)) == [
        ["kill", "latency"],
        ["kill", "latency"],
        ["kill"],
    ]
    many = Schedule(count=3 * len(FAULTS), per_round=len(FAULTS)).rounds(random.Random(1))
    assert all(sorted(faults) == sorted(FAULTS) for faults in many)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"faults": ["meteor"]}, "unknown faults ['meteor']"),
        ({"faults": []}, "a schedule needs at least one fault"),
        ({"count": 3, "duration": 10.0}, "a count or a duration, not both"),
        ({"count": 0}, "count must be at least 1, not 0"),
        ({"per_round": 0}, "per_round must be at least 1, not 0"),
        ({"duration": -1.0}, "duration must be at least 0, not -1.0"),
        ({"gap": -0.5}, "gap must be at least 0, not -0.5"),
        ({"drain": -1.0}, "drain must be at least 0, not -1.0"),
    ],
)
def test_a_schedule_out_of_range_is_refused_by_name(
    arguments: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError) as refused:
        Schedule(**arguments)  # type: ignore[arg-type]
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("workloads", "message"),
    [(["ghost"], "unknown workloads ['ghost']"), ([], "a run needs at least one workload")],
)
def test_a_run_without_known_workloads_is_refused_before_the_bed_is_touched(
    workloads: list[str], message: str
) -> None:
    with pytest.raises(ValueError) as refused:
        run_matrix(object(), workloads=workloads)  # type: ignore[arg-type]
    assert message in str(refused.value)
