"""The kinds of option values: how each is read from URL text, checked as a keyword value and
printed back. Generic (no option, no protocol); ``failover.options`` declares options with them.

A kind raises ``ValueError`` whose message completes "<option> ..." ("must be a whole number of
at least 1, not 0"); the option adds its name and makes it a ``ConfigurationError``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Final, Protocol

__all__ = ["Choice", "Duration", "Flag", "Kind", "Text", "WholeNumber"]


class Kind(Protocol):
    """The type of an option: parse its URL text, check a keyword value, print it back.

    ``parse`` and ``check`` raise ``ValueError`` whose message completes "<option> ..." (for
    example "must be a whole number of at least 1, not 0"); the table adds the option's name.
    ``parse(format(v)) == v`` for every value ``check`` accepts.
    """

    def parse(self, raw: str) -> Any:
        """The value of URL text."""
        ...

    def check(self, value: Any) -> Any:
        """A keyword value, checked (and normalised, e.g. an int to a float)."""
        ...

    def format(self, value: Any) -> str:
        """The URL text of a value."""
        ...

    def describe(self) -> str:
        """What the URL accepts, for the docs (empty: nothing to add)."""
        ...


_WHOLE: Final = re.compile(r"-?[0-9]+")


@dataclass(frozen=True, slots=True)
class WholeNumber:
    """A whole number, at least ``minimum`` (when given)."""

    minimum: int | None = None

    def parse(self, raw: str) -> int:
        if not _WHOLE.fullmatch(raw):
            raise ValueError(f"must be a whole number, not {raw!r}")
        return self.check(int(raw))

    def check(self, value: Any) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"must be a whole number, not {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"must be a whole number of at least {self.minimum}, not {value!r}")
        return value

    def format(self, value: Any) -> str:
        return str(value)

    def describe(self) -> str:
        return "" if self.minimum in (None, 0, 1) else f">= {self.minimum}"


@dataclass(frozen=True, slots=True)
class Choice:
    """One of some words (matched exactly, or ignoring case with ``fold``)."""

    choices: tuple[str, ...]
    fold: bool = False

    def parse(self, raw: str) -> str:
        return self.check(raw.lower() if self.fold else raw)

    def check(self, value: Any) -> str:
        if value not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}, not {value!r}")
        return str(value)

    def format(self, value: Any) -> str:
        return str(value)

    def describe(self) -> str:
        return ""


@dataclass(frozen=True, slots=True)
class Text:
    """Any text; empty only with ``empty=True``; ``pattern`` and ``hint`` restrict it."""

    empty: bool = True
    pattern: str | None = None
    hint: str = ""

    def parse(self, raw: str) -> str:
        return self.check(raw)

    def check(self, value: Any) -> str:
        if not isinstance(value, str) or (not value and not self.empty):
            raise ValueError(f"must be a {'' if self.empty else 'non-empty '}str, not {value!r}")
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            raise ValueError(f"may hold {self.hint}, not {value!r}")
        return value

    def format(self, value: Any) -> str:
        return str(value)

    def describe(self) -> str:
        return ""


@dataclass(frozen=True, slots=True)
class Flag:
    """``true`` or ``false``, in any case."""

    def parse(self, raw: str) -> bool:
        lowered = raw.lower()
        if lowered not in ("true", "false"):
            raise ValueError(f"expected true or false, not {raw!r}")
        return lowered == "true"

    def check(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise ValueError(f"must be a bool, not {value!r}")
        return value

    def format(self, value: Any) -> str:
        return "true" if value else "false"

    def describe(self) -> str:
        return ""


@dataclass(frozen=True, slots=True)
class Duration:
    """A positive time, in seconds as a value; in the URL in whole ``unit`` (``ms`` or ``s``).

    Attributes:
        unit: ``ms``: the URL gives whole milliseconds (as Qpid JMS does); ``s``: seconds, any
            decimal number.
        zero_is_none: The URL's ``0`` means "off", the value None (and a keyword may be None).
    """

    unit: str = "ms"
    zero_is_none: bool = False

    def parse(self, raw: str) -> float | None:
        if self.unit == "s":
            try:
                seconds = float(raw)
            except ValueError:
                raise ValueError(f"expected a number of seconds, not {raw!r}") from None
            return self.check(seconds)
        if not _WHOLE.fullmatch(raw):
            raise ValueError(f"must be a whole number of milliseconds, not {raw!r}")
        ms = int(raw)
        if ms == 0 and self.zero_is_none:
            return None
        if ms <= 0:
            least = 0 if self.zero_is_none else 1
            raise ValueError(f"must be a whole number of at least {least}, not {ms}")
        return ms / 1000

    def check(self, value: Any) -> float | None:
        if value is None and self.zero_is_none:
            return None
        good = isinstance(value, int | float) and not isinstance(value, bool)
        if not good or not math.isfinite(value) or value <= 0:
            off = " (or None: off)" if self.zero_is_none else ""
            raise ValueError(f"must be a positive, finite number of seconds{off}, not {value!r}")
        return float(value)

    def format(self, value: Any) -> str:
        if value is None:
            return "0"
        return str(round(value * 1000)) if self.unit == "ms" else str(value)

    def describe(self) -> str:
        return "ms; 0 = off" if self.zero_is_none else self.unit
