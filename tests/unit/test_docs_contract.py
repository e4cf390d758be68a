"""The documentation keeps its contract with the code: one place per promise.

``docs/semantics.md`` numbers the rules; every rule must have a test named after it and a row in
``docs/rules.md``, whose dotted paths must name where their code is defined (not a re-export,
not an inherited name) and whose tests must exist; every name
``docs/api.md`` documents must exist; the README must point at ``docs/``, not at files outside
the repository. A refactoring that moves a function fails here until the docs follow it.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

# One worker: the docs and the tests are read once (cached), not once per worker.
pytestmark = pytest.mark.xdist_group("docs-contract")

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TESTS = ROOT / "tests"

_RULE = re.compile(r"^\*\*([A-Z][0-9]+)\. ", re.MULTILINE)
_ROW = re.compile(r"^\| *([A-Z][0-9]+) *\|(.*)\|(.*)\| *$", re.MULTILINE)
_CODE = re.compile(r"`([^`\n]+)`")
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Dotted names in docs/api.md that name code (URL options such as `failover.retries` do not).
_CODE_PREFIXES = (
    "haclient.",
    "failover.url.",
    "failover.policy.",
    "failover.manager.",
    "failover.errors",
    "haerrors",
    "failover.schedule.",
    "failover.listeners.",
)


def rule_ids() -> list[str]:
    """The rule ids of docs/semantics.md, in order."""
    return _RULE.findall((DOCS / "semantics.md").read_text(encoding="utf-8"))


@cache
def defined_tests() -> dict[str, set[str]]:
    """Every test function under tests/ (module level, in classes, async too), by file."""
    found: dict[str, set[str]] = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        names = {
            node.name
            for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name.startswith("test_")
        }
        found[path.relative_to(ROOT).as_posix()] = names
    return found


def named_after(rule: str, name: str) -> bool:
    """Whether test ``name`` is named after ``rule``: ``test_F1_...``, never ``test_F13_...``."""
    return re.match(rf"test_{rule}(?![0-9])", name) is not None


def rows() -> dict[str, tuple[list[str], list[str]]]:
    """docs/rules.md: rule -> (dotted paths that keep it, tests that prove it)."""
    table: dict[str, tuple[list[str], list[str]]] = {}
    for rule, kept_by, tests in _ROW.findall((DOCS / "rules.md").read_text(encoding="utf-8")):
        assert rule not in table, f"docs/rules.md has two rows for {rule}"
        table[rule] = (_CODE.findall(kept_by), _CODE.findall(tests))
    return table


def resolve(dotted: str) -> Any:
    """The object a dotted path names: the longest importable module, then attributes.

    Raises:
        LookupError: nothing of that name.
    """
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        module_name = ".".join(parts[:split])
        try:
            target: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not module_name.startswith(exc.name):
                raise  # the module exists but an import inside it failed: a real error
            continue
        for attribute in parts[split:]:
            try:
                target = getattr(target, attribute)
            except AttributeError:
                raise LookupError(f"{dotted}: no attribute {attribute!r} there") from None
        return target
    raise LookupError(f"{dotted}: no such module")


def where_defined(dotted: str) -> str | None:
    """Why ``dotted`` does not name the place where its object is *defined*, or None when it
    does: each class along the path must have the next name in its own body (not inherited),
    and the module must define the name itself (a function or class whose ``__module__`` is
    that module, or a name bound at its top level), not import it from elsewhere.
    """
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:split]))
        except ModuleNotFoundError:
            continue
        break
    else:
        return f"{dotted}: no such module"
    names = parts[split:]
    if not names:
        return None
    first = getattr(module, names[0])
    if not _defined_in_module(module, names[0], first):
        return f"{dotted}: {names[0]} is not defined in {module.__name__}"
    owner = first
    for name in names[1:]:
        if not inspect.isclass(owner):
            return None  # an attribute of a function or value: the owner is where it is
        if name not in vars(owner):
            return f"{dotted}: {owner.__qualname__} inherits {name}, it does not define it"
        owner = vars(owner)[name]
    return None


def _defined_in_module(module: Any, name: str, value: Any) -> bool:
    if inspect.isclass(value) or inspect.isfunction(value):
        # an error class shows its public module; it records the one defining it (publish)
        defined_in = vars(value).get("_defined_in", value.__module__)
        return bool(defined_in == module.__name__)
    tree = ast.parse(inspect.getsource(module))
    for node in tree.body:
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def test_semantics_numbers_each_family_of_rules_from_one_without_gaps() -> None:
    ids = rule_ids()
    assert len(ids) == len(set(ids)), "a rule id appears twice"
    families: dict[str, list[int]] = {}
    for rule in ids:
        families.setdefault(rule[0], []).append(int(rule[1:]))
    assert set(families) == set("FACSEMTOX")
    for letter, numbers in families.items():
        assert numbers == list(range(1, len(numbers) + 1)), f"{letter} rules: {numbers}"


def test_every_rule_has_a_test_named_after_it() -> None:
    names = [name for file in defined_tests().values() for name in file]
    missing = [rule for rule in rule_ids() if not any(named_after(rule, n) for n in names)]
    assert missing == [], f"no test_<rule>_... for {missing}"


def test_named_after_does_not_confuse_f1_with_f13() -> None:
    assert named_after("F1", "test_F1_plain_url")
    assert named_after("F2", "test_F2_F3_calls_block")
    assert not named_after("F1", "test_F13_a_silent_broker")
    assert not named_after("F3", "test_F2_F3_calls_block")


def test_rules_md_has_one_row_per_rule() -> None:
    assert sorted(rows()) == sorted(rule_ids())


def test_every_path_in_rules_md_resolves() -> None:
    unresolved = []
    for rule, (paths, _) in rows().items():
        assert paths, f"{rule}: docs/rules.md names no function that keeps it"
        for path in paths:
            try:
                resolve(path)
            except LookupError as exc:
                unresolved.append(f"{rule}: {exc}")
    assert unresolved == []


def test_every_path_in_rules_md_names_where_it_is_defined() -> None:
    """Not a name reached through a re-export or a base class: the module, and the class,
    whose source holds the code that keeps the rule."""
    elsewhere = []
    for rule, (paths, _) in rows().items():
        for path in paths:
            problem = where_defined(path)
            if problem is not None:
                elsewhere.append(f"{rule}: {problem}")
    assert elsewhere == []


def test_every_failover_rule_names_one_place_that_decides_it_and_one_that_carries_it_out() -> None:
    """F1-F18: the decision is the failover machine's, its execution one place of the
    executor (the supervisor, the walk, the standby, the restore or the gate)."""
    text = (DOCS / "rules.md").read_text(encoding="utf-8")
    wrong = []
    for rule, kept_by, _ in _ROW.findall(text):
        if not re.fullmatch(r"F([1-9]|1[0-8])", rule):
            continue
        decided = re.findall(r"decided: `([^`]+)`", kept_by)
        carried = re.findall(r"carried out: `([^`]+)`", kept_by)
        if len(decided) != 1 or not decided[0].startswith("failover.machine."):
            wrong.append(f"{rule}: decided {decided}")
        executors = ("supervisor", "walk", "standby", "restore", "gate")
        if len(carried) != 1 or not carried[0].startswith(
            tuple(f"failover.{e}." for e in executors)
        ):
            wrong.append(f"{rule}: carried out {carried}")
    assert wrong == []


def test_where_defined_sees_inheritance_and_re_exports() -> None:
    assert where_defined("failover.supervisor.Supervisor._close_gate") is None
    assert where_defined("failover.states.TRANSITIONS") is None
    assert where_defined("failover.manager.TRANSITIONS") is not None  # imported there
    assert where_defined("failover.manager.is_retriable_failure") is not None
    assert where_defined("failover.gate.ConnectionGate.__init__") is None
    assert where_defined("failover.gate.ConnectionGate.__repr__") is not None  # object's


def test_every_test_in_rules_md_exists_and_every_row_names_one() -> None:
    known = defined_tests()
    absent = []
    for rule, (_, tests) in rows().items():
        assert tests, f"{rule}: docs/rules.md names no test"
        for test in tests:
            file, _, name = test.partition("::")
            if name not in known.get(file, set()):
                absent.append(f"{rule}: {test}")
    assert absent == []


def test_readme_points_at_the_docs_in_the_repository() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "../shared" not in readme
    for doc in ("docs/semantics.md", "docs/api.md", "docs/rules.md"):
        assert doc in readme, f"README.md does not mention {doc}"
        assert (ROOT / doc).is_file()


def _api_text() -> str:
    return (DOCS / "api.md").read_text(encoding="utf-8")


def _code_name(token: str) -> str:
    return token.split("(")[0].strip()


def test_every_dotted_name_in_api_md_resolves() -> None:
    text = _FENCE.sub("", _api_text())
    names = {_code_name(t) for t in _CODE.findall(text) if t.startswith(_CODE_PREFIXES)}
    assert len(names) > 50  # the parser still finds the names
    unresolved = []
    for name in sorted(names):
        try:
            resolve(name)
        except LookupError as exc:
            unresolved.append(str(exc))
    assert unresolved == []


def _instance_attributes(cls: type) -> set[str]:
    """Attributes the ``__init__`` of ``cls`` or a base assigns (``self.x = ...``)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or not inspect.isfunction(init):
            continue
        try:
            source = inspect.getsource(init)
        except OSError:  # generated (a dataclass's): its fields are class attributes anyway
            continue
        names.update(re.findall(r"self\.([A-Za-z_][A-Za-z0-9_]*)\s*(?::[^=]*)?=", source))
    return names


def _class_sections() -> list[tuple[list[str], list[str]]]:
    """docs/api.md's class headings: (the classes named, the members in the table below)."""
    sections = []
    for block in re.split(r"^###? ", _api_text(), flags=re.MULTILINE)[1:]:
        heading, _, body = block.partition("\n")
        classes = [c for c in _CODE.findall(heading) if c.startswith("haclient.")]
        members = []
        for line in body.splitlines():
            if line.startswith("| `"):
                first = line.split("|")[1]
                members += [m.group() for t in _CODE.findall(first) if (m := _IDENTIFIER.match(t))]
        if classes and members:
            sections.append((classes, members))
    return sections


@pytest.mark.parametrize("classes, members", _class_sections(), ids=lambda v: str(v[0]))
def test_every_member_api_md_lists_exists_on_each_class(
    classes: list[str], members: list[str]
) -> None:
    for dotted in classes:
        cls = resolve(dotted)
        assert inspect.isclass(cls), dotted
        assigned = _instance_attributes(cls)
        missing = [m for m in members if not hasattr(cls, m) and m not in assigned]
        assert missing == [], f"{dotted} lacks {missing}"


def test_api_md_lists_the_classes_of_both_apis() -> None:
    documented = {c for classes, _ in _class_sections() for c in classes}
    for name in ("Connection", "Session", "MessageProducer", "MessageConsumer", "QueueBrowser"):
        assert {f"haclient.{name}", f"haclient.aio.{name}"} <= documented


def test_every_option_api_md_names_is_accepted() -> None:
    from failover.policy import FailoverPolicy
    from haclient.errors import ConfigurationError
    from haclient.options import CLIENT_OPTIONS

    options = {
        token
        for token in _CODE.findall(_api_text())
        if re.fullmatch(r"(failover|jms|amqp)\.[A-Za-z.]+", token)
        and not token.startswith(_CODE_PREFIXES)
    }
    assert len(options) > 20
    for option in sorted(options - {"failover.nested.amqp.X", "amqp.X"}):
        if not option.startswith("failover."):
            assert CLIENT_OPTIONS.named(option) is not None, option
            continue
        try:
            FailoverPolicy.from_options({option: "1"})
        except ConfigurationError as exc:  # a bad value is fine here, an unknown name is not
            assert "unknown option" not in str(exc), option
