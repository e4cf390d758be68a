"""The README's shell commands for the reference broker and the examples, run as written:
real processes, on free ports instead of 5672/5673 and a temporary store
file instead of /tmp/broker.db, each stopped by its pid."""

from __future__ import annotations

import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.net import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TIMEOUT = 60.0


def readme_commands() -> list[str]:
    """Every line of a README code block that runs the broker or an example."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", (ROOT / "README.md").read_text(), re.M | re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    return [
        line for line in lines if re.match(r"\.venv/bin/(haclient-broker|python examples/)", line)
    ]


class Process:
    """A process started from one command line, its stdout read line by line in a thread."""

    def __init__(self, argv: list[str]) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        self.argv = argv
        self.popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, text: str) -> str:
        """The first line (from now) that contains ``text``; fails after TIMEOUT."""
        seen = []
        while True:
            try:
                line = self.lines.get(timeout=TIMEOUT)
            except queue.Empty:
                pytest.fail(f"{self.argv[:3]} never printed {text!r}; it printed {seen}")
            seen.append(line)
            if text in line:
                return line

    def stop(self, sig: int = signal.SIGINT) -> int:
        """Send ``sig`` to the process (by its pid) and wait for it to end."""
        if self.popen.poll() is None:
            os.kill(self.popen.pid, sig)
        try:
            status = self.popen.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.kill(self.popen.pid, signal.SIGKILL)
            status = self.popen.wait(timeout=TIMEOUT)
        self._reader.join(TIMEOUT)
        assert self.popen.stdout is not None
        self.popen.stdout.close()
        return status


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in started:
        process.stop(signal.SIGKILL)


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in the checkout to its end, with no input; its output is captured."""
    return subprocess.run(
        argv,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def _argv(line: str, ports: dict[str, str], store: Path) -> list[str]:
    for old, new in ports.items():
        line = re.sub(rf"\b{old}\b", new, line)
    line = line.replace("/tmp/broker.db", str(store))
    argv = shlex.split(line, comments=True)
    program = argv[0].removeprefix(".venv/bin/")
    assert program != argv[0], f"not a .venv/bin command: {line}"
    return [str(BIN / program), *argv[1:]]


def test_the_readme_broker_and_example_commands_run_as_written(
    tmp_path: Path, processes: list[Process]
) -> None:
    commands = readme_commands()
    brokers = [c for c in commands if "haclient-broker" in c]
    examples = [c for c in commands if "examples/" in c]
    assert len(brokers) == 2 and len(examples) == 3, commands
    ports = {"5672": str(free_port()), "5673": str(free_port())}
    master_argv, slave_argv = (_argv(c, ports, tmp_path / "broker.db") for c in brokers)

    master = Process(master_argv)
    processes.append(master)
    assert "(master of store" in master.wait_for("haclient-broker listening on")
    slave = Process(slave_argv)
    processes.append(slave)
    slave.wait_for("waiting as its slave")

    for command in examples:
        argv = _argv(command, ports, tmp_path / "broker.db")
        done = run(argv)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        assert "ERROR" not in done.stderr, done.stderr

    master.stop(signal.SIGKILL)  # the slave takes the store over and says it is the master now
    assert f":{ports['5673']} (master of store" in slave.wait_for("haclient-broker listening on")
    assert slave.stop() == 0


def test_the_broker_on_a_busy_port_says_so_in_one_line_and_exits_2() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run([str(BIN / "haclient-broker"), "--port", str(port)])
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"haclient-broker: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
