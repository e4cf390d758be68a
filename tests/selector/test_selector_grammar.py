"""Every production of the selector grammar, and every kind of error with its column."""

from __future__ import annotations

import re

import pytest

from haclient.errors import InvalidSelectorError
from haclient.selector import compile_selector
from haclient.selector import nodes as n
from haclient.selector.parser import parse
from haclient.selector.tokens import TokenKind, tokenize

a, b, c = n.Identifier("a"), n.Identifier("b"), n.Identifier("c")


def lit(value: str | int | float | bool) -> n.Literal:
    return n.Literal(value)


def cmp(left: n.Node, op: str, right: n.Node) -> n.Comparison:
    return n.Comparison(op, left, right)


# --- literals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("'abc'", "abc"),
        ("''", ""),
        ("'it''s'", "it's"),
        ("''''", "'"),
        ("'a b\tc'", "a b\tc"),
        ("'%_\\'", "%_\\"),
        ("57", 57),
        ("0", 0),
        ("00", 0),
        ("57L", 57),
        ("57l", 57),
        ("0x1F", 31),
        ("0X1f", 31),
        ("0x10L", 16),
        ("017", 15),
        ("010L", 8),
        ("9223372036854775807", 2**63 - 1),
        ("0x7fffffffffffffff", 2**63 - 1),
        ("7.", 7.0),
        (".5", 0.5),
        ("6.2", 6.2),
        ("7E3", 7000.0),
        ("7e3", 7000.0),
        ("1E+3", 1000.0),
        ("1e-3", 0.001),
        ("1.e5", 1e5),
        ("57.9E2", 5790.0),
        ("08.5", 8.5),
        ("2F", 2.0),
        ("2.5d", 2.5),
        ("2.5D", 2.5),
        ("1.5f", 1.5),
        ("1e3F", 1000.0),
        ("TRUE", True),
        ("true", True),
        ("False", False),
    ],
)
def test_literals(source: str, value: str | float | bool) -> None:
    node = parse(f"x = {source}")
    assert node == cmp(n.Identifier("x"), "=", lit(value))
    assert type(node.right.value) is type(value)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("-957", -957),
        ("+62", 62),
        ("-57.9E2", -5790.0),
        ("+6.2", 6.2),
        ("-9223372036854775808", -(2**63)),
        ("- 5", -5),
        ("-(5)", -5),
        ("- -5", 5),
    ],
)
def test_signed_literals_are_folded(source: str, value: float) -> None:
    assert parse(f"x = {source}") == cmp(n.Identifier("x"), "=", lit(value))


@pytest.mark.parametrize(
    "name", ["a", "A1", "_a", "$a", "a$b_c", "ünïcode", "€x", "JMSXGroupID", "JMS_IBM_Format"]
)
def test_identifiers(name: str) -> None:
    assert parse(f"{name} = 1") == cmp(n.Identifier(name), "=", lit(1))
    assert compile_selector(f"{name} = 1").identifiers == frozenset({name})


@pytest.mark.parametrize("name", sorted(["JMSDeliveryMode", "JMSPriority", "JMSMessageID"]))
def test_header_identifiers(name: str) -> None:
    assert parse(f"{name} IS NULL") == n.IsNull(n.Identifier(name))


def test_keywords_case_insensitive() -> None:
    assert parse("a between 1 and 2") == n.Between(a, lit(1), lit(2))
    assert parse("a Not Between 1 AnD 2") == n.Between(a, lit(1), lit(2), negated=True)
    assert parse("a nOt iN ('x')") == n.In(a, ("x",), negated=True)
    assert parse("a like 'x' escape '!'") == n.Like(a, "x", "!")
    assert parse("a is not null") == n.IsNull(a, negated=True)
    assert parse("not a or b") == n.Or(n.Not(a), b)
    assert parse("Color = 1") != parse("color = 1")


# --- expressions ---------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["=", "<>", "<", "<=", ">", ">="])
def test_comparison_operators(op: str) -> None:
    assert parse(f"a {op} 1") == cmp(a, op, lit(1))
    assert parse(f"a{op}b") == cmp(a, op, b)


@pytest.mark.parametrize(
    ("text", "tree"),
    [
        ("a + b = c", cmp(n.Arithmetic("+", a, b), "=", c)),
        ("a - b * c = 1", cmp(n.Arithmetic("-", a, n.Arithmetic("*", b, c)), "=", lit(1))),
        ("a / b - c = 1", cmp(n.Arithmetic("-", n.Arithmetic("/", a, b), c), "=", lit(1))),
        ("a - b - c = 1", cmp(n.Arithmetic("-", n.Arithmetic("-", a, b), c), "=", lit(1))),
        ("(a - b) * c = 1", cmp(n.Arithmetic("*", n.Arithmetic("-", a, b), c), "=", lit(1))),
        ("-a = 1", cmp(n.Unary("-", a), "=", lit(1))),
        ("+a = 1", cmp(n.Unary("+", a), "=", lit(1))),
        ("-a * b = 1", cmp(n.Arithmetic("*", n.Unary("-", a), b), "=", lit(1))),
        ("a * -b = 1", cmp(n.Arithmetic("*", a, n.Unary("-", b)), "=", lit(1))),
        ("1 < a", cmp(lit(1), "<", a)),
        ("(a = 1) = TRUE", cmp(cmp(a, "=", lit(1)), "=", lit(True))),
        ("a BETWEEN 1 AND b + 1", n.Between(a, lit(1), n.Arithmetic("+", b, lit(1)))),
        (
            "a + 1 NOT BETWEEN -1 AND 2.5",
            n.Between(n.Arithmetic("+", a, lit(1)), lit(-1), lit(2.5), True),
        ),
        ("a BETWEEN 1 AND 2 AND b", n.And(n.Between(a, lit(1), lit(2)), b)),
        ("a IN ('x')", n.In(a, ("x",))),
        ("a IN ('x', 'y''s', '')", n.In(a, ("x", "y's", ""))),
        ("(a) IN ('x')", n.In(a, ("x",))),
        ("a NOT IN ('x','y')", n.In(a, ("x", "y"), negated=True)),
        ("a LIKE '%x_'", n.Like(a, "%x_")),
        ("a NOT LIKE 'x' ESCAPE '\\'", n.Like(a, "x", "\\", negated=True)),
        ("a IS NULL", n.IsNull(a)),
        ("a IS NOT NULL", n.IsNull(a, negated=True)),
        ("NOT a", n.Not(a)),
        ("NOT NOT a", n.Not(n.Not(a))),
        ("NOT a = 1", n.Not(cmp(a, "=", lit(1)))),
        ("a AND b OR c", n.Or(n.And(a, b), c)),
        ("a OR b AND c", n.Or(a, n.And(b, c))),
        ("a OR b OR c", n.Or(n.Or(a, b), c)),
        ("a AND (b OR c)", n.And(a, n.Or(b, c))),
        ("NOT a AND b", n.And(n.Not(a), b)),
        ("((a))", a),
        ("TRUE", lit(True)),
        ("a", a),
        (" \t\r\n\fa\n=\n1 ", cmp(a, "=", lit(1))),
        ("", lit(True)),
    ],
)
def test_productions(text: str, tree: n.Node) -> None:
    assert parse(text) == tree
    assert parse(n.render(tree)) == tree


def test_tokens_carry_offsets() -> None:
    tokens = tokenize("a <= 'x''y'")
    assert [(t.kind, t.offset, t.value) for t in tokens] == [
        (TokenKind.IDENT, 0, "a"),
        (TokenKind.OP, 2, "<="),
        (TokenKind.STRING, 5, "x'y"),
        (TokenKind.EOF, 11, None),
    ]


# --- errors -----------------------------------------------------------------------------------


def error_of(text: str) -> tuple[int, str]:
    """The 1-based column and the message of the error ``text`` raises."""
    with pytest.raises(InvalidSelectorError) as info:
        compile_selector(text)
    message = str(info.value)
    match = re.match(r"column (\d+): ", message)
    assert match, message
    assert ' (in "' in message and message.endswith('")')
    return int(match.group(1)), message


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        # tokens
        ("a = 'abc", 5, "unterminated string"),
        ("a = 'it''s", 5, "unterminated string"),
        ("a = #", 5, "unexpected character '#'"),
        ("a != 1", 3, "use <> for not-equal"),
        ('a = "x"', 5, "single quotes"),
        ("a.b = 1", 2, "unexpected character '.'"),
        ("a = 0x", 5, "malformed hexadecimal"),
        ("a = 0xg", 5, "malformed hexadecimal"),
        ("a = 1e", 5, "malformed exponent"),
        ("a = 1e+", 5, "malformed exponent"),
        ("a = 09", 5, "malformed octal"),
        ("a = 5abc", 5, "malformed numeric literal '5a'"),
        ("a = 1.2.3", 5, "malformed numeric literal"),
        ("a = 1.5L", 5, "malformed numeric literal"),
        ("a = 0b101", 5, "malformed numeric literal"),
        ("a = 1_000", 5, "malformed numeric literal"),
        # ranges
        ("a = 9223372036854775808", 5, "out of range of long"),
        ("a = -9223372036854775809", 6, "out of range of long"),
        ("a = 0x8000000000000000", 5, "out of range of long"),
        ("a = 1e400", 5, "out of range of double"),
        # missing or unexpected tokens
        ("a = ", 5, "expected an expression, found end of selector"),
        ("a = )", 5, "expected an expression, found ')'"),
        ("a = 1 AND", 10, "expected an expression, found end of selector"),
        ("AND = 1", 1, "expected an expression, found keyword 'AND'"),
        ("escape = 1", 1, "found keyword 'escape' (keywords cannot be identifiers)"),
        ("a = NULL", 5, "use IS NULL"),
        ("a = b = c", 7, "expected an operator, AND, OR or end of selector, found '='"),
        ("a = 1 b", 7, "expected an operator, AND, OR or end of selector, found 'b'"),
        ("a b", 3, "found 'b'"),
        ("(a = 1", 7, "expected ')' after the parenthesized expression"),
        ("a = 1)", 6, "found ')'"),
        ("a NOT = 1", 7, "expected BETWEEN, IN or LIKE after NOT"),
        # conditions where a condition is needed
        ("a + 1", 1, "expected a conditional expression, found an arithmetic expression"),
        ("5", 1, "found a numeric literal"),
        ("'x'", 1, "found a string literal"),
        ("a + 1 AND b", 1, "conditional expression before AND"),
        ("b AND 'x' OR c", 7, "expected a conditional expression, found a string literal"),
        ("b OR 2", 6, "expected a conditional expression, found a numeric literal"),
        ("b = 1 OR c OR 1.5 + c", 15, "conditional expression"),
        ("NOT 5", 5, "expected a conditional expression"),
        # arithmetic where arithmetic is needed
        ("a + 'x' = 1", 5, "expected an arithmetic expression after '+'"),
        ("'x' + a = 1", 1, "expected an arithmetic expression, found a string literal"),
        ("TRUE * 2 = 1", 1, "found a boolean literal"),
        ("2 / FALSE = 1", 5, "found a boolean literal"),
        ("-'x' = 1", 2, "expected an arithmetic expression after '-'"),
        ("+TRUE = 1", 2, "expected an arithmetic expression after '+'"),
        ("(a = 1) + 1 = 2", 1, "found a conditional expression"),
        ("'a' < b", 1, "strings and booleans compare only with = and <>"),
        ("b >= TRUE", 6, "a boolean literal cannot be ordered"),
        ("(a = 1) < 2", 1, "a conditional expression cannot be ordered"),
        # BETWEEN
        ("'a' BETWEEN 1 AND 2", 1, "expected an arithmetic expression before BETWEEN"),
        ("a BETWEEN 'x' AND 2", 11, "arithmetic expression after BETWEEN"),
        ("a BETWEEN 1 OR 2", 13, "expected AND after BETWEEN's lower bound, found 'OR'"),
        ("a BETWEEN 1 AND 'z'", 17, "arithmetic expression after AND"),
        ("a BETWEEN 1", 12, "expected AND"),
        # IN
        ("5 IN ('a')", 1, "IN applies to an identifier, found a numeric literal"),
        ("a + 1 IN ('a')", 1, "IN applies to an identifier"),
        ("a IN ()", 7, "expected a string literal in the IN list, found ')'"),
        ("a IN ('x', 1)", 12, "expected a string literal after ','"),
        ("a IN ('x',)", 11, "expected a string literal after ','"),
        ("a IN 'x'", 6, "expected '(' after IN"),
        ("a IN ('x'", 10, "expected ')' after the IN list"),
        ("a IN ('x' 'y')", 11, "expected ')' after the IN list"),
        # LIKE
        ("a LIKE b", 8, "expected a string literal pattern after LIKE"),
        ("'s' LIKE 'x'", 1, "LIKE applies to an identifier, found a string literal"),
        ("a LIKE 'x' ESCAPE 5", 19, "expected a string literal after ESCAPE"),
        ("a LIKE 'x' ESCAPE ''", 19, "the escape character must be one character"),
        ("a LIKE 'x' ESCAPE 'ab'", 19, "the escape character must be one character"),
        ("a LIKE 'ab!' ESCAPE '!'", 8, "the pattern ends with the escape character"),
        # IS NULL
        ("a IS 5", 6, "expected NULL after IS"),
        ("a IS NOT 5", 10, "expected NULL after IS NOT"),
        ("5 IS NULL", 1, "IS NULL applies to an identifier"),
        # identifiers
        ("JMSDestination = 'x'", 1, "'JMSDestination' cannot be used in a selector"),
        ("a = 1 AND JMSExpiration > 0", 11, "'JMSExpiration' cannot be used"),
        ("JMSReplyTo IS NULL", 1, "'JMSReplyTo' cannot be used"),
        ("JMSRedelivered = TRUE", 1, "'JMSRedelivered' cannot be used"),
        ("JMSDeliveryTime > 0", 1, "'JMSDeliveryTime' cannot be used"),
        ("JMSFoo = 1", 1, "'JMSFoo' cannot be used"),
        # columns count characters, newlines included
        ("a = 1\nAND\n", 11, "found end of selector"),
    ],
)
def test_errors_say_where_and_what(text: str, column: int, fragment: str) -> None:
    got_column, message = error_of(text)
    assert fragment in message
    assert got_column == column, message


def test_error_message_format() -> None:
    _, message = error_of("JMSPriority > AND x")
    assert message == (
        "column 15: expected an expression, found keyword 'AND' (keywords cannot be "
        'identifiers) (in "JMSPriority > AND x")'
    )


def test_long_selectors_are_shortened_in_messages() -> None:
    text = "a = 1 AND " * 50 + "#"
    column, message = error_of(text)
    assert column == 501 and "..." in message and len(message) < 300


def test_allowed_jms_names_per_spec() -> None:
    for name in ["JMSCorrelationID", "JMSTimestamp", "JMSType", "JMSXDeliveryCount", "JMS_x"]:
        assert compile_selector(f"{name} IS NULL").identifiers == frozenset({name})
    # Names merely starting with "jms" in another case are application properties.
    assert compile_selector("jmsDestination = 'x'").identifiers == frozenset({"jmsDestination"})


# --- limits ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["OR", "AND"])
def test_long_generated_chains_compile_and_evaluate(op: str) -> None:
    terms = [f"x <> {i}" if op == "AND" else f"x = {i}" for i in range(5000)]
    selector = compile_selector(f" {op} ".join(terms))
    assert selector.evaluate({"x": 4999}.get) is (op == "OR")
    assert selector.evaluate({"x": -1}.get) is (op == "AND")
    assert selector.evaluate(lambda name: None) is None
    # Nested to the right, a chain counts as one level too (up to the parentheses limit).
    nested = compile_selector(f" {op} (".join(terms[:51]) + ")" * 50)
    assert nested.evaluate({"x": 50}.get) is (op == "OR")


def test_nesting_limit_parentheses() -> None:
    assert parse("(" * 50 + "a" + ")" * 50) == a
    column, message = error_of("(" * 51 + "a" + ")" * 51)
    assert column == 51 and "nest deeper than 50 levels" in message


def test_nesting_limit_not_and_signs() -> None:
    assert parse("NOT " * 50 + "a") is not None
    column, message = error_of("NOT " * 51 + "a")
    assert column == 201 and "nest deeper than 50" in message
    column, message = error_of("a = " + "-" * 51 + "b")
    assert column == 55 and "nest deeper than 50" in message


def test_depth_limit() -> None:
    deepest = "a" + " + a" * 98 + " = 1"
    assert compile_selector(deepest).evaluate({"a": 1}.get) is False
    column, message = error_of("a" + " + a" * 99 + " = 1")
    assert "the expression nests deeper than 100 levels" in message
    assert column == len("a" + " + a" * 99 + " = 1")


def test_the_error_carries_the_column_and_pickles_with_it() -> None:
    import pickle

    with pytest.raises(InvalidSelectorError) as info:
        compile_selector("JMSPriority > AND x")
    assert info.value.column == 15
    assert pickle.loads(pickle.dumps(info.value)).column == 15
