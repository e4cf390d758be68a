"""docs/guide/security.md, run as written: the reference broker with TLS, client certificates,
a SCRAM user and an OAuth token, from the guide's command line, and examples/secure_orders.py
logging in each of the guide's three ways (SCRAM with the password from the environment,
EXTERNAL with a client certificate, XOAUTH2 with a token read from a file). The certificates
are made by the guide's own OpenSSL commands; the brokers run on free ports and are stopped by
their pids."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from chaos.net import free_port

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide" / "security.md"
BIN = Path(sys.executable).parent
TIMEOUT = 60.0


def guide_commands() -> list[str]:
    blocks = re.findall(r"^```sh\n(.*?)^```", GUIDE.read_text(), re.M | re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """ca.pem, server.pem and server.key (localhost), app.pem (user app's certificate and key)
    and token.txt, made by the guide's commands (the lines before its first broker's)."""
    lines = guide_commands()
    first_broker = next(i for i, line in enumerate(lines) if "haclient-broker" in line)
    setup = lines[:first_broker]
    assert [line.split()[0] for line in setup] == ["openssl"] * 3 + ["cat", "echo"], setup
    for line in setup:
        done = subprocess.run(
            line, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT
        )
        assert done.returncode == 0, f"{line}\n{done.stderr}"
    for name in ("ca.pem", "server.pem", "server.key", "app.pem"):
        assert "-----BEGIN" in (tmp_path / name).read_text(), name
    assert (tmp_path / "token.txt").read_text() == "token-1\n"
    return tmp_path


@pytest.fixture
def ports(folder: Path) -> Iterator[dict[str, str]]:
    """The guide's two broker commands, each on a free port, in the folder of their files;
    yields the guide's port -> the port used."""
    lines = [c for c in guide_commands() if "haclient-broker" in c]
    assert [re.search(r"--port (\d+)", line) is not None for line in lines] == [True, True]
    ports = {re.findall(r"--port (\d+)", line)[0]: str(free_port()) for line in lines}
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with ExitStack() as stack:
        for line in lines:
            argv = shlex.split(_on_free_ports(line, ports))
            argv[0] = str(BIN / argv[0].removeprefix(".venv/bin/"))
            broker = stack.enter_context(
                subprocess.Popen(
                    argv,
                    cwd=folder,
                    env=env,
                    stdout=subprocess.PIPE,
                    text=True,
                    stderr=subprocess.DEVNULL,
                )
            )
            stack.callback(broker.wait, timeout=TIMEOUT)
            stack.callback(os.kill, broker.pid, signal.SIGINT)
            assert broker.stdout is not None
            first = broker.stdout.readline()
            assert "listening on amqps://127.0.0.1:" in first, first
        yield ports


def _on_free_ports(line: str, ports: dict[str, str]) -> str:
    return re.sub(r"\b(567\d)\b", lambda m: ports.get(m.group(1), m.group(1)), line)


def run_example(line: str, folder: Path, ports: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """One of the guide's example lines, its ``VAR=value`` prefix as the environment."""
    words = shlex.split(_on_free_ports(line, ports))
    env = dict(os.environ)
    while "=" in words[0] and not words[0].startswith("."):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    assert words[:2] == [".venv/bin/python", "examples/secure_orders.py"], words
    return subprocess.run(
        [sys.executable, str(ROOT / words[1]), *words[2:]],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
    )


def test_the_guide_logs_in_with_scram_a_certificate_and_a_token(
    folder: Path, ports: dict[str, str]
) -> None:
    lines = [c for c in guide_commands() if "examples/secure_orders.py" in c]
    assert [("SCRAM" in c, "keyStoreLocation" in c, "token-file" in c) for c in lines] == [
        (True, False, False),
        (False, True, False),
        (False, False, True),
    ]
    for line in lines:
        done = run_example(line, folder, ports)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        assert done.stdout.strip() == "sent 10 orders, received 10"
        assert "s3cret" not in done.stdout + done.stderr


def test_the_example_reports_a_refused_token_without_quoting_it(
    folder: Path, ports: dict[str, str]
) -> None:
    (line,) = [c for c in guide_commands() if "token-file" in c]
    (folder / "token.txt").write_text("token-expired\n")
    done = run_example(line, folder, ports)
    assert done.returncode == 1
    assert done.stderr.startswith("refused: ") and "XOAUTH2" in done.stderr, done.stderr
    assert "token-expired" not in done.stderr and "Traceback" not in done.stderr
