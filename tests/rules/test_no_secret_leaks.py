"""No secret leaks: a whole failover scenario run with canary secrets, and everything a user or
operator can see searched for them.

The secrets: a password (SASL SCRAM and PLAIN), an OAuth token (XOAUTH2, from a
``token_provider``), the client key's password and a trust store password, each a canary string
that occurs nowhere else. The scenario: two reference brokers serving mutual TLS and every login
mechanism; a connection logs in with the password, another with the token; messages go through;
the first broker is killed and both connections fail over to the second; a wrong password, a
wrong key password and a revoked token are refused; the chaos runner runs a kill against brokers
that want the password. What is searched: exception texts with their whole chains and
tracebacks, ``repr``/``str`` of URLs, options and connections, ``statistics()``, every log record
at DEBUG (with its traceback), the Prometheus exposition, listener events, and every file the
chaos run wrote (ledger and report) with what it printed. (The Spark data source's plans and
task errors are searched by tests/spark/test_spark_secrets.py, which has a Spark session.)
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from cryptography.hazmat.primitives import serialization
from failoverkit import TIMEOUT, Recorder, failover_url
from prometheus_client import CollectorRegistry, generate_latest

import haclient
from chaos.broker import BrokerThread
from chaos.cli import main as chaos_main
from failover.url import parse_url
from haclient.amqp.config import TlsServerOptions
from haclient.destination import Queue
from haclient.errors import AuthenticationError, ConfigurationError, HAClientError
from haclient.message import TextMessage
from haclient.metrics import HAClientCollector
from haclient.options import CLIENT_OPTIONS

PASSWORD = "canaryPW-4b1f9e"
TOKEN = "canaryTOKEN-d27a60"
KEY_PASSWORD = "canaryKEYPW-93c5e1"
TRUST_PASSWORD = "canaryTRUSTPW-7e02ab"
CANARIES = (PASSWORD, TOKEN, KEY_PASSWORD, TRUST_PASSWORD)


class Seen:
    """Every text a user or operator could see, with where it came from."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []

    def add(self, where: str, text: object) -> None:
        self.texts.append((where, str(text)))

    def error(self, where: str, exc: BaseException) -> None:
        """The exception as a traceback prints it: message, chain (cause and context), frames."""
        self.add(where, "".join(traceback.format_exception(exc)))
        self.add(f"{where} (repr)", repr(exc))

    def leaks(self) -> list[str]:
        """Each canary found, where, with the text around it."""
        found = []
        for where, text in self.texts:
            for canary in CANARIES:
                at = text.find(canary)
                if at >= 0:
                    found.append(f"{canary} in {where}: {text[max(0, at - 80) : at + 40]!r}")
        return found


class Records(logging.Handler):
    """Every log record at DEBUG and above, formatted as a log file would show it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def records() -> Iterator[Records]:
    handler = Records()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    """A private CA, the brokers' certificate, and the client's certificate whose key is
    encrypted with ``KEY_PASSWORD`` (one PEM file, as a key store)."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("app")
    files = {
        "ca": tmp_path / "ca.pem",
        "server": tmp_path / "server.pem",
        "server_key": tmp_path / "server.key",
        "client": tmp_path / "client.pem",
    }
    ca.cert_pem.write_to_path(files["ca"])
    server.cert_chain_pems[0].write_to_path(files["server"])
    server.private_key_pem.write_to_path(files["server_key"])
    key = serialization.load_pem_private_key(client.private_key_pem.bytes(), password=None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(KEY_PASSWORD.encode()),
    )
    files["client"].write_bytes(client.cert_chain_pems[0].bytes() + encrypted)
    return files


def tls_options(pki: dict[str, Path], key_password: str = KEY_PASSWORD) -> str:
    return (
        f"transport.trustStoreLocation={pki['ca']}&transport.trustStorePassword={TRUST_PASSWORD}"
        f"&transport.keyStoreLocation={pki['client']}&transport.keyStorePassword={key_password}"
    )


def secure_url(brokers: list[BrokerThread], pki: dict[str, Path], **options: Any) -> str:
    """The failover URL over both brokers, ``app``'s password in each broker URL."""
    url = failover_url(*brokers, **options)
    for broker in brokers:
        url = url.replace(broker.url, f"amqps://app:{PASSWORD}@127.0.0.1:{broker.port}")
    return f"{url}&{tls_options(pki)}"


def round_trip(connection: Any, queue: str, text: str) -> None:
    with connection.create_session() as session:
        session.create_producer(Queue(queue)).send(TextMessage(text))
        received = session.create_consumer(Queue(queue)).receive(timeout=TIMEOUT)
        assert received is not None and received.text == text


def refused(seen: Seen, where: str, error: type[HAClientError], url: str, **kw: Any) -> None:
    with pytest.raises(error) as caught:
        haclient.connect(url, **kw).close()
    seen.error(where, caught.value)


def test_T5_no_canary_secret_reaches_what_users_and_operators_see(
    pki: dict[str, Path],
    records: Records,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seen = Seen()
    server, key, ca = (str(pki[name]) for name in ("server", "server_key", "ca"))
    tls = TlsServerOptions(server, key, client_ca_file=ca)
    logins: dict[str, Any] = {"users": {"app": PASSWORD}, "oauth_tokens": {TOKEN: "app"}}
    with BrokerThread(tls=tls, **logins) as first, BrokerThread(tls=tls, **logins) as second:
        url = secure_url([first, second], pki)
        seen.add("str(url)", parse_url(url, options=CLIENT_OPTIONS))
        seen.add("repr(url)", repr(parse_url(url, options=CLIENT_OPTIONS)))
        recorders = Recorder(), Recorder()
        calls: list[str] = []

        def token_provider() -> str:
            calls.append("token")
            return TOKEN

        # With a client certificate EXTERNAL would be chosen: the password's logins are asked for.
        by_password = haclient.connect(url, client_id="canary-password", sasl_mechanisms="PLAIN")
        by_token = haclient.connect(
            url.replace(f"app:{PASSWORD}@", "app@"),
            client_id="canary-token",
            token_provider=token_provider,
            sasl_mechanisms=("XOAUTH2",),
        )
        with by_password, by_token:
            for connection, recorder in zip((by_password, by_token), recorders, strict=True):
                connection.add_listener(recorder)
                connection.start()
                round_trip(connection, "before", "before the failover")
            first.kill()
            for recorder in recorders:  # listeners are called on a thread of their own
                recorder.wait_blocking("completed")
            for connection in (by_password, by_token):
                round_trip(connection, "after", "after the failover")
                seen.add("statistics()", connection.statistics())
                seen.add("repr(connection)", repr(connection))
                seen.add("str(connection)", str(connection))
            registry = CollectorRegistry()
            registry.register(HAClientCollector([by_password, by_token]))
            seen.add("metrics exposition", generate_latest(registry).decode())
        for recorder in recorders:
            assert recorder.named("completed"), "the scenario must fail over"
            for name in ("started", "completed", "failed", "not_restored"):
                for event in recorder.named(name):
                    seen.add(f"listener {name}", event)
                    if isinstance(event, BaseException):
                        seen.error(f"listener {name}", event)
        assert len(calls) >= 2, "the token provider is called on the failover's reconnect too"

        # What is refused says so without the secret it was given.
        wrong = secure_url([second], pki).replace(PASSWORD, PASSWORD[::-1])
        for mechanism in ("PLAIN", "SCRAM-SHA-256"):
            where = f"wrong password ({mechanism})"
            refused(seen, where, AuthenticationError, wrong, sasl_mechanisms=mechanism)
        wrong_key = secure_url([second], pki).replace(KEY_PASSWORD, KEY_PASSWORD[::-1])
        refused(seen, "wrong key password", ConfigurationError, wrong_key)
        second.revoke_token(TOKEN)
        by_token_url = secure_url([second], pki).replace(f"app:{PASSWORD}@", "app@")
        refused(
            seen,
            "revoked token",
            AuthenticationError,
            by_token_url,
            token_provider=token_provider,
            sasl_mechanisms=("XOAUTH2",),
        )

    # The chaos runner, against embedded brokers that want the password: a kill and its report.
    out = tmp_path / "chaos"
    started = time.monotonic()
    argv = ["run", "--username", "app", "--password", PASSWORD, "--count", "1"]
    assert chaos_main([*argv, "--faults", "kill", "--workloads", "auto", "--out", str(out)]) == 0
    assert time.monotonic() - started < 300
    printed = capsys.readouterr()
    seen.add("chaos stdout", printed.out)
    seen.add("chaos stderr", printed.err)
    written = sorted(path for path in out.rglob("*") if path.is_file())
    assert written, "the chaos run writes its ledger and report"
    for path in written:
        seen.add(f"chaos file {path.name}", path.read_text(errors="replace"))

    for line in records.lines:
        seen.add("log record", line)
    assert any("app" in text for _, text in seen.texts)  # the searched texts are real ones
    assert len(records.lines) > 50, "DEBUG logging was captured"
    assert seen.leaks() == []
