"""The tokenizer of the JMS message selector language (JMS 2.0, section 3.8.1.1).

How this works: ``tokenize(text)`` scans the selector once, left to right, and returns a list of
``Token`` values ending with one ``EOF`` token. Every token carries its 0-based ``offset`` into
the text, so the parser can say where an error is (as a 1-based column: ``offset + 1``). The
tokenizer decides every lexical question, so the parser never looks at characters:

- Whitespace is the SQL/Java set: space, tab, newline, carriage return, form feed.
- Keywords (``NOT AND OR BETWEEN LIKE IN IS ESCAPE NULL TRUE FALSE``) are case-insensitive;
  every other word is an ``IDENT`` and keeps its spelling (identifiers are case-sensitive).
- Identifiers follow Java's rules: a Java letter (a letter, ``_``, ``$`` or another currency
  symbol, a connector punctuation) then Java letters or digits. Python's ``str.isidentifier``
  stands in for ``Character.isJavaIdentifierStart/Part``, widened by the categories Sc and Pc.
- String literals are in single quotes; ``''`` inside one is a quote.
- Exact numerics use Java's integer literal syntax: decimal, hexadecimal (``0x1F``) and octal
  (``017``), each with an optional ``L``/``l`` suffix. Binary literals and underscores (Java 7)
  are not accepted, as in ActiveMQ and Artemis. Approximate numerics use Java's decimal
  floating-point syntax (``7.``, ``.5``, ``-57.9E2``, ``1e3``, ``2F``, ``2.5d``); the ``F``
  suffix does not round to single precision: every approximate literal is a double.
- Signs are not part of numbers: ``-5`` is unary minus applied to ``5`` (the parser folds it).

Range checks of numbers belong to the parser (it knows whether a minus precedes the literal).
"""

from __future__ import annotations

import enum
import unicodedata
from dataclasses import dataclass
from typing import Final

from haclient.jms_errors import InvalidSelectorError

__all__ = ["KEYWORDS", "Token", "TokenKind", "describe", "selector_error", "tokenize"]


class TokenKind(enum.Enum):
    """What a token is."""

    IDENT = "identifier"
    STRING = "string literal"
    INTEGER = "exact numeric literal"
    FLOAT = "approximate numeric literal"
    KEYWORD = "keyword"
    OP = "operator"
    EOF = "end of selector"


KEYWORDS: Final = frozenset(
    {"NOT", "AND", "OR", "BETWEEN", "LIKE", "IN", "IS", "ESCAPE", "NULL", "TRUE", "FALSE"}
)

# Longest first, so "<=" and "<>" win over "<".
_OPERATORS: Final = ("<=", "<>", ">=", "=", "<", ">", "+", "-", "*", "/", "(", ")", ",")
_WHITESPACE: Final = frozenset(" \t\n\r\f")
_DIGITS: Final = frozenset("0123456789")
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")
_OCTAL_DIGITS: Final = frozenset("01234567")
_FLOAT_SUFFIXES: Final = frozenset("fFdD")


@dataclass(frozen=True, slots=True)
class Token:
    """One token.

    Attributes:
        kind: What the token is.
        text: The source text of the token, exactly as written (keywords keep their case).
        offset: The 0-based index of its first character in the selector.
        value: The decoded value: the string of a string literal, the number of a numeric
            literal, the upper-case keyword, the operator, the identifier; None for EOF.
    """

    kind: TokenKind
    text: str
    offset: int
    value: str | int | float | None


def selector_error(text: str, offset: int, message: str) -> InvalidSelectorError:
    """The error for a problem at ``offset`` (0-based) of the selector ``text``.

    The message starts with the 1-based column, e.g.
    ``column 15: expected an expression, found end of selector (in "JMSPriority > ")``.
    """
    return InvalidSelectorError(
        f"column {offset + 1}: {message} (in {_quote(text)})", column=offset + 1
    )


def _quote(text: str) -> str:
    """The selector, double-quoted and shortened if very long, for an error message."""
    if len(text) > 200:
        text = text[:197] + "..."
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def describe(token: Token) -> str:
    """How an error message names ``token``: ``'AND'``, ``end of selector``."""
    if token.kind is TokenKind.EOF:
        return "end of selector"
    return repr(token.text) if len(token.text) <= 40 else repr(token.text[:37] + "...")


def _is_ident_start(ch: str) -> bool:
    if ch.isascii():
        return ch.isalpha() or ch == "_" or ch == "$"
    return ch.isidentifier() or unicodedata.category(ch) in ("Sc", "Pc")


def _is_ident_part(ch: str) -> bool:
    if ch.isascii():
        return ch.isalnum() or ch == "_" or ch == "$"
    return ("_" + ch).isidentifier() or unicodedata.category(ch) in ("Sc", "Pc")


def tokenize(text: str) -> list[Token]:
    """Split a selector into tokens, the last one ``EOF``.

    Raises:
        InvalidSelectorError: A character that starts no token, an unterminated string, a
            malformed number; the message gives the column.
    """
    tokens: list[Token] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i >= n:
            tokens.append(Token(TokenKind.EOF, "", n, None))
            return tokens
        ch = text[i]
        if ch == "'":
            token = _string(text, i)
        elif ch in _DIGITS or (ch == "." and i + 1 < n and text[i + 1] in _DIGITS):
            token = _number(text, i)
        elif _is_ident_start(ch):
            token = _word(text, i)
        else:
            token = _operator(text, i)
        tokens.append(token)
        i = token.offset + len(token.text)


def _string(text: str, start: int) -> Token:
    """A string literal starting at the quote at ``start``."""
    parts: list[str] = []
    i = start + 1
    while True:
        end = text.find("'", i)
        if end < 0:
            raise selector_error(text, start, "unterminated string literal (no closing ')")
        parts.append(text[i:end])
        if end + 1 < len(text) and text[end + 1] == "'":
            parts.append("'")
            i = end + 2
            continue
        return Token(TokenKind.STRING, text[start : end + 1], start, "".join(parts))


def _word(text: str, start: int) -> Token:
    """An identifier or keyword starting at ``start``."""
    i = start + 1
    while i < len(text) and _is_ident_part(text[i]):
        i += 1
    word = text[start:i]
    upper = word.upper()
    if upper in KEYWORDS:
        return Token(TokenKind.KEYWORD, word, start, upper)
    return Token(TokenKind.IDENT, word, start, word)


def _operator(text: str, start: int) -> Token:
    """An operator or punctuation at ``start``."""
    for op in _OPERATORS:
        if text.startswith(op, start):
            return Token(TokenKind.OP, op, start, op)
    ch = text[start]
    hint = " (use <> for not-equal)" if text.startswith("!=", start) else ""
    if ch == '"':
        hint = " (string literals use single quotes)"
    raise selector_error(text, start, f"unexpected character {ch!r}{hint}")


def _scan(text: str, i: int, allowed: frozenset[str]) -> int:
    while i < len(text) and text[i] in allowed:
        i += 1
    return i


def _number(text: str, start: int) -> Token:
    """A numeric literal starting at ``start`` (a digit, or a dot followed by a digit)."""
    n = len(text)
    if text.startswith(("0x", "0X"), start):
        end = _scan(text, start + 2, _HEX_DIGITS)
        if end == start + 2:
            raise selector_error(text, start, "malformed hexadecimal literal")
        value = int(text[start + 2 : end], 16)
        return _integer_end(text, start, end, value)
    i = _scan(text, start, _DIGITS)
    is_float = False
    if i < n and text[i] == ".":
        is_float = True
        i = _scan(text, i + 1, _DIGITS)
    if i < n and text[i] in "eE":
        is_float = True
        j = i + 1
        if j < n and text[j] in "+-":
            j += 1
        k = _scan(text, j, _DIGITS)
        if k == j:
            raise selector_error(text, start, "malformed exponent in numeric literal")
        i = k
    if i < n and text[i] in _FLOAT_SUFFIXES:
        is_float = True
        i += 1
        literal = text[start : i - 1]
    else:
        literal = text[start:i]
    if is_float:
        _check_end(text, start, i)
        return Token(TokenKind.FLOAT, text[start:i], start, float(literal))
    digits = text[start:i]
    if len(digits) > 1 and digits[0] == "0":
        if not set(digits) <= _OCTAL_DIGITS:
            raise selector_error(text, start, f"malformed octal literal {digits!r}")
        return _integer_end(text, start, i, int(digits, 8))
    return _integer_end(text, start, i, int(digits))


def _integer_end(text: str, start: int, end: int, value: int) -> Token:
    """Finish an exact numeric literal: the optional ``L`` suffix, then a clean end."""
    if end < len(text) and text[end] in "lL":
        end += 1
    _check_end(text, start, end)
    return Token(TokenKind.INTEGER, text[start:end], start, value)


def _check_end(text: str, start: int, end: int) -> None:
    """A number must not run into a letter, digit or dot (``5abc``, ``1.2.3``)."""
    if end < len(text) and (_is_ident_part(text[end]) or text[end] == "."):
        raise selector_error(text, start, f"malformed numeric literal {text[start : end + 1]!r}")
