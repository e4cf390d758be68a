"""``haclient-chaos run`` and ``python -m chaos.demo``, run as users run them (subprocesses):
reports written, the exit status saying whether the audit held, nothing left running."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.cli import main

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _python(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TOXIPROXY_URL", None)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240
    )


def test_run_writes_the_report_and_exits_0_when_the_audit_holds(tmp_path: Path) -> None:
    done = _python(
        "-m",
        "chaos.cli",
        "run",
        "--faults",
        "latency,bandwidth",
        "--workloads",
        "client,dups_ok",
        "--seed",
        "3",
        "--out",
        str(tmp_path / "report"),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for name in (
        "report.html",
        "report.md",
        "ledger.jsonl",
        "throughput.png",
        "failovers.png",
        "blocked.png",
        "metrics.txt",
    ):
        assert (tmp_path / "report" / name).stat().st_size > 0, name
    summary = (tmp_path / "report" / "report.md").read_text()
    assert "every promise kept" in summary
    assert "- Counted by the metrics endpoint (`haclient_failovers_total`): " in summary
    assert (
        "haclient_failover_duration_seconds_bucket" in (tmp_path / "report/metrics.txt").read_text()
    )
    assert "| latency | every byte from the brokers delayed | 1 |" in summary
    assert "| bandwidth | the brokers' output squeezed to a few KB/s | 1 |" in summary
    assert "report.html" in done.stdout


def test_unknown_faults_are_refused_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "--faults", "meteor"])
    assert exited.value.code == 2
    assert "unknown fault: meteor" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("arguments", "named"),
    [(["--per-round", "0"], "per_round"), (["--count", "0"], "count")],
)
def test_a_schedule_out_of_range_is_refused_with_exit_2_naming_it(
    arguments: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", *arguments])
    assert exited.value.code == 2
    assert f"{named} must be at least 1, not 0" in capsys.readouterr().err


def test_the_demo_passes_its_audit_and_says_where_the_report_is(tmp_path: Path) -> None:
    done = _python("-m", "chaos.demo", "--quick", "--out", "demo", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "committed but lost           0" in done.stdout
    assert "verdict: every promise kept" in done.stdout
    assert f"report: {tmp_path / 'demo' / 'report.html'}" in done.stdout
    # the application crash, counted: what it costs without the patterns, nothing with them
    assert "without outbox and inbox     20 changes, 20 effects: 1 lost, 1 applied twice" in (
        done.stdout
    )
    assert "with haclient.exactly_once   20 changes, 20 effects: 0 lost, 0 applied twice" in (
        done.stdout
    )
    assert (tmp_path / "demo" / "throughput.png").exists()
