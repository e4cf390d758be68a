"""Every import of each installable part is declared where that part is installed.

The parts: the client (``haclient``, ``failover`` and ``haerrors``, the base install),
``haclient.metrics`` (the ``metrics`` extra), ``haclient.spark`` (the ``spark`` extra) and the
test bed (``chaos``, the ``haclient-chaos`` distribution). Each source file's imports are read
with ``ast`` (those inside functions too); a third-party module is mapped to the distribution
that provides it in this environment, and that distribution must be among the requirements of
the part's install.
A part may import first-party code only from the parts its install brings along.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from dataclasses import dataclass
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLIENT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
TESTBED = tomllib.loads((ROOT / "chaos" / "pyproject.toml").read_text())["project"]


def _name(requirement: str) -> str:
    """The normalized distribution name of a requirement (``haclient[metrics]==1`` -> haclient)."""
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group()).lower()


def _extras(requirement: str) -> set[str]:
    match = re.search(r"\[([^\]]*)\]", requirement)
    return {e.strip() for e in match.group(1).split(",")} if match else set()


def _client_requirements(extras: set[str]) -> set[str]:
    """What ``pip install 'haclient[extras]'`` installs directly, self-references followed."""
    names: set[str] = set()
    todo, seen = list(CLIENT["dependencies"]), set()
    for extra in extras:
        todo += CLIENT["optional-dependencies"][extra]
    while todo:
        requirement = todo.pop()
        if _name(requirement) == "haclient":
            for extra in _extras(requirement) - seen:
                seen.add(extra)
                todo += CLIENT["optional-dependencies"][extra]
        else:
            names.add(_name(requirement))
    return names


def _testbed_requirements() -> set[str]:
    names: set[str] = set()
    for requirement in TESTBED["dependencies"]:
        if _name(requirement) == "haclient":
            names |= _client_requirements(_extras(requirement))
        else:
            names.add(_name(requirement))
    return names


@dataclass(frozen=True)
class Part:
    """One installable part: its files, what its install brings, the first-party code it may use."""

    name: str
    files: tuple[Path, ...]
    requirements: frozenset[str]
    first_party: tuple[str, ...]  # module prefixes it may import


def _py(*patterns: str) -> tuple[Path, ...]:
    return tuple(sorted(p for pattern in patterns for p in ROOT.glob(pattern)))


EXTRA_MODULES = ("haclient.metrics", "haclient.spark", "haclient.exactly_once.metrics")
METRICS_FILES = ("haclient/metrics.py", "haclient/exactly_once/metrics.py")
CLIENT_FILES = tuple(
    p
    for p in _py("haclient/**/*.py", "failover/**/*.py", "haerrors/**/*.py")
    if not p.relative_to(ROOT).as_posix().startswith((*METRICS_FILES, "haclient/spark/"))
)
PARTS = [
    Part(
        "haclient",
        CLIENT_FILES,
        frozenset(_client_requirements(set())),
        ("haclient", "failover", "haerrors"),
    ),
    Part(
        "haclient[metrics]",
        _py(*METRICS_FILES),
        frozenset(_client_requirements({"metrics"})),
        ("haclient", "failover", "haerrors"),
    ),
    Part(
        "haclient[spark]",
        _py("haclient/spark/*.py"),
        frozenset(_client_requirements({"spark"})),
        ("haclient", "failover", "haerrors"),
    ),
    Part(
        "haclient-chaos",
        _py("chaos/**/*.py"),
        frozenset(_testbed_requirements()),
        ("haclient", "failover", "haerrors", "chaos"),
    ),
]
FIRST_PARTY = {"haclient", "failover", "haerrors", "chaos"}
# Imports that only run when the application has the module already, with the reason.
BROUGHT_BY_THE_APPLICATION = {
    "trio": "haclient.aio imports it only when running on trio (anyio's other backend)",
    "opentelemetry": (
        "haclient.aio.tracing imports it, and a connection imports haclient.aio.tracing only "
        "when asked to trace (jms.tracing, tracer_provider): the 'tracing' extra installs it"
    ),
    "cryptography": (
        "haclient.aio.pkcs12 imports it only when a PKCS12 store is given "
        "(transport.storeType=PKCS12): the 'pkcs12' extra installs it"
    ),
    "psycopg": (
        "haclient.exactly_once imports it only when given a psycopg connection or a "
        "postgresql:// URL (and chaos.postgresql when a test starts a server): the "
        "'postgresql' extra installs it"
    ),
    "sniffio": (
        "haclient.amqp.rawsocket uses it when installed: anyio asks it which event loop runs, "
        "and without it anyio asks asyncio, which needs no help"
    ),
}


def _imports(path: Path) -> list[str]:
    """Every absolute import in ``path``, as dotted module names."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _allowed_first_party(part: Part, module: str) -> bool:
    if module.split(".")[0] not in part.first_party:
        return False
    # The client's base install has no extra: its modules may not import those of an extra.
    if part.name == "haclient":
        return not any(module == m or module.startswith(m + ".") for m in EXTRA_MODULES)
    return not (part.name != "haclient[spark]" and module.startswith("haclient.spark"))


def _undeclared(part: Part, root: Path = ROOT) -> list[str]:
    providers = packages_distributions()
    problems: list[str] = []
    for path in part.files:
        for module in _imports(path):
            top = module.split(".")[0]
            where = path.relative_to(root)
            if top in sys.stdlib_module_names or top in BROUGHT_BY_THE_APPLICATION:
                continue
            if top in FIRST_PARTY:
                if not _allowed_first_party(part, module):
                    problems.append(f"{where} imports {module}, which {part.name} does not bring")
                continue
            dists = {_name(d) for d in providers.get(top, [])}
            if not dists:
                problems.append(f"{where} imports {top}, which no installed distribution provides")
            elif not dists & part.requirements:
                problems.append(f"{where} imports {top} ({', '.join(sorted(dists))}), undeclared")
    return problems


@pytest.mark.parametrize("part", PARTS, ids=[p.name for p in PARTS])
def test_item1_every_import_is_declared_by_the_part_that_installs_it(part: Part) -> None:
    assert part.files, f"{part.name} has no files"
    assert _undeclared(part) == []


def test_item1_the_base_install_needs_only_proton_anyio_tenacity_and_scramp() -> None:
    assert _client_requirements(set()) == {"python-qpid-proton", "anyio", "tenacity", "scramp"}
    assert "prometheus-client" in _client_requirements({"metrics"})
    assert "pyspark" in _client_requirements({"spark"})


def test_item1_the_walk_finds_an_undeclared_import(tmp_path: Path) -> None:
    """The check itself works: a module importing something its part lacks is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("import prometheus_client\nfrom haclient.spark import options\n")
    part = Part("haclient", (bad,), frozenset({"anyio"}), ("haclient", "failover"))
    assert _undeclared(part, root=tmp_path) == [
        "bad.py imports prometheus_client (prometheus-client), undeclared",
        "bad.py imports haclient.spark, which haclient does not bring",
    ]
