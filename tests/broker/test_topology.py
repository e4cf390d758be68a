"""Broker-announced topology: ``failover-server-list`` in the Open frame and ``amq.failover``.

The broker is told its peers (``Broker(peers=...)``, ``set_peers``, ``--peer``). A new
connection's Open carries them as a list of maps (``hostname``, ``network-host``, ``port``,
``scheme``); subscribers of the topic ``amq.failover`` get a membership message when they attach
and whenever the list changes: an empty body and the application property ``amq.failover``
holding the URLs joined by commas.
"""

from __future__ import annotations

import anyio
import pytest
from brokerkit import TIMEOUT, connect, receive, receiver

from chaos.broker import Broker
from chaos.broker.cli import build_parser
from haclient.amqp.codec import decode_message
from haclient.amqp.connection import AmqpConnection, ReceivedMessage
from haclient.amqp.types import Terminus

pytestmark = pytest.mark.anyio

FAILOVER = Terminus(address="amq.failover", capabilities=("topic",))


def server_list(conn: AmqpConnection) -> list[dict[str, object]]:
    assert conn.remote_open is not None
    value = conn.remote_open.properties.get("failover-server-list", [])
    return [{str(k): v for k, v in entry.items()} for entry in value]


def membership(received: ReceivedMessage) -> str:
    decoded = decode_message(received.payload)
    assert decoded.body is None
    value = decoded.application_properties["amq.failover"]
    assert isinstance(value, str)
    return value


async def test_open_frame_carries_failover_server_list() -> None:
    with anyio.fail_after(TIMEOUT):
        async with Broker(peers=["amqp://b1.example:5673", "amqps://b2.example"]) as broker:
            assert broker.peers == ("amqp://b1.example:5673", "amqps://b2.example")
            async with connect(broker) as conn:
                assert server_list(conn) == [
                    {
                        "hostname": "b1.example",
                        "network-host": "b1.example",
                        "port": 5673,
                        "scheme": "amqp",
                    },
                    {
                        "hostname": "b2.example",
                        "network-host": "b2.example",
                        "port": 5671,
                        "scheme": "amqps",
                    },
                ]


async def test_peer_list_change_is_published_to_two_subscribers_and_new_opens(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        broker.set_peers(["amqp://a:1"])
        async with connect(broker, "one") as one, connect(broker, "two") as two:
            link1 = await receiver(one, FAILOVER)
            link2 = await receiver(two, "amq.failover")  # a topic even without the capability
            # every new subscriber learns the current list at once
            assert membership(await receive(one, link1)) == "amqp://a:1"
            assert membership(await receive(two, link2)) == "amqp://a:1"
            broker.set_peers(["amqp://a:1", "amqp://b:2"])
            assert membership(await receive(one, link1)) == "amqp://a:1,amqp://b:2"
            assert membership(await receive(two, link2)) == "amqp://a:1,amqp://b:2"
            broker.set_peers(["amqp://a:1", "amqp://b:2"])  # no change: nothing published
            async with connect(broker, "three") as three:
                assert [entry["port"] for entry in server_list(three)] == [1, 2]
            broker.set_peers([])
            assert membership(await receive(one, link1)) == ""
            async with connect(broker, "four") as four:
                assert server_list(four) == []


async def test_bad_peer_url_is_refused_and_changes_nothing(broker: Broker) -> None:
    broker.set_peers(["amqp://a:1"])
    for bad in ("http://a:1", "amqp://", "amqp://a:1,amqp://b:2"):
        with pytest.raises(ValueError):
            broker.set_peers([bad])
    assert broker.peers == ("amqp://a:1",)


def test_cli_peer_option_is_repeatable() -> None:
    args = build_parser().parse_args(["--peer", "amqp://a:1", "--peer", "amqp://b:2"])
    assert args.peer == ["amqp://a:1", "amqp://b:2"]
