"""JMS message selectors (JMS 2.0, section 3.8.1): parse once, evaluate per message.

The broker evaluates consumers' selectors with this package, and the client uses it to emulate
selectors on brokers that lack them::

    from haclient.selector import compile_selector

    sel = compile_selector("JMSPriority > 4 AND region = 'eu'")
    sel.matches({"JMSPriority": 7, "region": "eu"}.get)     # True
    sel.evaluate({"region": "eu"}.get)                      # None: UNKNOWN (no JMSPriority)

How this works: ``tokens`` splits the text, ``parser`` builds a tree of frozen ``nodes`` and
checks it, ``evaluate`` compiles the tree to nested closures. A ``Selector`` is immutable and
thread-safe: compile once per consumer (``compile_selector`` caches recent compilations) and
call ``matches`` for every message. The caller maps a message to the ``lookup`` function: it
receives identifiers exactly as written (they are case-sensitive) and returns the header's or
property's value, or None when the message has none. Header fields must be mapped as JMS
defines them for selectors: ``JMSDeliveryMode`` as the string ``'PERSISTENT'`` or
``'NON_PERSISTENT'``, ``JMSPriority`` and ``JMSTimestamp`` as ints, ``JMSMessageID``,
``JMSCorrelationID`` and ``JMSType`` as strings or None. ``Selector.identifiers`` says which
ones a selector needs, so the caller can skip mapping the rest.

The language and its rules are documented in ``parser`` (syntax, and what is rejected at
compile time) and ``evaluate`` (types, NULL, three-valued logic).
"""

from __future__ import annotations

import functools
from typing import Any, Final

from haclient.selector.evaluate import Evaluator, Lookup, compile_condition
from haclient.selector.parser import HEADER_IDENTIFIERS, parse_with_identifiers

__all__ = ["HEADER_IDENTIFIERS", "Selector", "compile_selector"]

_CACHE_SIZE: Final = 512


class Selector:
    """A compiled message selector: immutable, hashable, safe to share between threads.

    Build one with ``compile_selector``. Two selectors are equal when their texts are equal.

    Attributes:
        text: The selector as given.
        identifiers: Every identifier the selector uses (header fields and properties).
    """

    __slots__ = ("_evaluate", "identifiers", "text")

    text: str
    identifiers: frozenset[str]
    _evaluate: Evaluator

    def __init__(self, text: str, identifiers: frozenset[str], evaluator: Evaluator) -> None:
        """Internal: use ``compile_selector``."""
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "identifiers", identifiers)
        object.__setattr__(self, "_evaluate", evaluator)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Selector is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Selector is immutable: cannot delete {name!r}")

    def matches(self, lookup: Lookup) -> bool:
        """Whether a message is selected: True only when the selector is TRUE for it.

        Args:
            lookup: Gives the value of an identifier (exactly as written in the selector):
                bool, int, float or str, or None when the message has no such header field
                or property. Values of other types compare as UNKNOWN.
        """
        return self._evaluate(lookup) is True

    def evaluate(self, lookup: Lookup) -> bool | None:
        """The selector's three-valued result for a message: True, False, or None (UNKNOWN).

        Args:
            lookup: As for ``matches``.
        """
        return self._evaluate(lookup)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Selector):
            return self.text == other.text
        return NotImplemented

    def __hash__(self) -> int:
        return hash((Selector, self.text))

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # The closures do not pickle; the text compiles back to the same selector.
        return compile_selector, (self.text,)


def compile_selector(text: str) -> Selector:
    """Parse and compile a JMS message selector.

    An empty or blank selector means "no selector" (JMS): it selects every message.

    Args:
        text: The selector, e.g. ``"JMSType = 'car' AND weight > 2500"``.

    Returns:
        The compiled ``Selector``. Recent compilations are cached and shared (they are
        immutable).

    Raises:
        InvalidSelectorError: The selector is not valid. The message starts with the 1-based
            column of the problem (``column 15: ...``), names the offending token and says what
            was expected.
        TypeError: ``text`` is not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"a selector is a string, not {type(text).__name__}")
    return _compile(text)


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compile(text: str) -> Selector:
    node, identifiers = parse_with_identifiers(text)
    return Selector(text, identifiers, compile_condition(node))
