"""The JMS 2.0 specification's selector examples and the evaluation rules (types, NULL, 3VL)."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import haclient.selector as selector_pkg
from haclient.errors import InvalidSelectorError
from haclient.selector import HEADER_IDENTIFIERS, Selector, compile_selector

T, F, U = True, False, None


def ev(text: str, **props: Any) -> bool | None:
    return compile_selector(text).evaluate(props.get)


def test_public_api_is_pinned() -> None:
    assert selector_pkg.__all__ == ["HEADER_IDENTIFIERS", "Selector", "compile_selector"]
    assert (
        frozenset(
            {"JMSDeliveryMode", "JMSPriority", "JMSMessageID", "JMSTimestamp"}
            | {"JMSCorrelationID", "JMSType"}
        )
        == HEADER_IDENTIFIERS
    )


def test_selector_attributes_and_value_semantics() -> None:
    sel = compile_selector("JMSPriority > 4 AND region = 'eu'")
    assert isinstance(sel, Selector)
    assert sel.text == "JMSPriority > 4 AND region = 'eu'"
    assert sel.identifiers == frozenset({"JMSPriority", "region"})
    assert sel.matches({"JMSPriority": 7, "region": "eu"}.get)
    assert sel.evaluate({"region": "eu"}.get) is None
    assert not sel.matches({"region": "eu"}.get)
    assert sel == compile_selector("JMSPriority > 4 AND region = 'eu'")
    assert hash(sel) == hash(compile_selector(sel.text))
    assert repr(sel) == "Selector(\"JMSPriority > 4 AND region = 'eu'\")"
    with pytest.raises(AttributeError):
        sel.text = "x"
    again = pickle.loads(pickle.dumps(sel))
    assert again == sel and again.matches({"JMSPriority": 9, "region": "eu"}.get)


def test_lookup_receives_identifiers_exactly_as_written() -> None:
    seen: list[str] = []

    def lookup(name: str) -> object:
        seen.append(name)
        return None

    compile_selector("Color = 'x' OR color = 'y' OR JMSType IS NULL").evaluate(lookup)
    assert seen == ["Color", "color", "JMSType"]


@pytest.mark.parametrize("text", ["", "   ", "\t\n"])
def test_empty_selector_selects_everything(text: str) -> None:
    sel = compile_selector(text)
    empty: dict[str, object] = {}
    assert sel.matches(empty.get) and sel.identifiers == frozenset()


def test_non_string_selector_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        compile_selector(None)  # type: ignore[arg-type]


# --- the specification's examples (JMS 2.0, 3.8.1.1) ------------------------------------------


def test_spec_example_car() -> None:
    text = "JMSType = 'car' AND color = 'blue' AND weight > 2500"
    assert ev(text, JMSType="car", color="blue", weight=3000) is T
    assert ev(text, JMSType="car", color="blue", weight=2500) is F
    assert ev(text, JMSType="car", color="red", weight=3000) is F
    assert ev(text, JMSType="car", color="blue") is U


@pytest.mark.parametrize(
    ("value", "expected"), [("123", T), ("12993", T), ("1234", F), ("12", F), (None, U)]
)
def test_spec_example_like_percent(value: str | None, expected: bool | None) -> None:
    assert ev("phone LIKE '12%3'", phone=value) is expected
    assert ev("phone NOT LIKE '12%3'", phone=value) is (None if expected is None else not expected)


@pytest.mark.parametrize(
    ("value", "expected"), [("lose", T), ("lase", T), ("lost", F), ("loose", F), ("lse", F)]
)
def test_spec_example_like_underscore(value: str, expected: bool) -> None:
    assert ev("word LIKE 'l_se'", word=value) is expected


@pytest.mark.parametrize(("value", "expected"), [("_foo", T), ("bar", F), ("_", T), ("x_", F)])
def test_spec_example_like_escape(value: str, expected: bool) -> None:
    assert ev("underscored LIKE '\\_%' ESCAPE '\\'", underscored=value) is expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(" UK", T), ("US", T), ("France", T), ("Peru", F), ("UK", F), (None, U), (3, U)],
)
def test_spec_example_in(value: object, expected: bool | None) -> None:
    assert ev("Country IN (' UK', 'US', 'France')", Country=value) is expected
    negated = None if expected is None else not expected
    assert ev("Country NOT IN (' UK', 'US', 'France')", Country=value) is negated


@pytest.mark.parametrize(
    ("age", "expected"), [(15, T), (17, T), (19, T), (14, F), (20, F), (19.5, F), (15.0, T)]
)
def test_spec_example_between(age: float, expected: bool) -> None:
    assert ev("age BETWEEN 15 AND 19", age=age) is expected
    assert ev("age >= 15 AND age <= 19", age=age) is expected
    assert ev("age NOT BETWEEN 15 AND 19", age=age) is (not expected)
    assert ev("age < 15 OR age > 19", age=age) is (not expected)


def test_spec_example_is_null() -> None:
    assert ev("prop_name IS NULL") is T
    assert ev("prop_name IS NULL", prop_name="x") is F
    assert ev("prop_name IS NOT NULL", prop_name="x") is T
    assert ev("prop_name IS NOT NULL") is F
    assert ev("prop_name IS NULL", prop_name=b"bytes") is F  # present, though unsupported


def test_delivery_mode_is_compared_as_a_string() -> None:
    assert ev("JMSDeliveryMode = 'PERSISTENT'", JMSDeliveryMode="PERSISTENT") is T
    assert ev("JMSDeliveryMode = 'PERSISTENT'", JMSDeliveryMode="NON_PERSISTENT") is F


# --- three-valued logic (SQL) -----------------------------------------------------------------

_VALUES = {T: "TRUE", F: "FALSE", U: "u"}  # u is an absent property: UNKNOWN as a condition
_AND = {(T, T): T, (T, F): F, (T, U): U, (F, F): F, (F, U): F, (U, U): U}
_OR = {(T, T): T, (T, F): T, (T, U): T, (F, F): F, (F, U): U, (U, U): U}


@pytest.mark.parametrize(("op", "table"), [("AND", _AND), ("OR", _OR)])
@pytest.mark.parametrize("a", [T, F, U])
@pytest.mark.parametrize("b", [T, F, U])
def test_three_valued_and_or(op: str, table: dict[Any, Any], a: Any, b: Any) -> None:
    expected = table.get((a, b), table.get((b, a)))
    assert ev(f"{_VALUES[a]} {op} {_VALUES[b]}") is expected
    # The same through comparisons and with operands as looked-up booleans.
    assert ev(f"x {op} y", x=a, y=b) is expected


@pytest.mark.parametrize(("a", "expected"), [(T, F), (F, T), (U, U)])
def test_three_valued_not(a: Any, expected: Any) -> None:
    assert ev(f"NOT {_VALUES[a]}") is expected
    assert ev("NOT (x = 1)", x={T: 1, F: 2, U: None}[a]) is expected


def test_and_or_chains() -> None:
    assert ev("a AND b AND c", a=T, b=T, c=T) is T
    assert ev("a AND b AND c", a=T, c=T) is U
    assert ev("a AND b AND c", b=F) is F
    assert ev("a OR b OR c", c=T) is T
    assert ev("a OR b OR c", a=F, b=F, c=F) is F
    assert ev("a OR b OR c", a=F, c=F) is U


def test_precedence_not_and_or() -> None:
    # NOT > AND > OR: "NOT a OR b AND c" is "(NOT a) OR (b AND c)".
    assert ev("NOT a OR b AND c", a=T, b=T, c=F) is F
    assert ev("NOT a OR b AND c", a=F, b=F, c=F) is T
    assert ev("(NOT a OR b) AND c", a=F, b=F, c=F) is F


def test_non_boolean_identifier_as_condition_is_unknown() -> None:
    assert ev("flag", flag="true") is U
    assert ev("flag", flag=1) is U
    assert ev("flag", flag=True) is T
    assert ev("NOT flag", flag=False) is T


# --- types ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "props", "expected"),
    [
        ("x = 5", {"x": "5"}, U),  # no string-to-number conversion
        ("x = '5'", {"x": 5}, U),
        ("x <> 5", {"x": "5"}, U),
        ("x = 5", {"x": 5.0}, T),  # numeric promotion
        ("x = 5.0", {"x": 5}, T),
        ("x < 5.5", {"x": 5}, T),
        ("x = TRUE", {"x": True}, T),
        ("x = TRUE", {"x": 1}, U),  # bool is not a number
        ("x = 1", {"x": True}, U),
        ("x > 0", {"x": True}, U),
        ("x = y", {"x": "a", "y": "a"}, T),
        ("x < y", {"x": "a", "y": "b"}, U),  # strings are not ordered
        ("x < y", {"x": True, "y": False}, U),
        ("x = y", {"x": True, "y": True}, T),
        ("x = 1", {"x": b"1"}, U),  # unsupported value types
        ("x = 'a'", {"x": b"a"}, U),
        ("x = 1", {}, U),
        ("x = 9007199254740993", {"x": 9007199254740992.0}, T),  # long promoted to double
        ("x = 1", {"x": 10**400}, F),
        ("x = 1.0", {"x": 10**400}, U),  # too large for a double
        ("x = x", {"x": float("nan")}, F),
        ("x <> x", {"x": float("nan")}, T),
    ],
)
def test_comparison_types(text: str, props: dict[str, Any], expected: bool | None) -> None:
    assert ev(text, **props) is expected


@pytest.mark.parametrize(
    ("text", "props", "expected"),
    [
        ("7 / 2 = 3", {}, T),
        ("-7 / 2 = -3", {}, T),  # Java truncates toward zero
        ("7 / -2 = -3", {}, T),
        ("-7 / -2 = 3", {}, T),
        ("7.0 / 2 = 3.5", {}, T),
        ("x / 2 = 3.5", {"x": 7.0}, T),
        ("x / 0 = 1", {"x": 7}, U),  # division by zero is UNKNOWN
        ("x / 0.0 = 1", {"x": 7.0}, U),
        ("NOT (x / 0 = 1)", {"x": 7}, U),
        ("x + 1 = 3", {"x": "2"}, U),
        ("x + 1 = 3", {}, U),
        ("-x = -3", {"x": 3}, T),
        ("-x = -3", {"x": "3"}, U),
        ("+x = 3", {"x": True}, U),
        ("x * 2 + 1 = 7", {"x": 3}, T),
        ("1 + 2 * 3 = 7", {}, T),
        ("(1 + 2) * 3 = 9", {}, T),
        ("10 - 2 - 3 = 5", {}, T),  # left-associative
        ("24 / 4 / 2 = 3", {}, T),
        ("x * 1.0 = 1.0", {"x": 10**400}, U),  # overflow is UNKNOWN
        ("- -5 = 5", {}, T),
        ("-(5) = -5", {}, T),
    ],
)
def test_arithmetic(text: str, props: dict[str, Any], expected: bool | None) -> None:
    assert ev(text, **props) is expected


def test_between_with_null_bounds_follows_and() -> None:
    assert ev("x BETWEEN lo AND 10", x=11) is F  # x <= 10 is false, whatever lo is
    assert ev("x BETWEEN lo AND 10", x=5) is U
    assert ev("x NOT BETWEEN lo AND 10", x=11) is T
    assert ev("x BETWEEN 1 AND 10", x="5") is U
    assert ev("x BETWEEN 1.5 AND 2.5", x=2) is T
    assert ev("x + 1 BETWEEN y AND y * 2", x=3, y=3) is T


def test_like_details() -> None:
    assert ev("s LIKE '%'", s="") is T
    assert ev("s LIKE ''", s="") is T
    assert ev("s LIKE ''", s="a") is F
    assert ev("s LIKE 'a%'", s="abc") is T
    assert ev("s LIKE '%c'", s="abc") is T
    assert ev("s LIKE '%b%'", s="abc") is T
    assert ev("s LIKE '%%b%%'", s="abc") is T
    assert ev("s LIKE '_'", s="\n") is T  # _ matches any one character, newline too
    assert ev("s LIKE 'a.c'", s="abc") is F  # regex metacharacters are literal
    assert ev("s LIKE 'a!%c' ESCAPE '!'", s="a%c") is T
    assert ev("s LIKE 'a!%c' ESCAPE '!'", s="abc") is F
    assert ev("s LIKE 'a!!c' ESCAPE '!'", s="a!c") is T
    assert ev("s LIKE 'a!bc' ESCAPE '!'", s="abc") is T  # escaping a plain character
    assert ev("s LIKE 'a%'", s=5) is U
    assert ev("s LIKE 'a%'") is U
    assert ev("s NOT LIKE 'a%'", s="b") is T


def test_value_subclasses_count_as_their_base_type() -> None:
    import enum

    class Level(enum.IntEnum):
        HIGH = 9

    class Name(str):
        pass

    assert ev("x = 9", x=Level.HIGH) is T
    assert ev("x BETWEEN 1 AND 9", x=Level.HIGH) is T
    assert ev("x IN ('a')", x=Name("a")) is T
    assert ev("x LIKE 'a'", x=Name("a")) is T
    assert ev("x = 'a'", x=Name("a")) is T


def test_compile_is_cached_and_errors_are_value_errors() -> None:
    assert compile_selector("a = 1") is compile_selector("a = 1")
    with pytest.raises(ValueError):
        compile_selector("a =")
    with pytest.raises(InvalidSelectorError):
        compile_selector("a =")
