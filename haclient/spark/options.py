"""The ``haclient`` data source's options: Spark's string map, checked once, as a frozen value.

Spark hands a data source its options as strings (``.option("batchSize", 500)`` arrives as
``"500"``), with keys in whatever case the job used. ``SparkOptions.parse`` matches the keys
case-insensitively, converts and validates every value (the URL with failover's own parser) and
raises ``ConfigurationError`` naming the option as documented (``batchSize``) and what it
accepts, so a typo fails the job when it is planned, on the driver, not on an executor.
Credentials never appear in the value's ``repr`` (which is what logs and Spark's plans would
show).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final
from urllib.parse import unquote

import haclient
from failover.url import mask_secrets, parse_url
from haclient.destination import Destination, Queue, Topic
from haclient.errors import ConfigurationError

__all__ = ["BODY_FORMATS", "SparkOptions", "startup_rides_out_takeovers"]

BODY_FORMATS: Final = ("text", "bytes", "json")
_WRITE_MODES: Final = ("transacted", "auto")


def _flag(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"expected true or false, not {value!r}")
    return lowered == "true"


# Options Spark itself sets on the writer or reader besides the job's own.
_SPARK_OWN: Final = frozenset({"checkpointlocation", "queryname", "outputmode"})


def _whole(value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise ValueError(f"expected a whole number, not {value!r}") from None


def _seconds(value: str) -> float:
    try:
        return float(value.strip())
    except ValueError:
        raise ValueError(f"expected a number of seconds, not {value!r}") from None


# Every option as documented (Spark matches names case-insensitively): (name, field, converter).
_TABLE: Final[tuple[tuple[str, str, Callable[[str], Any]], ...]] = (
    ("url", "url", str),
    ("address", "address", str),
    ("format", "body_format", str.lower),
    ("ackMode", "ack_mode", str.lower),
    ("transactions", "transactions", str.lower),
    ("batchSize", "batch_size", _whole),
    ("selector", "selector", str),
    ("username", "username", str),
    ("password", "password", str),
    ("query", "query", str),
    ("maxRowsPerBatch", "max_rows_per_batch", _whole),
    ("numPartitions", "num_partitions", _whole),
    ("receiveTimeout", "receive_timeout", _seconds),
    ("dedupWindow", "dedup_window", _whole),
    ("maxMessages", "max_messages", _whole),
    ("consume", "consume", _flag),
)
_OPTIONS: Final = {name.lower(): (name, attribute, convert) for name, attribute, convert in _TABLE}
_NAMES: Final = {attribute: name for name, attribute, _ in _TABLE}  # field -> documented name


def _named(field_name: str) -> str:
    """The option name a field is documented under (``batch_size`` -> ``batchSize``)."""
    return _NAMES.get(field_name, field_name)


@dataclass(frozen=True, slots=True)
class SparkOptions:
    """Everything the data source is configured with (Spark option names in brackets).

    Attributes:
        url: Any haclient URL, failover included (``url``).
        address: ``name`` or ``queue://name`` for a queue, ``topic://name`` for a topic
            (``address``).
        body_format: ``text`` (a ``body`` column, or the only column, as a TextMessage),
            ``bytes`` (a BytesMessage) or ``json`` (the whole row as a JSON TextMessage)
            (``format``).
        ack_mode: How the writer makes its sends durable: ``transacted`` (transactions of
            ``batch_size`` messages) or ``auto`` (each PERSISTENT send confirmed, for brokers
            without transactions) (``ackMode``). Readers always acknowledge in CLIENT mode.
        transactions: ``native`` or ``emulate`` (E3: RabbitMQ) (``transactions``).
        batch_size: Messages per writer transaction (``batchSize``).
        selector: A JMS selector for readers (``selector``).
        username / password: SASL PLAIN credentials (``username``, ``password``); never shown.
        query: The first part of the writer's message ids ``ID:<query>:<batch>:<partition>:
            <row>``. Batch writes default to a fresh id per job; streaming writes to
            ``stream-<address>``, so a restarted query repeats its ids (``query``).
        max_rows_per_batch: The stream reader's read limit per micro-batch
            (``maxRowsPerBatch``).
        num_partitions: Partitions a read batch is split into, more when each would carry
            over 512 KiB of rows (``numPartitions``).
        receive_timeout: Seconds a reader waits for the first message of a batch
            (``receiveTimeout``).
        dedup_window: Message ids the stream reader remembers to drop replays
            (``dedupWindow``; 0: off).
        max_messages: How many messages a batch read takes at most (``maxMessages``).
        consume: A batch read consumes the messages (true) or browses them (false, the
            default) (``consume``).

    Raises:
        ConfigurationError: a value is missing or invalid (``option`` names it by its Spark
            option name, ``url`` for any fault in the URL).
    """

    url: str
    address: str
    body_format: str = "text"
    ack_mode: str = "transacted"
    transactions: str = "native"
    batch_size: int = 500
    selector: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    query: str | None = None
    max_rows_per_batch: int = 10_000
    num_partitions: int = 2
    receive_timeout: float = 1.0
    dedup_window: int = 100_000
    max_messages: int = 10_000
    consume: bool = False

    def __post_init__(self) -> None:
        for name in ("url", "address"):
            if not getattr(self, name):
                raise ConfigurationError(f"the haclient data source needs {name!r}", option=name)
        self._check_url()
        self._check_address()
        self._check_choice("body_format", BODY_FORMATS)
        self._check_choice("ack_mode", _WRITE_MODES)
        self._check_choice("transactions", ("native", "emulate"))
        for name in ("batch_size", "max_rows_per_batch", "num_partitions", "max_messages"):
            self._check_at_least(name, 1)
        self._check_at_least("dedup_window", 0)
        timeout = self.receive_timeout
        if not (isinstance(timeout, int | float) and math.isfinite(timeout) and timeout > 0):
            raise ConfigurationError(
                f"receiveTimeout must be a positive, finite number of seconds, not {timeout!r}",
                option="receiveTimeout",
            )
        if self.query is not None and not re.fullmatch(r"[\w.-]+", self.query):
            raise ConfigurationError(
                f"query may hold letters, digits, '.', '_', '-', not {self.query!r}",
                option="query",
            )

    def _check_url(self) -> None:
        """Parse the URL here, on the driver, so that a typo fails the job when it is planned
        rather than in every executor task."""
        try:
            parse_url(self.url)
        except ConfigurationError as exc:
            raise ConfigurationError(f"url: {exc}", option="url") from None

    def _check_address(self) -> None:
        name = self.address.removeprefix("topic://").removeprefix("queue://")
        if not name:
            raise ConfigurationError(
                f"address {self.address!r} names no queue or topic "
                "(expected name, queue://name or topic://name)",
                option="address",
            )

    def _check_at_least(self, name: str, minimum: int) -> None:
        value = getattr(self, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ConfigurationError(
                f"{_named(name)} must be a whole number of at least {minimum}, not {value!r}",
                option=_named(name),
            )

    def _check_choice(self, name: str, choices: tuple[str, ...]) -> None:
        if getattr(self, name) not in choices:
            raise ConfigurationError(
                f"{_named(name)} must be one of {', '.join(choices)}, not {getattr(self, name)!r}",
                option=_named(name),
            )

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SparkOptions:
        """The options of a ``spark.read/write.format("haclient")`` call.

        Raises:
            ConfigurationError: an unknown option (with the closest known name) or a bad value.
        """
        values: dict[str, Any] = {}
        for key, raw in options.items():
            name = key.lower()
            if name == "path":  # .load(x) / .save(x): the address
                name = "address"
            if name in _SPARK_OWN or name.startswith("spark."):
                continue
            if name not in _OPTIONS:
                documented = {key: spelled for key, (spelled, _, _) in _OPTIONS.items()}
                close = difflib.get_close_matches(name, list(documented), n=1)
                hint = f" (did you mean {documented[close[0]]!r}?)" if close else ""
                raise ConfigurationError(f"unknown haclient option {key!r}{hint}", option=key)
            spelled, attribute, convert = _OPTIONS[name]
            try:
                values[attribute] = convert(raw)
            except ValueError as exc:
                raise ConfigurationError(f"{spelled}: {exc}", option=spelled) from None
        values.setdefault("url", "")
        values.setdefault("address", "")
        return cls(**values)

    def __repr__(self) -> str:
        shown = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "password"}
        shown["url"] = mask_secrets(self.url)
        return "SparkOptions(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

    @property
    def destination(self) -> Destination:
        """The queue or topic ``address`` names."""
        if self.address.startswith("topic://"):
            return Topic(self.address.removeprefix("topic://"))
        return Queue(self.address.removeprefix("queue://"))

    @property
    def transacted(self) -> bool:
        """True when the writer sends in transactions."""
        return self.ack_mode == "transacted"

    def connect(self, **keywords: Any) -> haclient.Connection:
        """A blocking connection to ``url`` with these credentials (not started).

        It fails over as the URL says; ``keywords`` are further connection options. Unlike a
        plain ``haclient.connect``, the first connect is retried like a failover, within the
        URL's time budget (``failover.giveupafter``, 2 minutes by default), unless the URL sets
        ``failover.startup.cyclecount``: a task that starts while a standby takes over is not
        a user's dead URL, and one failed task fails a whole local job.

        Raises:
            As ``haclient.connect``.
        """
        if self.transactions != "native":
            keywords.setdefault("transactions", self.transactions)
        return haclient.connect(
            startup_rides_out_takeovers(self.url),
            username=self.username,
            password=self.password,
            **keywords,
        )


_STARTUP_OPTION = re.compile(r"failover\.(startup\.cyclecount|startupMaxReconnectAttempts)=")


def startup_rides_out_takeovers(url: str) -> str:
    """``url`` with ``failover.startup.cyclecount=-1`` (the first connect retries as a failover
    does, within the time budget) unless it sets a startup pass count of its own.

    Raises:
        ConfigurationError: ``url`` is not a valid URL.
    """
    if _STARTUP_OPTION.search(unquote(url)):
        return url
    parsed = parse_url(url)
    policy = replace(parsed.policy, startup_cyclecount=None)
    return replace(parsed, policy=policy).to_string(include_secrets=True)
