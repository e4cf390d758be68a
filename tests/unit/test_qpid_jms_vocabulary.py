"""Qpid JMS's configuration vocabulary: every option it documents parses here.

Each option of Qpid JMS's configuration documentation is declared (``haclient.options`` or
``failover.policy``): applied with Qpid JMS's meaning, or accepted without effect with one
warning per connection saying why. The URLs below are its documentation's examples (with the
``option=value`` placeholders filled in) and the options its users commonly set.
"""

from __future__ import annotations

import logging
import socket
import struct

import anyio
import pytest

from chaos.broker import BrokerThread
from failover.options import Status
from failover.policy import FAILOVER_OPTIONS
from failover.url import parse_url
from haclient.aio.options import ConnectionOptions, generated_client_id
from haclient.aio.physical import engine_config, open_physical
from haclient.destination import Queue, Topic
from haclient.errors import ConfigurationError
from haclient.options import CLIENT_OPTIONS

# Every option name Qpid JMS 1.16.0's qpid-jms-docs/Configuration.md documents (the tag 1.16.0
# of apache/qpid-jms; the 2.x documentation lists the same names), in its order.
QPID_JMS_1_16_OPTIONS = (
    "jms.username",
    "jms.password",
    "jms.clientID",
    "jms.forceAsyncSend",
    "jms.forceSyncSend",
    "jms.forceAsyncAcks",
    "jms.localMessageExpiry",
    "jms.localMessagePriority",
    "jms.validatePropertyNames",
    "jms.validateSelector",
    "jms.receiveLocalOnly",
    "jms.receiveNoWaitLocalOnly",
    "jms.queuePrefix",
    "jms.topicPrefix",
    "jms.closeTimeout",
    "jms.connectTimeout",
    "jms.sendTimeout",
    "jms.requestTimeout",
    "jms.clientIDPrefix",
    "jms.connectionIDPrefix",
    "jms.populateJMSXUserID",
    "jms.awaitClientID",
    "jms.useDaemonThread",
    "jms.tracing",
    "jms.prefetchPolicy.queuePrefetch",
    "jms.prefetchPolicy.topicPrefetch",
    "jms.prefetchPolicy.queueBrowserPrefetch",
    "jms.prefetchPolicy.durableTopicPrefetch",
    "jms.prefetchPolicy.all",
    "jms.messageIDPolicy.messageIDType",
    "jms.redeliveryPolicy.maxRedeliveries",
    "jms.redeliveryPolicy.outcome",
    "jms.presettlePolicy.presettleAll",
    "jms.presettlePolicy.presettleProducers",
    "jms.presettlePolicy.presettleTopicProducers",
    "jms.presettlePolicy.presettleQueueProducers",
    "jms.presettlePolicy.presettleTransactedProducers",
    "jms.presettlePolicy.presettleConsumers",
    "jms.presettlePolicy.presettleTopicConsumers",
    "jms.presettlePolicy.presettleQueueConsumers",
    "jms.deserializationPolicy.allowList",
    "jms.deserializationPolicy.denyList",
    "transport.sendBufferSize",
    "transport.receiveBufferSize",
    "transport.trafficClass",
    "transport.connectTimeout",
    "transport.soTimeout",
    "transport.soLinger",
    "transport.tcpKeepAlive",
    "transport.tcpNoDelay",
    "transport.useEpoll",
    "transport.useKQueue",
    "transport.keyStoreLocation",
    "transport.keyStorePassword",
    "transport.trustStoreLocation",
    "transport.trustStorePassword",
    "transport.keyStoreType",
    "transport.trustStoreType",
    "transport.storeType",
    "transport.contextProtocol",
    "transport.enabledCipherSuites",
    "transport.disabledCipherSuites",
    "transport.enabledProtocols",
    "transport.disabledProtocols",
    "transport.trustAll",
    "transport.verifyHost",
    "transport.keyAlias",
    "transport.useOpenSSL",
    "amqp.idleTimeout",
    "amqp.vhost",
    "amqp.saslLayer",
    "amqp.saslMechanisms",
    "amqp.maxFrameSize",
    "amqp.drainTimeout",
    "amqp.allowNonSecureRedirects",
    "amqp.anonymousFallbackCacheSize",
    "amqp.anonymousFallbackCacheTimeout",
    "amqp.traceFrames",
    "failover.initialReconnectDelay",
    "failover.reconnectDelay",
    "failover.maxReconnectDelay",
    "failover.useReconnectBackOff",
    "failover.reconnectBackOffMultiplier",
    "failover.maxReconnectAttempts",
    "failover.startupMaxReconnectAttempts",
    "failover.warnAfterReconnectAttempts",
    "failover.randomize",
    "failover.amqpOpenServerListAction",
    "sasl.options.configScope",
    "sasl.options.protocol",
    "sasl.options.serverName",
)

# Documented there too but not declared: transport.ws.httpHeader.<Header> (the
# amqpws/amqpwss schemes, which haclient does not speak); the discovery: scheme's options
# (discovery.*, discovery.discovered.*, the file agent's updateInterval, the multicast agent's
# group), a URI scheme haclient does not speak.


def _declared(name: str) -> bool:
    return CLIENT_OPTIONS.named(name) is not None or FAILOVER_OPTIONS.named(name) is not None


def test_every_documented_option_is_declared() -> None:
    assert [name for name in QPID_JMS_1_16_OPTIONS if not _declared(name)] == []


def test_every_transport_amqp_and_sasl_option_may_be_nested_in_a_failover_url() -> None:
    per_broker = [n for n in QPID_JMS_1_16_OPTIONS if n.split(".")[0] in ("transport", "amqp")]
    per_broker += [n for n in QPID_JMS_1_16_OPTIONS if n.startswith("sasl.options.")]
    assert set(per_broker) <= set(CLIENT_OPTIONS.broker_names())


# --- The documentation's URLs, and what they set --------------------------------------------


def test_the_connect_timeout_example() -> None:
    url = parse_url(
        "amqp://localhost:5672?jms.clientID=foo&transport.connectTimeout=30000",
        options=CLIENT_OPTIONS,
    )
    options = ConnectionOptions.build(url, {})
    assert (options.client_id, options.tcp_connect_timeout) == ("foo", 30.0)


def test_the_failover_example() -> None:
    url = parse_url(
        "failover:(amqp://host1:5672,amqp://host2:5672)?jms.clientID=foo"
        "&failover.maxReconnectAttempts=20",
        options=CLIENT_OPTIONS,
    )
    assert [b.host for b in url.brokers] == ["host1", "host2"]
    assert url.policy.cyclecount == 20
    assert ConnectionOptions.build(url, {}).client_id == "foo"


def test_per_broker_amqp_and_transport_options() -> None:
    url = parse_url(
        "failover:(amqp://host1:5672?amqp.vhost=one,amqp://host2:5672?transport.tcpKeepAlive=true)"
        "?jms.clientID=foo",
        options=CLIENT_OPTIONS,
    )
    options = ConnectionOptions.build(url, {})
    one, two = (options.for_broker(broker) for broker in url.brokers)
    assert (one.vhost, one.tcp_keep_alive) == ("one", False)
    assert (two.vhost, two.tcp_keep_alive) == (None, True)
    assert engine_config(url.brokers[0], options, "c").hostname == "one"
    assert engine_config(url.brokers[1], options, "c").hostname == "host2"


def test_nested_options_apply_to_every_broker() -> None:
    url = parse_url(
        "failover:(amqp://host1:5672,amqp://host2:5672)?jms.clientID=foo"
        "&failover.nested.amqp.vhost=myhost",
        options=CLIENT_OPTIONS,
    )
    options = ConnectionOptions.build(url, {})
    assert [engine_config(b, options, "c").hostname for b in url.brokers] == ["myhost"] * 2


def test_the_vhost_is_not_the_tls_peer_name() -> None:
    url = parse_url("amqps://broker.example:5671?amqp.vhost=tenant", options=CLIENT_OPTIONS)
    config = engine_config(url.brokers[0], ConnectionOptions.build(url, {}), "c")
    assert config.hostname == "tenant"
    assert config.tls is not None and config.tls.peer_name == "broker.example"


def test_options_qpid_jms_users_commonly_set() -> None:
    url = parse_url(
        "failover:(amqp://a:5672,amqp://b:5672)?jms.prefetchPolicy.all=10&jms.sendTimeout=5000"
        "&jms.requestTimeout=7000&jms.closeTimeout=2000&jms.connectTimeout=3000"
        "&failover.amqpOpenServerListAction=IGNORE&transport.tcpKeepAlive=true"
        "&transport.tcpNoDelay=false&transport.sendBufferSize=65536"
        "&transport.receiveBufferSize=131072&transport.soLinger=3&transport.trafficClass=16"
        "&amqp.saslLayer=false&amqp.idleTimeout=30000&amqp.maxFrameSize=65536",
        options=CLIENT_OPTIONS,
    )
    options = ConnectionOptions.build(url, {})
    assert options.prefetch == 10
    assert (options.attach_timeout, options.close_timeout, options.connect_timeout) == (7, 2, 3)
    assert options.send_timeout == 5
    assert (options.tcp_keep_alive, options.tcp_no_delay) == (True, False)
    assert (options.send_buffer_size, options.receive_buffer_size) == (65536, 131072)
    assert (options.so_linger, options.traffic_class) == (3, 16)
    assert (options.idle_timeout, options.max_frame_size) == (30.0, 65536)
    assert engine_config(url.brokers[0], options, "c").auth is None  # amqp.saslLayer=false
    assert url.policy.accepted_options == ()  # amqpOpenServerListAction is applied
    assert url.policy.open_server_list_action == "ignore"


def test_the_policy_and_receive_options_qpid_jms_users_set() -> None:
    url = parse_url(
        "failover:(amqp://a:5672?amqp.drainTimeout=5000,amqp://b:5672)"
        "?jms.prefetchPolicy.queuePrefetch=1&jms.prefetchPolicy.topicPrefetch=100"
        "&jms.presettlePolicy.presettleConsumers=true&jms.forceAsyncSend=true"
        "&jms.localMessagePriority=true&jms.receiveLocalOnly=true"
        "&jms.receiveNoWaitLocalOnly=true&jms.connectionIDPrefix=app-",
        options=CLIENT_OPTIONS,
    )
    options = ConnectionOptions.build(url, {})
    assert (options.prefetch_for(Queue("q")), options.prefetch_for(Topic("t"))) == (1, 100)
    assert options.prefetch_for(Topic("t"), durable=True) == 1000  # jms.prefetch's default
    assert options.presettled_consumer(Queue("q"), transacted=False)
    assert not options.presettled_producer(Queue("q"), transacted=False)
    assert (options.force_async_send, options.force_sync_send) == (True, False)
    assert options.local_message_priority
    assert (options.receive_local_only, options.receive_no_wait_local_only) == (True, True)
    assert options.connection_id_prefix == "app-"
    drains = [options.for_broker(broker).drain_timeout for broker in url.brokers]
    assert drains == [5.0, 60.0]  # per broker; Qpid JMS's 60 s default elsewhere
    again = ConnectionOptions.build(
        parse_url("amqp://a?" + _query(options.url_options()), options=CLIENT_OPTIONS), {}
    )
    assert again == options


def test_the_acknowledgement_and_check_options_qpid_jms_users_set() -> None:
    """From Qpid JMS's Configuration.md: forceAsyncAcks (A7), validatePropertyNames (M10),
    validateSelector (E7), useDaemonThread (C7), each with its effect's switch."""
    url = parse_url(
        "failover:(amqp://a:5672,amqp://b:5672)?jms.forceAsyncAcks=true"
        "&jms.validatePropertyNames=false&jms.validateSelector=false&jms.useDaemonThread=false",
        options=CLIENT_OPTIONS,
    )
    options = ConnectionOptions.build(url, {})
    assert options.force_async_acks
    assert not options.validate_property_names and not options.validate_selector
    assert not options.use_daemon_thread
    defaults = ConnectionOptions.build(parse_url("amqp://a", options=CLIENT_OPTIONS), {})
    assert not defaults.force_async_acks
    assert defaults.validate_property_names and defaults.validate_selector
    assert defaults.use_daemon_thread  # haclient's default, not Qpid JMS's (C6)
    again = ConnectionOptions.build(
        parse_url("amqp://a?" + _query(options.url_options()), options=CLIENT_OPTIONS), {}
    )
    assert again == options


def _query(options: dict[str, str]) -> str:
    return "&".join(f"{name}={value}" for name, value in options.items())


def test_the_client_id_prefix_is_the_generated_ids() -> None:
    options = ConnectionOptions.build(
        parse_url("amqp://a?jms.clientIDPrefix=orders-", options=CLIENT_OPTIONS), {}
    )
    assert options.client_id_prefix == "orders-"
    assert generated_client_id(options.client_id_prefix).startswith("orders-")
    assert generated_client_id().startswith("ID:")


def test_minus_one_means_off_as_in_qpid_jms() -> None:
    url = parse_url(
        "amqp://a?transport.soLinger=-1&jms.sendTimeout=-1&transport.soTimeout=-1",
        options=CLIENT_OPTIONS,
    )
    options = ConnectionOptions.build(url, {})
    assert options.so_linger is None and options.send_timeout is None


def test_java_key_stores_are_refused_with_how_to_convert_them() -> None:
    for name in ("transport.keyStoreType", "transport.trustStoreType", "transport.storeType"):
        for java in ("JKS", "jks"):
            with pytest.raises(ConfigurationError, match=r"PKCS12 or PEM .*keytool") as info:
                parse_url(f"amqps://a?{name}={java}", options=CLIENT_OPTIONS)
            assert info.value.option == name
        for readable in ("PEM", "PKCS12", "pkcs12"):  # PKCS12: tests/api/test_tls_options.py
            url = parse_url(f"amqps://a?{name}={readable}", options=CLIENT_OPTIONS)
            assert ConnectionOptions.build(url, {}) is not None
    with pytest.raises(ConfigurationError, match="key_store_type"):
        ConnectionOptions(key_store_type="JKS")


def test_bad_values_are_still_refused() -> None:
    for text in (
        "amqp://a?jms.presettlePolicy.presettleAll=maybe",
        "amqp://a?jms.messageIDPolicy.messageIDType=SEQUENCE",
        "failover:(amqp://a)?failover.amqpOpenServerListAction=MERGE",
        "amqp://a?transport.trafficClass=-3",
    ):
        with pytest.raises(ConfigurationError):
            parse_url(text, options=CLIENT_OPTIONS)


# --- One warning per connection for the options without effect -------------------------------


def test_one_warning_names_every_option_without_effect_and_why(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = parse_url(
        "failover:(amqp://a?transport.useEpoll=true,amqp://b)?jms.forceAsyncAcks=true"
        "&jms.tracing=opentracing&jms.deserializationPolicy.allowList=java.util"
        "&jms.presettlePolicy.presettleAll=true&jms.localMessagePriority=true"
        "&failover.amqpOpenServerListAction=ADD&jms.prefetchPolicy.all=5"
        "&failover.nested.sasl.options.protocol=amqp&jms.messageIDPolicy.messageIDType=UUID",
        options=CLIENT_OPTIONS,
    )
    with caplog.at_level(logging.WARNING, logger="haclient.connection"):
        ConnectionOptions.build(url, {})
    warnings = [r for r in caplog.records if "without effect" in r.getMessage()]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    for name in (
        "transport.useEpoll",
        "jms.deserializationPolicy.allowList",
        "sasl.options.protocol",
    ):
        assert name in text
    assert "failover.amqpOpenServerListAction" not in text  # applied
    assert "jms.prefetchPolicy.all" not in text  # applied
    assert "jms.presettlePolicy.presettleAll" not in text  # applied
    assert "jms.localMessagePriority" not in text  # applied
    assert "jms.messageIDPolicy.messageIDType" not in text  # applied
    assert "jms.tracing" not in text  # applied: OpenTelemetry
    assert "jms.forceAsyncAcks" not in text  # applied (A7)
    assert "no JVM" in text and "no Java serialization" in text
    assert "not applied yet" not in text  # every option is applied or has its reason


def test_no_warning_without_such_options(caplog: pytest.LogCaptureFixture) -> None:
    url = parse_url(
        "amqp://a?jms.prefetchPolicy.all=5&transport.tcpKeepAlive=true", options=CLIENT_OPTIONS
    )
    with caplog.at_level(logging.WARNING, logger="haclient.connection"):
        ConnectionOptions.build(url, {})
    assert not [r for r in caplog.records if "without effect" in r.getMessage()]


def test_every_option_without_effect_says_why() -> None:
    accepted = [
        o for o in (*CLIENT_OPTIONS, *FAILOVER_OPTIONS) if o.status is Status.ACCEPTED and o.doc
    ]
    # the rest are applied (test_qpid_jms_applied.py, and the tests named after their rules);
    # those left are each accepted with a reason
    assert len(accepted) >= 5
    assert all(len(o.doc) > 10 for o in accepted)


# --- The socket options reach the socket ------------------------------------------------------


@pytest.mark.anyio
async def test_socket_options_are_set_on_the_connection_to_a_broker() -> None:
    with BrokerThread() as broker:
        url = parse_url(
            f"amqp://127.0.0.1:{broker.port}?transport.tcpKeepAlive=true"
            "&transport.tcpNoDelay=true&transport.sendBufferSize=32768&transport.soLinger=2"
            "&transport.trafficClass=16&transport.connectTimeout=2000&amqp.vhost=tenant",
            options=CLIENT_OPTIONS,
        )
        options = ConnectionOptions.build(url, {})
        async with anyio.create_task_group() as group:
            physical = await open_physical(group, url.brokers[0], options, "vocabulary")
            sock = physical.amqp.driver._stream.extra(anyio.abc.SocketAttribute.raw_socket)
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) >= 32768
            linger = sock.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8)
            assert struct.unpack("ii", linger) == (1, 2)
            assert sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == 16
            await physical.amqp.close()
            group.cancel_scope.cancel()
