"""The layers stay apart: ``failover`` knows nothing of AMQP or of the client above it, its
decisions are pure, and importing it loads no ``haclient`` module, nor proton (nor anyio but
for the manager); the AMQP engine (``haclient.amqp``, with ``haclient.selector``) imports
nothing of ``failover``. What both raise, the root of the exception tree, lives in the bottom
layer (``haerrors``), which imports the standard library alone; failover's own errors are in
``failover.errors``, the client's JMS meanings in ``haclient.jms_errors`` and the AMQP table
beside the engine (``haclient.amqp.conditions``); ``haclient`` re-exports them all with plain
imports, one ``__all__``.

Two kinds of check: what each source file imports (read with ``ast``), and what a fresh
interpreter has in ``sys.modules`` after an import (run in a subprocess, so that nothing this
test session imported earlier hides a leak).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import failover
import failover.errors
import haclient
import haclient.amqp.conditions
import haclient.errors
import haclient.jms_errors
import haerrors

FAILOVER = Path(failover.__file__).parent
HACLIENT = Path(haclient.__file__).parent
HAERRORS = Path(haerrors.__file__).parent

# The modules of failover that own tasks; every other one is free of anyio.
USES_ANYIO = {"manager.py", "gate.py", "supervisor.py", "standby.py", "restore.py"}
# The modules of failover that decide and never act: no clock, no sleep, no I/O, no logging.
PURE = ["url.py", "options.py", "option_kinds.py", "policy.py", "states.py", "protocols.py"]
# What the client's upper layers load; the layers below must not.
HEAVY = ["proton", "anyio", "haclient.aio", "haclient.sync", "haclient.amqp"]
# The subpackages ``import haclient; haclient.aio...`` reaches.
SUBMODULES = ["aio", "amqp", "destination", "errors", "mapping", "message", "modes", "selector"]
SUBMODULES += ["sync"]


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _modules_after(statement: str) -> set[str]:
    """The modules a fresh interpreter has loaded after ``statement``."""
    probe = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    return set(json.loads(result.stdout))


def _loaded_after(statement: str) -> list[str]:
    """The modules of ``HEAVY`` that a fresh interpreter has loaded after ``statement``."""
    loaded = _modules_after(statement)
    return [name for name in HEAVY if name in loaded]


def test_failover_package_knows_nothing_of_amqp() -> None:
    """``failover`` imports neither proton nor anything of haclient; only the manager, its gate,
    its supervisor, its restore and its standby, which run the reconnect loops, may use anyio."""
    for path in FAILOVER.rglob("*.py"):
        banned = {"proton", "_proton", "haclient"}
        banned |= set() if path.name in USES_ANYIO else {"anyio"}
        for name in _imports(path):
            assert name.split(".")[0] not in banned, f"{path}: imports {name}"


@pytest.mark.parametrize("module", PURE)
def test_decisions_do_no_io_and_never_sleep(module: str) -> None:
    """URL parsing, policies, the state machine and the restore tiers are pure: no clock, no
    sleeping, no sockets, no threads."""
    banned = {"time", "asyncio", "anyio", "trio", "socket", "threading", "tenacity", "logging"}
    tops = {name.split(".")[0] for name in _imports(FAILOVER / module)}
    assert not tops & banned, f"{module} imports {tops & banned}"


def test_the_failover_decisions_load_no_client_anyio_or_proton() -> None:
    statement = "import failover.url, failover.policy, failover.states, failover.protocols"
    assert _loaded_after(statement) == []


def test_failover_loads_no_haclient_module() -> None:
    """Every module of ``failover``, the manager included, loads without ``haclient``."""
    modules = sorted(f"failover.{path.stem}" for path in FAILOVER.glob("[!_]*.py"))
    loaded = _modules_after(f"import failover, {', '.join(modules)}")
    assert set(modules) <= loaded
    assert sorted(name for name in loaded if name.split(".")[0] == "haclient") == []


def _outside_stdlib(path: Path) -> set[str]:
    """What ``path`` imports besides the standard library."""
    stdlib = sys.stdlib_module_names | {"__future__"}
    return {name for name in _imports(path) if name.split(".")[0] not in stdlib}


def test_the_error_tree_loads_with_the_standard_library_alone() -> None:
    """The root of the tree needs nothing but the standard library; failover's errors nothing
    but the root; the client's JMS meanings and the AMQP table nothing of the engine they sit
    below or beside (the engine's modules import them)."""
    assert _loaded_after("import haerrors") == []
    assert _loaded_after("import failover.errors") == []
    assert {path.name for path in HAERRORS.rglob("*.py")} == {"__init__.py"}
    assert _outside_stdlib(HAERRORS / "__init__.py") == set()
    assert _outside_stdlib(FAILOVER / "errors.py") == {"haerrors"}
    assert _outside_stdlib(Path(haclient.jms_errors.__file__)) == {"haerrors"}
    conditions = Path(haclient.amqp.conditions.__file__)
    assert _outside_stdlib(conditions) == {"haerrors", "haclient.jms_errors"}


def test_the_amqp_engine_and_the_selector_import_nothing_of_failover() -> None:
    """The engine is a layer of its own beside ``failover``, not above it: the errors both
    raise are ``haerrors``'s, and the engine reads its own configuration."""
    for folder in ("amqp", "selector"):
        for path in (HACLIENT / folder).rglob("*.py"):
            for name in _imports(path):
                assert name.split(".")[0] != "failover", f"{path}: imports {name}"


def test_the_bottom_layer_imports_nothing_of_the_client_or_failover() -> None:
    for path in HAERRORS.rglob("*.py"):
        for name in _imports(path):
            assert name.split(".")[0] not in {"haclient", "failover"}, f"{path}: imports {name}"


def test_the_amqp_engine_imports_errors_from_where_they_are_defined() -> None:
    """``haclient.errors`` imports ``haclient.amqp.conditions``: a module of ``haclient.amqp``
    importing ``haclient.errors`` would close a circle."""
    for path in (HACLIENT / "amqp").rglob("*.py"):
        for name in _imports(path):
            assert name not in {"haclient", "haclient.errors"}, f"{path}: imports {name}"


def test_every_error_is_one_class_under_every_name() -> None:
    """``haclient.X``, ``haclient.errors.X`` and the home module's ``X`` are one object."""
    homes = {**vars(haerrors), **vars(failover.errors), **vars(haclient.jms_errors)}
    homes |= vars(haclient.amqp.conditions)
    for name in haclient.errors.__all__:
        value = getattr(haclient.errors, name)
        assert value is getattr(haclient, name) is homes[name], name
    assert haclient.ClosedError is failover.errors.ClosedError is haerrors.ClosedError


def test_the_top_level_names_are_plain_imports_listed_once() -> None:
    """``haclient`` binds every name of ``__all__`` with a plain import (no module
    ``__getattr__``, no second list of names), and ``import haclient`` loads the client."""
    tree = ast.parse(Path(haclient.__file__).read_text())
    imported = {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module != "__future__"
        for alias in node.names
    }
    assert set(haclient.__all__) - {"__version__"} == imported
    assert not hasattr(haclient, "__getattr__")
    assert _loaded_after("import haclient") == HEAVY


def test_the_top_level_names_and_subpackages_are_reachable() -> None:
    """``haclient.connect``, ``from haclient import X`` and ``from haclient import *`` give
    every name of ``__all__``; ``haclient.aio`` and the other subpackages are attributes."""
    namespace: dict[str, object] = {}
    exec("from haclient import *", namespace)
    assert set(haclient.__all__) <= set(namespace)
    assert set(haclient.__all__) <= set(dir(haclient))
    from haclient.sync import connect

    assert haclient.connect is connect
    for name in SUBMODULES:
        assert getattr(haclient, name).__name__ == f"haclient.{name}"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        haclient.nothing  # type: ignore[attr-defined]  # noqa: B018
