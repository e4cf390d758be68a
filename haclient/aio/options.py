"""Connection options: from the URL's ``amqp.*``/``jms.*`` options and ``connect()`` keywords.

Every option is declared once, in ``haclient.options.CLIENT_OPTIONS``: its URL name, keyword,
kind, default and check. Keywords win over URL options, and every keyword is checked: an
unknown one or a bad value raises ``ConfigurationError`` naming it, never silently does nothing.
"""

from __future__ import annotations

import logging
import ssl
import uuid
import warnings
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from failover.options import Status, masked, unknown_option_error
from failover.policy import FAILOVER_OPTIONS
from failover.url import BrokerURL, FailoverURL
from haclient.aio.tls_options import tls_client_options
from haclient.destination import Destination, TemporaryTopic, Topic
from haclient.options import CLIENT_OPTIONS

__all__ = ["ConnectionOptions", "TrustAllWarning", "generated_client_id"]

log = logging.getLogger("haclient.connection")


class TrustAllWarning(UserWarning):
    """``transport.trustAll=true``: no certificate is checked (anyone can pose as the broker)."""


def generated_client_id(prefix: str = "ID:") -> str:
    """A container id for a connection the application gave no client id (``<prefix><uuid>``,
    ``ID:<uuid>`` by default: ``jms.clientIDPrefix``)."""
    return f"{prefix}{uuid.uuid4()}"


@dataclass(frozen=True, slots=True)
class ConnectionOptions:
    """Everything a logical connection is configured with, besides its brokers and policy.

    Each field is the keyword of an option of ``haclient.options.CLIENT_OPTIONS``, which says
    its URL name, default and check (docs/api.md lists them).

    Attributes:
        client_id: The JMS client id, sent as the AMQP container id (S1, S2). None: a generated
            id is used and the connection has no client id in the JMS sense.
        client_id_prefix: The generated id's prefix (``ID:``).
        username / password: SASL credentials (ANONYMOUS without a username).
        sasl_mechanisms: The SASL mechanisms allowed (None: every one haclient supports); the
            strongest the broker offers among them that the credentials suit is used.
        token_provider: A callable (plain or async) returning an OAuth 2 token, called before
            each connect; the token is the password (XOAUTH2).
        prefetch: Link credit of each consumer (messages buffered ahead of ``receive``); 0
            pulls one message per ``receive``.
        queue_prefetch / topic_prefetch / durable_topic_prefetch / queue_browser_prefetch:
            The credit of that kind of consumer (``jms.prefetchPolicy.*``); None: ``prefetch``
            (``prefetch_for``).
        presettle_all ... presettle_queue_consumers: Qpid JMS's presettle policy
            (``jms.presettlePolicy.*``, M5): which producers send settled and which consumers
            ask the broker to send settled (``presettled_producer``, ``presettled_consumer``).
        force_sync_send / force_async_send: Every ``send()`` waits for the broker's outcome /
            none does (``jms.forceSyncSend``, ``jms.forceAsyncSend``; sync wins).
        force_async_acks: AUTO and CLIENT acknowledgements do not wait for the broker's
            confirmation (``jms.forceAsyncAcks``, A7).
        validate_property_names: False: a property name sent need only be a non-empty str
            (``jms.validatePropertyNames``, M10).
        validate_selector: False: a selector the broker evaluates is not parsed before it is
            sent (``jms.validateSelector``, E7).
        use_daemon_thread: False: a blocking connection keeps the process alive while it is
            open (``jms.useDaemonThread``, C7); True: it is closed at exit (C6).
        local_message_priority: Consumers hand prefetched messages out by JMSPriority, highest
            first (``jms.localMessagePriority``).
        receive_local_only / receive_no_wait_local_only: ``receive(timeout)`` /
            ``receive_nowait()`` return None when nothing is prefetched instead of draining the
            link (``jms.receiveLocalOnly``, ``jms.receiveNoWaitLocalOnly``).
        connection_id_prefix: The prefix of ``Connection.connection_id``
            (``jms.connectionIDPrefix``).
        queue_prefix / topic_prefix: Prefixes for queue and topic addresses
            (``jms.queuePrefix``, ``jms.topicPrefix``); a prefix the broker announces wins.
        populate_user_id: Send the logged-in user's name as every message's JMSXUserID
            (``jms.populateJMSXUserID``); False: send none, an application's own is cleared
            (M7).
        message_id_type: How producers make message ids (``jms.messageIDPolicy.messageIDType``):
            ``original``/``default``, ``uuid``, ``uuid_string`` or ``prefixed_uuid_string``.
        max_redeliveries: Redeliveries a message may have (``delivery_count`` - 1); a message
            past them is never handed out but settled with ``redelivery_outcome`` (E6); -1: off.
        redelivery_outcome: ``ACCEPTED``, ``REJECTED``, ``RELEASED``, ``MODIFIED_FAILED`` or
            ``MODIFIED_FAILED_UNDELIVERABLE`` (Qpid JMS's names and default).
        local_message_expiry: Consumers drop messages whose ``expiration`` has passed (M4);
            False: they are handed out.
        idle_timeout: Seconds of silence after which the broker counts as dead (F13); None: off.
        max_frame_size: The largest frame accepted; None: proton's default.
        transactions: ``native`` (the broker's coordinator) or ``emulate`` (E3).
        selectors: ``auto``, ``broker`` or ``client`` (E1).
        attach_timeout: Seconds to wait for the broker to answer an attach or a begin.
        send_timeout: Seconds a ``send`` or ``send_async`` given no ``timeout`` waits while
            the connection fails over (F4); None: no limit of its own.
        connect_timeout: Seconds to wait for a broker's TCP connection, protocol header, login
            and Open: a port that accepts and says nothing fails after this (F4); also how
            long the first connect tries a broker starting up again (F1).
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
        tracing: ``opentelemetry`` (or Qpid JMS's ``opentracing``) to trace with OpenTelemetry's
            global tracer provider; None or ``noop``: off (``haclient.aio.tracing``).
        tracer_provider: The OpenTelemetry ``TracerProvider`` to trace with; turns tracing on.
        ssl_context: The ``ssl.SSLContext`` for ``amqps`` brokers; wins over the TLS options
            below but ``server_name``.
        ca_file ... server_name: The ``transport.*`` TLS options (``haclient.aio.tls_options``
            makes the context from them): trusted CAs, the client certificate, its key and its
            password, host name check, trust-all, TLS versions, cipher suites, SNI name.
        store_type / key_store_type / trust_store_type: The stores' format: ``PKCS12`` (the
            ``pkcs12`` extra reads it; ``haclient.aio.pkcs12``) or PEM; Java's JKS is refused.
        vhost: The virtual host of the Open and SASL hostname fields; None: the broker's host.
        sasl_layer: False: connect without a SASL layer.
        trace_frames: Log every AMQP frame at DEBUG on ``haclient.frames``
            (``amqp.traceFrames``).
        tcp_no_delay ... tcp_connect_timeout: The socket's options (``transport.*``):
            TCP_NODELAY, SO_KEEPALIVE, SO_SNDBUF, SO_RCVBUF, SO_LINGER, IP_TOS (None: the
            system's), and how long the TCP connection may take (None: ``connect_timeout``).
        drain_timeout: Seconds a receive waits for the broker's answer to a drain
            (``amqp.drainTimeout``); past it the consumer is closed. None: no limit.
        allow_non_secure_redirects: Follow a connection redirect from ``amqps`` to ``amqp``
            (``amqp.allowNonSecureRedirects``, F18; ``haclient.aio.redirect``).
        context_protocol: ``transport.contextProtocol``: the TLS versions allowed when
            ``enabled_protocols`` is not given, as Java's ``SSLContext`` of that name allows.

    Raises:
        ConfigurationError: From the constructor, naming the keyword, for an invalid value.
    """

    client_id: str | None = None
    client_id_prefix: str = "ID:"
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    sasl_mechanisms: tuple[str, ...] | None = None
    token_provider: Callable[[], str | Awaitable[str]] | None = field(default=None, repr=False)
    prefetch: int = 1000
    queue_prefetch: int | None = None
    topic_prefetch: int | None = None
    durable_topic_prefetch: int | None = None
    queue_browser_prefetch: int | None = None
    presettle_all: bool = False
    presettle_producers: bool = False
    presettle_topic_producers: bool = False
    presettle_queue_producers: bool = False
    presettle_transacted_producers: bool = False
    presettle_consumers: bool = False
    presettle_topic_consumers: bool = False
    presettle_queue_consumers: bool = False
    force_sync_send: bool = False
    force_async_send: bool = False
    force_async_acks: bool = False
    validate_property_names: bool = True
    validate_selector: bool = True
    use_daemon_thread: bool = True
    local_message_priority: bool = False
    receive_local_only: bool = False
    receive_no_wait_local_only: bool = False
    connection_id_prefix: str = "ID:"
    queue_prefix: str | None = None
    topic_prefix: str | None = None
    populate_user_id: bool = False
    message_id_type: str = "original"
    max_redeliveries: int = -1
    redelivery_outcome: str = "MODIFIED_FAILED_UNDELIVERABLE"
    local_message_expiry: bool = True
    idle_timeout: float | None = 60.0
    max_frame_size: int | None = None
    transactions: str = "native"
    selectors: str = "auto"
    attach_timeout: float = 30.0
    send_timeout: float | None = None
    connect_timeout: float = 10.0
    dups_ok_batch: int = 100
    dups_ok_interval: float = 0.1
    close_timeout: float = 5.0
    dedup_window: int = 10_000
    dedup_age: float = 600.0
    ack_confirmation: str = "auto"
    tracing: str | None = None
    tracer_provider: Any = None
    ssl_context: ssl.SSLContext | None = None
    ca_file: str | None = None
    trust_store_password: str | None = field(default=None, repr=False)
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = field(default=None, repr=False)
    key_alias: str | None = None
    verify_host: bool = True
    trust_all: bool = False
    enabled_protocols: tuple[str, ...] | None = None
    disabled_protocols: tuple[str, ...] | None = None
    enabled_cipher_suites: tuple[str, ...] | None = None
    disabled_cipher_suites: tuple[str, ...] | None = None
    server_name: str | None = None
    store_type: str | None = None
    key_store_type: str | None = None
    trust_store_type: str | None = None
    vhost: str | None = None
    sasl_layer: bool = True
    trace_frames: bool = False
    tcp_no_delay: bool = True
    tcp_keep_alive: bool = False
    send_buffer_size: int | None = None
    receive_buffer_size: int | None = None
    so_linger: int | None = None
    traffic_class: int | None = None
    tcp_connect_timeout: float | None = None
    drain_timeout: float | None = 60.0
    allow_non_secure_redirects: bool = False
    context_protocol: str = "TLS"

    def __post_init__(self) -> None:
        for f in fields(self):
            option = CLIENT_OPTIONS.keyword(f.name)
            assert option is not None, f.name  # tests/unit/test_options_table.py
            value = option.check(getattr(self, f.name))
            if isinstance(value, tuple):  # a list given as text or a list: kept as a tuple
                object.__setattr__(self, f.name, value)

    @classmethod
    def build(cls, url: FailoverURL, keywords: Mapping[str, Any]) -> ConnectionOptions:
        """The options of the URL, overridden by ``keywords`` (``connect(url, **keywords)``).

        Raises:
            ConfigurationError: an unknown keyword (with the closest known name) or a bad value,
                or TLS options that cannot be used (a missing file, a wrong key password ...).
        """
        values = CLIENT_OPTIONS.values(url.connection_options)
        for name, value in keywords.items():
            option = CLIENT_OPTIONS.keyword(name)
            if option is None:
                known = CLIENT_OPTIONS.keywords
                raise unknown_option_error(name, known, what="connection option", quote=True)
            if value is not None or option.none_is_value:
                values[name] = value
        if keywords.get("prefetch") is not None:  # the keyword wins over the URL's per kind
            for name in _PREFETCH_PER_KIND:
                values[name] = keywords.get(name)
        options = cls(**values)
        secure = [options.for_broker(broker) for broker in url.brokers if broker.secure]
        for each in secure:
            tls_client_options(each)  # a file or a name that will not do fails here
        _warn_without_effect(url)
        if options.ssl_context is None and any(each.trust_all for each in secure):
            warnings.warn(
                "transport.trustAll=true: the brokers' certificates are not checked, anyone on "
                "the path can pose as a broker (for tests only)",
                TrustAllWarning,
                stacklevel=3,
            )
        return options

    def prefetch_for(
        self, destination: Destination, *, durable: bool = False, browser: bool = False
    ) -> int:
        """The credit of a consumer of ``destination`` (a durable subscription's, a queue
        browser's): its kind's ``jms.prefetchPolicy.*`` option, else ``prefetch``, as Qpid
        JMS's ``JmsDefaultPrefetchPolicy.getConfiguredPrefetch`` chooses."""
        if isinstance(destination, Topic | TemporaryTopic):
            kind = self.durable_topic_prefetch if durable else self.topic_prefetch
        else:
            kind = self.queue_browser_prefetch if browser else self.queue_prefetch
        return self.prefetch if kind is None else kind

    def presettled_producer(self, destination: Destination | None, *, transacted: bool) -> bool:
        """Whether a producer to ``destination`` (None: anonymous) sends settled (M5), as
        Qpid JMS's ``JmsDefaultPresettlePolicy.isProducerPresttled`` decides."""
        if self.presettle_all or self.presettle_producers:
            return True
        if destination is None:
            return False
        if transacted and self.presettle_transacted_producers:
            return True
        if isinstance(destination, Topic | TemporaryTopic):
            return self.presettle_topic_producers
        return self.presettle_queue_producers

    def presettled_consumer(self, destination: Destination, *, transacted: bool) -> bool:
        """Whether a consumer of ``destination`` asks the broker to send settled (M5), as
        ``JmsDefaultPresettlePolicy.isConsumerPresttled``: never in a transacted session."""
        if transacted:
            return False
        if self.presettle_all or self.presettle_consumers:
            return True
        if isinstance(destination, Topic | TemporaryTopic):
            return self.presettle_topic_consumers
        return self.presettle_queue_consumers

    def for_broker(self, broker: BrokerURL) -> ConnectionOptions:
        """These options with ``broker``'s own (per-broker) URL options applied over them."""
        overrides = CLIENT_OPTIONS.values(broker.options)
        return replace(self, **overrides) if overrides else self

    def url_options(self, *, include_secrets: bool = False) -> dict[str, str]:
        """The URL options (``jms.*``, ``amqp.*``) of the fields that differ from the defaults
        and have a URL name; ``build`` of a URL carrying them reads back equal fields. Secrets
        are masked unless ``include_secrets``."""
        out: dict[str, str] = {}
        for option in CLIENT_OPTIONS:
            value = getattr(self, option.keyword or "", option.default)
            if option.name is not None and value != option.default:
                out[option.name] = option.kind.format(value)
        return out if include_secrets else masked(out, CLIENT_OPTIONS)

    def __repr__(self) -> str:
        shown = masked({f.name: getattr(self, f.name) for f in fields(self)}, CLIENT_OPTIONS)
        return f"ConnectionOptions({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


_PREFETCH_PER_KIND = (
    "queue_prefetch",
    "topic_prefetch",
    "durable_topic_prefetch",
    "queue_browser_prefetch",
)


def _warn_without_effect(url: FailoverURL) -> None:
    """One warning naming the options of ``url`` accepted without effect, and why each."""
    given = {*url.connection_options, *url.policy.accepted_options}
    for broker in url.brokers:
        given.update(broker.options)
    table = CLIENT_OPTIONS
    why = {
        name: option.doc
        for name in sorted(given)
        if (option := table.named(name) or FAILOVER_OPTIONS.named(name)) is not None
        and option.status is Status.ACCEPTED
        and option.keyword is None
    }
    if why:
        log.warning(
            "options accepted without effect (Qpid JMS options this client does not apply): %s",
            "; ".join(f"{name}: {reason}" for name, reason in why.items()),
        )
