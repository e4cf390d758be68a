"""Logins to a running broker over real sockets: in-process (``BrokerThread``, whose admin
calls revoke and add tokens) and as the ``haclient-broker`` command, with TLS and client
certificates; and the command line's errors for the login options."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from saslkit import (
    AUTH,
    OK,
    TIMEOUT,
    SaslClient,
    amqp_follows,
    client_context,
    close_all,
    connect,
    login,
    make_pki,
    scram_login,
    sockets,
    xoauth2,
)

from chaos.broker import BrokerThread
from chaos.broker.cli import build_parser, main
from haclient.amqp.config import TlsServerOptions
from haclient.amqp.sasl_frames import SASL_HEADER

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _close_sockets() -> Iterator[None]:
    yield
    close_all()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_pki(Path(tmp_path_factory.mktemp("login-pki")))


def _refused_at_tls(port: int, context: ssl.SSLContext) -> bool:
    """The broker ends a TLS connection without a usable certificate before any SASL byte."""
    try:
        wire = connect(port, context)
        wire.write(SASL_HEADER)
    except (ssl.SSLError, ConnectionError):
        return True
    return wire.read() == b""


# In-process broker ------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-1", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_login_over_a_socket_and_the_refusal_ends_it(mechanism: str) -> None:
    with BrokerThread(users={"app": "s3cret"}) as broker, sockets():
        wire = connect(broker.port)
        client = SaslClient(wire)
        assert client.hello()[:3] == ["SCRAM-SHA-512", "SCRAM-SHA-256", "SCRAM-SHA-1"]
        assert scram_login(client, mechanism, "app", "s3cret").code == OK
        assert amqp_follows(wire)

        wrong = connect(broker.port)
        client = SaslClient(wrong)
        client.hello()
        assert scram_login(client, mechanism, "app", "guess").code == AUTH
        assert wrong.read() == b""  # the broker closed the socket


def test_a_token_revoked_through_the_admin_calls_is_refused_and_a_fresh_one_works() -> None:
    """As a client whose token provider hands out a new token on every connect would see it."""
    provider: Iterator[str] = iter(["tok-1", "tok-1", "tok-2"])
    with (
        BrokerThread(oauth_tokens={"tok-1": "app"}, sasl_mechanisms=["XOAUTH2"]) as broker,
        sockets(),
    ):
        assert login(connect(broker.port), "XOAUTH2", xoauth2("app", next(provider))).code == OK
        assert broker.revoke_token("tok-1")
        assert login(connect(broker.port), "XOAUTH2", xoauth2("app", next(provider))).code == AUTH
        broker.add_token("tok-2", "app")
        wire = connect(broker.port)
        assert login(wire, "XOAUTH2", xoauth2("app", next(provider))).code == OK
        assert amqp_follows(wire)


def test_restricted_mechanisms_are_all_that_is_offered_and_accepted() -> None:
    with (
        BrokerThread(users={"app": "s3cret"}, sasl_mechanisms=["SCRAM-SHA-256"]) as broker,
        sockets(),
    ):
        client = SaslClient(connect(broker.port))
        assert client.hello() == ["SCRAM-SHA-256"]
        assert login(connect(broker.port), "PLAIN", b"\0app\0s3cret").code == AUTH
        assert scram_login(client, "SCRAM-SHA-256", "app", "s3cret").code == OK


def test_external_over_tls_with_and_without_a_client_certificate(pki: dict[str, str]) -> None:
    tls = TlsServerOptions(pki["server"], pki["server_key"], client_ca_file=pki["ca"])
    with BrokerThread(tls=tls, users={"app": "s3cret"}) as broker, sockets():
        wire = connect(broker.port, client_context(pki))
        assert login(wire, "EXTERNAL", b"app-1").code == OK
        assert amqp_follows(wire)
        assert _refused_at_tls(broker.port, client_context(pki, certificate=None))


# The command ------------------------------------------------------------------------------------


class Process:
    """``haclient-broker`` in a process of its own; stopped by its pid."""

    def __init__(self, *arguments: str) -> None:
        command = [sys.executable, "-m", "chaos.broker.cli", "--port", "0", *arguments]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert "listening on amqp" in line, self.stop()
        self.port = int(line.rsplit(":", 1)[1])

    def stop(self) -> str:
        """SIGTERM, then SIGKILL if it does not end; its standard error."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=TIMEOUT)
        _, err = self.process.communicate(timeout=TIMEOUT)
        return err


def test_the_command_serves_scram_external_xoauth2_and_plain_over_tls(pki: dict[str, str]) -> None:
    broker = Process(
        *("--user", "app:s3cret", "--oauth-token", "tok-1=app"),
        *("--tls-cert", pki["server"], "--tls-key", pki["server_key"]),
        *("--tls-client-ca", pki["ca"]),
    )
    try:
        context = client_context(pki)
        client = SaslClient(connect(broker.port, context))
        offered = ["SCRAM-SHA-512", "SCRAM-SHA-256", "SCRAM-SHA-1", "EXTERNAL", "XOAUTH2", "PLAIN"]
        assert client.hello() == offered
        assert scram_login(client, "SCRAM-SHA-512", "app", "s3cret").code == OK
        assert login(connect(broker.port, context), "EXTERNAL", None).code == OK
        assert login(connect(broker.port, context), "XOAUTH2", xoauth2("app", "tok-1")).code == OK
        assert login(connect(broker.port, context), "XOAUTH2", xoauth2("app", "tok-2")).code == AUTH
        assert login(connect(broker.port, context), "PLAIN", b"\0app\0s3cret").code == OK
        assert login(connect(broker.port, context), "ANONYMOUS", None).code == AUTH
        assert _refused_at_tls(broker.port, client_context(pki, certificate=None))
    finally:
        close_all()
        errors = broker.stop()
    assert broker.process.returncode == 0
    assert "s3cret" not in errors and "tok-1" not in errors  # the log holds no secret


def test_the_command_offers_only_the_mechanisms_it_is_told() -> None:
    broker = Process("--user", "app:s3cret", "--sasl-mechanisms", "scram-sha-256,PLAIN")
    try:
        client = SaslClient(connect(broker.port))
        assert client.hello() == ["SCRAM-SHA-256", "PLAIN"]
        assert scram_login(client, "SCRAM-SHA-256", "app", "s3cret").code == OK
        assert login(connect(broker.port), "SCRAM-SHA-512", b"n,,n=app,r=abc").code == AUTH
    finally:
        close_all()
        broker.stop()


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--sasl-mechanisms", "CRAM-MD5"], "unknown SASL mechanism 'CRAM-MD5': known are"),
        (["--sasl-mechanisms", ","], "no SASL mechanism named"),
        (["--oauth-token", "canary-token"], "expected TOKEN=USER"),
        (["--oauth-token", "canary-token="], "expected TOKEN=USER"),
    ],
)
def test_bad_login_options_are_argparse_errors(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(argv)
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert error in err and "canary-token" not in err  # a token is never echoed


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (
            ["--sasl-mechanisms", "SCRAM-SHA-256,PLAIN"],
            "--sasl-mechanisms: SASL mechanism SCRAM-SHA-256 is not enabled (it needs a user); "
            "enabled: PLAIN, ANONYMOUS",
        ),
        (
            ["--user", "a:b", "--sasl-mechanisms", "EXTERNAL"],
            "EXTERNAL is not enabled (it needs client certificates",
        ),
        (["--sasl-mechanisms", "XOAUTH2"], "XOAUTH2 is not enabled (it needs an OAuth token)"),
        (["--tls-client-ca", "ca.pem"], "--tls-client-ca needs --tls-cert and --tls-key"),
    ],
)
def test_login_options_that_do_not_fit_exit_with_status_2(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert error in capsys.readouterr().err


def test_an_unreadable_client_ca_is_a_clear_error_at_start(
    pki: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    tls = ["--tls-cert", pki["server"], "--tls-key", pki["server_key"]]
    assert main([*tls, "--tls-client-ca", str(tmp_path / "missing.pem")]) == 2
    assert "haclient-broker: cannot load the TLS files" in capsys.readouterr().err
