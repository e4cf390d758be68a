"""Option declarations: one ``Option`` per option, and everything that follows from it.

How this works: a layer declares each option it reads once, as an ``Option`` (its URL name and
aliases, its keyword, its kind, default, scope, the layer that consumes it and a line for the
docs), and collects them in an ``OptionTable``. From the table come the URL's checks (a name not
in it is refused with the nearest known name), the conversion of URL text and keywords into
values, their printing back (``Kind.format``), the per-broker overrides (``Scope.BROKER``) and
the rows of the documentation. This module knows no option of its own and no protocol: the
kinds (``failover.option_kinds``, re-exported here) are generic (a whole number, one of some
words, a duration, text), and the layers declare their tables: ``failover.policy`` the
``failover.*`` options (``FAILOVER_OPTIONS``, which ``FailoverPolicy.from_options`` reads), the
layers above the rest, which they ``register`` for the URL parser (``failover.url``) to check
against.

Three things every layer shares live here too, so that each exists once:

- ``unknown_option_error``: the error for an unknown name, with the nearest known one.
- ``MASK`` and ``masked``/``mask_option_values``: the one way a secret value (an option declared
  ``secret=True``) is hidden in reprs, errors and logs. ``failover.url.mask_secrets`` builds on
  them for a whole URL (user info included).
- ``NO_OPTIONS``: the empty table, what the URL parser knows when given none (then only the
  ``failover.*`` options are known, and any other is reported unknown).
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from failover.errors import ConfigurationError
from failover.option_kinds import (
    Choice,
    Duration,
    Flag,
    KeywordOnly,
    Kind,
    Member,
    Milliseconds,
    MinusOneIsNone,
    Names,
    Number,
    Text,
    WholeNumber,
)

__all__ = [
    "MASK",
    "NO_OPTIONS",
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
    "Option",
    "OptionTable",
    "Scope",
    "Status",
    "Text",
    "WholeNumber",
    "mask_option_values",
    "masked",
    "nearest",
    "secret_values",
    "unknown_option_error",
    "whole_connection_error",
]

#: What a secret value is shown as.
MASK: Final = "******"


class Scope(enum.Enum):
    """Where an option may be given."""

    #: For the whole connection: after the URL's parentheses, on a plain URL, or as a keyword.
    CONNECTION = "connection"
    #: Also on one broker URL, where it overrides the connection-wide value for that broker.
    BROKER = "broker"


class Status(enum.Enum):
    """What an accepted option does (room for options accepted for compatibility)."""

    #: Parsed, checked and applied.
    APPLIED = "applied"
    #: Parsed and checked, but without effect (a Qpid JMS option the client has no use for).
    ACCEPTED = "accepted"


# --- Declarations ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Option:
    """One option, declared once.

    Attributes:
        name: Its URL name (``jms.prefetch``); None for a keyword-only option.
        kind: How its value is read, checked and printed (``WholeNumber``, ``Choice``, ...).
        default: Its value when not given (as a keyword value: seconds, not milliseconds).
        doc: One line for the documentation.
        keyword: Its keyword name (``prefetch``) where it has one.
        aliases: Other URL names that set it (another client's spelling).
        scope: ``Scope.BROKER`` when a broker URL may override it for that broker.
        layer: Which part of the client consumes it (``connection``, ``engine``, ``spark``...).
        status: ``Status.ACCEPTED`` for an option accepted without effect.
        secret: Its value is masked wherever it is shown.
        optional: None is one of its values (e.g. "off", or "generate one").
        none_is_value: A keyword given as None sets None, overriding the URL; otherwise a
            keyword None means "not given" (``connect(url, client_id=None)``).
        shown_default: The default as the docs show it (else ``default`` as written).
    """

    name: str | None
    kind: Kind
    default: Any
    doc: str
    keyword: str | None = None
    aliases: tuple[str, ...] = ()
    scope: Scope = Scope.CONNECTION
    layer: str = "connection"
    status: Status = Status.APPLIED
    secret: bool = False
    optional: bool = False
    none_is_value: bool = False
    shown_default: str | None = None

    def __post_init__(self) -> None:
        if self.name is None and self.keyword is None:
            raise ValueError("an option needs a URL name or a keyword")

    @property
    def label(self) -> str:
        """The name errors use: the URL name, else the keyword."""
        return self.name or str(self.keyword)

    def parse(self, raw: str, *, as_named: str | None = None) -> Any:
        """The value of URL text.

        Raises:
            ConfigurationError: Naming the option (``as_named``, the name it was given under).
        """
        named = as_named or self.label
        try:
            return self.kind.parse(raw)
        except ValueError as exc:
            raise ConfigurationError(f"{named} {exc}", option=named) from None

    def check(self, value: Any, *, as_named: str | None = None) -> Any:
        """A keyword value, checked and normalised; None stays None where ``optional``.

        Raises:
            ConfigurationError: Naming the keyword (or ``as_named``).
        """
        named = as_named or self.keyword or self.label
        if value is None and self.optional:
            return None
        try:
            return self.kind.check(value)
        except ValueError as exc:
            raise ConfigurationError(f"{named} {exc}", option=named) from None


class OptionTable:
    """An immutable collection of ``Option`` declarations, found by URL name or keyword.

    Raises:
        ValueError: From the constructor: two options share a URL name, alias or keyword.
    """

    __slots__ = ("_by_keyword", "_by_name", "_options")

    def __init__(self, options: Iterable[Option]) -> None:
        self._options: tuple[Option, ...] = tuple(options)
        self._by_name: dict[str, Option] = {}
        self._by_keyword: dict[str, Option] = {}
        for option in self._options:
            names = (option.name, *option.aliases) if option.name else option.aliases
            for name in names:
                _add_once(self._by_name, name, option)
            if option.keyword is not None:
                _add_once(self._by_keyword, option.keyword, option)

    def __iter__(self) -> Iterator[Option]:
        return iter(self._options)

    def __len__(self) -> int:
        return len(self._options)

    def __add__(self, other: OptionTable) -> OptionTable:
        return OptionTable((*self._options, *other._options))

    def __repr__(self) -> str:
        return f"OptionTable({len(self._options)} options)"

    def __reduce__(self) -> tuple[type[OptionTable], tuple[tuple[Option, ...]]]:
        # A parsed URL carries its table (failover.url), and URLs are pickled (PySpark).
        return (OptionTable, (self._options,))

    def named(self, name: str) -> Option | None:
        """The option a URL name or alias sets; None when unknown."""
        return self._by_name.get(name)

    def keyword(self, keyword: str) -> Option | None:
        """The option a keyword sets; None when unknown."""
        return self._by_keyword.get(keyword)

    @property
    def url_names(self) -> tuple[str, ...]:
        """Every URL name and alias, in declaration order."""
        return tuple(self._by_name)

    @property
    def keywords(self) -> tuple[str, ...]:
        """Every keyword, in declaration order."""
        return tuple(self._by_keyword)

    def broker_names(self) -> tuple[str, ...]:
        """The URL names a single broker URL may carry (``Scope.BROKER``)."""
        return tuple(n for n, o in self._by_name.items() if o.scope is Scope.BROKER)

    def is_secret(self, name: str) -> bool:
        """Whether the URL name or keyword ``name`` holds a secret."""
        option = self._by_name.get(name) or self._by_keyword.get(name)
        return option is not None and option.secret

    def check_url_option(self, name: str, raw: str, *, on_broker: bool = False) -> Any:
        """The value of the URL option ``name=raw``, checked.

        Args:
            on_broker: The option was given on one broker URL: only ``Scope.BROKER`` options
                may be.

        Raises:
            ConfigurationError: Naming the option: unknown (with the nearest name), not for
                one broker, or a bad value.
        """
        option = self._by_name.get(name)
        if option is None:
            known = self.broker_names() if on_broker else self.url_names
            raise unknown_option_error(name, known)
        if on_broker and option.scope is not Scope.BROKER:
            raise whole_connection_error(name)
        return option.parse(raw, as_named=name)

    def check_one_value_each(self, options: Mapping[str, str]) -> None:
        """Check that no two names of one option (a URL name and its alias, say
        ``transport.trustStoreLocation`` and ``transport.caFile``) give different values in
        ``options`` (URL names, assumed known): otherwise one would silently win.

        Raises:
            ConfigurationError: Naming both (``option`` the later one); never their values,
                which may be secret.
        """
        seen: dict[int, tuple[str, Any]] = {}
        for name, raw in options.items():
            option = self._by_name.get(name)
            if option is None:
                continue
            value = option.parse(raw, as_named=name)
            first = seen.setdefault(id(option), (name, value))
            if first[0] != name and first[1] != value:
                raise ConfigurationError(
                    f"{first[0]} and {name} are two names of one option and give it different "
                    "values: give one of them",
                    option=name,
                )

    def values(self, options: Mapping[str, str]) -> dict[str, Any]:
        """Keyword name -> value of URL options (assumed known), for ``Option.keyword``s."""
        out: dict[str, Any] = {}
        for name, raw in options.items():
            option = self._by_name[name]
            if option.keyword is not None:
                out[option.keyword] = option.parse(raw, as_named=name)
        return out


def _add_once(index: dict[str, Option], name: str, option: Option) -> None:
    if name in index:
        raise ValueError(f"option {name!r} is declared twice")
    index[name] = option


# --- Did you mean ------------------------------------------------------------------------------


def nearest(name: str, known: Iterable[str], *, fold: bool = False) -> str | None:
    """The known name closest to ``name`` (as spelt in ``known``), None when none is close.

    With ``fold``, case is ignored (Spark matches option names so).
    """
    spelt = {(k.lower() if fold else k): k for k in known}
    close = difflib.get_close_matches(name.lower() if fold else name, list(spelt), n=1)
    return spelt[close[0]] if close else None


def unknown_option_error(
    option: str,
    known: Sequence[str] | Iterable[str],
    *,
    what: str = "option",
    quote: bool = False,
    fold: bool = False,
) -> ConfigurationError:
    """The error for an unknown option, naming the nearest known one.

    ``unknown option 'jms.clientId' (did you mean jms.clientID?)``; ``what`` names the kind
    (``connection option``) and ``quote`` quotes the suggestion (a keyword is a Python name).
    """
    close = nearest(option, known, fold=fold)
    hint = f" (did you mean {close!r}?)" if close and quote else ""
    hint = hint or (f" (did you mean {close}?)" if close else "")
    return ConfigurationError(f"unknown {what} {option!r}{hint}", option=option)


def whole_connection_error(option: str) -> ConfigurationError:
    """The error for a connection-wide option given on one broker URL."""
    return ConfigurationError(
        f"{option} applies to the whole connection: put it after the parentheses, not on "
        "one broker",
        option=option,
    )


# --- The one masker ----------------------------------------------------------------------------


def masked(options: Mapping[str, Any], table: OptionTable) -> dict[str, Any]:
    """``options`` (URL names or keywords) with every secret value of ``table`` replaced by
    ``MASK``."""
    secret = table.is_secret
    return {k: (MASK if secret(k) and v is not None else v) for k, v in options.items()}


def mask_option_values(text: str, table: OptionTable) -> str:
    """``text`` with the value of every secret option of ``table`` (``name=value``, up to the
    next ``&``) replaced by ``MASK``; for text that may not parse."""
    pattern = _secret_pattern(table)
    return pattern.sub(lambda m: f"{m.group(1)}{MASK}", text) if pattern else text


def secret_values(text: str, table: OptionTable) -> list[str]:
    """The values of the secret options of ``table`` written in ``text`` (``name=value``)."""
    pattern = _secret_pattern(table)
    return [m.group(0)[len(m.group(1)) :] for m in pattern.finditer(text)] if pattern else []


def _secret_pattern(table: OptionTable) -> re.Pattern[str] | None:
    names = [re.escape(n) for n in table.url_names if table.is_secret(n)]
    return re.compile(rf"((?:{'|'.join(names)})=)[^&]*") if names else None


#: The empty table: what the URL parser and the maskers know when given no table.
NO_OPTIONS: Final = OptionTable(())
