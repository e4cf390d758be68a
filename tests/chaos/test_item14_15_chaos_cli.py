"""``haclient-chaos run`` checks every argument before anything
starts, reports a set-up failure as one (never as a broken promise), and keeps the brokers'
user and password through the proxies."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import haclient
from chaos.bed import Bed
from chaos.broker import BrokerThread
from chaos.cli import main
from chaos.net import free_port
from chaos.scenarios.runner import Schedule
from chaos.toxiproxy import ToxiproxyServer
from haclient import Queue, TextMessage
from haclient.errors import AuthenticationError, ConfigurationError

pytestmark = pytest.mark.timeout(120)


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``haclient-chaos`` in this process; it must exit 2 with one line of error."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (["--duration", "nan"], "argument --duration: expected a finite number of seconds"),
        (["--duration", "inf"], "argument --duration: expected a finite number of seconds"),
        (["--duration", "0"], "argument --duration: expected more than 0 seconds"),
        (["--workloads", ""], "argument --workloads: name at least one workload (known: auto"),
        (["--faults", " , "], "argument --faults: name at least one fault (known: kill"),
        (["--out", "/proc/x"], "--out: cannot create '/proc/x'"),
        (["--broker", "notaurl"], "--broker: not a broker URL (expected amqp://host:port)"),
        (
            ["--broker", "failover:(amqp://127.0.0.1:1,amqp://127.0.0.1:2)"],
            "--broker: one broker per URL (amqp://host:port)",
        ),
        (["--password", "secret"], "--password needs --username"),
    ],
)
def test_item14_a_bad_argument_is_one_line_and_exit_2_before_anything_starts(
    arguments: list[str], error: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["run", *arguments]
    if "--out" not in arguments:
        argv += ["--out", str(tmp_path / "report")]
    assert error in _refused(argv, capsys)
    assert not (tmp_path / "report").exists()


def test_item14_a_toxiproxy_that_does_not_answer_is_named(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    argv = ["run", "--toxiproxy", url, "--out", str(tmp_path)]
    assert f"--toxiproxy: no Toxiproxy at {url} (no answer)" in _refused(argv, capsys)


def test_item14_a_toxiproxy_url_from_the_environment_is_checked_too(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("TOXIPROXY_URL", url)
    argv = ["run", "--out", str(tmp_path)]
    assert f"$TOXIPROXY_URL: no Toxiproxy at {url} (no answer)" in _refused(argv, capsys)


def test_item14_an_out_directory_below_a_file_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("")
    argv = ["run", "--out", str(tmp_path / "file" / "report")]
    assert "--out: cannot create" in _refused(argv, capsys)


@pytest.mark.parametrize("name", ["duration", "gap", "drain"])
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_item14_a_schedule_refuses_a_time_that_is_not_finite(name: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"{name} must be a finite number of seconds"):
        Schedule(**{name: value})  # type: ignore[arg-type]


def test_item14_a_broker_that_does_not_answer_is_a_set_up_failure_not_a_broken_promise(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["run", "--broker", f"amqp://127.0.0.1:{free_port()}", "--count", "1"]
    argv += ["--setup-timeout", "1"]  # how long it waits for brokers starting up
    assert main([*argv, "--out", str(tmp_path / "report")]) == 2
    out, err = capsys.readouterr()
    assert "haclient-chaos: set-up failed, nothing was run: cannot connect" in err
    assert "PROMISES BROKEN" not in out + err and "Traceback" not in err
    assert not (tmp_path / "report" / "report.md").exists()


def _send(url: str) -> None:
    with haclient.connect(url, idle_timeout=0.5) as conn, conn.create_session() as session:
        session.create_producer(Queue("q")).send(TextMessage("through the proxy"))


def test_item15_an_external_brokers_user_and_password_survive_the_proxies() -> None:
    with (
        ToxiproxyServer.running() as server,
        BrokerThread(users={"app": "s3cret"}) as broker,
    ):
        given = f"amqp://app:s3cret@127.0.0.1:{broker.broker.port}"
        with Bed(broker_urls=[given], toxiproxy_url=server.url) as bed:
            _send(bed.url())
        plain = f"amqp://127.0.0.1:{broker.broker.port}"
        with Bed(
            broker_urls=[plain], toxiproxy_url=server.url, username="app", password="s3cret"
        ) as bed:
            _send(bed.url())
        assert broker.queue_depth("q") == 2


def test_item15_embedded_brokers_accept_only_the_given_user() -> None:
    with Bed(username="app", password="s3cret") as bed:
        _send(bed.url())
        anonymous = bed.url().replace("app:s3cret@", "")
        with pytest.raises(AuthenticationError):
            _send(anonymous.replace("startup.cyclecount=-1", "startup.cyclecount=1"))


def test_item15_a_password_without_a_user_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="a password without a user name"):
        Bed(password="s3cret")


@pytest.mark.slow
def test_item15_a_run_against_brokers_that_want_a_login_keeps_its_promises(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with (
        ToxiproxyServer.running() as server,
        BrokerThread(users={"app": "s3cret"}, idle_timeout=1.0) as broker,
    ):
        port = broker.broker.port
        common = ["--toxiproxy", server.url, "--count", "1", "--faults", "latency"]
        common += ["--workloads", "auto"]
        wrong = ["run", "--broker", f"amqp://app:wrong@127.0.0.1:{port}", *common]
        assert main([*wrong, "--out", str(tmp_path / "wrong")]) == 2
        err = capsys.readouterr().err
        assert "set-up failed" in err and "AuthenticationError" in err and "wrong" not in err
        right = ["run", "--broker", f"amqp://127.0.0.1:{port}", "--username", "app"]
        right += ["--password", "s3cret", *common, "--out", str(tmp_path / "right")]
        assert main(right) == 0
    summary = (tmp_path / "right" / "report.md").read_text()
    assert "every promise kept" in summary
    assert "s3cret" not in summary + capsys.readouterr().out
