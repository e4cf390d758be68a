"""The layers stay apart: ``failover`` knows nothing of AMQP or of the client above it, its
decisions are pure, and importing it (or ``haclient.errors``) loads neither anyio nor proton.

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
import haclient

FAILOVER = Path(failover.__file__).parent

# The modules of failover that own tasks; every other one is free of anyio.
USES_ANYIO = {"manager.py", "supervisor.py"}
# The modules of failover that decide and never act: no clock, no sleep, no I/O, no logging.
PURE = ["url.py", "options.py", "option_kinds.py", "policy.py", "states.py", "protocols.py"]
# What the client's upper layers load; the layers below must not.
HEAVY = ["proton", "anyio", "haclient.aio", "haclient.sync", "haclient.amqp"]


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _loaded_after(statement: str) -> list[str]:
    """The modules of ``HEAVY`` that a fresh interpreter has loaded after ``statement``."""
    probe = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(json.loads(result.stdout))
    return [name for name in HEAVY if name in loaded]


def test_failover_package_knows_nothing_of_amqp() -> None:
    """``failover`` imports neither proton nor haclient (but for ``haclient.errors``); only
    the manager and its supervisor, which run the reconnect loop, may use anyio."""
    for path in FAILOVER.rglob("*.py"):
        banned = {"proton", "_proton"} | (set() if path.name in USES_ANYIO else {"anyio"})
        for name in _imports(path):
            top = name.split(".")[0]
            assert top not in banned, f"{path}: imports {name}"
            if top == "haclient":
                assert name == "haclient.errors", f"{path}: imports {name}"


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


def test_the_error_tree_loads_no_client_anyio_or_proton() -> None:
    assert _loaded_after("import haclient.errors") == []
    assert _loaded_after("import haclient") == []


def _type_checking_names(path: Path) -> dict[str, str]:
    """Name -> module, as the ``if TYPE_CHECKING:`` imports of ``path`` give it to type checkers."""
    names: dict[str, str] = {}
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module, ast.unparse(imp)
                for alias in imp.names:
                    module = __import__(imp.module, fromlist=["*"])
                    star = alias.name == "*"
                    names |= dict.fromkeys(module.__all__ if star else [alias.name], imp.module)
    return names


def test_type_checkers_see_the_names_that_load_on_use() -> None:
    """The TYPE_CHECKING imports of ``haclient`` say the lazy table again; they must agree."""
    assert _type_checking_names(Path(haclient.__file__)) == haclient._LAZY


def test_the_top_level_names_still_load_on_use() -> None:
    """``haclient`` re-exports lazily: ``haclient.connect``, ``from haclient import X`` and
    ``from haclient import *`` still give every name of ``__all__``."""
    assert _loaded_after("import haclient; haclient.connect") == HEAVY
    assert not {"haclient.aio", "haclient.sync"} & set(_loaded_after("from haclient import Queue"))
    namespace: dict[str, object] = {}
    exec("from haclient import *", namespace)
    assert set(haclient.__all__) <= set(namespace)
    assert set(haclient.__all__) <= set(dir(haclient))
    from haclient.sync import connect

    assert haclient.connect is connect
    assert haclient.aio.__name__ == "haclient.aio"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        haclient.nothing  # noqa: B018
