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

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Final
from urllib.parse import unquote

import haclient
from failover.options import (
    Choice,
    Duration,
    Flag,
    Kind,
    Option,
    OptionTable,
    Text,
    WholeNumber,
    masked,
    unknown_option_error,
)
from failover.policy import FAILOVER_OPTIONS
from failover.url import mask_secrets, parse_url
from haclient.destination import Destination, Queue, Topic
from haclient.errors import ConfigurationError
from haclient.options import CLIENT_OPTIONS

__all__ = ["BODY_FORMATS", "SPARK_OPTIONS", "SparkOptions", "startup_rides_out_takeovers"]

BODY_FORMATS: Final = ("text", "bytes", "json")
_WRITE_MODES: Final = ("transacted", "auto")

# Options Spark itself sets on the writer or reader besides the job's own.
_SPARK_OWN: Final = frozenset({"checkpointlocation", "queryname", "outputmode"})

_CONNECTION: Final = "connection"  # handed to haclient.connect as the keyword of the same name
_QUERY: Final = r"[\w.-]+"
_QUERY_HINT: Final = "letters, digits, '.', '_', '-'"


def _connection_option(keyword: str, spark_name: str, *, fold: bool = False) -> Option:
    """The client's declaration of ``keyword``, under its Spark name; ``fold``: any case."""
    option = CLIENT_OPTIONS.keyword(keyword)
    assert option is not None, keyword
    kind = option.kind
    if fold and isinstance(kind, Choice):
        kind = replace(kind, fold=True)
    return replace(option, name=spark_name, aliases=(), kind=kind)


def _own(name: str, kind: Kind, default: Any, keyword: str, **more: Any) -> Option:
    """An option of the data source itself (read by ``haclient.spark``)."""
    return Option(name, kind, default, "", keyword=keyword, layer="spark", **more)


#: Every option as documented (Spark matches names case-insensitively); a keyword is the
#: ``SparkOptions`` field, and the ``connection`` layer's are ``haclient.connect`` keywords too.
SPARK_OPTIONS: Final = OptionTable(
    [
        _own("url", Text(), "", "url"),
        _own("address", Text(), "", "address", aliases=("path",)),  # .load(x) / .save(x)
        _own("format", Choice(BODY_FORMATS, fold=True), "text", "body_format"),
        _own("ackMode", Choice(_WRITE_MODES, fold=True), "transacted", "ack_mode"),
        _connection_option("transactions", "transactions", fold=True),
        _own("batchSize", WholeNumber(1), 500, "batch_size"),
        _own("selector", Text(), None, "selector", optional=True),
        _connection_option("username", "username"),
        _connection_option("password", "password"),
        _own("query", Text(pattern=_QUERY, hint=_QUERY_HINT), None, "query", optional=True),
        _own("maxRowsPerBatch", WholeNumber(1), 10_000, "max_rows_per_batch"),
        _own("numPartitions", WholeNumber(1), 2, "num_partitions"),
        _own("receiveTimeout", Duration("s"), 1.0, "receive_timeout"),
        _own("dedupWindow", WholeNumber(0), 100_000, "dedup_window"),
        _own("maxMessages", WholeNumber(1), 10_000, "max_messages"),
        _own("consume", Flag(), False, "consume"),
        _own("traceContext", Flag(), False, "trace_context"),
    ]
)
_FOLDED: Final = {name.lower(): name for name in SPARK_OPTIONS.url_names}


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
        trace_context: Reads add the columns ``traceparent`` and ``tracestate`` (the W3C
            trace context a message carries, rule O2); writes give each message those columns
            of its row as these properties, and when the URL traces too
            (``jms.tracing=opentelemetry``) send it as a child of that context, so that the
            trace goes on (``traceContext``).

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
    trace_context: bool = False

    def __post_init__(self) -> None:
        for name in ("url", "address"):
            if not getattr(self, name):
                raise ConfigurationError(f"the haclient data source needs {name!r}", option=name)
        for f in fields(self):
            option = SPARK_OPTIONS.keyword(f.name)
            assert option is not None, f.name
            option.check(getattr(self, f.name), as_named=option.label)  # batchSize, as documented
        self._check_url()
        self._check_address()

    def _check_url(self) -> None:
        """Parse the URL here, on the driver, so that a typo fails the job when it is planned
        rather than in every executor task."""
        try:
            parse_url(self.url, options=CLIENT_OPTIONS)
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

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SparkOptions:
        """The options of a ``spark.read/write.format("haclient")`` call.

        Raises:
            ConfigurationError: an unknown option (with the closest known name) or a bad value.
        """
        values: dict[str, Any] = {}
        for key, raw in options.items():
            if key.lower() in _SPARK_OWN or key.lower().startswith("spark."):
                continue
            spelt = _FOLDED.get(key.lower())
            option = SPARK_OPTIONS.named(spelt) if spelt else None
            if option is None or option.keyword is None:
                known = [o.label for o in SPARK_OPTIONS]
                raise unknown_option_error(
                    key, known, what="haclient option", quote=True, fold=True
                )
            # Spaces around a number or a word are the job's formatting, not part of the value.
            values[option.keyword] = option.parse(
                raw if isinstance(option.kind, Text) else raw.strip()
            )
        values.setdefault("url", "")
        values.setdefault("address", "")
        return cls(**values)

    def __repr__(self) -> str:
        shown = masked({f.name: getattr(self, f.name) for f in fields(self)}, SPARK_OPTIONS)
        shown["url"] = mask_secrets(self.url, options=CLIENT_OPTIONS)
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
            ConfigurationError: the URL or an option is invalid (as ``haclient.connect``).
            ConnectionFailedError: no broker could be reached within the URL's time budget.
            AuthenticationError: the broker refused the login.
        """
        for option in SPARK_OPTIONS:
            if option.layer == _CONNECTION and option.keyword is not None:
                value = getattr(self, option.keyword)
                if value != option.default:
                    keywords.setdefault(option.keyword, value)
        return haclient.connect(startup_rides_out_takeovers(self.url), **keywords)


def _names_pattern(keyword: str) -> re.Pattern[str]:
    """``name=`` for each URL name of the failover option that sets the field ``keyword``."""
    option = FAILOVER_OPTIONS.keyword(keyword)
    assert option is not None and option.name is not None
    return re.compile("|".join(f"{re.escape(n)}=" for n in (option.name, *option.aliases)))


# failover.startup.cyclecount= or Qpid JMS's failover.startupMaxReconnectAttempts=
_STARTUP_OPTION: Final = _names_pattern("startup_cyclecount")


def startup_rides_out_takeovers(url: str) -> str:
    """``url`` with ``failover.startup.cyclecount=-1`` (the first connect retries as a failover
    does, within the time budget) unless it sets a startup pass count of its own.

    Raises:
        ConfigurationError: ``url`` is not a valid URL.
    """
    if _STARTUP_OPTION.search(unquote(url)):
        return url
    parsed = parse_url(url, options=CLIENT_OPTIONS)
    policy = replace(parsed.policy, startup_cyclecount=None)
    return replace(parsed, policy=policy).to_string(include_secrets=True)
