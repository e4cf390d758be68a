"""The recursive-descent parser of JMS message selectors (JMS 2.0, section 3.8.1.1).

How this works: ``parse(text)`` tokenizes the selector (``tokens.tokenize``) and descends the
grammar below, one function per precedence level, building ``nodes`` values. Every error is an
``InvalidSelectorError`` whose message starts with ``column N:`` (1-based), names the offending
token and says what was expected.

The grammar (keywords case-insensitive; lowest precedence first)::

    selector    := [ or ] EOF                    -- empty or blank: no selector (always TRUE)
    or          := and { OR and }
    and         := not { AND not }
    not         := NOT not | predicate
    predicate   := sum [ cmp_op sum
                       | [NOT] BETWEEN sum AND sum
                       | [NOT] IN '(' string { ',' string } ')'
                       | [NOT] LIKE string [ ESCAPE string ]
                       | IS [NOT] NULL ]
    sum         := product { ('+' | '-') product }
    product     := unary { ('*' | '/') unary }
    unary       := ('+' | '-') unary | primary
    primary     := literal | identifier | '(' or ')'

Comparisons do not chain (``a = b = c`` is an error, as in SQL). Besides the grammar, the
parser checks what the spec's productions say about operand kinds, where it can know them
(an identifier's type is only known per message, so identifiers pass every check):

1. The selector and the operands of NOT, AND, OR are conditional expressions (a comparison or
   predicate, TRUE/FALSE, an identifier, or one of these in parentheses): ``a + 1`` alone is
   an error.
2. Operands of arithmetic and of BETWEEN are arithmetic: not strings, booleans or conditions.
3. Strings and booleans compare only with ``=`` and ``<>``: ``'a' < 'b'`` is an error.
4. IN, LIKE and IS NULL apply to an identifier; IN lists string literals; LIKE's pattern is a
   string literal and its ESCAPE a one-character string literal.
5. Exact numeric literals are within Java's ``long`` range (``-9223372036854775808`` included);
   approximate ones are finite doubles.
6. Header fields are restricted to ``HEADER_IDENTIFIERS``; other names starting with ``JMS``
   are allowed only as JMS-defined (``JMSX...``) or provider (``JMS_...``) properties.
7. Nesting is bounded, so that neither parsing nor evaluation can exhaust Python's stack:
   at most ``MAX_NESTING`` open parentheses, NOTs and signs, and a tree at most ``MAX_DEPTH``
   deep, where a chain of ANDs (or ORs) of any length counts as one level, so generated
   selectors like ``x = 1 OR x = 2 OR ...`` may be as long as needed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final
from typing import Literal as L

from haclient.jms_errors import InvalidSelectorError
from haclient.selector import nodes as n
from haclient.selector.tokens import Token, TokenKind, describe, selector_error, tokenize

__all__ = ["HEADER_IDENTIFIERS", "parse", "parse_with_identifiers"]

HEADER_IDENTIFIERS: Final = frozenset(
    {
        "JMSDeliveryMode",
        "JMSPriority",
        "JMSMessageID",
        "JMSTimestamp",
        "JMSCorrelationID",
        "JMSType",
    }
)
"""The message header fields a selector may name (JMS 2.0, 3.8.1.1): no others."""

_LONG_MAX: Final = 2**63 - 1
MAX_NESTING: Final = 50
"""The most parentheses, NOTs and signs that may be open at once (rule 7)."""
MAX_DEPTH: Final = 100
"""The deepest syntax tree allowed, a chain of ANDs or ORs counting as one level (rule 7)."""
_Kind = L["bool", "num", "str", "any"]


def kind(node: n.Node) -> _Kind:
    """What ``node`` evaluates to, as far as the parser can tell (``any``: an identifier)."""
    match node:
        case n.Identifier():
            return "any"
        case n.Literal(value):
            if isinstance(value, bool):
                return "bool"
            return "str" if isinstance(value, str) else "num"
        case n.Unary() | n.Arithmetic():
            return "num"
    return "bool"


def parse(text: str) -> n.Node:
    """The syntax tree of ``text`` (``Literal(True)`` for an empty selector).

    Raises:
        InvalidSelectorError: The selector is not valid; the message gives the column.
    """
    return parse_with_identifiers(text)[0]


def parse_with_identifiers(text: str) -> tuple[n.Node, frozenset[str]]:
    """The syntax tree of ``text`` and the identifiers it uses.

    Raises:
        InvalidSelectorError: The selector is not valid; the message gives the column.
    """
    parser = _Parser(text)
    return parser.selector(), frozenset(parser.identifiers)


class _Parser:
    """One parse of one selector: the tokens, a cursor, the identifiers seen."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.pos = 0
        self.identifiers: set[str] = set()
        self.nesting = 0  # open parentheses, NOT and signs: the parser's own recursion
        # id(node) -> (node, depth); holding the node keeps its id from being reused.
        self.depths: dict[int, tuple[n.Node, int]] = {}

    # --- cursor -----------------------------------------------------------------------------

    def peek(self) -> Token:
        return self.tokens[self.pos]

    def advance(self) -> Token:
        token = self.tokens[self.pos]
        if token.kind is not TokenKind.EOF:
            self.pos += 1
        return token

    def at_keyword(self, *words: str) -> bool:
        token = self.tokens[self.pos]
        return token.kind is TokenKind.KEYWORD and token.value in words

    def at_op(self, *ops: str) -> bool:
        token = self.tokens[self.pos]
        return token.kind is TokenKind.OP and token.value in ops

    def error(self, token: Token, message: str) -> InvalidSelectorError:
        return selector_error(self.text, token.offset, message)

    def expected(self, what: str) -> InvalidSelectorError:
        token = self.peek()
        return self.error(token, f"expected {what}, found {describe(token)}")

    def expect_keyword(self, word: str, after: str) -> None:
        if not self.at_keyword(word):
            raise self.expected(f"{word} after {after}")
        self.advance()

    def expect_op(self, op: str, after: str) -> None:
        if not self.at_op(op):
            raise self.expected(f"{op!r} after {after}")
        self.advance()

    def operand(self, parse: Callable[[], n.Node], allowed: tuple[_Kind, ...], what: str) -> n.Node:
        """Parse with ``parse``; the result's kind must be in ``allowed`` (rules 1-3)."""
        start = self.peek()
        return self.check(start, parse(), allowed, what)

    def check(self, start: Token, node: n.Node, allowed: tuple[_Kind, ...], what: str) -> n.Node:
        """``node``, which began at ``start``, if its kind is in ``allowed``."""
        if kind(node) not in allowed:
            raise self.error(start, f"expected {what}, found {_kind_name(node)}")
        return node

    def enter(self, token: Token) -> None:
        """One level deeper in the parser's recursion, opened by ``token`` (rule 7)."""
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise self.error(
                token, f"parentheses, NOT and signs nest deeper than {MAX_NESTING} levels"
            )

    def depth(self, node: n.Node) -> int:
        entry = self.depths.get(id(node))
        return 1 if entry is None else entry[1]

    def built(self, node: n.Node) -> n.Node:
        """``node`` if the tree under it is at most ``MAX_DEPTH`` deep (rule 7).

        A chain of AND (or of OR) counts as one level: evaluation runs it as a loop.
        """
        depth = 1
        for child in n.children(node):
            same_chain = type(child) is type(node) and isinstance(node, (n.And, n.Or))
            depth = max(depth, self.depth(child) + (0 if same_chain else 1))
        if depth > MAX_DEPTH:
            raise self.error(
                self.tokens[self.pos - 1], f"the expression nests deeper than {MAX_DEPTH} levels"
            )
        self.depths[id(node)] = (node, depth)
        return node

    # --- grammar ----------------------------------------------------------------------------

    def selector(self) -> n.Node:
        if self.peek().kind is TokenKind.EOF:
            return n.Literal(True)
        node = self.operand(self.or_, ("bool", "any"), "a conditional expression")
        if self.peek().kind is not TokenKind.EOF:
            raise self.expected("an operator, AND, OR or end of selector")
        return node

    def condition(self, parse: Callable[[], n.Node]) -> n.Node:
        return self.operand(parse, ("bool", "any"), "a conditional expression")

    def or_(self) -> n.Node:
        start = self.peek()
        node = self.and_()
        while self.at_keyword("OR"):
            node = self.check(start, node, ("bool", "any"), "a conditional expression before OR")
            self.advance()
            node = self.built(n.Or(node, self.condition(self.and_)))
        return node

    def and_(self) -> n.Node:
        start = self.peek()
        node = self.not_()
        while self.at_keyword("AND"):
            node = self.check(start, node, ("bool", "any"), "a conditional expression before AND")
            self.advance()
            node = self.built(n.And(node, self.condition(self.not_)))
        return node

    def not_(self) -> n.Node:
        if self.at_keyword("NOT"):
            self.enter(self.advance())
            node = self.built(n.Not(self.condition(self.not_)))
            self.nesting -= 1
            return node
        return self.predicate()

    def predicate(self) -> n.Node:
        start = self.peek()
        left = self.sum()
        token = self.peek()
        if token.kind is TokenKind.OP and token.value in n.COMPARISON_OPERATORS:
            return self.comparison(start, left)
        negated = False
        if self.at_keyword("NOT"):
            self.advance()
            negated = True
            if not self.at_keyword("BETWEEN", "IN", "LIKE"):
                raise self.expected("BETWEEN, IN or LIKE after NOT")
        if self.at_keyword("BETWEEN"):
            return self.between(start, left, negated)
        if self.at_keyword("IN"):
            return self.in_(self.identifier_operand(start, left, "IN"), negated)
        if self.at_keyword("LIKE"):
            return self.like(self.identifier_operand(start, left, "LIKE"), negated)
        if self.at_keyword("IS"):
            identifier = self.identifier_operand(start, left, "IS NULL")
            self.advance()
            negated = self.at_keyword("NOT")
            if negated:
                self.advance()
            self.expect_keyword("NULL", "IS" + (" NOT" if negated else ""))
            return n.IsNull(identifier, negated)
        return left

    def comparison(self, start: Token, left: n.Node) -> n.Node:
        op_token = self.advance()
        op = str(op_token.value)
        right_start = self.peek()
        right = self.sum()
        if op not in ("=", "<>"):
            for token, node in ((start, left), (right_start, right)):
                if kind(node) in ("str", "bool"):
                    raise self.error(
                        token,
                        f"{_kind_name(node)} cannot be ordered: strings and booleans "
                        f"compare only with = and <> (operator {op!r})",
                    )
        return self.built(n.Comparison(op, left, right))

    def between(self, start: Token, operand: n.Node, negated: bool) -> n.Node:
        if kind(operand) not in ("num", "any"):
            raise self.error(start, f"expected an arithmetic expression before BETWEEN, "
                             f"found {_kind_name(operand)}")  # fmt: skip
        self.advance()
        low = self.operand(self.sum, ("num", "any"), "an arithmetic expression after BETWEEN")
        self.expect_keyword("AND", "BETWEEN's lower bound")
        high = self.operand(self.sum, ("num", "any"), "an arithmetic expression after AND")
        return self.built(n.Between(operand, low, high, negated))

    def identifier_operand(self, start: Token, node: n.Node, operator: str) -> n.Identifier:
        if not isinstance(node, n.Identifier):
            raise self.error(
                start, f"{operator} applies to an identifier, found {_kind_name(node)}"
            )
        return node

    def string_literal(self, what: str) -> tuple[Token, str]:
        token = self.peek()
        if token.kind is not TokenKind.STRING:
            raise self.expected(what)
        self.advance()
        return token, str(token.value)

    def in_(self, identifier: n.Identifier, negated: bool) -> n.Node:
        self.advance()
        self.expect_op("(", "IN")
        values = [self.string_literal("a string literal in the IN list")[1]]
        while self.at_op(","):
            self.advance()
            values.append(self.string_literal("a string literal after ','")[1])
        self.expect_op(")", "the IN list")
        return n.In(identifier, tuple(values), negated)

    def like(self, identifier: n.Identifier, negated: bool) -> n.Node:
        self.advance()
        pattern_token, pattern = self.string_literal("a string literal pattern after LIKE")
        escape: str | None = None
        if self.at_keyword("ESCAPE"):
            self.advance()
            escape_token, escape = self.string_literal("a string literal after ESCAPE")
            if len(escape) != 1:
                raise self.error(
                    escape_token,
                    f"the escape character must be one character, found {describe(escape_token)}",
                )
            if pattern.endswith(escape) and _trailing_escape(pattern, escape):
                raise self.error(pattern_token, "the pattern ends with the escape character")
        return n.Like(identifier, pattern, escape, negated)

    def sum(self) -> n.Node:
        start = self.peek()
        node = self.product()
        while self.at_op("+", "-"):
            node = self.check(start, node, ("num", "any"), "an arithmetic expression")
            op = str(self.advance().value)
            right = self.operand(
                self.product, ("num", "any"), f"an arithmetic expression after {op!r}"
            )
            node = self.built(n.Arithmetic(op, node, right))
        return node

    def product(self) -> n.Node:
        start = self.peek()
        node = self.unary()
        while self.at_op("*", "/"):
            node = self.check(start, node, ("num", "any"), "an arithmetic expression")
            op = str(self.advance().value)
            right = self.operand(
                self.unary, ("num", "any"), f"an arithmetic expression after {op!r}"
            )
            node = self.built(n.Arithmetic(op, node, right))
        return node

    def unary(self) -> n.Node:
        if not self.at_op("+", "-"):
            return self.primary()
        sign = self.advance()
        op = str(sign.value)
        token = self.peek()
        if op == "-" and token.kind is TokenKind.INTEGER:
            # Folded here so that -9223372036854775808 (Long.MIN_VALUE) is in range.
            self.advance()
            return n.Literal(-self.integer_value(token, _LONG_MAX + 1))
        self.enter(sign)
        operand = self.operand(self.unary, ("num", "any"), f"an arithmetic expression after {op!r}")
        self.nesting -= 1
        if isinstance(operand, n.Literal) and not isinstance(operand.value, (bool, str)):
            return n.Literal(-operand.value if op == "-" else operand.value)
        return self.built(n.Unary(op, operand))

    def integer_value(self, token: Token, limit: int) -> int:
        value = token.value
        assert isinstance(value, int)
        if value > limit:
            raise self.error(token, f"exact numeric literal {token.text} is out of range of long")
        return value

    def primary(self) -> n.Node:
        token = self.peek()
        if token.kind is TokenKind.IDENT:
            self.advance()
            return self.identifier(token)
        if token.kind is TokenKind.STRING:
            self.advance()
            return n.Literal(str(token.value))
        if token.kind is TokenKind.INTEGER:
            self.advance()
            return n.Literal(self.integer_value(token, _LONG_MAX))
        if token.kind is TokenKind.FLOAT:
            self.advance()
            return n.Literal(self.float_value(token))
        if self.at_keyword("TRUE", "FALSE"):
            self.advance()
            return n.Literal(token.value == "TRUE")
        if self.at_op("("):
            self.enter(self.advance())
            node = self.or_()
            self.expect_op(")", "the parenthesized expression")
            self.nesting -= 1
            return node
        if self.at_keyword("NULL"):
            raise self.error(token, "NULL is not a value: use IS NULL or IS NOT NULL")
        if token.kind is TokenKind.KEYWORD and token.value != "NOT":
            raise self.error(
                token,
                f"expected an expression, found keyword {describe(token)} "
                "(keywords cannot be identifiers)",
            )
        raise self.expected("an expression")

    def float_value(self, token: Token) -> float:
        value = token.value
        assert isinstance(value, float)
        if math.isinf(value):
            raise self.error(token, f"approximate literal {token.text} is out of range of double")
        return value

    def identifier(self, token: Token) -> n.Identifier:
        name = str(token.value)
        if (
            name.startswith("JMS")
            and name not in HEADER_IDENTIFIERS
            and not name.startswith(("JMSX", "JMS_"))
        ):
            raise self.error(
                token,
                f"{name!r} cannot be used in a selector: the header fields allowed are "
                f"{', '.join(sorted(HEADER_IDENTIFIERS))}; other names starting with JMS "
                "are reserved (JMSX... and JMS_... properties are allowed)",
            )
        self.identifiers.add(name)
        return n.Identifier(name)


def _trailing_escape(pattern: str, escape: str) -> bool:
    """Whether ``pattern`` ends with an escape character that escapes nothing."""
    i = 0
    while i < len(pattern):
        if pattern[i] == escape:
            if i + 1 == len(pattern):
                return True
            i += 2
        else:
            i += 1
    return False


def _kind_name(node: n.Node) -> str:
    """How an error message names what ``node`` is."""
    match node:
        case n.Literal(value) if isinstance(value, bool):
            return "a boolean literal"
        case n.Literal(value) if isinstance(value, str):
            return "a string literal"
        case n.Literal():
            return "a numeric literal"
        case n.Identifier(name):
            return f"identifier {name!r}"
        case n.Unary() | n.Arithmetic():
            return "an arithmetic expression"
    return "a conditional expression"
