"""The kinds of option values: how each is read from URL text, checked as a keyword value and
printed back. Generic (no option, no protocol); ``failover.options`` declares options with them.

A kind raises ``ValueError`` whose message completes "<option> ..." ("must be a whole number of
at least 1, not 0"); the option adds its name and makes it a ``ConfigurationError``.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Final, Protocol

__all__ = [
    "Choice",
    "Duration",
    "Flag",
    "KeywordOnly",
    "Kind",
    "Member",
    "Milliseconds",
    "MinusOneIsNone",
    "Names",
    "Number",
    "Text",
    "WholeNumber",
    "plain_number",
]


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
# A non-negative decimal number as a URL writes it: no sign, exponent, spaces or underscores.
_DECIMAL: Final = re.compile(r"[0-9]+(\.[0-9]+)?")


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
class Names:
    """A list of names: comma-separated in a URL, a str or a sequence of str as a keyword. The
    value is a tuple, each name once, in the order given. With ``known``, each must be one of
    them (upper-cased first with ``upper``); ``what`` is what one name is, for messages."""

    known: tuple[str, ...] | None = None
    upper: bool = False
    what: str = "name"

    def parse(self, raw: str) -> tuple[str, ...]:
        return self.check(raw)

    def check(self, value: Any) -> tuple[str, ...]:
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
            raise ValueError(f"must be a comma-separated str or a sequence of str, not {value!r}")
        names: list[str] = []
        for item in items:
            name = item.strip().upper() if self.upper else item.strip()
            if self.known is not None and name and name not in self.known:
                raise ValueError(
                    f"names {self.what} {item.strip()!r}, which is not supported "
                    f"(supported: {', '.join(self.known)})"
                )
            if name and name not in names:
                names.append(name)
        if not names:
            raise ValueError(f"must name at least one {self.what}, not {value!r}")
        return tuple(names)

    def format(self, value: Any) -> str:
        return ",".join(value)

    def describe(self) -> str:
        return "comma-separated"


@dataclass(frozen=True, slots=True)
class KeywordOnly:
    """A value only a keyword can give (an object, a callable): ``accepts`` checks it, and
    ``expected`` says what it must be ("an ssl.SSLContext")."""

    expected: str
    accepts: Callable[[Any], bool]

    def parse(self, raw: str) -> Any:
        raise ValueError(f"is a keyword only ({self.expected}): a URL cannot carry it")

    def check(self, value: Any) -> Any:
        if not self.accepts(value):
            raise ValueError(f"must be {self.expected}, not {type(value).__name__}")
        return value

    def format(self, value: Any) -> str:
        return repr(value)

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
        unit: ``ms``: the URL gives whole milliseconds (as Qpid JMS does; a value with a part of
            a millisecond prints rounded up); ``s``: seconds, any decimal number.
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
        """URL text: whole milliseconds for ``ms``, a part of one rounded up (a positive time
        never prints as 0, which reads back as "off" or is refused)."""
        if value is None:
            return "0"
        if self.unit != "ms":
            return str(value)
        ms = value * 1000
        whole = round(ms)
        return str(whole if abs(ms - whole) < 1e-6 else math.ceil(ms))

    def describe(self) -> str:
        return "ms; 0 = off" if self.zero_is_none else self.unit


@dataclass(frozen=True, slots=True)
class Member:
    """A member of an ``enum.Enum`` whose values are words; the URL gives the word (in any
    case with ``fold``), the value is the member."""

    members: type[enum.Enum]
    fold: bool = True

    def parse(self, raw: str) -> enum.Enum:
        try:
            return self.members(raw.lower() if self.fold else raw)
        except ValueError:
            raise ValueError(f"must be one of {self._words()}, not {raw!r}") from None

    def check(self, value: Any) -> enum.Enum:
        if not isinstance(value, self.members):
            raise ValueError(f"must be a {self.members.__name__} ({self._words()}), not {value!r}")
        return value

    def format(self, value: Any) -> str:
        return str(value.value)

    def describe(self) -> str:
        return ""

    def _words(self) -> str:
        return ", ".join(str(member.value) for member in self.members)


@dataclass(frozen=True, slots=True)
class Number:
    """A decimal number (a float value) of at least ``minimum``; the URL writes it without a
    sign or an exponent (``1.5``), and it prints back so (``plain_number``)."""

    minimum: float = 0.0

    def parse(self, raw: str) -> float:
        if not _DECIMAL.fullmatch(raw):
            raise ValueError(f"must be a non-negative decimal number, not {raw!r}")
        return self.check(float(raw))

    def check(self, value: Any) -> float:
        good = isinstance(value, int | float) and not isinstance(value, bool)
        if not good or not math.isfinite(value) or value < self.minimum:
            raise ValueError(f"must be a finite number of at least {self.minimum:g}, not {value!r}")
        return float(value)

    def format(self, value: Any) -> str:
        return plain_number(value)

    def describe(self) -> str:
        return f">= {self.minimum:g}" if self.minimum else ""


@dataclass(frozen=True, slots=True)
class Milliseconds:
    """A time in seconds as a value, in the URL a decimal number of milliseconds (``2.5`` is
    2.5 ms), printed back exactly; zero is a value unless ``positive``.

    Unlike ``Duration`` (whole milliseconds, always positive) it takes the delays of a schedule,
    where 0 means "at once".
    """

    positive: bool = False

    def parse(self, raw: str) -> float:
        if not _DECIMAL.fullmatch(raw):
            raise ValueError(f"must be a non-negative number of milliseconds, not {raw!r}")
        if self.positive and float(raw) == 0:
            raise ValueError(f"must be a positive number of milliseconds, not {raw!r}")
        return self.check(float(raw) / 1000.0)

    def check(self, value: Any) -> float:
        good = isinstance(value, int | float) and not isinstance(value, bool)
        if not good or not math.isfinite(value) or value < 0 or (self.positive and value == 0):
            least = "positive" if self.positive else "non-negative"
            raise ValueError(f"must be a {least}, finite number of seconds, not {value!r}")
        return float(value)

    def format(self, value: Any) -> str:
        ms = value * 1000.0
        # Whole milliseconds print as such when they read back exactly (0.007 s * 1000 is
        # 7.000000000000001, but 7 / 1000 is 0.007 again); anything else as a decimal.
        whole = round(ms)
        return str(whole) if whole / 1000.0 == value else plain_number(ms)

    def describe(self) -> str:
        return "ms"


@dataclass(frozen=True, slots=True)
class MinusOneIsNone:
    """Another kind whose URL text may also be ``-1``: the value None (``means`` says what
    None stands for: "unlimited", "none", ...), printed back as ``-1``."""

    kind: Kind
    means: str = "none"

    def parse(self, raw: str) -> Any:
        if raw == "-1":
            return None
        try:
            return self.kind.parse(raw)
        except ValueError as exc:
            raise ValueError(f"{exc} (or -1: {self.means})") from None

    def check(self, value: Any) -> Any:
        if value is None:
            return None
        try:
            return self.kind.check(value)
        except ValueError as exc:
            raise ValueError(f"{exc} (or None: {self.means})") from None

    def format(self, value: Any) -> str:
        return "-1" if value is None else self.kind.format(value)

    def describe(self) -> str:
        inner = self.kind.describe()
        return f"{inner}; -1 = {self.means}" if inner else f"-1 = {self.means}"


def plain_number(value: float) -> str:
    """``1.0`` -> ``"1"``, ``1e-05`` -> ``"0.00001"``: decimal text (never an exponent) that
    parses back to the same float."""
    text = format(Decimal(repr(float(value))), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text
