"""``haclient-chaos`` (issue 39, item 9): the password from the environment or a file, a
warning when it is on the command line; a report that reads without the audit's internal
names and without rows of 0 for workloads that did not run."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.audit import PROMISES, audit
from chaos.cli import PASSWORD_ENV, _parser, _password
from chaos.report import summary_markdown
from chaos.scenarios.runner import MatrixRun


def _args(*argv: str) -> object:
    return _parser().parse_args(["run", *argv])


def test_item9_a_password_on_the_command_line_is_taken_with_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _password(_args("--username", "app", "--password", "s3cret")) == (
        "s3cret",
        "--password",
    )
    err = capsys.readouterr().err
    assert "warning" in err and PASSWORD_ENV in err and "--password-file" in err
    assert "s3cret" not in err


def test_item9_a_password_from_the_environment_or_a_file_is_taken_quietly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(PASSWORD_ENV, "from-env")
    assert _password(_args("--username", "app")) == ("from-env", f"${PASSWORD_ENV}")
    secret = tmp_path / "password"
    secret.write_text("from-file\n")
    secret.chmod(0o600)
    assert _password(_args("--password-file", str(secret))) == ("from-file", "--password-file")
    assert capsys.readouterr().err == ""
    monkeypatch.delenv(PASSWORD_ENV)
    assert _password(_args()) == (None, None)


def test_item9_a_password_file_that_cannot_be_read_or_two_sources_are_refused(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="--password-file: cannot read"):
        _password(_args("--password-file", str(tmp_path / "missing")))
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ValueError, match=r"--password-file: .* is empty"):
        _password(_args("--password-file", str(empty)))
    with pytest.raises(ValueError, match="give one"):
        _password(_args("--password", "x", "--password-file", str(empty)))


def test_item9_a_password_from_the_environment_needs_a_user_too(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from chaos.cli import main

    monkeypatch.setenv(PASSWORD_ENV, "from-env")
    with pytest.raises(SystemExit) as exited:
        main(["run"])
    assert exited.value.code == 2
    assert f"${PASSWORD_ENV} needs --username" in capsys.readouterr().err


def _auto_only() -> MatrixRun:
    run = MatrixRun(workloads=["auto"], seed=1, started=100.0, ended=110.0, run_id="r1")
    run.ledger.add("sent", stream="auto-r0", actor="producer", mode="AUTO", ids=["m1"])
    run.ledger.add("accepted", stream="auto-r0", actor="producer", mode="AUTO", ids=["m1"])
    run.ledger.add("received", stream="auto-r0", actor="consumer", mode="AUTO", ids=["m1"])
    return run


def test_item9_the_promises_table_has_readable_names_and_only_promises_the_run_could_break() -> (
    None
):
    run = _auto_only()
    summary = summary_markdown(run, audit(run.ledger.snapshot()))
    promises = summary.split("## Promises", 1)[1]
    for internal in PROMISES:
        assert f"| {internal} |" not in promises, internal
    assert "rolled back" not in promises and "in doubt" not in promises  # no transaction ran
    assert "request" not in promises  # no request_reply
    assert "lost" in promises  # what an AUTO stream can break is there
    assert "Producer transactions" not in summary and "Questions answered" not in summary
    assert "Acknowledges refused" not in summary


def test_item9_a_run_of_every_workload_lists_every_promise_once() -> None:
    from chaos.scenarios.runner import ALL_WORKLOADS

    run = MatrixRun(workloads=list(ALL_WORKLOADS), seed=1, started=100.0, ended=110.0, run_id="r")
    summary = summary_markdown(run, audit(run.ledger.snapshot()))
    rows = summary.split("## Promises", 1)[1].split("\n\n")[1].splitlines()[2:]
    assert len(rows) == len(PROMISES)
    assert "Producer transactions" in summary and "Questions answered" in summary
