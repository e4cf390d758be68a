"""The wheels and sdists as a user gets them: built with ``python -m build``, checked
with ``twine check``, installed into fresh virtualenvs outside the checkout, where the client
talks to a reference broker and ``pytest`` in an empty folder runs no test (exit 5).

Two distributions come from this repository: ``haclient`` (the client: ``haclient`` and
``failover``) and ``haclient-chaos`` (the test bed in ``chaos/``, with its commands and the
pytest plugin). The reference broker these tests talk to is the checkout's, stopped by its pid.
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import threading
import tomllib
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import haclient
from chaos.net import free_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("packaging"),  # one worker: the wheels and virtualenvs built once
]

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
VERSION = haclient.__version__
TIMEOUT = 300.0  # a pip install on a busy machine; a hang is far longer

SMOKE = """
import sys

import haclient
from haclient import AckMode, Queue, TextMessage

assert haclient.__file__.startswith(sys.prefix), f"not the installed package: {haclient.__file__}"
with haclient.connect(sys.argv[1]) as conn:
    conn.start()
    with conn.create_session(AckMode.CLIENT) as session:
        session.create_producer(Queue("smoke")).send(TextMessage("from the wheel"))
        message = session.create_consumer(Queue("smoke")).receive(timeout=10)
        message.acknowledge()
print("received", repr(message.text), "with haclient", haclient.__version__)
"""

IMPORT_EVERY_MODULE = """
import importlib, pkgutil, sys

import failover, haclient, haerrors

skipped = (
    "haclient.metrics",
    "haclient.spark",
    "haclient.aio.tracing",
    "haclient.exactly_once.metrics",
    "haclient.exactly_once.tracing",
)
names = []
for package in (haclient, failover, haerrors):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if not module.name.startswith(skipped):
            importlib.import_module(module.name)
            names.append(module.name)
for name in skipped:
    try:
        importlib.import_module(name)
    except ImportError as exc:
        print(name, "->", exc)
    else:
        raise SystemExit(f"{name} imported without its extra")
print(len(names), "modules")
"""

USER_TEST = """
import haclient
from haclient import Queue, TextMessage

def test_a_broker_from_the_installed_test_bed(chaos_broker):
    assert haclient.__file__.startswith(__import__("sys").prefix)
    with haclient.connect(chaos_broker.url) as conn:
        with conn.create_session() as session:
            session.create_producer(Queue("q")).send(TextMessage("hi"))
    assert chaos_broker.queue_depth("q") == 1
"""


def _env() -> dict[str, str]:
    """The environment without the checkout's virtualenv or path."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1"}


def _run(argv: list[str | Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    return done


def _check(argv: list[str | Path], cwd: Path) -> str:
    done = _run(argv, cwd)
    assert done.returncode == 0, f"{argv}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdists and wheels of both distributions, built as ``python -m build`` does."""
    out = tmp_path_factory.mktemp("dist")
    with ThreadPoolExecutor() as builds:  # side by side: each build waits on pip much of its time
        started = [builds.submit(_build, project, out) for project in (ROOT, ROOT / "chaos")]
        for build in started:
            build.result()
    return out


def _build(project: Path, out: Path) -> None:
    _check([sys.executable, "-m", "build", "--outdir", out, project], cwd=out)


def _venv(where: Path, *install: str | Path) -> Path:
    """A fresh virtualenv at ``where`` (outside the checkout) with ``install`` installed."""
    _check([sys.executable, "-m", "venv", where], cwd=where.parent)
    python = where / "bin" / "python"
    # --no-compile: no byte code for the dependencies (matplotlib, numpy ...), which nothing
    # here measures; it was most of an install's time
    _check([python, "-m", "pip", "install", "--quiet", "--no-compile", *install], cwd=where.parent)
    return python


@pytest.fixture(scope="module")
def client_venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with the client's wheel (no extras) and pytest: its python."""
    return _venv(tmp_path_factory.mktemp("client") / "venv", _wheel(dist, "haclient"), "pytest")


@pytest.fixture(scope="module")
def bed_venv(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with both wheels: the client with its metrics extra, and the test bed (as
    ``pip install '.[metrics]'`` and ``pip install . ./chaos`` in docs/install.md)."""
    wheels = [f"{_wheel(dist, 'haclient')}[metrics]", _wheel(dist, "haclient_chaos")]
    return _venv(tmp_path_factory.mktemp("bed") / "venv", *wheels)


def _wheel(dist: Path, name: str) -> Path:
    return dist / f"{name}-{VERSION}-py3-none-any.whl"


def _sdist(dist: Path, name: str) -> Path:
    return dist / f"{name}-{VERSION}.tar.gz"


class Broker:
    """The checkout's ``haclient-broker`` on a free loopback port, stopped by its pid."""

    def __init__(self) -> None:
        self.port = free_port()
        self.popen = subprocess.Popen(
            [str(BIN / "haclient-broker"), "--port", str(self.port)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self._lines.put(line)

    def wait_listening(self) -> None:
        while "listening on" not in (line := self._lines.get(timeout=60)):
            pass
        assert f":{self.port}" in line, line

    def stop(self) -> None:
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGINT)
        try:
            self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=30)
        self._reader.join(30)
        assert self.popen.stdout is not None
        self.popen.stdout.close()


@pytest.fixture
def broker() -> Iterator[Broker]:
    started = Broker()
    try:
        started.wait_listening()
        yield started
    finally:
        started.stop()


def test_item2_both_distributions_build_and_pass_twine_check(dist: Path) -> None:
    names = sorted(p.name for p in dist.iterdir())
    assert names == sorted(
        [
            _wheel(dist, "haclient").name,
            _sdist(dist, "haclient").name,
            _wheel(dist, "haclient_chaos").name,
            _sdist(dist, "haclient_chaos").name,
        ]
    )
    out = _check([sys.executable, "-m", "twine", "check", "--strict", *dist.iterdir()], cwd=dist)
    assert out.count("PASSED") == 4, out


def test_item2_the_client_wheel_holds_the_library_its_license_and_types_only(dist: Path) -> None:
    with zipfile.ZipFile(_wheel(dist, "haclient")) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(f"haclient-{VERSION}.dist-info/METADATA").decode()
        entry_points = wheel.read(f"haclient-{VERSION}.dist-info/entry_points.txt").decode()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"haclient", "failover", "haerrors", f"haclient-{VERSION}.dist-info"}
    assert {"haclient/py.typed", "failover/py.typed", "haerrors/py.typed"} <= set(names)
    assert f"haclient-{VERSION}.dist-info/licenses/LICENSE" in names
    assert "haclient/amqp/server_layers.py" not in names  # the server side is the bed's
    # One command, the outbox relay (X2); no plugin (the pytest plugin is the bed's).
    assert entry_points.split() == [
        "[console_scripts]",
        "haclient-relay",
        "=",
        "haclient.exactly_once.cli:main",
    ]
    assert "License-Expression: Apache-2.0" in metadata
    assert "Description-Content-Type: text/markdown" in metadata
    requires = sorted(line for line in metadata.splitlines() if line.startswith("Requires-Dist"))
    base = [line for line in requires if "extra ==" not in line]
    assert [line.split(":")[1].split(">")[0].strip() for line in base] == [
        "anyio",
        "python-qpid-proton",
        "scramp",
        "tenacity",
    ]
    extras = {line.split(": ")[1] for line in metadata.splitlines() if "Provides-Extra" in line}
    assert extras == {"metrics", "spark", "tracing", "pkcs12", "postgresql", "docs", "dev"}


def test_item2_the_sdists_hold_no_tests_bench_or_docs(dist: Path) -> None:
    with tarfile.open(_sdist(dist, "haclient")) as sdist:
        tops = {name.split("/")[1] for name in sdist.getnames() if "/" in name}
    assert tops >= {"haclient", "failover", "haerrors", "LICENSE", "README.md", "CHANGELOG.md"}
    assert not tops & {"chaos", "tests", "bench", "docs", "examples", "site"}
    with tarfile.open(_sdist(dist, "haclient_chaos")) as sdist:
        names = sdist.getnames()
    assert f"haclient_chaos-{VERSION}/broker/server.py" in names
    assert f"haclient_chaos-{VERSION}/LICENSE" in names


def test_item2_one_version_string() -> None:
    """``haclient.__version__`` is the client's version; the test bed is released with it."""
    client = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    bed = tomllib.loads((ROOT / "chaos" / "pyproject.toml").read_text())["project"]
    assert "version" in client["dynamic"] and "version" not in client
    assert bed["version"] == VERSION
    assert f"haclient[metrics,tracing]=={VERSION}" in bed["dependencies"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## {VERSION}" in changelog


def test_item1_every_client_module_imports_without_extras(
    client_venv: Path, tmp_path: Path
) -> None:
    out = _check([client_venv, "-I", "-c", IMPORT_EVERY_MODULE], cwd=tmp_path)
    assert "haclient.metrics -> haclient.metrics needs prometheus_client" in out
    assert "pip install 'haclient[metrics]'" in out
    assert "haclient.spark -> haclient.spark needs pyspark" in out
    assert "pip install 'haclient[spark]'" in out
    assert "haclient.aio.tracing -> haclient.aio.tracing needs opentelemetry" in out
    assert "pip install 'haclient[tracing]'" in out


def test_item2_the_installed_client_talks_to_a_reference_broker(
    client_venv: Path, broker: Broker, tmp_path: Path
) -> None:
    url = f"amqp://127.0.0.1:{broker.port}"
    out = _check([client_venv, "-I", "-c", SMOKE, url], cwd=tmp_path)
    assert out.strip() == f"received 'from the wheel' with haclient {VERSION}"


def test_item1_pytest_in_an_empty_folder_runs_no_test_with_the_client(
    client_venv: Path, tmp_path: Path
) -> None:
    done = _run([client_venv.parent / "pytest"], cwd=tmp_path)
    assert done.returncode == 5, done.stdout + done.stderr  # 5: no tests ran


def test_item1_the_test_bed_brings_its_fixtures_and_changes_no_other_run(
    bed_venv: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    done = _run([bed_venv.parent / "pytest"], cwd=empty)
    assert done.returncode == 5, done.stdout + done.stderr
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_user.py").write_text(USER_TEST)
    out = _check([bed_venv.parent / "pytest", "-q", "-p", "no:cacheprovider"], cwd=project)
    assert "1 passed" in out
    _check([bed_venv, "-I", "-c", "import haclient.metrics, chaos.bed"], cwd=tmp_path)
    for command in ("haclient-broker", "haclient-toxiproxy", "haclient-chaos"):
        assert "usage:" in _check([bed_venv.parent / command, "--help"], cwd=tmp_path)


def test_item3_the_docs_install_lines_are_the_ones_these_venvs_mirror() -> None:
    """The ``pip install`` lines of the docs (from a checkout, into ``.venv``) install what the
    virtualenvs above install from the built wheels: the client alone, the client with
    ``metrics``, the client and the test bed."""
    blocks = [
        block
        for path in [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
        for block in re.findall(r"^```sh\n(.*?)^```", path.read_text(), re.M | re.S)
    ]
    lines = {
        shlex.join(shlex.split(line, comments=True))
        for block in blocks
        for line in block.splitlines()
        if line.startswith(".venv/bin/pip install")
    }
    assert lines == {
        ".venv/bin/pip install .",
        ".venv/bin/pip install '.[metrics]'",
        ".venv/bin/pip install . ./chaos",
    }
