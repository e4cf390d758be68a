"""Connection options: from the URL's ``amqp.*``/``jms.*`` options and ``connect()`` keywords.

Keywords win over URL options, and every keyword is checked: an unknown one or a bad value
raises ``ConfigurationError`` naming it, never silently does nothing.
"""

from __future__ import annotations

import difflib
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final

from failover.url import FailoverURL
from haclient.errors import ConfigurationError

__all__ = ["ConnectionOptions", "generated_client_id"]

_URL_OPTIONS: Final[dict[str, tuple[str, Callable[[str], Any]]]] = {
    "jms.clientID": ("client_id", str),
    "jms.username": ("username", str),
    "jms.password": ("password", str),
    "jms.prefetch": ("prefetch", int),
    "jms.transactions": ("transactions", str),
    "jms.selectors": ("selectors", str),
    "jms.dedupWindow": ("dedup_window", int),
    "jms.dedupAge": ("dedup_age", lambda ms: int(ms) / 1000),
    "jms.connectTimeout": ("connect_timeout", lambda ms: int(ms) / 1000),
    "amqp.idleTimeout": ("idle_timeout", lambda ms: int(ms) / 1000 or None),
    "amqp.maxFrameSize": ("max_frame_size", int),
}


def generated_client_id() -> str:
    """A container id for a connection the application gave no client id (``ID:<uuid>``)."""
    return f"ID:{uuid.uuid4()}"


_ACK_CONFIRMATIONS = ("auto", "settle-second", "link-flow", "drain", "round-trip")


@dataclass(frozen=True, slots=True)
class ConnectionOptions:
    """Everything a logical connection is configured with, besides its brokers and policy.

    Attributes:
        client_id: The JMS client id, sent as the AMQP container id (S1, S2). None: a generated
            id is used and the connection has no client id in the JMS sense.
        username / password: SASL PLAIN credentials (ANONYMOUS without a username).
        prefetch: Link credit of each consumer (messages buffered ahead of ``receive``); 0
            pulls one message per ``receive``.
        idle_timeout: Seconds of silence after which the broker counts as dead (F13); None: off.
        max_frame_size: The largest frame accepted; None: proton's default.
        transactions: ``native`` (the broker's coordinator) or ``emulate`` (E3).
        selectors: ``auto``, ``broker`` or ``client`` (E1).
        attach_timeout: Seconds to wait for the broker to answer an attach or a begin.
        connect_timeout: Seconds to wait for a broker's TCP connection, protocol header, login
            and Open: a port that accepts and says nothing fails after this (F4).
        dups_ok_batch: DUPS_OK flushes acknowledgements after this many messages ...
        dups_ok_interval: ... or this many seconds after the oldest unflushed one (A3).
        close_timeout: Seconds ``close()`` waits for the broker's answer before dropping the socket.
        dedup_window: How many consumed message ids each session remembers to suppress their
            duplicates (a redelivery or an F11 re-send of a message already handed out); 0
            turns suppression off (``haclient.aio.dedup``).
        dedup_age: ... and for how many seconds at most.
        ack_confirmation: How AUTO and CLIENT acknowledgements are confirmed (A6): ``auto``
            (receiver settle mode ``second`` where granted, else the cheapest exchange the
            broker answers), or one of ``link-flow``, ``drain``, ``round-trip`` to use that
            exchange instead of mode ``second`` (benchmarks, tests; see ``haclient.aio.confirm``).
    """

    client_id: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    prefetch: int = 1000
    idle_timeout: float | None = 60.0
    max_frame_size: int | None = None
    transactions: str = "native"
    selectors: str = "auto"
    attach_timeout: float = 30.0
    connect_timeout: float = 10.0
    dups_ok_batch: int = 100
    dups_ok_interval: float = 0.1
    close_timeout: float = 5.0
    dedup_window: int = 10_000
    dedup_age: float = 600.0
    ack_confirmation: str = "auto"

    def __post_init__(self) -> None:
        if self.client_id is not None and (
            not isinstance(self.client_id, str) or not self.client_id
        ):
            raise ConfigurationError(
                f"client_id must be a non-empty str (or None for a generated id), "
                f"not {self.client_id!r}",
                option="client_id",
            )
        if (
            not isinstance(self.prefetch, int)
            or isinstance(self.prefetch, bool)
            or self.prefetch < 0
        ):
            raise ConfigurationError(
                f"prefetch must be an int >= 0, not {self.prefetch!r}", option="prefetch"
            )
        if self.transactions not in ("native", "emulate"):
            raise ConfigurationError(
                f"transactions must be 'native' or 'emulate', not {self.transactions!r}",
                option="transactions",
            )
        if self.selectors not in ("auto", "broker", "client"):
            raise ConfigurationError(
                f"selectors must be 'auto', 'broker' or 'client', not {self.selectors!r}",
                option="selectors",
            )
        if self.ack_confirmation not in _ACK_CONFIRMATIONS:
            raise ConfigurationError(
                f"ack_confirmation must be one of {', '.join(_ACK_CONFIRMATIONS)}, "
                f"not {self.ack_confirmation!r}",
                option="ack_confirmation",
            )
        if not isinstance(self.dedup_window, int) or self.dedup_window < 0:
            raise ConfigurationError("dedup_window must be an int >= 0", option="dedup_window")
        for name in (
            "attach_timeout",
            "connect_timeout",
            "dups_ok_interval",
            "close_timeout",
            "dedup_age",
        ):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value <= 0:
                raise ConfigurationError(f"{name} must be a positive number", option=name)
        if self.idle_timeout is not None and (
            not isinstance(self.idle_timeout, int | float) or self.idle_timeout <= 0
        ):
            raise ConfigurationError("idle_timeout must be positive or None", option="idle_timeout")
        if not isinstance(self.dups_ok_batch, int) or self.dups_ok_batch < 1:
            raise ConfigurationError("dups_ok_batch must be an int >= 1", option="dups_ok_batch")

    @classmethod
    def build(cls, url: FailoverURL, keywords: Mapping[str, Any]) -> ConnectionOptions:
        """The options of the URL, overridden by ``keywords`` (``connect(url, **keywords)``).

        Raises:
            ConfigurationError: an unknown keyword (with the closest known name) or a bad value.
        """
        values: dict[str, Any] = {}
        for option, raw in url.connection_options.items():
            name, convert = _URL_OPTIONS[option]
            values[name] = convert(raw)
        known = [f.name for f in fields(cls)]
        for name, value in keywords.items():
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ConfigurationError(f"unknown connection option {name!r}{hint}", option=name)
            if value is not None or name in ("idle_timeout", "max_frame_size"):
                values[name] = value
        return cls(**values)
