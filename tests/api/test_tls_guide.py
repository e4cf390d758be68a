"""docs/guide/tls.md, run as written: the reference broker serves TLS with the
guide's command line, a client trusts a private certificate authority through ``SSL_CERT_FILE``
and, without it, is refused at once with ``AuthenticationError``. Certificates come from
trustme; the broker is stopped by its pid."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from chaos.net import free_port

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide" / "tls.md"
BIN = Path(sys.executable).parent
TIMEOUT = 60.0

APP = """
import sys

import haclient
from haclient import Queue, TextMessage

try:
    with haclient.connect(sys.argv[1]) as conn:
        conn.start()
        with conn.create_session() as session:
            session.create_producer(Queue("tls")).send(TextMessage("over TLS"))
            print("received", session.create_consumer(Queue("tls")).receive(timeout=10).text)
except haclient.AuthenticationError as exc:
    print("refused:", exc)
"""


def guide_commands() -> list[str]:
    blocks = re.findall(r"^```sh\n(.*?)^```", GUIDE.read_text(), re.M | re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


@pytest.fixture
def tls_files(tmp_path: Path) -> Path:
    """server.pem, server.key (for localhost) and ca.pem in ``tmp_path``."""
    ca = trustme.CA()
    server = ca.issue_cert("localhost")
    server.cert_chain_pems[0].write_to_path(tmp_path / "server.pem")
    server.private_key_pem.write_to_path(tmp_path / "server.key")
    ca.cert_pem.write_to_path(tmp_path / "ca.pem")
    (tmp_path / "app.py").write_text(APP)
    return tmp_path


@pytest.fixture
def broker_port(tls_files: Path) -> Iterator[int]:
    """The guide's broker command, on a free port, in the folder of its certificate."""
    (line,) = [c for c in guide_commands() if "haclient-broker" in c]
    port = free_port()
    argv = shlex.split(line.replace("5671", str(port)))
    argv[0] = str(BIN / argv[0].removeprefix(".venv/bin/"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        argv, cwd=tls_files, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as broker:
        try:
            assert broker.stdout is not None
            first = broker.stdout.readline()
            assert f"listening on amqps://127.0.0.1:{port}" in first, first
            yield port
        finally:
            os.kill(broker.pid, signal.SIGINT)
            broker.wait(timeout=TIMEOUT)


def _client(folder: Path, port: int, with_ca: bool) -> str:
    """The guide's client command line (``SSL_CERT_FILE=... python app.py``), or the same
    without ``SSL_CERT_FILE``."""
    (line,) = [c for c in guide_commands() if c.startswith("SSL_CERT_FILE=")]
    assignment, *argv = shlex.split(line)
    env = {k: v for k, v in os.environ.items() if k not in {"SSL_CERT_FILE", "SSL_CERT_DIR"}}
    if with_ca:
        env["SSL_CERT_FILE"] = str(folder / "ca.pem")
    assert assignment.startswith("SSL_CERT_FILE=") and argv[:2] == ["python", "app.py"]
    url = f"amqps://localhost:{port}"
    done = subprocess.run(
        [sys.executable, "app.py", url, *argv[2:]],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_guide_a_private_ca_through_ssl_cert_file(tls_files: Path, broker_port: int) -> None:
    assert _client(tls_files, broker_port, with_ca=True) == "received over TLS"


def test_the_guide_an_untrusted_certificate_is_refused_at_once(
    tls_files: Path, broker_port: int
) -> None:
    out = _client(tls_files, broker_port, with_ca=False)
    assert out.startswith("refused:") and "certificate verify failed" in out, out
