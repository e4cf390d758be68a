"""Rule F12: the ``exchange`` method learns brokers from the Open frame's
``failover-server-list`` and from membership messages on ``amq.failover``, newest list first,
through both APIs, on reference brokers that announce their peers (``peers=``, ``set_peers``)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from apikit import Api
from failoverkit import TIMEOUT, Recorder, brokers, failover_url, port_of

from chaos.broker import BrokerThread
from haclient.amqp import EngineConfig
from haclient.amqp.codec import AmqpMessage, encode_message
from haclient.amqp.connection import open_connection
from haclient.destination import Queue, Topic
from haclient.message import TextMessage

pytestmark = pytest.mark.anyio


async def _ports_known(connection: Any, *expected: int) -> None:
    """Wait until the connection's next failover walks brokers on ``expected`` ports first."""
    with anyio.fail_after(TIMEOUT):
        while [b.port for b in connection.brokers][: len(expected)] != list(expected):
            await anyio.sleep(0.02)


async def _membership_followed(broker: BrokerThread) -> None:
    """Wait until the connection consumes ``broker``'s membership topic: a topic keeps nothing
    for a subscriber that has not attached yet, and the attach follows ``connect()``."""
    with anyio.fail_after(TIMEOUT):
        while not _has_consumer(broker, "amq.failover"):
            await anyio.sleep(0.02)


def _has_consumer(broker: BrokerThread, address: str) -> bool:
    try:
        return broker.consumer_count(address) > 0
    except KeyError:  # not made yet: the attach makes it
        return False


def _set_peers(broker: BrokerThread, *peers: BrokerThread) -> None:
    inner = broker.broker
    broker.portal.call(lambda: inner.set_peers([p.url for p in peers]))


async def test_F12_exchange_follows_the_open_frames_server_list(api: Api) -> None:
    with brokers(2) as (first, second):
        _set_peers(first, second)  # the first announces the second in its Open frame
        recorder = Recorder()
        url = failover_url(first, method="exchange")  # the URL knows only the first
        async with await api.connect(url) as connection:
            await connection.add_listener(recorder)
            session = await connection.create_session()
            producer = await session.create_producer(Queue("f12"))
            await _ports_known(connection, second.port, first.port)  # learned, seed last
            first.kill()
            await producer.send(TextMessage("on a broker the URL never named"))
            completed = await recorder.wait_for("completed")
        assert [port_of(b) for b in completed] == [second.port]
        assert second.queue_depth("f12") == 1


async def test_F12_a_membership_message_replaces_the_list(api: Api) -> None:
    with brokers(3) as (first, second, third):
        _set_peers(first, second)
        recorder = Recorder()
        async with await api.connect(failover_url(first, method="exchange")) as connection:
            await connection.add_listener(recorder)
            await _ports_known(connection, second.port)
            _set_peers(first, third)  # published on amq.failover: newer than the Open frame
            await _ports_known(connection, third.port, first.port)
            first.kill()
            completed = await recorder.wait_for("completed")
        assert [port_of(b) for b in completed] == [third.port]


async def test_F12_a_garbage_membership_message_is_ignored(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    with brokers(2) as (first, second):
        _set_peers(first, second)
        async with await api.connect(failover_url(first, method="exchange")) as connection:
            await _ports_known(connection, second.port, first.port)
            await _membership_followed(first)
            # "amq.failover" is no JMS identifier: the gossip goes out through the bare engine
            config = EngineConfig(container_id="gossip")
            async with open_connection("127.0.0.1", first.port, config) as gossip:
                amqp_session = await gossip.open_session()
                sender = await gossip.open_sender("amq.failover", session=amqp_session)
                for junk in ("not a url", "failover:(amqp://a:1)", 42):
                    bad = AmqpMessage(body=None, application_properties={"amq.failover": junk})
                    await gossip.send(sender, encode_message(bad))
            with anyio.fail_after(TIMEOUT):  # the connection read each one, and said why not
                while caplog.text.count("ignoring a membership message") < 3:
                    await anyio.sleep(0.02)
            assert [b.port for b in connection.brokers] == [second.port, first.port]
            session = await connection.create_session()  # still connected and working
            await (await session.create_producer(Queue("f12g"))).send(TextMessage("ok"))
        assert first.queue_depth("f12g") == 1


async def test_F12_the_new_broker_is_followed_after_failover(api: Api) -> None:
    with brokers(3) as (first, second, third):
        _set_peers(first, second)
        recorder = Recorder()
        async with await api.connect(failover_url(first, method="exchange")) as connection:
            await connection.add_listener(recorder)
            await _ports_known(connection, second.port, first.port)
            first.kill()
            await recorder.wait_for("completed")
            _set_peers(second, third)  # told by the broker failed over to, on its own topic
            await _ports_known(connection, third.port, first.port)
            second.kill()
            completed = await recorder.wait_for("completed", count=2)
        assert [port_of(b) for b in completed] == [second.port, third.port]


async def test_F12_an_empty_membership_list_leaves_only_the_seeds(api: Api) -> None:
    with brokers(2) as (first, second):
        _set_peers(first, second)
        async with await api.connect(failover_url(first, method="exchange")) as connection:
            await _ports_known(connection, second.port, first.port)
            _set_peers(first)  # "no peers" (the newest list) is news too
            with anyio.fail_after(TIMEOUT):
                while [b.port for b in connection.brokers] != [first.port]:
                    await anyio.sleep(0.02)


async def test_F12_the_application_may_use_the_membership_topic_itself(api: Api) -> None:
    with brokers(3) as (first, second, third):
        _set_peers(first, second)
        async with await api.connect(failover_url(first, method="exchange")) as connection:
            await connection.start()
            session = await connection.create_session()
            consumer = await session.create_consumer(Topic("amq.failover"))
            with anyio.fail_after(TIMEOUT):  # the internal subscriber is there as well
                while first.consumer_count("amq.failover") < 2:
                    await anyio.sleep(0.02)
            assert (await connection.statistics()).consumers == 1  # but it is not the app's
            welcome = await consumer.receive(TIMEOUT)  # the broker greets each new subscriber
            assert welcome is not None
            assert welcome.properties["amq.failover"] == second.url
            _set_peers(first, third)
            news = await consumer.receive(TIMEOUT)
            assert news is not None
            assert news.properties["amq.failover"] == third.url
            await _ports_known(connection, third.port, first.port)  # and the connection learned
