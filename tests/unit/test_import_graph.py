"""The import graph of the repository's packages: layers point down, and nothing imports in a
circle.

How this works: every module of ``haclient``, ``failover``, ``haerrors``, ``chaos`` and ``bench``
is read with ``ast`` (nothing is imported). Every import statement counts, wherever it stands:
at the top, inside a function, or under ``if TYPE_CHECKING:`` (a type-level import ties two
modules as surely as a run-time one). Relative imports are resolved against the importing module's
package. ``from package import name`` is an arrow to ``package.name`` when that is a module,
else to the package itself.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

# One worker: the graph is read once (a cached parse of every module), not once per worker.
pytestmark = pytest.mark.xdist_group("import-graph")

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("haclient", "failover", "haerrors", "chaos", "bench")

# The layers of README.md's Architecture section, top first. A module may import modules of its
# own layer and of the layers below it, never of a layer above. A module belongs to the layer
# of the longest name below that is a prefix of its own.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("benchmarks (entry points)", ("bench",)),
    ("the test bed, beside the library: it may use all of it", ("chaos",)),
    (
        "entry points",
        ("haclient.metrics", "haclient.spark", "haclient.exactly_once", "haclient._extras"),
    ),
    ("blocking API", ("haclient", "haclient.sync")),
    ("async API", ("haclient.aio",)),
    (
        "values, the option table, the wire mapping, the exception tree and the selector language",
        (
            "haclient.options",
            "haclient.outgoing",
            "haclient.mapping",
            "haclient.message",
            "haclient.destination",
            "haclient.errors",
            "haclient.modes",
            "haclient.selector",
        ),
    ),
    (
        "the AMQP engine and failover, side by side: neither imports the other (APART)",
        ("haclient.amqp", "failover"),
    ),
    (
        "below the engine: the client's JMS errors, a helper of the engine and the blocking API",
        ("haclient.jms_errors", "haclient.typed_property"),
    ),
    ("the root of the exception tree, under both the engine and failover", ("haerrors",)),
)

# Parts that never import one another whatever their layers (importer, imported, by prefix):
# the engine (with the selector language) and failover are separate layers side by side,
# failover imports nothing of the client, and the bottom layer nothing at all of ours.
APART: tuple[tuple[str, str], ...] = (
    ("haclient.amqp", "failover"),
    ("haclient.selector", "failover"),
    ("failover", "haclient"),
    ("haerrors", "haclient"),
    ("haerrors", "failover"),
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _modules() -> dict[str, Path]:
    """Every module of ``PACKAGES``, by dotted name."""
    return {
        _module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")
    }


def _owner(name: str) -> str | None:
    """The module of ``PACKAGES`` that an imported name lives in (its longest prefix that is
    a module), or None for a name from elsewhere (the standard library, a dependency)."""
    modules = _modules()
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imported(module: str, is_package: bool, source: str) -> Iterator[str]:
    """The dotted names that ``module`` (of ``source``) imports: modules, or packages for the
    names they define."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source, module)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                yield submodule if submodule in _modules() else base


@functools.cache
def _graph() -> dict[str, frozenset[str]]:
    """Module -> the modules of ``PACKAGES`` it imports (itself excluded)."""
    graph: dict[str, frozenset[str]] = {}
    for module, path in _modules().items():
        imported = _imported(module, path.name == "__init__.py", path.read_text())
        owners = {_owner(name) for name in imported}
        graph[module] = frozenset(owner for owner in owners if owner and owner != module)
    return graph


def _layer(module: str) -> int:
    """The index in ``LAYERS`` of the layer ``module`` belongs to."""
    best = max(
        (
            (len(prefix), index)
            for index, (_, prefixes) in enumerate(LAYERS)
            for prefix in prefixes
            if module == prefix or module.startswith(prefix + ".")
        ),
        default=None,
    )
    assert best is not None, f"{module} is in no layer: add it to LAYERS (and to the README)"
    return best[1]


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _arrows_apart() -> set[tuple[str, str]]:
    """The imports ``APART`` forbids."""
    return {
        (module, imported)
        for module, imports in _graph().items()
        for imported in imports
        for importer, target in APART
        if _under(module, importer) and _under(imported, target)
    }


def _arrows_up() -> set[tuple[str, str]]:
    return {
        (module, imported)
        for module, imports in _graph().items()
        for imported in imports
        if _layer(imported) < _layer(module)
    }


def _reachable(graph: dict[str, frozenset[str]], start: str) -> set[str]:
    """The modules ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def _circles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """The circles of ``graph``, each as the sorted modules that reach one another (a strongly
    connected component). Quadratic, which a few hundred modules afford."""
    reach = {module: _reachable(graph, module) for module in graph}
    circles = {
        frozenset({module, *(other for other in reach[module] if module in reach[other])})
        for module in graph
        if module in reach[module]
    }
    return sorted(sorted(circle) for circle in circles)


def test_every_package_is_read() -> None:
    """The reader finds the modules it should (a wrong root would make every test pass)."""
    modules = _modules()
    for name in ("haclient.aio.session", "failover.manager", "chaos.broker.nodes", "bench.jms"):
        assert name in modules
    assert "haclient.amqp.engine" in _graph()["haclient.amqp.driver"]


def test_relative_and_type_level_imports_are_arrows() -> None:
    """The reader resolves ``from ..x import y`` and sees imports under ``if TYPE_CHECKING:``."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import gate\n"
        "if TYPE_CHECKING:\n"
        "    from ..amqp import engine\n"
        "    from ..amqp.types import ErrorCondition\n"
    )
    names = set(_imported("haclient.aio.session", False, source))
    assert names == {"typing", "haclient.aio.gate", "haclient.amqp.engine", "haclient.amqp.types"}
    assert set(_imported("haclient.aio", True, "from .gate import Gate")) == {"haclient.aio.gate"}


def test_every_module_has_a_layer() -> None:
    for module in _graph():
        _layer(module)
    top_down = ["bench.jms", "chaos.bed", "haclient.sync.session", "haclient.aio.session"]
    top_down += ["haclient.message", "haclient.amqp.engine", "haclient.jms_errors", "haerrors"]
    assert [_layer(module) for module in top_down] == sorted({_layer(m) for m in top_down})


def test_layers_point_down_only() -> None:
    """bench -> chaos -> haclient -> (the AMQP engine | failover) -> haerrors; inside haclient,
    the entry points -> the blocking API -> the async API -> values -> the AMQP engine -> the
    client's JMS errors. So nothing in haclient or failover imports chaos or bench."""
    assert sorted(_arrows_up()) == []
    assert _layer("failover.manager") == _layer("haclient.amqp.engine")


def test_the_engine_and_failover_stay_apart() -> None:
    """No module of haclient.amqp or haclient.selector imports failover; failover imports
    nothing of haclient; haerrors nothing of either (only the async API joins the engine and
    failover: its connector drives the one for the other)."""
    assert sorted(_arrows_apart()) == []


def test_the_apart_check_sees_a_forbidden_import() -> None:
    """The check is not vacuous: ``haclient.aio`` imports both, and would be caught."""
    graph = _graph()
    assert any(_under(name, "failover") for name in graph["haclient.aio.connection"])
    assert any(_under(name, "haclient.amqp") for name in graph["haclient.aio.physical"])
    assert all(_under(name, "haerrors") for name in graph["failover.errors"])


def test_the_library_never_imports_the_test_bed_or_the_benchmarks() -> None:
    for module, imports in _graph().items():
        if module.split(".")[0] in ("haclient", "failover", "haerrors"):
            assert not {name for name in imports if name.split(".")[0] in ("chaos", "bench")}


def test_no_module_imports_itself_through_others() -> None:
    """No circle of imports anywhere, type-level ones included: the graph is a hierarchy."""
    assert _circles(_graph()) == []


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": frozenset({"b"}), "b": frozenset()}, []),
        ({"a": frozenset({"b"}), "b": frozenset({"a"})}, [["a", "b"]]),
        (
            {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset()},
            [["a", "b", "c"]],
        ),
    ],
)
def test_the_circle_finder_finds_circles(
    graph: dict[str, frozenset[str]], expected: list[list[str]]
) -> None:
    assert _circles(graph) == expected
