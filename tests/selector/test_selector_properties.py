"""Hypothesis: random syntax trees, rendered to text, parsed and compiled, against a reference.

The reference evaluator below walks the tree directly and spells out each JMS rule in the
plainest way (LIKE by a recursive matcher, not a regex; three-valued logic by tables), so a
disagreement points at the compiled closures (their fast paths especially) or the parser.
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from haclient.errors import InvalidSelectorError
from haclient.selector import compile_selector
from haclient.selector import nodes as n
from haclient.selector.parser import parse


def examples(count: int) -> int:
    """``count`` property examples, scaled by ``$HACLIENT_PROPERTY_SCALE`` (``make test-quick``
    runs a quarter of them; ``make test`` all)."""
    return max(10, round(count * float(os.environ.get("HACLIENT_PROPERTY_SCALE", "1"))))


SETTINGS = settings(
    max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

NAMES = ["a", "b", "s", "JMSPriority", "JMSType", "JMSXGroupSeq"]
ALPHABET = "ab%_!'"
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


# --- the reference ---------------------------------------------------------------------------


class Unsupported:
    """A looked-up value of an unsupported type (like bytes)."""


def is_num(v: object) -> bool:
    return type(v) in (int, float)


def ref_compare(op: str, left: object, right: object) -> bool | None:
    if left is None or right is None:
        return None
    if is_num(left) and is_num(right):
        x: Any = left
        y: Any = right
        if type(x) is not type(y):
            try:
                x, y = float(x), float(y)
            except OverflowError:
                return None
        result: bool = {
            "=": x == y,
            "<>": x != y,
            "<": x < y,
            "<=": x <= y,
            ">": x > y,
            ">=": x >= y,
        }[op]
        return result
    if op in ("=", "<>") and type(left) is type(right) and type(left) in (str, bool):
        return (left == right) if op == "=" else (left != right)
    return None


def ref_arith(op: str, left: object, right: object) -> object:
    if not (is_num(left) and is_num(right)):
        return None
    x: Any = left
    y: Any = right
    try:
        if op == "+":
            return x + y
        if op == "-":
            return x - y
        if op == "*":
            return x * y
        if y == 0:
            return None
        if type(x) is int and type(y) is int:
            sign = -1 if (x < 0) != (y < 0) else 1
            return sign * (abs(x) // abs(y))
        return x / y
    except OverflowError:
        return None


def like_tokens(pattern: str, escape: str | None) -> list[tuple[str, str]]:
    """The pattern as ('lit', ch), ('one', '_'), ('any', '%') items."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if escape is not None and ch == escape:
            out.append(("lit", pattern[i + 1]))
            i += 2
            continue
        out.append(("any", ch) if ch == "%" else ("one", ch) if ch == "_" else ("lit", ch))
        i += 1
    return out


def ref_like(value: str, items: list[tuple[str, str]]) -> bool:
    @functools.cache
    def match(i: int, j: int) -> bool:
        if j == len(items):
            return i == len(value)
        kind, ch = items[j]
        if kind == "any":
            return match(i, j + 1) or (i < len(value) and match(i + 1, j))
        if i == len(value):
            return False
        return (kind == "one" or value[i] == ch) and match(i + 1, j + 1)

    return match(0, 0)


def and3(x: bool | None, y: bool | None) -> bool | None:
    if x is False or y is False:
        return False
    return None if x is None or y is None else True


def or3(x: bool | None, y: bool | None) -> bool | None:
    if x is True or y is True:
        return True
    return None if x is None or y is None else False


def not3(x: bool | None) -> bool | None:
    return None if x is None else not x


def ref_value(node: n.Node, props: dict[str, object]) -> object:
    match node:
        case n.Literal(value):
            return value
        case n.Identifier(name):
            v = props.get(name)
            return Unsupported() if isinstance(v, bytes) else v
        case n.Unary(op, operand):
            v = ref_value(operand, props)
            return (-v if op == "-" else v) if is_num(v) else None  # type: ignore[operator]
        case n.Arithmetic(op, left, right):
            return ref_arith(op, ref_value(left, props), ref_value(right, props))
    return ref_condition(node, props)


def ref_condition(node: n.Node, props: dict[str, object]) -> bool | None:
    match node:
        case n.Literal() | n.Identifier():
            v = ref_value(node, props)
            return v if isinstance(v, bool) else None
        case n.Comparison(op, left, right):
            return ref_compare(op, ref_value(left, props), ref_value(right, props))
        case n.Between(operand, low, high, negated):
            v = ref_value(operand, props)
            inside = and3(
                ref_compare(">=", v, ref_value(low, props)),
                ref_compare("<=", v, ref_value(high, props)),
            )
            return not3(inside) if negated else inside
        case n.In(identifier, values, negated):
            v = props.get(identifier.name)
            if not isinstance(v, str):
                return None
            return (v in values) != negated
        case n.Like(identifier, pattern, escape, negated):
            v = props.get(identifier.name)
            if not isinstance(v, str):
                return None
            return ref_like(v, like_tokens(pattern, escape)) != negated
        case n.IsNull(identifier, negated):
            return (props.get(identifier.name) is None) != negated
        case n.Not(operand):
            return not3(ref_condition(operand, props))
        case n.And(left, right):
            return and3(ref_condition(left, props), ref_condition(right, props))
        case n.Or(left, right):
            return or3(ref_condition(left, props), ref_condition(right, props))
    raise AssertionError(node)


# --- trees -----------------------------------------------------------------------------------

identifiers = st.sampled_from(NAMES).map(n.Identifier)
string_identifiers = st.sampled_from(["s", "JMSType", "a"]).map(n.Identifier)  # IN, LIKE
small_ints = st.integers(-3, 3)
int_literals = st.one_of(small_ints, st.integers(LONG_MIN, LONG_MAX)).map(n.Literal)
float_literals = st.one_of(
    st.sampled_from([0.0, -0.0, 0.5, -1.5, 2.0, 3.0]),
    st.floats(allow_nan=False, allow_infinity=False),
).map(n.Literal)
string_literals = st.text(ALPHABET, max_size=4).map(n.Literal)
bool_literals = st.booleans().map(n.Literal)


def numeric(children: st.SearchStrategy[n.Node]) -> st.SearchStrategy[n.Node]:
    return st.one_of(
        st.builds(n.Unary, st.sampled_from("+-"), children).filter(
            lambda u: not isinstance(u.operand, n.Literal)
        ),
        st.builds(n.Arithmetic, st.sampled_from(n.ARITHMETIC_OPERATORS), children, children),
    )


num_exprs = st.recursive(
    st.one_of(identifiers, int_literals, float_literals), numeric, max_leaves=4
)


@st.composite
def likes(draw: st.DrawFn) -> n.Like:
    escape = draw(st.sampled_from([None, "!"]))
    pattern = draw(st.text(ALPHABET, max_size=5))
    if escape is not None and _dangling(pattern, escape):
        pattern += "a"
    return n.Like(draw(string_identifiers), pattern, escape, draw(st.booleans()))


def _dangling(pattern: str, escape: str) -> bool:
    i = 0
    while i < len(pattern):
        if pattern[i] == escape:
            if i + 1 == len(pattern):
                return True
            i += 1
        i += 1
    return False


def comparisons(conditions: st.SearchStrategy[n.Node]) -> st.SearchStrategy[n.Node]:
    equatable = st.one_of(num_exprs, string_literals, bool_literals, conditions)
    literals = st.one_of(small_ints.map(n.Literal), float_literals)
    ops = st.sampled_from(n.COMPARISON_OPERATORS)
    equality = st.sampled_from(["=", "<>"])
    return st.one_of(
        st.builds(n.Comparison, equality, equatable, equatable),
        st.builds(n.Comparison, st.sampled_from(["<", "<=", ">", ">="]), num_exprs, num_exprs),
        # The shapes the compiler specializes: an identifier against a literal, either side.
        st.builds(n.Comparison, ops, identifiers, literals),
        st.builds(n.Comparison, ops, literals, identifiers),
        st.builds(n.Comparison, equality, identifiers, string_literals),
        st.builds(n.Comparison, equality, bool_literals, identifiers),
    ).map(lambda node: node)  # mapped: one_of does not flatten it, so it is one choice of many


def compound(children: st.SearchStrategy[n.Node]) -> st.SearchStrategy[n.Node]:
    return st.one_of(
        comparisons(children),
        st.builds(n.Not, children),
        st.builds(n.And, children, children),
        st.builds(n.Or, children, children),
    )


predicates = st.one_of(
    bool_literals,
    identifiers,
    st.builds(n.Between, num_exprs, num_exprs, num_exprs, st.booleans()),
    st.builds(
        n.Between, identifiers, small_ints.map(n.Literal), small_ints.map(n.Literal), st.booleans()
    ),
    st.builds(
        n.In,
        string_identifiers,
        st.lists(st.text(ALPHABET, max_size=3), min_size=1, max_size=3).map(tuple),
        st.booleans(),
    ),
    likes(),
    st.builds(n.IsNull, identifiers, st.booleans()),
    comparisons(st.nothing()),
)
conditions = st.recursive(predicates, compound, max_leaves=8)

any_value = st.one_of(
    st.none(),
    st.booleans(),
    small_ints,
    st.integers(LONG_MIN, LONG_MAX),
    st.sampled_from([2**53 + 1, 10**400, -(10**400)]),
    st.floats(-3, 3),
    st.floats(),
    st.text(ALPHABET, max_size=4),
    st.just(b"a"),
)
numbers = st.one_of(small_ints, st.floats(-3, 3).map(lambda f: round(f * 2) / 2))
short_text = st.text(ALPHABET, max_size=4)
# Each name usually holds its typical type, so that most results are defined (not UNKNOWN).
TYPICAL = {"a": numbers, "b": numbers, "s": short_text, "JMSPriority": small_ints}
TYPICAL |= {"JMSType": short_text, "JMSXGroupSeq": st.booleans()}
property_maps = st.fixed_dictionaries(
    {
        name: st.integers(0, 3).flatmap(lambda i, name=name: TYPICAL[name] if i else any_value)  # type: ignore[misc]
        for name in NAMES
    }
)


# --- properties ------------------------------------------------------------------------------


@SETTINGS
@given(conditions, st.lists(property_maps, min_size=1, max_size=4))
def test_compiled_selector_agrees_with_reference(
    tree: n.Node, messages: list[dict[str, object]]
) -> None:
    text = n.render(tree)
    selector = compile_selector(text)
    for props in messages:
        expected = ref_condition(tree, props)
        got = selector.evaluate(props.get)
        assert got is expected, (text, props)
        assert selector.matches(props.get) is (expected is True)


@SETTINGS
@given(conditions)
def test_render_then_parse_round_trips(tree: n.Node) -> None:
    text = n.render(tree)
    parsed = parse(text)
    assert parsed == tree
    assert n.render(parsed) == text


@SETTINGS
@given(conditions)
def test_identifiers_are_the_names_in_the_tree(tree: n.Node) -> None:
    text = n.render(tree)
    expected = {name for name in NAMES if _mentions(tree, name)}
    assert compile_selector(text).identifiers == expected


def _mentions(node: object, name: str) -> bool:
    if isinstance(node, n.Identifier):
        return node.name == name
    if isinstance(node, tuple):
        return any(_mentions(x, name) for x in node)
    if hasattr(node, "__dataclass_fields__"):
        return any(_mentions(getattr(node, f), name) for f in node.__dataclass_fields__)
    return False


SELECTORISH = st.lists(
    st.sampled_from(
        [
            *"ab()'=<>+-*/,.%_ 0123456789eExL!\"#",
            *["AND ", " OR ", "NOT ", " IN ", " LIKE ", " BETWEEN ", " IS ", " NULL", " ESCAPE "],
            *["TRUE", "JMSType", "JMSDestination"],
        ]
    ),
    max_size=30,
).map("".join)


@SETTINGS
@given(SELECTORISH, property_maps)
def test_arbitrary_text_compiles_or_raises_invalid_selector(
    text: str, props: dict[str, object]
) -> None:
    try:
        selector = compile_selector(text)
    except InvalidSelectorError as exc:
        column = int(str(exc).split(":", 1)[0].removeprefix("column "))
        assert 1 <= column <= len(text) + 1
        return
    assert selector.evaluate(props.get) in (True, False, None)


@SETTINGS
@given(
    st.sampled_from(NAMES),
    st.floats(allow_nan=False, allow_infinity=False) | st.integers(LONG_MIN, LONG_MAX),
)
def test_numeric_literals_render_and_parse_exactly(name: str, value: float) -> None:
    tree = n.Comparison("=", n.Identifier(name), n.Literal(value))
    parsed = parse(n.render(tree))
    assert parsed == tree
    got = parsed.right.value  # type: ignore[union-attr]
    assert type(got) is type(value)
    assert math.copysign(1, got) == math.copysign(1, value) or value == 0


@settings(max_examples=examples(1500), deadline=None)
@given(likes(), st.text(ALPHABET, max_size=6))
def test_like_agrees_with_reference(like: n.Like, value: str) -> None:
    # Every pattern shape (the string-method fast paths and the regex) against the matcher.
    props: dict[str, object] = {like.identifier.name: value}
    expected = ref_condition(like, props)
    assert compile_selector(n.render(like)).evaluate(props.get) is expected, (like, value)


@SETTINGS
@given(num_exprs, property_maps)
def test_arithmetic_values_agree_with_reference(expr: n.Node, props: dict[str, object]) -> None:
    # The value, not just the truth of a comparison: "expr = result" with result the reference.
    value = ref_value(expr, props)
    if value is not None and not is_num(value):
        return  # a bare identifier holding a string, boolean or bytes: not arithmetic
    selector = compile_selector(f"{n.render(expr)} = result")
    got = selector.evaluate({**props, "result": value}.get)
    if value is None:
        assert got is None
    else:
        assert got is (value == value), (n.render(expr), props, value)  # NaN is never equal
