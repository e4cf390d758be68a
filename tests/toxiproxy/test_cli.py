"""``haclient-toxiproxy`` (run as ``python -m chaos.toxiproxy.cli``): serves until SIGINT or
SIGTERM and exits 0; a busy port or a non-loopback host is one clear line and a non-zero exit."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.toxiproxy.client import ToxiproxyClient

TIMEOUT = 20.0
ROOT = Path(__file__).resolve().parents[2]
COMMAND = [sys.executable, "-m", "chaos.toxiproxy.cli"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *args], capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_serves_until_a_signal_then_exits_cleanly(signum: signal.Signals) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(
        [*COMMAND, "--port", "0"], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("haclient-toxiproxy: API on http://127.0.0.1:")
            client = ToxiproxyClient(line.split(" on ", 1)[1].strip())
            assert client.version() == "2.12.0"
            client.create_proxy("p", "127.0.0.1:9")
            process.send_signal(signum)
            assert process.wait(timeout=TIMEOUT) == 0
        finally:
            if process.poll() is None:
                process.kill()


def test_a_busy_port_is_one_line_and_exit_1() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = run("--port", str(port))
    assert done.returncode == 1
    assert done.stderr == (
        f"haclient-toxiproxy: cannot listen on 127.0.0.1:{port}: Address already in use\n"
    )


def test_a_non_loopback_host_is_refused() -> None:
    done = run("--host", "0.0.0.0", "--port", "0")
    assert done.returncode == 2
    assert "loopback addresses only" in done.stderr and done.stderr.count("\n") == 1
