"""Compile a selector's syntax tree to nested Python closures, and the JMS evaluation rules.

How this works: ``compile_condition(node)`` walks the tree once and returns one function,
``evaluate(lookup) -> True | False | None``, made of closures that call each other; no tree is
walked per message. Two compile functions split the work by context: ``_condition`` for nodes
whose result is a truth value (SQL three-valued: True, False, or None for UNKNOWN) and ``_value``
for nodes whose result is a value. The common shapes (an identifier against a literal, BETWEEN
with literal bounds, LIKE with a prefix pattern) get specialised closures that test the exact
type first and fall back to the generic rules below for anything else.

The evaluation rules (JMS 2.0, 3.8.1.1, with the decisions the spec leaves open):

1. Values are None (NULL: an absent property), bool, int, float, str. A value of any other
   type from ``lookup`` is not NULL (``IS NULL`` is false) but every operation on it is
   UNKNOWN. Subclasses of int, float and str count as their base type. bool is not a number.
2. A comparison involving NULL is UNKNOWN. Numbers compare with numbers: an int against a float
   is promoted to float (Java's binary numeric promotion). Strings compare with strings and
   booleans with booleans, only by ``=`` and ``<>``. Any other pairing, and ordering of strings
   or booleans, is UNKNOWN (the spec says such a comparison is false; haclient chooses
   UNKNOWN, which differs only under NOT).
3. Arithmetic is on numbers only (otherwise UNKNOWN; NULL gives NULL). int with int stays int
   (exact, without Java's 64-bit wrap-around); int/int truncates toward zero as Java does.
   Division by zero, of ints or floats, is UNKNOWN: a decision (Java would throw for ints and
   give an infinity or NaN for floats), so that a zero never selects or deselects a message by
   accident, even under NOT. A result too large for a float is UNKNOWN.
4. ``a BETWEEN b AND c`` is ``a >= b AND a <= c``; ``NOT BETWEEN`` its negation.
5. ``x IN (...)`` and ``x LIKE p`` are UNKNOWN when ``x`` is NULL or not a string. LIKE's ``_``
   matches one character (one code point), ``%`` any sequence; the escape character makes the
   next character literal.
6. NOT, AND, OR follow SQL's three-valued logic; AND and OR stop at the first operand that
   decides the result (lookups have no side effects, so this is only faster).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any, Final, TypeAlias

from haclient.selector import nodes as n

__all__ = ["Evaluator", "Lookup", "compile_condition"]

Lookup: TypeAlias = Callable[[str], object]
"""Gives an identifier's value; None when the message has no such header or property."""
Evaluator: TypeAlias = Callable[[Lookup], "bool | None"]
_ValueFn: TypeAlias = Callable[[Lookup], object]
_Compare: TypeAlias = Callable[[object, object], "bool | None"]


class _Other:
    """Stands for a looked-up value of an unsupported type: present, but comparable to nothing."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<unsupported value>"


OTHER: Final = _Other()

_FLIPPED: Final = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_OPERATORS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def normalize(value: object) -> object:
    """``value`` as one of None, bool, int, float, str, or ``OTHER`` (rule 1)."""
    t = type(value)
    if value is None or t is int or t is float or t is str or t is bool:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return OTHER


def make_compare(op: str) -> _Compare:
    """The generic comparison ``l op r`` on normalized values (rule 2)."""
    fn = _OPERATORS[op]
    equality = op in ("=", "<>")

    def compare(left: object, right: object) -> bool | None:
        tl = type(left)
        tr = type(right)
        try:
            if tl is int or tl is float:
                if tr is tl:
                    return fn(left, right)
                if tr is int or tr is float:
                    return fn(float(left), float(right))  # type: ignore[arg-type]
                return None
        except OverflowError:  # an int beyond the range of a double
            return None
        if equality and tl is tr and (tl is str or tl is bool):
            return fn(left, right)
        return None

    return compare


def _arith(op: str, left: object, right: object) -> object:
    """``left op right`` for two normalized values (rule 3); None when UNKNOWN or NULL."""
    tl = type(left)
    tr = type(right)
    if not ((tl is int or tl is float) and (tr is int or tr is float)):
        return None
    a: int | float = left  # type: ignore[assignment]
    b: int | float = right  # type: ignore[assignment]
    try:
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if b == 0:
            return None
        if tl is int and tr is int:
            q = a // b
            return q + 1 if q < 0 and q * b != a else q  # truncate toward zero, like Java
        return a / b
    except OverflowError:
        return None


# --- values -------------------------------------------------------------------------------------


def _value(node: n.Node) -> _ValueFn:
    """A closure giving ``node``'s normalized value (None for NULL)."""
    match node:
        case n.Literal(value):
            return lambda lookup: value
        case n.Identifier(name):

            def identifier(lookup: Lookup) -> object:
                v = lookup(name)
                t = type(v)
                if t is int or t is str or t is float or t is bool or v is None:
                    return v
                return normalize(v)

            return identifier
        case n.Unary(op, operand):
            return _unary(op, _value(operand))
        case n.Arithmetic(op, left, right):
            lf, rf = _value(left), _value(right)
            return lambda lookup: _arith(op, lf(lookup), rf(lookup))
    return _condition(node)


def _unary(op: str, operand: _ValueFn) -> _ValueFn:
    def unary(lookup: Lookup) -> object:
        v = operand(lookup)
        t = type(v)
        if t is int or t is float:
            return -v if op == "-" else v  # type: ignore[operator]
        return None

    return unary


# --- conditions ---------------------------------------------------------------------------------


def compile_condition(node: n.Node) -> Evaluator:
    """One function evaluating the condition ``node`` for a lookup: True, False or None."""
    return _condition(node)


def _condition(node: n.Node) -> Evaluator:
    match node:
        case n.Literal(value):
            result = value if isinstance(value, bool) else None
            return lambda lookup: result
        case n.Identifier(name):

            def boolean(lookup: Lookup) -> bool | None:
                v = lookup(name)
                return v if type(v) is bool else None

            return boolean
        case n.Comparison(op, left, right):
            return _comparison(op, left, right)
        case n.Between():
            return _between(node)
        case n.In(identifier, values, negated):
            return _in(identifier.name, frozenset(values), negated)
        case n.Like(identifier, pattern, escape, negated):
            return _like(identifier.name, pattern, escape, negated)
        case n.IsNull(identifier, negated):
            name = identifier.name
            if negated:
                return lambda lookup: lookup(name) is not None
            return lambda lookup: lookup(name) is None
        case n.Not(operand):
            inner = _condition(operand)

            def not_(lookup: Lookup) -> bool | None:
                r = inner(lookup)
                return None if r is None else not r

            return not_
        case n.And() | n.Or():
            return _logical(node)
    raise TypeError(f"not a selector node: {node!r}")


def _flatten(node: n.Node, kind: type[n.And] | type[n.Or]) -> list[n.Node]:
    """The operands of a chain ``a AND b AND c`` (or OR), in order.

    Iterative: a generated chain may be thousands long, deeper than Python's recursion limit.
    """
    out: list[n.Node] = []
    stack = [node]
    while stack:
        top = stack.pop()
        if isinstance(top, kind):
            stack.append(top.right)
            stack.append(top.left)
        else:
            out.append(top)
    return out


def _logical(node: n.And | n.Or) -> Evaluator:
    """AND or OR over all the operands of a chain, stopping at the deciding one (rule 6)."""
    parts = tuple(_condition(p) for p in _flatten(node, type(node)))
    decisive = isinstance(node, n.Or)  # OR stops at True, AND at False
    if len(parts) == 2:
        first, second = parts

        def pair(lookup: Lookup) -> bool | None:
            a = first(lookup)
            if a is decisive:
                return decisive
            b = second(lookup)
            if b is decisive:
                return decisive
            return None if a is None or b is None else not decisive

        return pair

    def chain(lookup: Lookup) -> bool | None:
        unknown = False
        for part in parts:
            r = part(lookup)
            if r is decisive:
                return decisive
            if r is None:
                unknown = True
        return None if unknown else not decisive

    return chain


def _comparison(op: str, left: n.Node, right: n.Node) -> Evaluator:
    if isinstance(left, n.Literal) and isinstance(right, n.Identifier):
        left, right, op = right, left, _FLIPPED[op]
    if isinstance(left, n.Identifier) and isinstance(right, n.Literal):
        return _identifier_vs_literal(op, left.name, right.value)
    compare = make_compare(op)
    lf, rf = _value(left), _value(right)
    return lambda lookup: compare(lf(lookup), rf(lookup))


def _identifier_vs_literal(op: str, name: str, constant: object) -> Evaluator:
    """``name op constant``: the exact-type fast path, the generic rules for the rest."""
    fn = _OPERATORS[op]
    compare = make_compare(op)
    t_const = type(constant)
    if t_const is int or t_const is float:
        as_float = float(constant)  # type: ignore[arg-type]

        def numeric(lookup: Lookup) -> bool | None:
            v = lookup(name)
            t = type(v)
            if t is t_const:
                return fn(v, constant)
            if t is float:
                return fn(v, as_float)
            return compare(normalize(v), constant)

        return numeric

    def other(lookup: Lookup) -> bool | None:
        v = lookup(name)
        if type(v) is t_const:
            return fn(v, constant)
        return compare(normalize(v), constant)

    return other


def _between(node: n.Between) -> Evaluator:
    """BETWEEN as ``v >= low AND v <= high``, negated for NOT BETWEEN (rule 4)."""
    ge, le = make_compare(">="), make_compare("<=")
    negated = node.negated
    operand = _value(node.operand)
    low, high = _value(node.low), _value(node.high)

    def between(lookup: Lookup) -> bool | None:
        v = operand(lookup)
        a = ge(v, low(lookup))
        if a is False:
            return negated
        b = le(v, high(lookup))
        if b is False:
            return negated
        if a is None or b is None:
            return None
        return not negated

    bounds = (node.low, node.high)
    if not (
        isinstance(node.operand, n.Identifier)
        and all(isinstance(b, n.Literal) and type(b.value) is int for b in bounds)
    ):
        return between
    # The common case: an identifier between two int literals.
    name = node.operand.name
    lo = node.low.value  # type: ignore[union-attr]
    hi = node.high.value  # type: ignore[union-attr]
    flo, fhi = float(lo), float(hi)

    def between_ints(lookup: Lookup) -> bool | None:
        v = lookup(name)
        t = type(v)
        if t is int:
            return (lo <= v <= hi) is not negated  # type: ignore[operator]
        if t is float:
            return (flo <= v <= fhi) is not negated  # type: ignore[operator]
        return between(lookup)

    return between_ints


def _in(name: str, values: frozenset[str], negated: bool) -> Evaluator:
    def in_(lookup: Lookup) -> bool | None:
        v = lookup(name)
        if type(v) is not str:
            v = normalize(v)
            if type(v) is not str:
                return None
        return (v in values) is not negated

    return in_


def like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
    """The regular expression (for ``fullmatch``) of a LIKE pattern (rule 5)."""
    parts: list[str] = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == escape and i + 1 < len(pattern):
            parts.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        parts.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(parts), re.DOTALL)


def _like_matcher(pattern: str, escape: str | None) -> Callable[[str], bool]:
    """A test of a string against the pattern: C-level string methods where they suffice."""
    if escape is None and "_" not in pattern:
        core = pattern.strip("%")
        if "%" not in core:
            starts, ends = pattern.startswith("%"), pattern.endswith("%")
            if not core:
                return (lambda s: True) if pattern else "".__eq__
            if starts and ends:
                return operator.methodcaller("__contains__", core)
            if ends:
                return operator.methodcaller("startswith", core)
            if starts:
                return operator.methodcaller("endswith", core)
            return core.__eq__
    regex = like_regex(pattern, escape)
    return lambda s: regex.fullmatch(s) is not None


def _like(name: str, pattern: str, escape: str | None, negated: bool) -> Evaluator:
    matcher = _like_matcher(pattern, escape)

    def like(lookup: Lookup) -> bool | None:
        v = lookup(name)
        if type(v) is not str:
            v = normalize(v)
            if type(v) is not str:
                return None
        return matcher(v) is not negated

    return like
