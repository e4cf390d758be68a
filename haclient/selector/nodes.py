"""The syntax tree of a JMS message selector: small frozen dataclasses, and ``render``.

How this works: the parser builds these nodes; ``haclient.selector.evaluate`` compiles them to
closures. Nodes are immutable values (equal when their fields are equal), so tests can compare a
parsed tree with an expected one. ``render(node)`` prints a node back as selector text with every
compound expression in parentheses; parsing that text gives an equal tree (tested), so it is also
a canonical spelling of a selector.

Node kinds, by the spec's productions:

- values: ``Literal`` (string, exact or approximate number, boolean), ``Identifier``,
  ``Unary`` (``+``/``-``), ``Arithmetic`` (``+ - * /``);
- conditions: ``Comparison`` (``= <> < <= > >=``), ``Between``, ``In``, ``Like``, ``IsNull``,
  ``Not``, ``And``, ``Or``. An ``Identifier`` or boolean ``Literal`` is also a condition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, TypeAlias

__all__ = [
    "And",
    "Arithmetic",
    "Between",
    "Comparison",
    "Identifier",
    "In",
    "IsNull",
    "Like",
    "Literal",
    "Node",
    "Not",
    "Or",
    "Unary",
    "children",
    "render",
]

COMPARISON_OPERATORS: Final = ("=", "<>", "<", "<=", ">", ">=")
ARITHMETIC_OPERATORS: Final = ("+", "-", "*", "/")


@dataclass(frozen=True, slots=True)
class Literal:
    """A literal: ``'text'``, ``57``, ``7.5E2``, ``TRUE``."""

    value: str | int | float | bool


@dataclass(frozen=True, slots=True)
class Identifier:
    """A header field or property reference, case-sensitive as written."""

    name: str


@dataclass(frozen=True, slots=True)
class Unary:
    """``+operand`` or ``-operand`` (never on a numeric literal: ``-5`` is ``Literal(-5)``)."""

    op: str
    operand: Node


@dataclass(frozen=True, slots=True)
class Arithmetic:
    """``left op right`` with ``op`` one of ``+ - * /``."""

    op: str
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Comparison:
    """``left op right`` with ``op`` one of ``= <> < <= > >=``."""

    op: str
    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Between:
    """``operand [NOT] BETWEEN low AND high``."""

    operand: Node
    low: Node
    high: Node
    negated: bool = False


@dataclass(frozen=True, slots=True)
class In:
    """``identifier [NOT] IN ('a', 'b', ...)``: string literals only, at least one."""

    identifier: Identifier
    values: tuple[str, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Like:
    """``identifier [NOT] LIKE 'pattern' [ESCAPE 'c']``."""

    identifier: Identifier
    pattern: str
    escape: str | None = None
    negated: bool = False


@dataclass(frozen=True, slots=True)
class IsNull:
    """``identifier IS [NOT] NULL``."""

    identifier: Identifier
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Not:
    """``NOT operand``."""

    operand: Node


@dataclass(frozen=True, slots=True)
class And:
    """``left AND right``."""

    left: Node
    right: Node


@dataclass(frozen=True, slots=True)
class Or:
    """``left OR right``."""

    left: Node
    right: Node


Node: TypeAlias = (
    Literal
    | Identifier
    | Unary
    | Arithmetic
    | Comparison
    | Between
    | In
    | Like
    | IsNull
    | Not
    | And
    | Or
)


def children(node: Node) -> tuple[Node, ...]:
    """The nodes directly under ``node``, in source order."""
    match node:
        case Unary(_, operand) | Not(operand):
            return (operand,)
        case Arithmetic(_, left, right) | Comparison(_, left, right):
            return (left, right)
        case And(left, right) | Or(left, right):
            return (left, right)
        case Between(operand, low, high):
            return (operand, low, high)
        case In(identifier) | Like(identifier) | IsNull(identifier):
            return (identifier,)
    return ()


def quote(value: str) -> str:
    """A string literal for ``value``: ``'it''s'``."""
    return "'" + value.replace("'", "''") + "'"


def _render_literal(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return quote(value)
    if isinstance(value, int):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        # No literal spells these; only arithmetic on literals could make them.
        raise ValueError(f"no selector literal for {value!r}")
    text = repr(value)
    return text if ("." in text or "e" in text) else text + ".0"


def render(node: Node) -> str:
    """Selector text for ``node``, every compound expression in parentheses."""
    match node:
        case Literal(value):
            return _render_literal(value)
        case Identifier(name):
            return name
        case Unary(op, operand):
            return f"({op}{render(operand)})"
        case Arithmetic(op, left, right) | Comparison(op, left, right):
            return f"({render(left)} {op} {render(right)})"
        case Between(operand, low, high, negated):
            word = "NOT BETWEEN" if negated else "BETWEEN"
            return f"({render(operand)} {word} {render(low)} AND {render(high)})"
        case In(identifier, values, negated):
            word = "NOT IN" if negated else "IN"
            return f"({identifier.name} {word} ({', '.join(quote(v) for v in values)}))"
        case Like(identifier, pattern, escape, negated):
            word = "NOT LIKE" if negated else "LIKE"
            tail = f" ESCAPE {quote(escape)}" if escape is not None else ""
            return f"({identifier.name} {word} {quote(pattern)}{tail})"
        case IsNull(identifier, negated):
            return f"({identifier.name} IS {'NOT NULL' if negated else 'NULL'})"
        case Not(operand):
            return f"(NOT {render(operand)})"
        case And(left, right):
            return f"({render(left)} AND {render(right)})"
        case Or(left, right):
            return f"({render(left)} OR {render(right)})"
    raise TypeError(f"not a selector node: {node!r}")
