"""Every command line in the documentation is run by a test.

A command line is a line of a ``sh`` code block in README.md or under docs/ (a ``\\`` at the end
of a line continues it). ``RUNNERS`` says which test runs each kind of line, and
``test_every_command_line_in_the_docs_is_run_by_a_test`` fails for a line no runner takes, so
a new command in the docs needs its test. The runners read their lines from the docs, so what
they run is what the docs say (on free ports and temporary files instead of the fixed ones).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from chaos.cli import _parser
from chaos.net import free_port
from chaos.rabbitmq import _PLUGINS, _PLUGINS_WITH_TLS, ERLANG_NO_BUSY_WAIT
from chaos.rabbitmq_tls import PLUGIN
from chaos.scenarios.runner import Schedule

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TIMEOUT = 60.0

# A pattern of command lines -> the test that runs them.
_CHAOS_RUN = r"(HACLIENT_CHAOS_PASSWORD=\S+ )?\.venv/bin/haclient-chaos run.*"
"""A chaos run, its password (if any) in the environment, never on the command line."""

RUNNERS = {
    r"make (demo|test|docs|docs-check|test-quick|test-under-load)": (
        "test_the_make_targets_run_what_the_docs_say (here)"
    ),
    r"python3 -m venv \.venv": "tests/packaging/test_distributions.py (fresh virtualenvs)",
    r"\.venv/bin/pip install .+": "tests/packaging/test_distributions.py (the built wheels)",
    r"\.venv/bin/haclient-broker --port \d+ --user .+": "tests/api/test_getting_started.py",
    r"\.venv/bin/python examples/.+": "tests/api/test_getting_started.py",
    r"curl -s http://127\.0\.0\.1:\d+/metrics \| grep \w+": "tests/api/test_getting_started.py",
    r"openssl req .+|cat app\.crt app\.key > app\.pem|echo token-1 > token\.txt": (
        "tests/api/test_security_guide.py"
    ),
    r"\.venv/bin/haclient-toxiproxy .+": "test_the_toxiproxy_command_line_serves_the_api (here)",
    r"haclient-relay .+": "test_the_relay_command_line_relays_an_outbox (here)",
    _CHAOS_RUN: "test_the_chaos_run_command_lines_are_valid (here)",
    r"rabbitmq-plugins enable rabbitmq_(amqp1_0|auth_mechanism_ssl)": (
        "test_the_rabbitmq_plugin_command (here)"
    ),
    r"\.venv/bin/haclient-broker .*--tls-cert .+": "tests/api/test_tls_guide.py",
    r"SSL_CERT_FILE=\S+ python .+": "tests/api/test_tls_guide.py",
    r"\.venv/bin/haclient-broker .*--tls-client-ca .+": "tests/api/test_security_guide.py",
    r"\.venv/bin/haclient-broker .*--oauth-token .+": "tests/api/test_security_guide.py",
    r"(APP_PASSWORD=\S+ )?\.venv/bin/python examples/secure_orders\.py .+": (
        "tests/api/test_security_guide.py"
    ),
}


def skip_or_fail(reason: str) -> None:
    """Skip, or fail under ``HACLIENT_REQUIRE_BROKERS=1`` (as tests/conftest.py's
    ``skip_or_fail``, which a test module cannot import by name when other conftests load)."""
    if os.environ.get("HACLIENT_REQUIRE_BROKERS") == "1":
        pytest.fail(f"{reason}, and HACLIENT_REQUIRE_BROKERS=1 forbids skipping", pytrace=False)
    pytest.skip(reason)


def doc_files() -> list[Path]:
    """README.md and every Markdown file under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def command_lines(pattern: str | None = None) -> list[str]:
    """Every command line of the docs (continuations joined), or those matching ``pattern``."""
    lines: list[str] = []
    for path in doc_files():
        blocks = re.findall(r"^```sh\n(.*?)^```", path.read_text(), re.M | re.S)
        for block in blocks:
            joined = re.sub(r"\\\n\s*", "", block)
            lines += [line.strip() for line in joined.splitlines() if line.strip()]
    if pattern is None:
        return lines
    return [line for line in lines if re.fullmatch(pattern, _code(line))]


def _code(line: str) -> str:
    """The line without its trailing comment."""
    return shlex.join(shlex.split(line, comments=True)) if "#" in line else line


def test_every_command_line_in_the_docs_is_run_by_a_test() -> None:
    lines = command_lines()
    assert lines, "no sh blocks found"
    orphans = [line for line in lines if not any(re.fullmatch(p, _code(line)) for p in RUNNERS)]
    assert orphans == [], "command lines no test runs: add a runner to RUNNERS"
    unused = [pattern for pattern in RUNNERS if not command_lines(pattern)]
    assert unused == [], "runners whose command lines are gone from the docs"


def test_the_make_targets_run_what_the_docs_say() -> None:
    """``make -n`` prints the recipes without running them."""
    expected = {
        "demo": ["pip install", "-e . -e ./chaos", "python -m chaos.demo"],
        "test": ["mypy", "mkdocs build --strict", '-m "not alone"', "pytest -m alone"],
        "docs": ["'.[docs]'", "mkdocs serve --dev-addr 127.0.0.1:8000"],
        "docs-check": ["'.[docs]'", "chromium", "python -m tools.docs_check"],
        "test-quick": [
            "pytest -n 12",
            '-m "not rabbitmq and not postgresql"',
            "tests/unit",
            "tests/rules",
        ],
        "test-under-load": [".ci/under-load"],
    }
    targets = [
        line.split()[1] for line in command_lines(r"make (demo|test|docs|docs-check|test-[a-z-]+)")
    ]
    assert sorted(targets) == sorted(expected)
    for target in targets:
        env = {**os.environ, "MAKEFLAGS": ""}
        done = subprocess.run(
            ["make", "-n", "-B", target], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        for text in expected[target]:
            assert text in done.stdout, (target, text, done.stdout)
    for target in ("demo", "docs", "docs-check"):  # no Spark, no test tools
        done = subprocess.run(
            ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True
        )
        assert "spark" not in done.stdout and "[dev" not in done.stdout, (target, done.stdout)


def test_the_toxiproxy_command_line_serves_the_api() -> None:
    (line,) = command_lines(r"\.venv/bin/haclient-toxiproxy .+")
    argv = shlex.split(line.replace("8474", str(free_port())))
    argv[0] = str(BIN / argv[0].removeprefix(".venv/bin/"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env) as process:
        try:
            assert process.stdout is not None
            first = process.stdout.readline()
            assert first.startswith("haclient-toxiproxy: API on http://127.0.0.1:"), first
            url = first.split(" on ", 1)[1].strip()
            with urllib.request.urlopen(f"{url}/version", timeout=TIMEOUT) as answer:
                assert answer.status == 200
        finally:
            os.kill(process.pid, signal.SIGINT)
            assert process.wait(timeout=TIMEOUT) == 0


def test_the_relay_command_line_relays_an_outbox(tmp_path: Path) -> None:
    """The guide's ``haclient-relay`` line, on a reference broker and an outbox of one row: the
    row arrives on the broker, and the relay stops cleanly on SIGTERM (exit 0)."""
    import sqlite3

    from chaos.broker import BrokerThread
    from haclient import Queue, TextMessage
    from haclient.exactly_once import Outbox, install

    (line,) = command_lines(r"haclient-relay .+")
    argv = shlex.split(line)
    database = tmp_path / argv[argv.index("--database") + 1]
    db = sqlite3.connect(database)
    install(db)
    with Outbox().transaction(db) as tx:
        tx.send(Queue("docs-relay"), TextMessage("from the outbox"))
    db.close()
    with BrokerThread() as broker:
        argv[0] = str(BIN / argv[0])
        argv[argv.index("--url") + 1] = f"failover:({broker.url})"
        argv[argv.index("--database") + 1] = str(database)
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as process:
            try:
                deadline = time.monotonic() + TIMEOUT
                while _depth(broker, "docs-relay") < 1:
                    assert process.poll() is None, process.communicate()[0]
                    assert time.monotonic() < deadline, "the row never arrived"
                    time.sleep(0.02)
            finally:
                os.kill(process.pid, signal.SIGTERM)
                assert process.wait(timeout=TIMEOUT) == 0
        assert broker.queue_depth("docs-relay") == 1


def _depth(broker: Any, queue: str) -> int:
    """Messages on ``queue`` of ``broker``, 0 before the queue exists."""
    try:
        return int(broker.queue_depth(queue))
    except KeyError:
        return 0


def test_the_chaos_run_command_lines_are_valid() -> None:
    """Each ``haclient-chaos run`` line parses and makes a valid fault schedule, as the command
    does before it starts; running them (up to 24 minutes each) is the chaos tests' part."""
    lines = command_lines(_CHAOS_RUN)
    assert len(lines) >= 3, lines
    for line in lines:
        words = shlex.split(line, comments=True)
        words = words[1:] if "=" in words[0] else words  # the password, from the environment
        args = _parser().parse_args(words[1:])
        assert args.password is None, f"a password on the command line: {line}"
        schedule = Schedule(
            args.faults,
            seed=args.seed,
            count=args.count,
            duration=args.duration,
            per_round=args.per_round,
        )
        assert schedule.faults, line


@pytest.mark.parametrize("plugin", ["rabbitmq_amqp1_0", PLUGIN])
def test_the_rabbitmq_plugin_command(tmp_path: Path, plugin: str) -> None:
    """A ``rabbitmq-plugins`` line of the docs enables a plugin the test nodes run with, the
    AMQP 1.0 plugin (the README) or EXTERNAL's (docs/guide/brokers.md), on a private plugins
    file here: the node is not running, so the change is made offline.

    The Erlang VM it runs wants an epmd, and would start one as a daemon on 0.0.0.0:4369 that
    outlives the test: it gets one of its own instead, on a free loopback port, stopped here."""
    path = f"{os.environ['PATH']}:/usr/sbin"
    program = shutil.which("rabbitmq-plugins", path=path)
    epmd = shutil.which("epmd", path=path)
    if program is None or epmd is None:
        skip_or_fail(
            "RabbitMQ is not installed: no rabbitmq-plugins or epmd on PATH or in /usr/sbin"
        )
    assert program is not None and epmd is not None
    (line,) = command_lines(f"rabbitmq-plugins enable {plugin}")
    argv = [str(program), *shlex.split(line)[1:]]
    plugins = tmp_path / "enabled_plugins"
    env = {
        **os.environ,
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(plugins),
        "RABBITMQ_NODENAME": f"docs-{os.getpid()}@localhost",
        "RABBITMQ_MNESIA_BASE": str(tmp_path / "mnesia"),
        "RABBITMQ_LOG_BASE": str(tmp_path / "log"),
        "RABBITMQ_CONFIG_FILE": str(tmp_path / "none"),
        "RABBITMQ_CTL_ERL_ARGS": ERLANG_NO_BUSY_WAIT,  # as the test nodes' tools run
        "ERL_EPMD_PORT": str(free_port()),
        "ERL_EPMD_ADDRESS": "127.0.0.1",
        "HOME": str(tmp_path),
    }
    own_epmd = subprocess.Popen(
        [epmd], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_listening(int(env["ERL_EPMD_PORT"]), own_epmd)  # else the VM starts an epmd itself
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    finally:
        own_epmd.terminate()
        try:
            own_epmd.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            own_epmd.kill()
            own_epmd.wait()
    assert done.returncode == 0, done.stdout + done.stderr
    assert plugins.read_text().strip() == f"[{plugin}]."
    assert _PLUGINS.strip() == "[rabbitmq_amqp1_0]."  # what the test nodes run with
    assert _PLUGINS_WITH_TLS.strip() == f"[rabbitmq_amqp1_0,{PLUGIN}]."  # ... with TLS


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    """Wait until ``process`` accepts connections on loopback ``port``."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        assert process.poll() is None, f"exited with {process.returncode} before listening"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline, f"nothing listens on port {port}"
            time.sleep(0.02)


def _help_options(command: str, *args: str) -> set[str]:
    done = subprocess.run(
        [str(BIN / command), *args, "--help"], capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", done.stdout)) - {"--help"}


def test_the_api_command_lines_section_lists_every_command_and_option() -> None:
    """docs/api.md's "Command lines": every installed command, each with all its options."""
    section = (ROOT / "docs" / "api.md").read_text().split("## Command lines", 1)[1]
    scripts = tomllib.loads((ROOT / "chaos" / "pyproject.toml").read_text())["project"]["scripts"]
    client = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(client) == {"haclient-relay"}  # the client's one command (X2)
    own = section.split("- `haclient-broker`", 1)[0]
    missing = {option for option in _help_options("haclient-relay") if f"`{option}" not in own}
    assert missing == set(), "haclient-relay"
    for command, args in {
        "haclient-broker": (),
        "haclient-toxiproxy": (),
        "haclient-chaos": ("run",),
    }.items():
        assert command in scripts
        entry = section.split(f"- `{command}", 1)[1].split("\n- ", 1)[0]
        missing = {option for option in _help_options(command, *args) if f"`{option}" not in entry}
        assert missing == set(), command
    assert len(scripts) == 3
    listed = set(re.findall(r"`bench\.(\w+)`", section))
    runnable = {p.stem for p in (ROOT / "bench").glob("*.py") if "__main__" in p.read_text()}
    assert runnable - listed == set()
