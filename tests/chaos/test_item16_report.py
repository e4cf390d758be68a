"""The chaos report is real HTML (headings, tables, the plots), its figures come from
the ledger with a label each, the demo's terminal says the same figures, the fault details
explain themselves, the plots read in ms with plain counts, and ``--help`` is plain text with
the defaults."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from chaos import demo
from chaos.audit import audit
from chaos.bed import Bed
from chaos.cli import main
from chaos.report import _counts_figure, figures, summary_markdown, write_report
from chaos.scenarios.runner import MatrixRun


def _run() -> MatrixRun:
    """Two failovers of 123 and 783 ms (median 453 ms), four transactions rolled back of which
    one in doubt, one committed, and a violation whose detail holds markup."""
    run = MatrixRun(workloads=["transacted"], seed=1, started=100.0, ended=110.0, run_id="r1")
    add = run.ledger.add
    for t, downtime in ((101.0, 0.123), (102.0, 0.783)):
        add("failover_completed", stream="transacted-r0", actor="consumer", t=t, duration=downtime)
    for n, in_doubt in enumerate((False, False, False, True)):
        ids = [f"x{n}"]
        add("sent", stream="transacted-r0", actor="producer", mode="TRANSACTED", ids=ids)
        add(
            "rolled_back",
            stream="transacted-r0",
            actor="producer",
            mode="TRANSACTED",
            ids=ids,
            in_doubt=in_doubt,
        )
    for kind in ("sent", "committed"):
        add(kind, stream="transacted-r0", actor="producer", mode="TRANSACTED", ids=["c1"])
    add("received", stream="transacted-r0", actor="consumer", mode="TRANSACTED", ids=["c1"])
    add("committed", stream="transacted-r0", actor="consumer", mode="TRANSACTED", ids=["c1"])
    add("received", stream="transacted-r0", actor="consumer", mode="TRANSACTED", ids=["<b>x"])
    return run


def test_item16_the_page_is_html_with_headings_and_tables_and_keeps_the_plots(
    tmp_path: Path,
) -> None:
    run = _run()
    page = write_report(run, audit(run.ledger.snapshot()), tmp_path).read_text()
    assert "<pre>" not in page
    assert "<h1>haclient chaos run</h1>" in page and "<h2>Streams</h2>" in page
    assert page.count("<table>") >= 2 and "<th>workload (consumer mode)</th>" in page
    assert "&lt;b&gt;x" in page and "<b>x" not in page  # a detail's markup is text
    for plot in ("throughput.png", "failovers.png", "blocked.png"):
        assert f'src="{plot}"' in page and (tmp_path / plot).stat().st_size > 0


def test_item16_one_median_from_the_ledger_and_rolled_back_apart_from_in_doubt(
    capsys: pytest.CaptureFixture[str],
) -> None:
    run = _run()
    told = figures(run.ledger.snapshot())
    assert (told.failovers, round(1000 * (told.downtime_median or 0))) == (2, 453)
    assert (told.committed, told.rolled_back, told.in_doubt) == (1, 3, 1)
    result = audit(run.ledger.snapshot())
    summary = summary_markdown(run, result)
    assert "Downtime per failover, from its start to the gate opening again: median 453 ms" in (
        summary
    )
    assert "1 committed, 3 rolled back (F7: commit() said so, nothing applied), 1 in doubt" in (
        summary
    )
    assert "<=" not in summary  # no bucket bound posing as a median
    demo._tell(run, result)
    terminal = capsys.readouterr().out
    assert "median 453 ms" in terminal
    assert "transactions rolled back     3 (" in terminal and "in doubt 1" in terminal


def test_item16_a_transacted_stream_counts_what_its_commits_covered() -> None:
    run = _run()
    rows = summary_markdown(run, audit(run.ledger.snapshot())).splitlines()
    [row] = [r for r in rows if r.startswith("| transacted (TRANSACTED) |")]
    sent, accepted_or_committed = row.split(" | ")[1:3]
    assert (sent, accepted_or_committed) == ("5", "1")
    assert "- *accepted or committed*: sends the broker accepted, or that a commit covered" in rows


def test_item16_a_kill_says_what_happened_to_the_broker() -> None:
    with Bed(ha=True) as bed:
        record = bed.kill(down=0.1)
    assert record.detail == (
        "broker-0 down; the standby took over; broker-0 back as the new standby after 0.10 s"
    )


def test_item16_count_axes_are_labelled_in_plain_numbers(tmp_path: Path) -> None:
    with _counts_figure("ms", tmp_path / "plot.png") as ax:
        ax.hist([1.0] * 3 + [200.0] * 40 + [900.0], bins=30)
        figure = ax.figure
    figure.canvas.draw()
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels and all("10^" not in t and "times" not in t for t in labels), labels
    assert all(t.replace(".", "").isdigit() for t in labels), labels
    plt.close("all")


def test_item16_help_is_plain_text_with_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["run", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        text = capsys.readouterr().out
        assert "``" not in text and "\\\\" not in text
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    for default in ("(default: 0)", "(default: 10)", "(default: chaos-report)"):
        assert default in text
