"""Failover URLs: parse and print ``failover:(amqp://a:5672,amqps://b:5671?...)?options``.

How this works: ``parse_url`` splits the text into broker URLs and options, and turns the
``failover.*`` options into a ``FailoverPolicy`` (``failover.policy``, whose table
``FAILOVER_OPTIONS`` declares them); every other option is a connection option, checked
against the option table the caller gives (``parse_url(text, options=table)``; ``haclient``
gives the client's ``jms.*``/``amqp.*`` options, ``haclient.options.CLIENT_OPTIONS``) and kept
as text for them. Given no table, the parser knows the ``failover.*`` options alone and reports
any other as unknown, whatever else the process imported: no table is registered anywhere. A
parsed value keeps its table (``table``), which its checks and its masking of secrets use. The
result is a frozen ``FailoverURL`` whose ``to_string(include_secrets=True)`` parses back into an
equal value; ``str()`` and ``repr()`` mask passwords and every option declared secret, so a URL
can be logged.

Forms accepted:

- ``failover:(URL[,URL...])[?options]``: the method defaults to ``roundrobin`` (as Qpid JMS
  walks its list). Options after the parentheses apply to the whole connection;
  ``failover.nested.X=v`` is Qpid JMS's spelling of a per-broker option ``X`` (one declared
  ``Scope.BROKER``, e.g. ``amqp.idleTimeout``) for every broker.
- ``amqp://host[:port][?options]`` alone: ``singlebroker`` (F1), with any options.
- Each broker URL is ``amqp`` or ``amqps`` (default port 5672 or 5671), optional
  ``user:password@`` (percent-decoded), a host name, IPv4 or ``[IPv6]`` address, and its own
  per-broker options, which override the connection-wide ones for that broker.

Every malformed input raises ``ConfigurationError`` (a ``ValueError``) whose ``option`` names
the option or the part of the URL at fault. An unknown option is an error, not ignored: a typo
would otherwise silently change nothing; the error names the nearest known option.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Final, TypeVar
from urllib.parse import quote, unquote

from failover.errors import ConfigurationError
from failover.options import (
    MASK,
    NO_OPTIONS,
    OptionTable,
    mask_option_values,
    masked,
    secret_values,
    unknown_option_error,
    whole_connection_error,
)
from failover.policy import FAILOVER_OPTIONS, FailoverMethod, FailoverPolicy

__all__ = [
    "DEFAULT_PORTS",
    "BrokerURL",
    "FailoverURL",
    "brokers_named",
    "mask_secrets",
    "merge_broker_lists",
    "parse_url",
]

DEFAULT_PORTS: Final[Mapping[str, int]] = MappingProxyType({"amqp": 5672, "amqps": 5671})

# Characters left unescaped in printed option values and credentials.
_SAFE_VALUE: Final = "-._~!$'*+:/"
_SAFE_USERINFO: Final = "-._~!$'*+"


_NESTED_PREFIX: Final = "failover.nested."


# --- Values --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerURL:
    """One broker of a failover URL.

    Attributes:
        scheme: ``"amqp"`` or ``"amqps"`` (TLS).
        host: Host name or IP address; an IPv6 address without its brackets.
        port: TCP port (default 5672 for amqp, 5671 for amqps).
        username: From ``user:password@``, percent-decoded; None when absent.
        password: Likewise; never shown by ``repr``/``str``.
        options: This broker's own options (text values, already checked; only options
            declared ``Scope.BROKER``).
        table: The option table ``options`` are checked against and masked by (the one
            ``parse_url`` was given; none: no option but ``failover.*`` is known).

    Raises:
        ConfigurationError: From the constructor, naming the part, for an invalid value.
    """

    scheme: str
    host: str
    port: int | None = None  # None: the scheme's default, filled in by __post_init__
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    options: Mapping[str, str] = field(default_factory=dict, hash=False)
    table: OptionTable = field(default=NO_OPTIONS, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.scheme not in DEFAULT_PORTS:
            raise ConfigurationError(
                f"unsupported scheme {self.scheme!r} (expected amqp or amqps)", option="scheme"
            )
        _check_host(self.host)
        if self.port is None:
            object.__setattr__(self, "port", DEFAULT_PORTS[self.scheme])
        elif isinstance(self.port, bool) or not isinstance(self.port, int):
            raise ConfigurationError(f"port must be an int, not {self.port!r}", option="port")
        elif not 1 <= self.port <= 65535:
            raise ConfigurationError(f"port {self.port} is out of range 1-65535", option="port")
        if self.username == "":
            raise ConfigurationError("empty user name in the broker URL", option="username")
        if self.password is not None and self.username is None:
            raise ConfigurationError("a password without a user name", option="username")
        options = dict(self.options)
        table = self.table
        for name, raw in options.items():
            if name.startswith("failover."):
                raise whole_connection_error(name)
            table.check_url_option(name, raw, on_broker=True)
        table.check_one_value_each(options)
        object.__setattr__(self, "options", MappingProxyType(options))

    def __reduce__(self) -> tuple[Callable[..., BrokerURL], tuple[object, ...]]:
        # A MappingProxyType does not pickle (PySpark ships these); the value was checked when
        # it was built, so it is rebuilt as it is, whichever option tables the process has.
        fields_ = (self.scheme, self.host, self.port, self.username, self.password)
        return (_rebuilt, (BrokerURL, *fields_, dict(self.options), self.table))

    @property
    def secure(self) -> bool:
        """True for ``amqps`` (TLS)."""
        return self.scheme == "amqps"

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` for a socket."""
        assert self.port is not None  # filled in by __post_init__
        return (self.host, self.port)

    def to_string(self, *, include_secrets: bool = False) -> str:
        """``amqps://user:******@host:5671?amqp.idleTimeout=1000``; the real password only with
        ``include_secrets=True``. The port is always printed."""
        userinfo = ""
        if self.username is not None:
            userinfo = quote(self.username, safe=_SAFE_USERINFO)
            if self.password is not None:
                secret = self.password if include_secrets else MASK
                userinfo += ":" + quote(secret, safe=_SAFE_USERINFO)
            userinfo += "@"
        host = f"[{self.host.replace('%', '%25')}]" if ":" in self.host else self.host
        return f"{self.scheme}://{userinfo}{host}:{self.port}{_query(self.options)}"

    def __str__(self) -> str:
        return self.to_string()

    def __repr__(self) -> str:
        password = "" if self.password is None else f", password={MASK!r}"
        options = f", options={dict(self.options)!r}" if self.options else ""
        return (
            f"BrokerURL(scheme={self.scheme!r}, host={self.host!r}, port={self.port!r}, "
            f"username={self.username!r}{password}{options})"
        )


@dataclass(frozen=True, slots=True)
class FailoverURL:
    """A parsed failover URL: the brokers, the policy and the connection options.

    Attributes:
        brokers: The seed broker list (non-empty). For ``exchange`` it is only the seed (F12).
        policy: The failover policy built from the ``failover.*`` options.
        connection_options: The other options (the table's), checked, as text, for the
            layers above. ``failover.nested.X`` appears here as ``X``.
        table: The option table ``connection_options`` are checked against and masked by
            (the one ``parse_url`` was given; none: no option but ``failover.*`` is known).

    Raises:
        ConfigurationError: From the constructor: no broker, ``singlebroker`` with several,
            two names of one option with different values, or a ``failover.priorityURIs``
            entry that names no broker of the list.
    """

    brokers: tuple[BrokerURL, ...]
    policy: FailoverPolicy = field(default_factory=FailoverPolicy)
    connection_options: Mapping[str, str] = field(default_factory=dict, hash=False)
    table: OptionTable = field(default=NO_OPTIONS, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        brokers = tuple(self.brokers)
        if not brokers:
            raise ConfigurationError("the broker list is empty", option="brokers")
        if not all(isinstance(b, BrokerURL) for b in brokers):
            raise ConfigurationError("brokers must be BrokerURL values", option="brokers")
        if self.policy.method is FailoverMethod.SINGLEBROKER and len(brokers) > 1:
            raise ConfigurationError(
                f"failover.method=singlebroker uses one broker, but {len(brokers)} are listed",
                option="failover.method",
            )
        options = dict(self.connection_options)
        table = self.table
        for name, raw in options.items():
            if table.named(name) is None:  # the nearest name may be a failover.* one
                raise unknown_option_error(name, (*table.url_names, *FAILOVER_OPTIONS.url_names))
            table.check_url_option(name, raw)
        table.check_one_value_each(options)
        for text in self.policy.priority_uris or ():
            brokers_named(text, brokers)  # raises for one that names no broker of the list
        object.__setattr__(self, "brokers", brokers)
        object.__setattr__(self, "connection_options", MappingProxyType(options))

    def __reduce__(self) -> tuple[Callable[..., FailoverURL], tuple[object, ...]]:
        fields_ = (self.brokers, self.policy, dict(self.connection_options), self.table)
        return (_rebuilt, (FailoverURL, *fields_))

    @property
    def method(self) -> FailoverMethod:
        """The failover method (``policy.method``)."""
        return self.policy.method

    def broker_options(self, index: int) -> dict[str, str]:
        """The options for ``brokers[index]``: the connection's, overridden by the broker's."""
        return {**self.connection_options, **self.brokers[index].options}

    def with_brokers(self, brokers: Iterable[BrokerURL]) -> FailoverURL:
        """A copy with another broker list (e.g. the one an ``exchange`` broker advertised)."""
        return replace(self, brokers=tuple(brokers))

    def to_string(self, *, include_secrets: bool = False) -> str:
        """The canonical URL text; ``parse_url`` of it with ``include_secrets=True`` is equal
        to this value. Passwords (userinfo) and secret options are masked otherwise.

        A single broker with ``singlebroker`` and no broker options prints as a plain
        ``amqp://`` URL; everything else as ``failover:(...)?failover.method=...``.
        """
        options = dict(self.connection_options)
        if not include_secrets:
            options = masked(options, self.table)
        policy_options = self.policy.to_options()
        only = self.brokers[0]
        if (
            len(self.brokers) == 1
            and self.policy.method is FailoverMethod.SINGLEBROKER
            and not only.options
        ):
            del policy_options["failover.method"]  # the plain form's default
            query = _query({**policy_options, **options})
            return only.to_string(include_secrets=include_secrets) + query
        inner = ",".join(b.to_string(include_secrets=include_secrets) for b in self.brokers)
        return f"failover:({inner}){_query({**policy_options, **options})}"

    def __str__(self) -> str:
        return self.to_string()

    def __repr__(self) -> str:
        return f"FailoverURL({self.to_string()!r})"


_Value = TypeVar("_Value", BrokerURL, FailoverURL)


def _rebuilt(cls: type[_Value], *values: object) -> _Value:
    """An unpickled ``cls``: its fields set as they were, without checking them again."""
    value = object.__new__(cls)
    for f, item in zip(fields(cls), values, strict=True):
        if isinstance(item, dict):
            item = MappingProxyType(item)
        object.__setattr__(value, f.name, item)
    return value


# --- Parsing -------------------------------------------------------------------------------------

_HOST_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9_])?")
_PORT = re.compile(r"[0-9]{1,5}")


def parse_url(text: str, *, options: OptionTable = NO_OPTIONS) -> FailoverURL:
    """Parse a failover URL or a single plain broker URL.

    Args:
        text: ``failover:(amqp://a:5672,amqps://b)?failover.method=roundrobin&...`` or
            ``amqp://host:port?...``. Surrounding white space is ignored.
        options: The options the URL may carry besides ``failover.*`` (the client passes
            ``haclient.options.CLIENT_OPTIONS``); none by default, so that any other option is
            unknown. The result keeps it (``table``).

    Returns:
        The frozen ``FailoverURL``.

    Raises:
        ConfigurationError: Naming the option or the part at fault (``option`` attribute);
            its message never shows a password, whatever the URL's shape.
    """
    if not isinstance(text, str):
        raise ConfigurationError(f"a URL must be a str, not {type(text).__name__}", option="url")
    try:
        return _parse(text, options)
    except ConfigurationError as exc:
        if not _shows_secret(text, str(exc), options):
            raise
        option = exc.option  # said again below, outside the handler: exc quotes the secret
    if option is None or _shows_secret(text, option, options):
        option = "url"
    raise ConfigurationError(
        f"invalid URL {_mask_malformed(text.strip(), options)!r} ({option}): write a '/', '?', "
        "'#', ',', '(', ')' or '@' in a user name or password percent-encoded (%2F, %3F, %23, "
        "%2C, %28, %29, %40)",
        option=option,
    )


def mask_secrets(url: str, *, options: OptionTable) -> str:
    """``url`` as it may be shown in errors, logs and reprs: every password masked.

    A URL that parses (with ``options``, as ``parse_url``) prints as ``FailoverURL`` prints it
    (``amqp://user:******@host:5672``); any other text (a malformed URL) is masked from the
    first ``user:`` to the last ``@``, and every secret option's value (``options`` says which
    are secret; it has no default, so that no caller masks less than it means to): more than
    the password, never less.
    """
    try:
        return str(parse_url(url, options=options))
    except ConfigurationError:
        return _mask_malformed(url.strip() if isinstance(url, str) else repr(url), options)


# ``user:`` at the start, after ``//``, ``(`` or ``,`` (an unencoded '@' in the user included),
# then anything up to the last ``@``; a scheme (``amqp:`` before ``//``, ``failover:`` before
# ``(``) is not a user.
_USERINFO_SECRET = re.compile(r"((?:^|//|[(,])[^:/?#,()]*:)(?!//|\().*@", re.DOTALL)


def _mask_malformed(text: str, table: OptionTable) -> str:
    text = mask_option_values(text, table)
    return _USERINFO_SECRET.sub(lambda m: f"{m.group(1)}{MASK}@", text, count=1)


def _shows_secret(text: str, message: str, table: OptionTable) -> bool:
    """Whether ``message`` (a parse error of ``text``) may quote a piece of a password."""
    secrets = [m.group(0)[len(m.group(1)) : -1] for m in _USERINFO_SECRET.finditer(text)]
    secrets += secret_values(text, table)
    pieces = (p for secret in secrets for p in re.split(r"[/?#,()@&=:\s]", secret))
    return any(piece in message for piece in pieces if piece)


def _parse(text: str, table: OptionTable) -> FailoverURL:
    text = text.strip()
    if not text:
        raise ConfigurationError("the URL is empty", option="url")
    if text.lower().startswith("failover:"):
        return _parse_failover(text[len("failover:") :], table)
    broker, options = _split_broker(text, table)
    failover_options = {k: v for k, v in options.items() if k.startswith("failover.")}
    policy = _policy(failover_options, FailoverMethod.SINGLEBROKER)
    connection = {k: v for k, v in options.items() if not k.startswith("failover.")}
    return FailoverURL((broker,), policy, connection, table)


def _parse_failover(rest: str, table: OptionTable) -> FailoverURL:
    if not rest.startswith("("):
        raise ConfigurationError(
            "expected '(' after 'failover:' (failover:(amqp://a,amqp://b)?options)",
            option="parentheses",
        )
    close = _matching_paren(rest)
    inner, tail = rest[1:close], rest[close + 1 :]
    if "(" in tail or ")" in tail:
        raise ConfigurationError("unbalanced parentheses in the URL", option="parentheses")
    if tail and not tail.startswith("?"):
        raise ConfigurationError(
            f"unexpected text after the broker list: {_mask_malformed(tail, table)!r}",
            option="parentheses",
        )
    options = _parse_query(tail[1:]) if tail else {}
    brokers: list[BrokerURL] = []
    for part in inner.split(","):
        if not part.strip():
            raise ConfigurationError("empty broker URL in the broker list", option="brokers")
        broker, broker_options = _split_broker(part.strip(), table)
        brokers.append(replace(broker, options=broker_options))
    failover_options: dict[str, str] = {}
    connection: dict[str, str] = {}
    for name, raw in options.items():
        if name.startswith(_NESTED_PREFIX):
            nested = name[len(_NESTED_PREFIX) :]
            if nested not in table.broker_names():
                nested_names = [_NESTED_PREFIX + o for o in table.broker_names()]
                raise unknown_option_error(name, nested_names)
            if nested in connection and connection[nested] != raw:
                raise ConfigurationError(f"{name} and {nested} give different values", option=name)
            connection[nested] = raw
        elif name.startswith("failover."):
            failover_options[name] = raw
        else:
            if name in connection and connection[name] != raw:
                raise ConfigurationError(
                    f"{_NESTED_PREFIX}{name} and {name} give different values", option=name
                )
            connection[name] = raw
    if not brokers:
        raise ConfigurationError("the broker list is empty", option="brokers")
    policy = _policy(failover_options, FailoverMethod.ROUNDROBIN)
    return FailoverURL(tuple(brokers), policy, connection, table)


def _policy(options: Mapping[str, str], default: FailoverMethod) -> FailoverPolicy:
    return FailoverPolicy.from_options(options, default_method=default)


def _matching_paren(rest: str) -> int:
    """The index in ``rest`` (which starts with '(') of the ')' that closes it."""
    depth = 0
    for i, char in enumerate(rest):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
    raise ConfigurationError("unbalanced parentheses: no closing ')'", option="parentheses")


def _split_broker(text: str, table: OptionTable) -> tuple[BrokerURL, dict[str, str]]:
    """A broker URL without its options, and its options (unchecked)."""
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise ConfigurationError(
            f"not a broker URL (expected amqp://host:port): {_mask_malformed(text, table)!r}",
            option="scheme",
        )
    scheme = scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise ConfigurationError(
            f"unsupported scheme {scheme!r} (expected amqp or amqps)", option="scheme"
        )
    if "#" in rest:
        raise ConfigurationError("a broker URL has no fragment ('#')", option="fragment")
    authority_path, qmark, query = rest.partition("?")
    authority, slash, path = authority_path.partition("/")
    if slash and path:
        raise ConfigurationError(f"a broker URL has no path: '/{path}'", option="path")
    username: str | None = None
    password: str | None = None
    userinfo, at, hostport = authority.rpartition("@")
    if at:
        user, colon, secret = userinfo.partition(":")
        for part, named in ((user, "username"), (secret, "password")):
            if "@" in part:  # amqp://u:pw@@host: never read as the password 'pw@'
                raise ConfigurationError(
                    f"invalid URL {_mask_malformed(text, table)!r}: write an '@' in a {named} "
                    "percent-encoded (%40)",
                    option=named,
                )
        username = _unquote(user, "username")
        password = _unquote(secret, "password") if colon else None
    host, port = _split_host_port(hostport)
    broker = BrokerURL(scheme, host, port, username, password, table=table)
    return broker, _parse_query(query) if qmark else {}


def _split_host_port(hostport: str) -> tuple[str, int | None]:
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            raise ConfigurationError(f"unclosed '[' in host {hostport!r}", option="host")
        # RFC 6874: a zone id's '%' is written '%25' ([fe80::1%25eth0]).
        host, rest = _unquote(hostport[1:end], "host"), hostport[end + 1 :]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigurationError(f"not an IPv6 address: [{host}]", option="host") from None
        if rest and not rest.startswith(":"):
            raise ConfigurationError(f"unexpected {rest!r} after [{host}]", option="host")
        port_text = rest[1:] if rest else None
    else:
        if hostport.count(":") > 1:
            raise ConfigurationError(
                f"an IPv6 address must be in brackets: {hostport!r}", option="host"
            )
        host, colon, port_text_ = hostport.partition(":")
        port_text = port_text_ if colon else None
    if port_text is None:
        return host, None
    if not _PORT.fullmatch(port_text):
        raise ConfigurationError(f"invalid port {port_text!r}", option="port")
    return host, int(port_text)


def _check_host(host: object) -> None:
    if not isinstance(host, str) or not host:
        raise ConfigurationError("the host is missing", option="host")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigurationError(f"invalid host {host!r}", option="host") from None
    elif not _HOST_NAME.fullmatch(host):
        raise ConfigurationError(f"invalid host {host!r}", option="host")


def _parse_query(query: str) -> dict[str, str]:
    """``a=1&b=2`` -> ``{"a": "1", "b": "2"}``, percent-decoded; duplicates are errors."""
    out: dict[str, str] = {}
    if not query:
        raise ConfigurationError("empty option list after '?'", option="options")
    for pair in query.split("&"):
        name, eq, raw = pair.partition("=")
        name = _unquote(name, "options")
        if not name:
            raise ConfigurationError(f"an option without a name: {pair!r}", option="options")
        if not eq:
            raise ConfigurationError(f"option {name} has no value (name=value)", option=name)
        if name in out:
            raise ConfigurationError(f"option {name} is given twice", option=name)
        out[name] = _unquote(raw, name)
    return out


# A '%' that does not start an escape (``%zz``, ``%4`` at the end): unquote would keep it as it is.
_BAD_ESCAPE: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _unquote(text: str, option: str) -> str:
    if _BAD_ESCAPE.search(text):
        raise ConfigurationError(
            f"{option}: invalid percent-encoding (write a '%' as %25)", option=option
        )
    try:
        return unquote(text, errors="strict")
    except UnicodeDecodeError:
        raise ConfigurationError(f"{option}: invalid percent-encoding", option=option) from None


def _query(options: Mapping[str, str]) -> str:
    """``?a=1&b=2`` (percent-encoded), or nothing for no options."""
    if not options:
        return ""
    pairs = (f"{quote(k, safe='.')}={quote(v, safe=_SAFE_VALUE)}" for k, v in options.items())
    return "?" + "&".join(pairs)


# --- The preferred brokers (F16) ---------------------------------------------------------------


def brokers_named(text: str, brokers: Sequence[BrokerURL]) -> tuple[BrokerURL, ...]:
    """The brokers of ``brokers`` a ``failover.priorityURIs`` entry names, matched by host and
    port: ``amqp://host:port``, any other scheme (an ActiveMQ ``tcp://`` URI), or
    ``host:port``; without a port, every broker of that host.

    Raises:
        ConfigurationError: Naming ``failover.priorityURIs``: the entry has no valid port, or
            names no broker of the list.
    """
    host, port = _host_and_port(text)
    match = [b for b in brokers if b.host.lower() == host and (port is None or b.port == port)]
    if not match:
        raise ConfigurationError(
            f"failover.priorityURIs names {text!r}, which is no broker of the list",
            option="failover.priorityURIs",
        )
    return tuple(match)


def _host_and_port(text: str) -> tuple[str, int | None]:
    """The host (lower case) and port a priority URI names."""
    rest = text.split("://", 1)[-1].split("?", 1)[0].split("/", 1)[0].rsplit("@", 1)[-1]
    if rest.startswith("["):  # [IPv6]:port
        host, _, tail = rest[1:].partition("]")
        port_text = tail.removeprefix(":")
    else:
        host, _, port_text = rest.partition(":")
    try:
        port = int(port_text) if port_text else None
    except ValueError:
        raise ConfigurationError(
            f"failover.priorityURIs: {text!r} has no valid port", option="failover.priorityURIs"
        ) from None
    return host.lower(), port


# --- The exchange method's list (F12) ----------------------------------------------------------


def merge_broker_lists(
    seed: Sequence[BrokerURL],
    advertised: Iterable[BrokerURL],
    *,
    secure: bool,
) -> tuple[BrokerURL, ...]:
    """The list ``exchange`` walks: the brokers advertised, then the seed brokers as fallback.

    Duplicates (same scheme, host and port) are dropped, the first kept. When the connection
    that learned the list is ``secure`` (amqps), an advertised ``amqp`` entry is refused: a
    broker must not be able to downgrade the client to plain TCP (Qpid JMS refuses such
    redirects by default too, ``amqp.allowNonSecureRedirects=false``). Seed entries are the
    user's own choice and always kept.
    """
    out: list[BrokerURL] = []
    seen: set[tuple[str, str, int | None]] = set()
    for broker, from_seed in [*((b, False) for b in advertised), *((b, True) for b in seed)]:
        key = (broker.scheme, broker.host.lower(), broker.port)
        if key in seen or (secure and not from_seed and not broker.secure):
            continue
        seen.add(key)
        out.append(broker)
    return tuple(out)
