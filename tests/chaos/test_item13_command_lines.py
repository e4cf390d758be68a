"""``haclient-broker`` and ``haclient-toxiproxy`` refuse a bad argument with
one line naming it and exit 2, before anything starts (no traceback, no port blamed for a
missing store directory)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from chaos.broker import cli as broker_cli
from chaos.toxiproxy import cli as toxiproxy_cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--port", "99999"], "argument --port: a port is 0 to 65535, not 99999"),
        (["--port", "-1"], "argument --port: a port is 0 to 65535, not -1"),
        (["--port", "x"], "argument --port: expected a port number, got 'x'"),
        (["--idle-timeout", "-1"], "argument --idle-timeout: expected 0 seconds or more"),
        (["--idle-timeout", "nan"], "argument --idle-timeout: expected a finite number"),
        (["--max-frame-size", "10"], "argument --max-frame-size: at least 512 bytes"),
        (["--log-level", "BOGUS"], "argument --log-level: unknown log level 'BOGUS' (known: "),
        (
            ["--store", "/nonexistent/dir/x.db"],
            "argument --store: no such directory for the store: '/nonexistent/dir'",
        ),
    ],
)
def test_item13_the_broker_refuses_a_bad_argument_with_one_line_and_exit_2(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        broker_cli.main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert error in err
    assert "Traceback" not in err and "cannot listen" not in err


def test_item13_a_log_level_is_accepted_in_any_case() -> None:
    assert broker_cli.build_parser().parse_args(["--log-level", "debug"]).log_level == "DEBUG"


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--port", "99999"], "argument --port: a port is 0 to 65535, not 99999"),
        (["--port", "many"], "argument --port: expected a port number, got 'many'"),
    ],
)
def test_item13_toxiproxy_refuses_a_bad_port_with_one_line_and_exit_2(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        toxiproxy_cli.main(argv)
    assert exited.value.code == 2
    assert error in capsys.readouterr().err


@pytest.mark.timeout(60)
@pytest.mark.parametrize("module", ["chaos.broker.cli", "chaos.toxiproxy.cli"])
def test_item13_as_a_user_runs_it_there_is_no_traceback(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "--port", "99999"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith("a port is 0 to 65535, not 99999")
