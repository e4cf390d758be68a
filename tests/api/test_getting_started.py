"""docs/guide/getting-started.md and the README's quick start, run as written: the reference
broker from the page's command lines, the programs it shows (``examples/``), a shared-store pair
whose master is killed while ``examples/resilient_orders.py`` runs, and the metrics endpoint
read with the page's ``curl`` line. Real processes, on free loopback ports instead of
5672/5673/9464 and a temporary store file instead of /tmp/orders.db, each stopped by its pid.
The install lines are the packaging tests' (tests/packaging/test_distributions.py)."""

from __future__ import annotations

import os
import queue
import re
import shlex
import shutil
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
GUIDE = ROOT / "docs" / "guide" / "getting-started.md"
TIMEOUT = 60.0


def blocks(path: Path, language: str) -> list[str]:
    """The code blocks of ``path`` in ``language``, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```", path.read_text(), re.M | re.S)


def lines(path: Path) -> list[str]:
    """Every line of the ``sh`` blocks of ``path``, in order."""
    return [line.strip() for b in blocks(path, "sh") for line in b.splitlines() if line.strip()]


class Process:
    """A process started from one command line, its stdout read line by line in a thread."""

    def __init__(self, argv: list[str], cwd: Path = ROOT) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        self.argv = argv
        self.popen = subprocess.Popen(
            argv,
            cwd=cwd,
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


def _on_free_ports(line: str, ports: dict[str, str], store: Path) -> str:
    for old, new in ports.items():
        line = re.sub(rf"\b{old}\b", new, line)
    return line.replace("/tmp/orders.db", str(store))


def _argv(line: str, ports: dict[str, str], store: Path) -> list[str]:
    argv = shlex.split(_on_free_ports(line, ports, store), comments=True)
    program = argv[0].removeprefix(".venv/bin/")
    assert program != argv[0], f"not a .venv/bin command: {line}"
    return [str(BIN / program), *argv[1:]]


def _examples(tmp_path: Path, ports: dict[str, str]) -> Path:
    """A folder with ``examples/`` as the page shows them, on the free ports: the page's
    ``examples/...`` paths run from there."""
    folder = tmp_path / "run"
    (folder / "examples").mkdir(parents=True)
    for example in (ROOT / "examples").glob("*.py"):
        text = example.read_text()
        for old, new in ports.items():
            text = re.sub(rf"\b{old}\b", new, text)
        (folder / "examples" / example.name).write_text(text)
    return folder


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def test_the_readme_quick_start_runs_as_written(tmp_path: Path, processes: list[Process]) -> None:
    readme = ROOT / "README.md"
    (broker_line,) = [line for line in lines(readme) if "haclient-broker" in line]
    (program,) = blocks(readme, "python")
    assert program in (ROOT / "examples" / "hello.py").read_text()  # the same program
    ports = {"5672": str(free_port())}
    broker = Process(_argv(broker_line, ports, tmp_path / "none.db"))
    processes.append(broker)
    broker.wait_for("haclient-broker listening on")
    (tmp_path / "quick_start.py").write_text(_on_free_ports(program, ports, tmp_path))
    done = _run([sys.executable, str(tmp_path / "quick_start.py")], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["sent: order 1", "received: order 1"]
    assert broker.stop() == 0


def test_the_getting_started_steps_run_as_written(tmp_path: Path, processes: list[Process]) -> None:
    steps = lines(GUIDE)
    install, rest = steps[:2], steps[2:]
    assert install == ["python3 -m venv .venv", ".venv/bin/pip install . ./chaos"]
    assert "<!-- include examples/hello.py -->" in GUIDE.read_text()
    assert "<!-- include examples/hello_async.py -->" in GUIDE.read_text()
    single, hello, hello_async, master_line, slave_line, orders_line, curl_line = rest
    ports = {p: str(free_port()) for p in ("5672", "5673", "9464")}
    store = tmp_path / "orders.db"
    folder = _examples(tmp_path, ports)

    # Steps 2-4: one broker; the first programs, blocking and async.
    broker = Process(_argv(single, ports, store))
    processes.append(broker)
    broker.wait_for("haclient-broker listening on amqp://127.0.0.1:")
    for line, order in ((hello, "order 1"), (hello_async, "order 2")):
        done = _run(_argv(line, ports, store), folder)
        assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
        assert done.stdout.splitlines() == [f"sent: {order}", f"received: {order}"], line
        assert f"received: {order}" in GUIDE.read_text()
    assert broker.stop() == 0  # Ctrl-C

    # Step 5: a shared-store pair; its master killed while the orders flow.
    master = Process(_argv(master_line, ports, store))
    processes.append(master)
    assert "(master of store" in master.wait_for("haclient-broker listening on")
    slave = Process(_argv(slave_line, ports, store))
    processes.append(slave)
    slave.wait_for("waiting as its slave")
    orders = Process(_argv(orders_line, ports, store), cwd=folder)
    processes.append(orders)
    orders.wait_for("metrics at http://127.0.0.1:")
    orders.wait_for("sent 2000 orders")
    master.stop(signal.SIGKILL)  # kill -9, as Ctrl-\\ does
    orders.wait_for("failover completed: now on amqp://app:******@127.0.0.1:")

    # Step 6: the metrics endpoint, while the orders still flow.
    if shutil.which("curl") is None:
        pytest.fail("curl is not installed: the page's metrics step cannot run")
    scraped = subprocess.run(
        _on_free_ports(curl_line, ports, store),
        shell=True,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert (
        'haclient_failovers_total{connection="resilient-orders",outcome="completed"} 1.0'
        in scraped.stdout.splitlines()
    ), scraped.stdout + scraped.stderr

    summary = orders.wait_for("sent 20000 orders, received 20000 distinct")
    assert "lost 0" in summary, summary
    assert orders.popen.wait(timeout=TIMEOUT) == 0  # it ends by itself once it said so
    assert slave.stop() == 0


def test_the_broker_on_a_busy_port_says_so_in_one_line_and_exits_2() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = _run([str(BIN / "haclient-broker"), "--port", str(port)], ROOT)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"haclient-broker: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
