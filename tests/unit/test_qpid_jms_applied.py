"""Qpid JMS options applied with Qpid JMS's meaning: address prefixes, JMSXUserID, message ids.

Each test checks an option's effect where it shows: the prefixes a connection to a broker uses
(``jms.queuePrefix`` / ``jms.topicPrefix``; the prefix a broker announces in its Open wins, as
in Qpid JMS, whose ``AmqpConnectionProperties`` overwrites the configured one with it); the
``user-id`` of every message sent (``jms.populateJMSXUserID``: the logged-in user's name,
replacing the application's, as Qpid JMS's ``JmsSession.send`` does); the message ids a
producer makes (``jms.messageIDPolicy.messageIDType``, Qpid JMS's ``JmsMessageIDBuilder``); the
credit each kind of consumer grants (``jms.prefetchPolicy.*``, Qpid JMS's
``JmsDefaultPrefetchPolicy``); which producers and consumers the presettle policy presettles
(``jms.presettlePolicy.*``, ``JmsDefaultPresettlePolicy``; what that does on the wire is
tests/rules/test_qpid_jms_policies.py's); the forced send modes; the connection id's prefix
(``jms.connectionIDPrefix``); acknowledgement strategies that confirm nothing
(``jms.forceAsyncAcks``, A7) and property names let through (``jms.validatePropertyNames``,
M10; on a broker: tests/rules/test_qpid_jms_checks.py).
"""

from __future__ import annotations

import logging
import re
import uuid

import anyio
import pytest

import haclient
import haclient.aio as aio
from chaos.broker import BrokerThread
from failover.url import parse_url
from haclient.aio.acks import AckStrategy, ack_strategy
from haclient.aio.options import ConnectionOptions
from haclient.aio.physical import _prefixes, open_physical
from haclient.aio.pull import drain_timed_out, pulls
from haclient.amqp.by_priority import ByPriority, priority_of
from haclient.amqp.codec import AmqpMessage, decode_message, encode_message
from haclient.amqp.connection import ReceivedMessage
from haclient.destination import (
    NO_PREFIXES,
    DestinationPrefixes,
    Queue,
    TemporaryQueue,
    TemporaryTopic,
    Topic,
    address_of,
)
from haclient.errors import MessageFormatError
from haclient.mapping import message_id_from_amqp
from haclient.message import (
    DeliveryMode,
    TextMessage,
    check_property_name,
    checked_properties,
    uuid_message_ids,
)
from haclient.modes import AckMode
from haclient.options import CLIENT_OPTIONS
from haclient.outgoing import OutgoingEncoder

# --- jms.queuePrefix / jms.topicPrefix -----------------------------------------------------------


def test_prefix_options_are_read_from_the_url_and_keywords() -> None:
    url = parse_url(
        "amqp://a?jms.queuePrefix=queue://&jms.topicPrefix=topic://", options=CLIENT_OPTIONS
    )
    options = ConnectionOptions.build(url, {})
    assert (options.queue_prefix, options.topic_prefix) == ("queue://", "topic://")
    options = ConnectionOptions.build(url, {"queue_prefix": "q."})
    assert options.queue_prefix == "q."
    assert ConnectionOptions().queue_prefix is None


def test_the_configured_prefix_applies_when_the_broker_announces_none() -> None:
    prefixes = _prefixes({}, None, ("q.", "t."))
    assert prefixes == DestinationPrefixes(queue="q.", topic="t.")
    assert address_of(Queue("orders"), prefixes) == "q.orders"
    assert address_of(Queue("q.orders"), prefixes) == "q.orders"
    assert address_of(TemporaryQueue("tmp-1"), prefixes) == "tmp-1"


def test_the_prefix_the_broker_announces_wins_kind_by_kind() -> None:
    announced = {"queue-prefix": "queue://"}
    assert _prefixes(announced, None, ("q.", "t.")) == DestinationPrefixes("queue://", "t.")
    assert _prefixes(announced, None, (None, None)) == DestinationPrefixes("queue://", "")


def test_rabbitmq_defaults_yield_to_the_configured_prefix() -> None:
    assert _prefixes({}, "RabbitMQ", (None, None)) == DestinationPrefixes("/queue/", "/topic/")
    assert _prefixes({}, "RabbitMQ", ("/amq/queue/", None)) == DestinationPrefixes(
        "/amq/queue/", "/topic/"
    )


@pytest.mark.anyio
async def test_a_connection_to_a_broker_uses_the_configured_prefixes() -> None:
    with BrokerThread() as broker:
        url = parse_url(
            f"amqp://127.0.0.1:{broker.port}?jms.queuePrefix=q.&jms.topicPrefix=t.",
            options=CLIENT_OPTIONS,
        )
        options = ConnectionOptions.build(url, {})
        async with anyio.create_task_group() as group:
            physical = await open_physical(group, url.brokers[0], options, "applied")
            assert physical.prefixes == DestinationPrefixes(queue="q.", topic="t.")
            await physical.amqp.close()
            group.cancel_scope.cancel()


# --- jms.populateJMSXUserID ----------------------------------------------------------------------


def _user_id(payload: bytes) -> bytes | None:
    return decode_message(payload).user_id


def test_the_encoder_stamps_the_user_id_only_when_asked() -> None:
    message = TextMessage("x", destination=Queue("q"))
    message.properties["JMSXUserID"] = "mallory"
    encoder = OutgoingEncoder()
    assert _user_id(encoder.encode(message, NO_PREFIXES)) == b"mallory"
    assert _user_id(encoder.encode(message, NO_PREFIXES, b"alice", stamp_user_id=True)) == (
        b"alice"
    )
    assert _user_id(encoder.encode(message, NO_PREFIXES, None, stamp_user_id=True)) is None


@pytest.mark.anyio
async def test_a_sent_message_carries_the_logged_in_user_as_jmsx_user_id() -> None:
    with BrokerThread() as broker:  # the open broker takes PLAIN with any name
        url = f"amqp://127.0.0.1:{broker.port}?jms.populateJMSXUserID=true"
        async with aio.connect(url, username="alice", password="secret") as connection:
            await connection.start()
            session = await connection.create_session()
            producer = await session.create_producer(Queue("user-id"))
            consumer = await session.create_consumer(Queue("user-id"))
            message = TextMessage("hi")
            message.properties["JMSXUserID"] = "mallory"
            await producer.send(message, delivery_mode=DeliveryMode.PERSISTENT)
            received = await consumer.receive(5.0)
            assert received is not None
            assert received.properties["JMSXUserID"] == "alice"


# --- jms.messageIDPolicy.messageIDType -----------------------------------------------------------

SOME_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def test_message_id_types_are_read_in_any_case_with_qpid_jms_names() -> None:
    for raw, kind in (("UUID", "uuid"), ("Prefixed_UUID_String", "prefixed_uuid_string")):
        url = parse_url(f"amqp://a?jms.messageIDPolicy.messageIDType={raw}", options=CLIENT_OPTIONS)
        assert ConnectionOptions.build(url, {}).message_id_type == kind
    url = parse_url("amqp://a?jms.messageIDPolicy.messageIDType=DEFAULT", options=CLIENT_OPTIONS)
    assert ConnectionOptions.build(url, {}).message_id_type == "default"
    assert ConnectionOptions().message_id_type == "original"


@pytest.mark.parametrize(
    ("kind", "wire", "jms_id"),
    [
        ("uuid", uuid.UUID, rf"ID:AMQP_UUID:{SOME_UUID}"),
        ("uuid_string", str, rf"ID:AMQP_NO_PREFIX:{SOME_UUID}"),
        ("prefixed_uuid_string", str, rf"ID:{SOME_UUID}"),
    ],
)
def test_uuid_ids_go_on_the_wire_as_qpid_jms_sends_them(kind: str, wire: type, jms_id: str) -> None:
    ids = uuid_message_ids(kind)
    first, second = ids(), ids()
    assert first != second and re.fullmatch(jms_id, first)
    message = TextMessage("x", destination=Queue("q"))
    message.message_id = first
    amqp_id = decode_message(OutgoingEncoder().encode(message, NO_PREFIXES)).message_id
    assert type(amqp_id) is wire
    if kind == "uuid_string":
        assert re.fullmatch(SOME_UUID, amqp_id)
    if kind == "prefixed_uuid_string":
        assert amqp_id == first
    assert message_id_from_amqp(amqp_id) == first


@pytest.mark.anyio
async def test_a_producer_sends_uuid_message_ids_when_asked() -> None:
    with BrokerThread() as broker:
        url = f"amqp://127.0.0.1:{broker.port}?jms.messageIDPolicy.messageIDType=UUID"
        async with aio.connect(url) as connection:
            await connection.start()
            session = await connection.create_session()
            producer = await session.create_producer(Queue("uuid-ids"))
            consumer = await session.create_consumer(Queue("uuid-ids"))
            message = TextMessage("hi")
            await producer.send(message, delivery_mode=DeliveryMode.PERSISTENT)
            assert message.message_id is not None
            assert re.fullmatch(rf"ID:AMQP_UUID:{SOME_UUID}", message.message_id)
            received = await consumer.receive(5.0)
            assert received is not None and received.message_id == message.message_id


# --- jms.prefetchPolicy.* ------------------------------------------------------------------------


def test_each_consumer_kind_takes_its_prefetch_as_qpid_jms_chooses_it() -> None:
    url = parse_url(
        "amqp://a?jms.prefetchPolicy.all=50&jms.prefetchPolicy.queuePrefetch=7"
        "&jms.prefetchPolicy.topicPrefetch=3&jms.prefetchPolicy.durableTopicPrefetch=2"
        "&jms.prefetchPolicy.queueBrowserPrefetch=9",
        options=CLIENT_OPTIONS,
    )
    options = ConnectionOptions.build(url, {})
    assert options.prefetch == 50
    assert options.prefetch_for(Queue("q")) == 7
    assert options.prefetch_for(TemporaryQueue("t")) == 7
    assert options.prefetch_for(Queue("q"), browser=True) == 9
    assert options.prefetch_for(Topic("t")) == 3
    assert options.prefetch_for(Topic("t"), durable=True) == 2
    only_all = ConnectionOptions.build(
        parse_url("amqp://a?jms.prefetchPolicy.all=5", options=CLIENT_OPTIONS), {}
    )
    assert only_all.prefetch_for(Topic("t"), durable=True) == 5


def test_the_prefetch_keyword_wins_over_the_urls_per_kind_prefetch() -> None:
    url = parse_url(
        "amqp://a?jms.prefetchPolicy.queuePrefetch=7&jms.prefetchPolicy.topicPrefetch=3",
        options=CLIENT_OPTIONS,
    )
    options = ConnectionOptions.build(url, {"prefetch": 11, "topic_prefetch": 4})
    assert options.prefetch_for(Queue("q")) == 11  # the keyword over the URL's queuePrefetch
    assert options.prefetch_for(Topic("t")) == 4  # a per-kind keyword over `prefetch`


@pytest.mark.anyio
async def test_consumers_and_browsers_grant_their_kinds_prefetch_on_a_broker() -> None:
    with BrokerThread() as broker:
        url = (
            f"amqp://127.0.0.1:{broker.port}?jms.prefetchPolicy.queuePrefetch=7"
            "&jms.prefetchPolicy.topicPrefetch=3&jms.prefetchPolicy.durableTopicPrefetch=2"
            "&jms.prefetchPolicy.queueBrowserPrefetch=9"
        )
        async with aio.connect(url, client_id="prefetch-kinds") as connection:
            session = await connection.create_session()
            queue = await session.create_consumer(Queue("kinds"))
            topic = await session.create_consumer(Topic("kinds"))
            durable = await session.create_durable_consumer(Topic("kinds"), "sub")
            browser = await session.create_browser(Queue("kinds"))
            granted = [c._receiver.credit for c in (queue, topic, durable)]  # nothing arrived
            assert granted == [7, 3, 2]
            assert browser._credit == 9


# --- jms.presettlePolicy.* -----------------------------------------------------------------------


def _policy(**flags: bool) -> ConnectionOptions:
    names = "&".join(f"jms.presettlePolicy.{name}=true" for name, on in flags.items() if on)
    return ConnectionOptions.build(
        parse_url(f"amqp://a?{names}" if names else "amqp://a", options=CLIENT_OPTIONS), {}
    )


def test_M5_the_presettle_policy_decides_as_qpid_jms() -> None:
    queue, topic, temporary = Queue("q"), Topic("t"), TemporaryTopic("tt")
    assert not _policy().presettled_producer(queue, transacted=False)
    assert not _policy().presettled_consumer(queue, transacted=False)
    everything = _policy(presettleAll=True)
    assert everything.presettled_producer(None, transacted=True)
    assert everything.presettled_consumer(topic, transacted=False)
    assert not everything.presettled_consumer(topic, transacted=True)  # never in a transaction
    topics = _policy(presettleTopicProducers=True, presettleQueueConsumers=True)
    assert topics.presettled_producer(topic, transacted=False)
    assert topics.presettled_producer(temporary, transacted=False)
    assert not topics.presettled_producer(queue, transacted=False)
    assert not topics.presettled_producer(None, transacted=False)  # anonymous: all/producers only
    assert topics.presettled_consumer(queue, transacted=False)
    assert not topics.presettled_consumer(topic, transacted=False)
    transacted = _policy(presettleTransactedProducers=True)
    assert transacted.presettled_producer(queue, transacted=True)
    assert not transacted.presettled_producer(queue, transacted=False)
    assert _policy(presettleProducers=True).presettled_producer(None, transacted=False)
    assert _policy(presettleConsumers=True).presettled_consumer(topic, transacted=False)
    assert ConnectionOptions(presettle_topic_consumers=True).presettled_consumer(
        temporary, transacted=False
    )


# --- jms.forceSyncSend / jms.forceAsyncSend ------------------------------------------------------


def test_the_send_options_are_read_from_the_url_and_keywords() -> None:
    url = parse_url(
        "amqp://a?jms.forceSyncSend=true&jms.forceAsyncSend=true", options=CLIENT_OPTIONS
    )
    options = ConnectionOptions.build(url, {})
    assert (options.force_sync_send, options.force_async_send) == (True, True)
    assert ConnectionOptions.build(url, {"force_sync_send": False}).force_sync_send is False
    assert (ConnectionOptions().force_sync_send, ConnectionOptions().force_async_send) == (
        False,
        False,
    )


# --- jms.connectionIDPrefix ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_connection_id_takes_the_configured_prefix() -> None:
    with BrokerThread() as broker:
        url = f"amqp://127.0.0.1:{broker.port}?jms.connectionIDPrefix=app-"
        async with aio.connect(url) as connection:
            assert re.fullmatch(r"app-[0-9a-f]{32}", connection.connection_id)
            assert connection.connection_id in repr(connection)
            assert connection.statistics().connection_id == connection.connection_id
            session = await connection.create_session()
            producer = await session.create_producer(Queue("ids"))
            message = TextMessage("x")
            await producer.send(message)
            assert message.message_id is not None
            assert message.message_id.startswith(f"ID:{connection.connection_id[4:]}:")
        async with aio.connect(f"amqp://127.0.0.1:{broker.port}") as connection:
            assert re.fullmatch(r"ID:[0-9a-f]{32}", connection.connection_id)


def test_the_blocking_connection_shows_its_connection_id() -> None:
    with BrokerThread() as broker:
        url = f"amqp://127.0.0.1:{broker.port}?jms.connectionIDPrefix=blocking-"
        with haclient.connect(url) as connection:
            assert connection.connection_id.startswith("blocking-")
            assert connection.statistics().connection_id == connection.connection_id


# --- jms.localMessagePriority --------------------------------------------------------------------


def _arrived(priority: int | None, body: str) -> ReceivedMessage:
    fields = {} if priority is None else {"priority": priority}
    return ReceivedMessage(None, encode_message(AmqpMessage(body=body, **fields)))  # type: ignore[arg-type]


def test_M8_arrivals_are_taken_highest_priority_first_fifo_within_one() -> None:
    waiting: ByPriority[ReceivedMessage] = ByPriority()
    for priority, body in ((None, "default"), (2, "low"), (200, "top"), (9, "nine"), (4, "four")):
        waiting.append(_arrived(priority, body))
    assert len(waiting) == 5 and waiting
    assert decode_message(waiting[0].payload).body == "top"  # 200 counts as 9, came first
    order = [decode_message(message.payload).body for message in waiting]
    assert order == ["top", "nine", "default", "four", "low"]
    taken = [decode_message(waiting.popleft().payload).body for _ in range(5)]
    assert taken == order and not waiting
    with pytest.raises(IndexError):
        waiting.popleft()
    assert priority_of(b"not a message") == 4


# --- jms.receiveLocalOnly / jms.receiveNoWaitLocalOnly -------------------------------------------


def test_M9_which_receives_pull_as_qpid_jms_decides() -> None:
    default = ConnectionOptions()
    assert not pulls(None, 10, default)  # receive() waits on: never a drain
    assert pulls(0, 10, default) and pulls(0.5, 10, default)
    local = ConnectionOptions(receive_local_only=True)
    assert pulls(0, 10, local) and not pulls(0.5, 10, local)
    no_wait_local = ConnectionOptions(receive_no_wait_local_only=True)
    assert not pulls(0, 10, no_wait_local) and pulls(0.5, 10, no_wait_local)
    both = ConnectionOptions(receive_local_only=True, receive_no_wait_local_only=True)
    assert pulls(0, 0, both) and pulls(0.5, 0, both)  # prefetch 0 always pulls
    assert not pulls(None, 0, both)
    assert "within 0.3 s" in str(drain_timed_out(0.3))


# --- jms.forceAsyncAcks (A7) --------------------------------------------------------------------


class _Host:
    gate = tracing = None
    is_closed = False


@pytest.mark.parametrize("mode", [AckMode.AUTO, AckMode.CLIENT, AckMode.INDIVIDUAL])
def test_A7_forced_async_acks_make_auto_and_client_confirm_nothing(mode: AckMode) -> None:
    def build(force_async: bool) -> AckStrategy:
        return ack_strategy(
            mode,
            _Host(),  # type: ignore[arg-type]
            new_transaction=lambda: pytest.fail("not transacted"),
            dups_ok_batch=1,
            dups_ok_interval=1.0,
            force_async=force_async,
        )

    assert build(False).confirms and not build(True).confirms
    assert not build(True).presettled  # still acknowledged, only not waited for


# --- jms.validatePropertyNames (M10) ------------------------------------------------------------


@pytest.mark.parametrize("name", ["x-opt-id", "content.type", "NULL", "and", "JMSFoo", "1st"])
def test_M10_unchecked_any_non_empty_name_passes(name: str) -> None:
    with pytest.raises(MessageFormatError):
        check_property_name(name)
    assert check_property_name(name, validate=False) == name
    assert checked_properties({name: 1}, validate_names=False) == {name: 1}


def test_M10_unchecked_names_and_values_are_still_checked() -> None:
    for bad in ("", 3, None):
        with pytest.raises(MessageFormatError):
            check_property_name(bad, validate=False)
    with pytest.raises(MessageFormatError):
        checked_properties({"x-opt": object()}, validate_names=False)
    with pytest.raises(MessageFormatError):
        checked_properties({"JMSXDeliveryCount": 2}, validate_names=False)


def test_M10_the_encoder_sends_unchecked_names_only_when_told() -> None:
    message = TextMessage("x", message_id="ID:1")
    message.destination = Queue("q")
    message.properties["x-opt-id"] = 7
    with pytest.raises(MessageFormatError):
        OutgoingEncoder().encode(message, NO_PREFIXES)
    payload = OutgoingEncoder(validate_names=False).encode(message, NO_PREFIXES)
    assert decode_message(payload).application_properties == {"x-opt-id": 7}


# --- amqp.traceFrames -----------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("traced", [True, False])
async def test_trace_frames_logs_each_frame_on_the_frames_logger(
    traced: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """``amqp.traceFrames=true`` logs the frames both ways at DEBUG on ``haclient.frames``, the
    message's body among them, and never the SASL exchange (its own layer, below the trace);
    without it that logger says nothing."""
    caplog.set_level(logging.DEBUG, logger="haclient.frames")
    with BrokerThread() as broker:
        url = f"amqp://127.0.0.1:{broker.port}?amqp.traceFrames={str(traced).lower()}"
        async with aio.connect(url, username="alice", password="frame-secret") as connection:
            session = await connection.create_session()
            producer = await session.create_producer(Queue("traced-frames"))
            await producer.send(TextMessage("frame-body-7"))
    frames = [r.getMessage() for r in caplog.records if r.name == "haclient.frames"]
    if not traced:
        assert frames == []
        return
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.name == "haclient.frames")
    assert any("-> @open" in f for f in frames) and any("<- @open" in f for f in frames)
    assert any("-> @attach" in f for f in frames) and any("<- @disposition" in f for f in frames)
    assert any("-> @transfer" in f and "frame-body-7" in f for f in frames)
    assert not any("frame-secret" in f or "sasl" in f.lower() for f in frames)
