"""The ``haclient`` data source's options: Spark's string map, checked once, as a frozen value.

Spark hands a data source its options as strings (``.option("batchSize", 500)`` arrives as
``"500"``), with keys in whatever case the job used. ``SparkOptions.parse`` lower-cases the keys,
converts and validates every value and raises ``ConfigurationError`` naming the option at fault,
so a typo fails the job when it is planned, not on an executor. Credentials never appear in the
value's ``repr`` (which is what logs and Spark's plans would show).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final

import haclient
from failover.url import mask_secrets
from haclient.destination import Destination, Queue, Topic
from haclient.errors import ConfigurationError

__all__ = ["BODY_FORMATS", "SparkOptions"]

BODY_FORMATS: Final = ("text", "bytes", "json")
_WRITE_MODES: Final = ("transacted", "auto")


def _flag(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"expected true or false, not {value!r}")
    return lowered == "true"


# Options Spark itself sets on the writer or reader besides the job's own.
_SPARK_OWN: Final = frozenset({"checkpointlocation", "queryname", "outputmode"})

# Spark option name (lower case) -> (field name, converter).
_OPTIONS: Final[dict[str, tuple[str, Callable[[str], Any]]]] = {
    "url": ("url", str),
    "address": ("address", str),
    "format": ("body_format", str.lower),
    "ackmode": ("ack_mode", str.lower),
    "transactions": ("transactions", str.lower),
    "batchsize": ("batch_size", int),
    "selector": ("selector", str),
    "username": ("username", str),
    "password": ("password", str),
    "query": ("query", str),
    "maxrowsperbatch": ("max_rows_per_batch", int),
    "numpartitions": ("num_partitions", int),
    "receivetimeout": ("receive_timeout", float),
    "dedupwindow": ("dedup_window", int),
    "maxmessages": ("max_messages", int),
    "consume": ("consume", _flag),
}


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
        num_partitions: Partitions a read batch is split into (``numPartitions``).
        receive_timeout: Seconds a reader waits for the first message of a batch
            (``receiveTimeout``).
        dedup_window: Message ids the stream reader remembers to drop replays
            (``dedupWindow``; 0: off).
        max_messages: How many messages a batch read takes at most (``maxMessages``).
        consume: A batch read consumes the messages (true) or browses them (false, the
            default) (``consume``).

    Raises:
        ConfigurationError: a value is missing or invalid (``option`` names it).
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
        self._check_choice("body_format", BODY_FORMATS)
        self._check_choice("ack_mode", _WRITE_MODES)
        self._check_choice("transactions", ("native", "emulate"))
        for name in ("batch_size", "max_rows_per_batch", "num_partitions", "max_messages"):
            if getattr(self, name) < 1:
                raise ConfigurationError(f"{name} must be at least 1", option=name)
        if self.dedup_window < 0:
            raise ConfigurationError("dedup_window must be 0 or more", option="dedup_window")
        if self.receive_timeout <= 0:
            raise ConfigurationError("receive_timeout must be positive", option="receive_timeout")
        if self.query is not None and not re.fullmatch(r"[\w.-]+", self.query):
            raise ConfigurationError(
                "query may hold letters, digits, '.', '_', '-'", option="query"
            )

    def _check_choice(self, name: str, choices: tuple[str, ...]) -> None:
        if getattr(self, name) not in choices:
            raise ConfigurationError(
                f"{name} must be one of {', '.join(choices)}, not {getattr(self, name)!r}",
                option=name,
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
                close = difflib.get_close_matches(name, list(_OPTIONS), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigurationError(f"unknown haclient option {key!r}{hint}", option=key)
            attribute, convert = _OPTIONS[name]
            try:
                values[attribute] = convert(raw)
            except ValueError as exc:
                raise ConfigurationError(f"option {key!r}: {exc}", option=key) from exc
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

        It fails over as the URL says; ``keywords`` are further connection options.

        Raises:
            As ``haclient.connect``.
        """
        if self.transactions != "native":
            keywords.setdefault("transactions", self.transactions)
        return haclient.connect(
            self.url, username=self.username, password=self.password, **keywords
        )
