"""``haclient.aio`` keeps its own house in order: its modules import one another without
circles (type-level imports included), a session is given its connection's context and never
imports the connection, and the acknowledge mode is branched on only by its strategy classes.

Read from the source with ``ast``; nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import haclient.aio

AIO = Path(haclient.aio.__file__).parent
PACKAGE = "haclient.aio"
# The modules that make and use a session's children: they ask the strategy (``acks``) and the
# transaction, never the mode.
CHILDREN = ["session.py", "producer.py", "consumer.py", "browser.py", "context.py"]


def _tree(name: str) -> ast.Module:
    path = AIO / name
    return ast.parse(path.read_text(), str(path))


def _aio_imports(name: str) -> set[str]:
    """The ``haclient.aio`` modules ``name`` imports, also under ``TYPE_CHECKING``."""
    imported: set[str] = set()
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
            if node.module == PACKAGE:  # ``from haclient.aio import x``: x may be a module
                modules = [f"{PACKAGE}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        imported |= {m for m in modules if m.startswith(f"{PACKAGE}.")}
    return imported


def _graph() -> dict[str, set[str]]:
    modules = {f"{PACKAGE}.{path.stem}": path.name for path in AIO.glob("*.py")}
    modules.pop(f"{PACKAGE}.__init__")
    return {module: _aio_imports(name) & modules.keys() for module, name in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), and self-imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component: list[str] = []
            while not component or component[-1] != module:
                component.append(stack.pop())
            if len(component) > 1 or module in graph[module]:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_aio_has_no_import_circles_type_level_included() -> None:
    graph = _graph()
    assert f"{PACKAGE}.session" in graph and f"{PACKAGE}.acks" in graph  # the walk saw them
    assert _circles(graph) == []


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]


def test_a_session_does_not_import_its_connection() -> None:
    """A session is given the ``ConnectionContext``: what it needs of the connection
    (subscription names, temporary destinations, registration, forgetting itself) is there."""
    assert f"{PACKAGE}.connection" not in _aio_imports("session.py")


def test_acks_and_transactions_do_not_import_each_other_for_pending_acks() -> None:
    assert f"{PACKAGE}.acks" not in _aio_imports("transaction.py")
    assert f"{PACKAGE}.acks" not in _aio_imports("emulated_transaction.py")


def test_only_the_strategies_branch_on_the_acknowledge_mode() -> None:
    """No ``AckMode.X`` in the session and its children: the mode's questions (``presettled``,
    ``needs_flusher``, ``allows_recover``, ``confirms``) are the strategy's, and "is this a
    transaction" is the transaction's."""
    for name in CHILDREN:
        members = [
            f"{name}:{node.lineno}: AckMode.{node.attr}"
            for node in ast.walk(_tree(name))
            if isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "AckMode"
        ]
        assert members == []
