"""The client's options: one declaration each, for the URL, the keywords and the docs.

How this works: ``CLIENT_OPTIONS`` declares every option of a connection (``jms.*`` and
``amqp.*`` in the URL, keywords of ``connect()`` and ``ConnectionFactory``) with the generic
machinery of ``failover.options``, and registers the table when this module is imported (the
``haclient`` package imports it), so that ``failover.url`` checks a URL's options against it.
``haclient.aio.ConnectionOptions`` is built from it (``ConnectionOptions.build``), the Spark
data source reuses its declarations (``haclient.spark.options``), and the keyword table of
docs/api.md is ``markdown()`` of it. The failover options table of docs/api.md is
``failover_markdown()`` of ``failover.policy.FAILOVER_OPTIONS``, the ``failover.*`` options'
one table (``tests/unit/test_options_table.py`` keeps both blocks equal to their tables, and run
as a script rewrites them: ``docs_with_tables``).

Adding an option is adding a declaration here (``Status.ACCEPTED`` for one parsed and checked
but without effect, e.g. a Qpid JMS option the client has no use for), and a field of
``ConnectionOptions`` when it has a keyword.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any, Final

from failover.options import (
    Choice,
    Duration,
    Flag,
    KeywordOnly,
    MinusOneIsNone,
    Names,
    Option,
    OptionTable,
    Scope,
    Status,
    Text,
    WholeNumber,
)
from failover.policy import FAILOVER_OPTIONS
from haclient.amqp.config import SASL_MECHANISMS

__all__ = [
    "ACK_CONFIRMATIONS",
    "CLIENT_OPTIONS",
    "CONTEXT_PROTOCOLS",
    "MESSAGE_ID_TYPES",
    "REDELIVERY_OUTCOMES",
    "SASL_NAMES",
    "SELECTORS",
    "TLS_VERSIONS",
    "TRACING",
    "TRANSACTIONS",
    "docs_with_failover_table",
    "docs_with_table",
    "docs_with_tables",
    "failover_markdown",
    "markdown",
]

TRANSACTIONS: Final = ("native", "emulate")
#: ``jms.messageIDPolicy.messageIDType``'s names, lower-cased (Qpid JMS's, and ``original``).
MESSAGE_ID_TYPES: Final = ("original", "default", "uuid", "uuid_string", "prefixed_uuid_string")
SELECTORS: Final = ("auto", "broker", "client")
TRACING: Final = ("noop", "opentelemetry", "opentracing")
ACK_CONFIRMATIONS: Final = ("auto", "settle-second", "link-flow", "drain", "round-trip")

#: ``jms.redeliveryPolicy.outcome``'s names (Qpid JMS's), in the order of its numbers 1 to 5.
REDELIVERY_OUTCOMES: Final = (
    "ACCEPTED",
    "REJECTED",
    "RELEASED",
    "MODIFIED_FAILED",
    "MODIFIED_FAILED_UNDELIVERABLE",
)


@dataclass(frozen=True, slots=True)
class _OutcomeName(Choice):
    """A ``REDELIVERY_OUTCOMES`` name; the URL may write it in any case or as its number 1-5,
    as Qpid JMS reads it."""

    choices: tuple[str, ...] = REDELIVERY_OUTCOMES

    def parse(self, raw: str) -> str:
        if raw.isdigit() and 1 <= int(raw) <= len(self.choices):
            return self.choices[int(raw) - 1]
        return self.check(raw.upper())

    def describe(self) -> str:
        return "or 1-5"


_ENGINE: Final = "engine"  # read by the AMQP engine's configuration (haclient.aio.physical)
_TLS: Final = "tls"  # read by haclient.aio.tls_options, which makes the SSLContext

#: The TLS version names ``transport.enabledProtocols`` and ``disabledProtocols`` take, oldest
#: first (Qpid JMS's, Java's, spelling).
TLS_VERSIONS: Final = ("TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")
#: ``transport.contextProtocol``'s names: Java's ``SSLContext`` protocols (SunJSSE's).
CONTEXT_PROTOCOLS: Final = ("TLS", "SSL", "Default", *TLS_VERSIONS)


#: How ``amqp.saslMechanisms`` is read: as the engine reads ``ClientAuth.mechanisms``
#: (``haclient.amqp.config.sasl_names``, which the engine keeps itself, importing no option
#: kind of ``failover``); tests/unit/test_options_table.py checks that the two agree.
SASL_NAMES: Final = Names(SASL_MECHANISMS, upper=True, what="SASL mechanism")


# The checks of keyword-only values, named (not lambdas) so that the table pickles: a parsed URL
# carries it (failover.url), and PySpark pickles URLs.
def _is_given(value: Any) -> bool:
    return value is not None


def _is_ssl_context(value: Any) -> bool:
    return isinstance(value, ssl.SSLContext)


def _tls(name: str, kind: Any, default: Any, doc: str, keyword: str, **more: Any) -> Option:
    """A ``transport.*`` option: TLS, for the whole connection or one broker."""
    return Option(name, kind, default, doc, keyword=keyword, scope=Scope.BROKER, layer=_TLS, **more)


def _broker(name: str, kind: Any, default: Any, doc: str, keyword: str, **more: Any) -> Option:
    """An ``amqp.*`` or ``transport.*`` option the driver applies, per broker too."""
    return Option(
        name, kind, default, doc, keyword=keyword, scope=Scope.BROKER, layer=_ENGINE, **more
    )


#: ``transport.*StoreType``: any name but JKS, Java's own format (PKCS12 and PEM are read).
_NOT_JAVA_STORE: Final = r"(?is)(?!jks\Z).+"
_PEM_ONLY: Final = (
    "PKCS12 or PEM (convert a JKS store: `keytool -importkeystore -srckeystore store.jks "
    "-destkeystore store.p12 -deststoretype PKCS12`, then storeType=PKCS12)"
)


def _without_effect(
    name: str, kind: Any, default: Any, why: str, *, broker: bool = False
) -> Option:
    """A Qpid JMS option accepted without effect: ``why`` says so (docs, and the one warning
    per connection that names the accepted options a URL gives)."""
    scope = Scope.BROKER if broker else Scope.CONNECTION
    return Option(name, kind, default, why, scope=scope, status=Status.ACCEPTED, optional=True)


_NO_JVM: Final = "no JVM here"
_PRODUCERS: Final = (
    "a send does not wait for an outcome and is never re-sent (an anonymous producer: only "
    "by `presettle_all`, `presettle_producers`)"
)
_CONSUMERS: Final = (
    "the broker sends deliveries settled, acknowledgements do nothing (never in a transacted "
    "session)"
)
_BOTH: Final = f"{_PRODUCERS}; {_CONSUMERS}"

#: The Qpid JMS 1.x options (its Configuration.md) this client accepts without effect, so that
#: a Java application's URL parses; each says why. ``jms.redeliveryPolicy.*`` is not here.
_ACCEPTED: Final = (
    _without_effect(
        "jms.awaitClientID",
        Flag(),
        True,
        "connections open at once, as Qpid JMS's with `false`: `connect()` and "
        "`create_connection()` complete the AMQP Open before they return (or raise) and take "
        "the client id as `client_id=`, which stands for JMS's `setClientID` before first "
        "use; no connection waits half-open for one",
    ),
    *(
        _without_effect(
            f"jms.deserializationPolicy.{name}",
            Text(),
            None,
            "no Java serialization: an ObjectMessage body is never deserialized",
        )
        for name in ("allowList", "denyList")
    ),
    _without_effect(
        "amqp.anonymousFallbackCacheSize",
        WholeNumber(0),
        None,
        "an anonymous producer on a broker without ANONYMOUS-RELAY keeps up to 32 links, one "
        "per destination, the least recently used closed first (Qpid JMS keeps 1 by default); "
        "that size is fixed",
        broker=True,
    ),
    _without_effect(
        "amqp.anonymousFallbackCacheTimeout",
        Duration(),
        None,
        "an anonymous producer's per-destination links stay open until the cache of 32 "
        "evicts them or the producer closes (Qpid JMS closes one idle for 30 s)",
        broker=True,
    ),
    _without_effect(
        "transport.soTimeout",
        MinusOneIsNone(WholeNumber(0), "none"),
        None,
        "Qpid JMS 1.16 keeps it (`TransportOptions.soTimeout`) but its Netty transport never "
        "reads it: no read timeout there either (`amqp.idleTimeout` finds a silent broker)",
        broker=True,
    ),
    _without_effect("transport.useEpoll", Flag(), True, f"{_NO_JVM}: no Netty", broker=True),
    _without_effect("transport.useKQueue", Flag(), False, f"{_NO_JVM}: no Netty", broker=True),
    _without_effect(
        "transport.useOpenSSL",
        Flag(),
        False,
        "Python's TLS is always OpenSSL's (its certificate checks stay on)",
        broker=True,
    ),
    *(
        _without_effect(
            f"sasl.options.{name}",
            Text(),
            None,
            "read only by GSSAPI (Kerberos) in Qpid JMS (every other mechanism's `init` ignores "
            "the `sasl.options.*` map), and this client has no GSSAPI login",
            broker=True,
        )
        for name in ("configScope", "protocol", "serverName")
    ),
)


#: Every option of a connection, in the order the docs list them.
CLIENT_OPTIONS: Final = OptionTable(
    [
        Option(
            "jms.clientID",
            Text(empty=False),
            None,
            "The JMS client id, sent as the AMQP container id (S1, S2); None: a generated "
            "`ID:<uuid>` container id, and no client id in the JMS sense. An empty or non-str "
            "id raises `ConfigurationError`, whichever way it is given.",
            keyword="client_id",
            optional=True,
        ),
        Option(
            "jms.clientIDPrefix",
            Text(),
            "ID:",
            "The prefix of the container id generated for a connection without `jms.clientID` "
            "(`<prefix><uuid>`).",
            keyword="client_id_prefix",
        ),
        Option(
            "jms.username",
            Text(),
            None,
            "SASL user name (ANONYMOUS without one). `user:pass@` in a broker URL wins "
            "for that broker.",
            keyword="username",
            optional=True,
        ),
        Option(
            "jms.password",
            Text(),
            None,
            "SASL password (the token, for XOAUTH2); masked wherever it is shown.",
            keyword="password",
            optional=True,
            secret=True,
        ),
        Option(
            "amqp.saslMechanisms",
            SASL_NAMES,
            None,
            "The SASL mechanisms allowed (Qpid JMS's option), e.g. `SCRAM-SHA-256,PLAIN`; the "
            "client logs in with the strongest the broker offers among them that its "
            "credentials suit. None: all it supports, strongest first: "
            f"{', '.join(SASL_MECHANISMS)} (XOAUTH2 alone with a `token_provider`).",
            keyword="sasl_mechanisms",
            scope=Scope.BROKER,
            layer=_ENGINE,
            optional=True,
        ),
        Option(
            None,
            KeywordOnly("a callable", callable),
            None,
            "A callable (plain or async) returning an OAuth 2 access token, called before "
            "every connect (each failover logs in with a fresh token). The token is the SASL "
            "password and goes with XOAUTH2 (`amqp.saslMechanisms=PLAIN` for a broker that "
            "takes it as a PLAIN password); needs `username`. A provider that raises, or has "
            "not answered within `jms.connectTimeout` (then abandoned), fails the connect with "
            "`AuthenticationError`.",
            keyword="token_provider",
            optional=True,
            secret=True,
        ),
        Option(
            "jms.prefetch",
            WholeNumber(0),
            1000,
            "Credit per consumer; 0 pulls one message per `receive`.",
            keyword="prefetch",
            aliases=("jms.prefetchPolicy.all",),
        ),
        *(
            Option(
                f"jms.prefetchPolicy.{name}",
                WholeNumber(0),
                None,
                f"Credit of each {kind} (Qpid JMS's prefetch policy); None: `prefetch`. The "
                "`prefetch` keyword wins over the URL's per-kind options, a per-kind keyword "
                "over `prefetch`.",
                keyword=keyword,
                optional=True,
            )
            for name, keyword, kind in (
                ("queuePrefetch", "queue_prefetch", "queue consumer"),
                ("topicPrefetch", "topic_prefetch", "non-durable topic consumer"),
                ("durableTopicPrefetch", "durable_topic_prefetch", "durable topic consumer"),
                ("queueBrowserPrefetch", "queue_browser_prefetch", "queue browser (at most 1000)"),
            )
        ),
        *(
            Option(
                f"jms.presettlePolicy.{name}",
                Flag(),
                False,
                f"{what} presettled (M5): {effect}.",
                keyword=keyword,
            )
            for name, keyword, what, effect in (
                ("presettleAll", "presettle_all", "Every producer and consumer", _BOTH),
                ("presettleProducers", "presettle_producers", "Every producer", _PRODUCERS),
                (
                    "presettleTopicProducers",
                    "presettle_topic_producers",
                    "Producers to a topic",
                    _PRODUCERS,
                ),
                (
                    "presettleQueueProducers",
                    "presettle_queue_producers",
                    "Producers to a queue",
                    _PRODUCERS,
                ),
                (
                    "presettleTransactedProducers",
                    "presettle_transacted_producers",
                    "Producers of a transacted session",
                    _PRODUCERS,
                ),
                ("presettleConsumers", "presettle_consumers", "Every consumer", _CONSUMERS),
                (
                    "presettleTopicConsumers",
                    "presettle_topic_consumers",
                    "Consumers of a topic",
                    _CONSUMERS,
                ),
                (
                    "presettleQueueConsumers",
                    "presettle_queue_consumers",
                    "Consumers of a queue",
                    _CONSUMERS,
                ),
            )
        ),
        Option(
            "jms.forceSyncSend",
            Flag(),
            False,
            "Every `send()` waits for the broker's outcome, NON_PERSISTENT ones too (and is "
            "re-sent after a failover, F11); wins over `force_async_send`.",
            keyword="force_sync_send",
        ),
        Option(
            "jms.forceAsyncSend",
            Flag(),
            False,
            "No `send()` waits for the broker's outcome, PERSISTENT ones neither: a send returns "
            "once queued for the socket, a refusal is raised by a later call of the producer, "
            "and one cut off by a failover is not re-sent (F11 does not hold).",
            keyword="force_async_send",
        ),
        Option(
            "jms.forceAsyncAcks",
            Flag(),
            False,
            "AUTO and CLIENT acknowledgements are sent without waiting for the broker's "
            "confirmation (A7): `receive()` and `acknowledge()` return once the settlement is "
            "queued for the socket; one a failover cuts off is not known, and its message may "
            "come again, flagged redelivered (the session's duplicate window suppresses that "
            "copy). DUPS_OK, NO_ACK and transacted sessions are unchanged.",
            keyword="force_async_acks",
        ),
        Option(
            "jms.validatePropertyNames",
            Flag(),
            True,
            "false: a property name need only be a non-empty str when a message is sent (a "
            "received message's names forwarded as they came, say), as Qpid JMS lets any name "
            "through; true: a JMS identifier, not a selector keyword, not `JMS...` but "
            "`JMSX`/`JMS_` (M10). A message's constructor always checks.",
            keyword="validate_property_names",
        ),
        Option(
            "jms.validateSelector",
            Flag(),
            True,
            "false: a selector the broker evaluates is sent without being parsed first, and a "
            "broker that refuses it fails the consumer's creation with the broker's error; one "
            "the client evaluates (E1) is always parsed, before the attach (E7).",
            keyword="validate_selector",
        ),
        Option(
            "jms.useDaemonThread",
            Flag(),
            True,
            "Blocking API: true (this client's default, not Qpid JMS's) a connection left open "
            "does not keep the process alive: it is closed at exit (C6); false (Qpid JMS's "
            "default) the process stays alive while the connection is open, as a JVM stays "
            "alive for a Qpid JMS connection, until it is closed or its failover gives up (C7). "
            "No effect in the async API, whose connections live in the caller's event loop.",
            keyword="use_daemon_thread",
        ),
        Option(
            "jms.localMessagePriority",
            Flag(),
            False,
            "A consumer hands its prefetched messages out highest JMSPriority first (FIFO within "
            "a priority), as Qpid JMS's priority message queue; false: in arrival order.",
            keyword="local_message_priority",
        ),
        Option(
            "jms.receiveLocalOnly",
            Flag(),
            False,
            "false: a `receive(timeout)` that found nothing prefetched asks the broker for what "
            "it still has (a drain) before returning None; true: it returns None without asking "
            "(a consumer with prefetch 0 always asks).",
            keyword="receive_local_only",
        ),
        Option(
            "jms.receiveNoWaitLocalOnly",
            Flag(),
            False,
            "The same for `receive_nowait()`: false, it drains the link when nothing is "
            "prefetched (one round trip); true, it returns None at once.",
            keyword="receive_no_wait_local_only",
        ),
        Option(
            "jms.connectionIDPrefix",
            Text(),
            "ID:",
            "The prefix of the connection's id (`<prefix><uuid>`: `connection_id`, its repr and "
            "statistics); message ids stay `ID:...` (JMS).",
            keyword="connection_id_prefix",
        ),
        Option(
            "jms.queuePrefix",
            Text(),
            None,
            "Prefix added to every queue's name that does not already start with it (not to "
            "temporary queues) and stripped from addresses that arrive; a `queue-prefix` the "
            "broker announces in its Open wins, as in Qpid JMS. None: the broker's, if any.",
            keyword="queue_prefix",
            optional=True,
        ),
        Option(
            "jms.topicPrefix",
            Text(),
            None,
            "The same for topics (`topic-prefix` announced by the broker wins).",
            keyword="topic_prefix",
            optional=True,
        ),
        Option(
            "jms.populateJMSXUserID",
            Flag(),
            False,
            "true: every message sent carries the name of the user that logged in to the "
            "broker as its `user-id` (JMSXUserID), replacing any the application set (none "
            "after an anonymous login), as in Qpid JMS. false: none is sent; a JMSXUserID the "
            "application set is cleared, as Qpid JMS clears it (M7).",
            keyword="populate_user_id",
        ),
        Option(
            "jms.messageIDPolicy.messageIDType",
            Choice(MESSAGE_ID_TYPES, fold=True),
            "original",
            "How a producer makes message ids, as Qpid JMS: `original` (Qpid JMS's `DEFAULT`, "
            "also accepted) the string `ID:<connection>:<producer>:<n>`; `uuid` an AMQP uuid "
            "(JMSMessageID `ID:AMQP_UUID:<uuid>`); `uuid_string` the string `<uuid>`; "
            "`prefixed_uuid_string` the string `ID:<uuid>`. Client-side no-local (E2, brokers "
            "that ignore the filter) knows a UUID id as this connection's for its last 10,000 "
            "sends (10 minutes), and the other connections of a client id by `original` ids "
            "only.",
            keyword="message_id_type",
        ),
        Option(
            "jms.redeliveryPolicy.maxRedeliveries",
            WholeNumber(-1),
            -1,
            "Redeliveries a message may have (its `delivery_count` - 1); one past them is never "
            "handed out but settled with `redelivery_outcome` (E6). -1: off.",
            keyword="max_redeliveries",
        ),
        Option(
            "jms.redeliveryPolicy.outcome",
            _OutcomeName(),
            "MODIFIED_FAILED_UNDELIVERABLE",
            "How a message past `max_redeliveries` is settled (E6): `ACCEPTED`, `REJECTED`, "
            "`RELEASED`, `MODIFIED_FAILED` or `MODIFIED_FAILED_UNDELIVERABLE`.",
            keyword="redelivery_outcome",
        ),
        Option(
            "jms.localMessageExpiry",
            Flag(),
            True,
            "A consumer drops a message whose `expiration` has passed instead of handing it "
            "out, settling it `modified` (delivery-failed, undeliverable-here) as Qpid JMS "
            "does (M4); false: expired messages are handed out.",
            keyword="local_message_expiry",
        ),
        Option(
            "amqp.idleTimeout",
            Duration("ms", zero_is_none=True),
            60.0,
            "Heartbeat idle timeout (F13); None: off.",
            keyword="idle_timeout",
            scope=Scope.BROKER,
            layer=_ENGINE,
            optional=True,
            none_is_value=True,
        ),
        Option(
            "amqp.maxFrameSize",
            WholeNumber(512),
            None,
            "Largest frame accepted; None: proton's default.",
            keyword="max_frame_size",
            scope=Scope.BROKER,
            layer=_ENGINE,
            optional=True,
            none_is_value=True,
        ),
        Option(
            "jms.transactions",
            Choice(TRANSACTIONS),
            "native",
            "`native` or `emulate` (E3). With `native`, a broker without transactions makes "
            "`create_session(TRANSACTED)` raise `NotImplementedByBrokerError` naming "
            "`jms.transactions=emulate`.",
            keyword="transactions",
        ),
        Option(
            "jms.selectors",
            Choice(SELECTORS),
            "auto",
            "`auto`, `broker` or `client` (E1).",
            keyword="selectors",
        ),
        Option(
            "jms.requestTimeout",
            Duration(),
            30.0,
            "How long to wait for the broker's answer to a begin or attach (opening a session, "
            "producer or consumer: Qpid JMS's request timeout, without its wait-forever "
            "default).",
            keyword="attach_timeout",
        ),
        Option(
            "jms.sendTimeout",
            MinusOneIsNone(Duration(), "wait"),
            None,
            "How long a `send()` or `send_async()` given no `timeout=` waits while the "
            "connection fails over (F4: `FailoverTimeoutError`; a PERSISTENT message cut off "
            "before its outcome may have reached the broker); `failover.timeout` bounds it "
            "too. None (-1, Qpid JMS's default): no limit of its own. Unlike Qpid JMS's, it "
            "does not bound the wait for credit or for the broker's outcome once connected.",
            keyword="send_timeout",
            optional=True,
        ),
        Option(
            "jms.connectTimeout",
            Duration(),
            10.0,
            "How long to wait for a broker's TCP connection, protocol header, login (the "
            "`token_provider`'s token included) and Open; "
            "a port that accepts and says nothing fails after this, the error naming what was "
            "awaited. The first connect also tries a broker starting up (it accepts and closes "
            "before answering) again for this long (F1).",
            keyword="connect_timeout",
        ),
        Option(
            None,
            WholeNumber(1),
            100,
            "DUPS_OK flushes after this many messages ...",
            keyword="dups_ok_batch",
        ),
        Option(
            None,
            Duration(),
            0.1,
            "... or this long after the first unflushed one (A3).",
            keyword="dups_ok_interval",
        ),
        Option(
            "jms.dedupWindow",
            WholeNumber(0),
            10_000,
            "Consumed message ids each session remembers to suppress duplicates (a redelivery "
            "or an F11 re-send after a failover); 0: off. See docs/semantics.md, "
            '"Duplicate window".',
            keyword="dedup_window",
        ),
        Option(
            "jms.dedupAge",
            Duration(),
            600.0,
            "... for at most this long.",
            keyword="dedup_age",
        ),
        Option(
            "jms.closeTimeout",
            Duration(),
            5.0,
            "How long `close()` waits for the broker before dropping the socket.",
            keyword="close_timeout",
        ),
        Option(
            None,
            Choice(ACK_CONFIRMATIONS),
            "auto",
            "How AUTO and CLIENT acknowledgements are confirmed (A6): `auto` (receiver settle "
            "mode `second` where granted, else the cheapest exchange the broker answers), or "
            "one of `settle-second`, `link-flow`, `drain`, `round-trip` to use that exchange "
            "(benchmarks, tests).",
            keyword="ack_confirmation",
        ),
        Option(
            "jms.tracing",
            Choice(TRACING, fold=True),
            None,
            "`opentelemetry`: trace sends, receives and settlements with OpenTelemetry's global "
            "tracer provider (O1-O4; needs the `tracing` extra). Qpid JMS's `opentracing` means "
            "the same (OpenTracing is retired in favour of OpenTelemetry); None or `noop`: off.",
            keyword="tracing",
            optional=True,
        ),
        Option(
            None,
            KeywordOnly("an OpenTelemetry TracerProvider", _is_given),
            None,
            "The OpenTelemetry `TracerProvider` whose tracer makes the spans; given, it turns "
            "tracing on whatever `jms.tracing` says (but `noop`).",
            keyword="tracer_provider",
            optional=True,
        ),
        Option(
            None,
            KeywordOnly("an ssl.SSLContext", _is_ssl_context),
            None,
            "An `ssl.SSLContext` for `amqps` brokers; it wins over every `transport.*` option "
            "but `transport.serverName`. A context cannot be asked whether it holds a client "
            "certificate: SASL EXTERNAL may be chosen without a username, or when "
            "`amqp.saslMechanisms` names it.",
            keyword="ssl_context",
            optional=True,
        ),
        _tls(
            "transport.trustStoreLocation",
            Text(empty=False),
            None,
            "PEM file of the certificate authorities to trust instead of the system's store. "
            "A JKS or PKCS12 store raises `ConfigurationError` saying how to convert it to PEM.",
            "ca_file",
            aliases=("transport.caFile",),
            optional=True,
        ),
        _tls(
            "transport.trustStorePassword",
            Text(),
            None,
            "Password of a PKCS12 trust store (`transport.trustStoreType=PKCS12`); a PEM "
            "trust store has none. Masked wherever it is shown.",
            "trust_store_password",
            secret=True,
            optional=True,
        ),
        _tls(
            "transport.certFile",
            Text(empty=False),
            None,
            "PEM file of the client certificate (its chain), and of its key when "
            "`transport.keyFile` is not given (`transport.keyStoreLocation`: cert and key).",
            "cert_file",
            aliases=("transport.keyStoreLocation",),
            optional=True,
        ),
        _tls(
            "transport.keyFile",
            Text(empty=False),
            None,
            "PEM file of the client certificate's private key.",
            "key_file",
            optional=True,
        ),
        _tls(
            "transport.keyPassword",
            Text(),
            None,
            "Password of an encrypted private key; masked wherever it is shown.",
            "key_password",
            aliases=("transport.keyStorePassword",),
            secret=True,
            optional=True,
        ),
        _tls(
            "transport.keyAlias",
            Text(empty=False),
            None,
            "Which key of a Java key store to use; a PEM key store holds one key, so the alias "
            "is not checked.",
            "key_alias",
            status=Status.ACCEPTED,
            optional=True,
        ),
        _tls(
            "transport.verifyHost",
            Flag(),
            True,
            "Check that the broker's certificate names the host (or `transport.serverName`).",
            "verify_host",
        ),
        _tls(
            "transport.trustAll",
            Flag(),
            False,
            "Trust any certificate, checking nothing (tests only: warns when on).",
            "trust_all",
        ),
        _tls(
            "transport.enabledProtocols",
            Names(TLS_VERSIONS, what="TLS version"),
            None,
            "TLS versions to allow (`TLSv1.2`, `TLSv1.3`, ...; consecutive); None: TLS 1.2 "
            "and newer.",
            "enabled_protocols",
            optional=True,
        ),
        _tls(
            "transport.disabledProtocols",
            Names(TLS_VERSIONS, what="TLS version"),
            None,
            "TLS versions to refuse, taken from the oldest or the newest end.",
            "disabled_protocols",
            optional=True,
        ),
        _tls(
            "transport.enabledCipherSuites",
            Names(what="cipher suite"),
            None,
            "Cipher suites for TLS 1.2 and older (OpenSSL or IANA names); None: OpenSSL's "
            "defaults. TLS 1.3 suites are always OpenSSL's: naming only those allows TLS 1.3 "
            "only.",
            "enabled_cipher_suites",
            optional=True,
        ),
        _tls(
            "transport.disabledCipherSuites",
            Names(what="cipher suite"),
            None,
            "Cipher suites for TLS 1.2 and older to refuse (OpenSSL or IANA names).",
            "disabled_cipher_suites",
            optional=True,
        ),
        _tls(
            "transport.serverName",
            Text(empty=False),
            None,
            "The name sent as SNI and checked against the broker's certificate; None: the "
            "host of the broker URL.",
            "server_name",
            optional=True,
        ),
        *(
            _tls(
                name,
                Text(empty=False, pattern=_NOT_JAVA_STORE, hint=_PEM_ONLY),
                None,
                "The store's format: `PKCS12` (any case; read with the `pkcs12` extra, the "
                "password is `keyStorePassword` or `trustStorePassword`), else PEM (any other "
                f"name but JKS). A JKS store raises `ConfigurationError`{more}.",
                keyword,
                optional=True,
            )
            for name, keyword, more in (
                ("transport.storeType", "store_type", ""),
                ("transport.keyStoreType", "key_store_type", " (wins over `storeType`)"),
                ("transport.trustStoreType", "trust_store_type", " (wins over `storeType`)"),
            )
        ),
        _broker(
            "amqp.vhost",
            Text(empty=False),
            None,
            "The virtual host named in the AMQP Open and SASL hostname fields; None: the "
            "broker URL's host. TLS still checks the URL's host (or `transport.serverName`).",
            "vhost",
            optional=True,
        ),
        _broker(
            "amqp.traceFrames",
            Flag(),
            False,
            "Log every AMQP frame sent and received (after the login) at DEBUG on the "
            "haclient.frames logger, as Qpid JMS logs them on its FRAMES logger; message "
            "bodies included.",
            "trace_frames",
        ),
        _broker(
            "amqp.saslLayer",
            Flag(),
            True,
            "false: no SASL layer (a broker that takes AMQP without a login); credentials are "
            "then not sent.",
            "sasl_layer",
        ),
        _broker(
            "transport.tcpNoDelay",
            Flag(),
            True,
            "TCP_NODELAY on the socket (Nagle's algorithm off).",
            "tcp_no_delay",
        ),
        _broker(
            "transport.tcpKeepAlive",
            Flag(),
            False,
            "SO_KEEPALIVE on the socket.",
            "tcp_keep_alive",
        ),
        _broker(
            "transport.sendBufferSize",
            WholeNumber(1),
            None,
            "SO_SNDBUF in bytes; None: the system's.",
            "send_buffer_size",
            optional=True,
        ),
        _broker(
            "transport.receiveBufferSize",
            WholeNumber(1),
            None,
            "SO_RCVBUF in bytes; None: the system's.",
            "receive_buffer_size",
            optional=True,
        ),
        _broker(
            "transport.soLinger",
            MinusOneIsNone(WholeNumber(0), "off"),
            None,
            "SO_LINGER in seconds on close; None (-1): off.",
            "so_linger",
            optional=True,
        ),
        _broker(
            "transport.trafficClass",
            WholeNumber(0),
            None,
            "IP_TOS (the traffic class byte, 0-255) of the socket; None: the system's.",
            "traffic_class",
            optional=True,
        ),
        Option(
            "amqp.drainTimeout",
            Duration(zero_is_none=True),
            60.0,
            "How long a receive waits for the broker's answer to a drain (see "
            "`receive_local_only`); past it the consumer is closed, as Qpid JMS closes it, and "
            "the receive raises `ClosedError`. None (0): no limit.",
            keyword="drain_timeout",
            scope=Scope.BROKER,
            optional=True,
            none_is_value=True,
        ),
        _broker(
            "transport.connectTimeout",
            Duration(),
            None,
            "How long the TCP connection may take (within `jms.connectTimeout`, which bounds "
            "the whole open); None: `jms.connectTimeout` alone.",
            "tcp_connect_timeout",
            optional=True,
        ),
        # -- connection redirects and the TLS context protocol --
        _broker(
            "amqp.allowNonSecureRedirects",
            Flag(),
            False,
            "Follow a broker's connection redirect from `amqps` to plain `amqp` (F18); false: "
            "such a redirect is not followed and failover tries the next broker. A broker "
            "list an `amqps` broker announces never downgrades (F12).",
            "allow_non_secure_redirects",
        ),
        _tls(
            "transport.contextProtocol",
            Choice(CONTEXT_PROTOCOLS),
            "TLS",
            "The protocol Java's `SSLContext.getInstance` is asked for, as its default TLS "
            "versions: `TLS` (also `SSL`, `Default`): TLS 1.2 and 1.3; `TLSv1.2`: TLS 1.2 "
            "only; `TLSv1.3`: 1.2 and 1.3; `TLSv1`, `TLSv1.1`: none (Java turns those off "
            "too), `ConfigurationError`. `transport.enabledProtocols` wins over it.",
            "context_protocol",
        ),
        *_ACCEPTED,
    ]
)


# --- The docs' table ---------------------------------------------------------------------------

BEGIN: Final = (
    "<!-- options-table: generated from haclient.options.CLIENT_OPTIONS by "
    "`python tests/unit/test_options_table.py`; do not edit -->"
)
END: Final = "<!-- options-table: end -->"


def markdown(table: OptionTable = CLIENT_OPTIONS) -> str:
    """The keyword table of docs/api.md: one row per option, in declaration order."""
    rows = [
        "| Keyword | URL option | Default | Meaning |",
        "|---|---|---|---|",
    ]
    for option in table:
        keyword = f"`{option.keyword}`" if option.keyword else ""
        rows.append(f"| {keyword} | {_url_cell(option)} | {_default(option)} | {option.doc} |")
    return "\n".join(rows)


def _url_cell(option: Option) -> str:
    if option.name is None:
        return ""
    notes = [note for note in (option.kind.describe(),) if note]
    if option.scope is Scope.BROKER:
        notes.append("also per broker")
    if option.status is Status.ACCEPTED:
        notes.append("accepted, without effect")
    names = ", ".join(f"`{name}`" for name in (option.name, *option.aliases))
    return f"{names} ({'; '.join(notes)})" if notes else names


def _default(option: Option) -> str:
    if option.shown_default is not None:
        return option.shown_default
    value: Any = option.default
    if value is None:
        return "None"
    if isinstance(option.kind, Duration):
        return f"{value:g} s"
    if isinstance(value, str):
        return f"`{value}`"
    return str(value)


def docs_with_table(text: str, table: OptionTable = CLIENT_OPTIONS) -> str:
    """``text`` (docs/api.md) with the block between ``BEGIN`` and ``END`` regenerated.

    Raises:
        ValueError: The markers are missing.
    """
    return _with_block(text, BEGIN, END, markdown(table))


# --- The docs' failover options table ----------------------------------------------------------

FAILOVER_BEGIN: Final = (
    "<!-- failover-options-table: generated from failover.policy.FAILOVER_OPTIONS by "
    "`python tests/unit/test_options_table.py`; do not edit -->"
)
FAILOVER_END: Final = "<!-- failover-options-table: end -->"


def failover_markdown(table: OptionTable = FAILOVER_OPTIONS) -> str:
    """The failover options table of docs/api.md: one row per ``failover.*`` option, in
    declaration order, its Qpid JMS names (the aliases) in the third column."""
    rows = [
        "| Option | Default | Qpid JMS name | Meaning (F5) |",
        "|---|---|---|---|",
    ]
    for option in table:
        qpid = ", ".join(f"`{alias}`" for alias in option.aliases)
        doc = option.doc
        if option.status is Status.ACCEPTED:
            doc = f"(accepted, without effect) {doc}"
        rows.append(f"| `{option.label}` | {_url_default(option)} | {qpid} | {doc} |")
    return "\n".join(rows)


def _url_default(option: Option) -> str:
    """The default as the URL writes it (milliseconds for a duration); unset: ``unset``."""
    if option.shown_default is not None:
        return option.shown_default
    if option.default is None:
        return "unset"
    text = option.kind.format(option.default)
    return f"`{text}`" if isinstance(option.kind, Text) else text


def docs_with_failover_table(text: str, table: OptionTable = FAILOVER_OPTIONS) -> str:
    """``text`` (docs/api.md) with the block between ``FAILOVER_BEGIN`` and ``FAILOVER_END``
    regenerated.

    Raises:
        ValueError: The markers are missing.
    """
    return _with_block(text, FAILOVER_BEGIN, FAILOVER_END, failover_markdown(table))


def docs_with_tables(text: str) -> str:
    """``text`` (docs/api.md) with both generated options tables regenerated.

    Raises:
        ValueError: A table's markers are missing.
    """
    return docs_with_failover_table(docs_with_table(text))


def _with_block(text: str, begin: str, end: str, body: str) -> str:
    head, found_begin, rest = text.partition(begin)
    _, found_end, tail = rest.partition(end)
    if not found_begin or not found_end:
        raise ValueError(f"the options table's markers are missing: {begin} ... {end}")
    return f"{head}{begin}\n{body}\n{end}{tail}"
