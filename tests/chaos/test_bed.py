"""The bed itself: brokers behind proxies, each fault doing what it says (outcomes read on the
brokers' admin API and through haclient), external brokers, and a clean end (no proxy, no
thread left)."""

from __future__ import annotations

import threading
import time

import pytest

import haclient
from chaos.bed import Bed
from chaos.broker import BrokerThread
from chaos.toxiproxy import ToxiproxyServer
from chaos.toxiproxy.client import ToxiproxyClient
from haclient import Queue, TextMessage

pytestmark = pytest.mark.timeout(120)


def _send(url: str, queue: str, text: str) -> None:
    with haclient.connect(url, idle_timeout=0.5) as conn, conn.create_session() as session:
        session.create_producer(Queue(queue)).send(TextMessage(text))


def _depth(broker: BrokerThread, queue: str) -> int:
    try:
        return broker.queue_depth(queue)
    except KeyError:  # no such node on this broker
        return 0


def test_F3_a_kill_of_the_master_hands_the_store_to_the_standby() -> None:
    with Bed(ha=True) as bed:
        first = bed.master()
        _send(bed.url(), "q", "before")
        record = bed.kill()
        assert record.name == "kill" and record.end >= record.start
        assert bed.master() is not first
        _send(bed.url(), "q", "after")
        assert bed.queue_depth("q") == 2  # the standby took over the stored message


def test_a_graceful_stop_then_the_old_master_waits_as_standby() -> None:
    with Bed(ha=True) as bed:
        first = bed.master()
        bed.stop()
        second = bed.master()
        assert second is not first
        bed.kill()
        assert bed.master() is first


def test_independent_brokers_come_back_with_their_messages() -> None:
    with Bed(brokers=2, ha=False) as bed:
        assert len(bed.members) == 2
        _send(bed.members[0].url, "q", "kept")
        bed.kill(down=0.1)
        assert bed.queue_depth("q") == 1


@pytest.mark.parametrize(
    "fault",
    [
        lambda bed: bed.latency(0.5, ms=200),
        lambda bed: bed.bandwidth(0.5, rate_kb=8),
        lambda bed: bed.slicer(0.5, size=5),
        lambda bed: bed.limit_data(0.5, nbytes=50),
        lambda bed: bed.reset_peer(0.5),
        lambda bed: bed.blackhole(0.5),
        lambda bed: bed.flap(period_ms=50, count=2),
        lambda bed: bed.pause(0.3),
    ],
    ids=[
        "latency",
        "bandwidth",
        "slicer",
        "limit_data",
        "reset_peer",
        "blackhole",
        "flap",
        "pause",
    ],
)
def test_each_network_fault_is_undone(fault: object) -> None:
    with Bed(ha=True) as bed:
        record = fault(bed)  # type: ignore[operator]
        assert record.end - record.start >= 0.09
        for member in bed.members:
            assert bed.proxies.toxics(member.proxy) == []
            assert bed.proxies.proxy(member.proxy).enabled
        _send(bed.url(), "q", "after")  # the bed serves as before
        assert bed.queue_depth("q") == 1


def test_a_latency_toxic_slows_a_send_down() -> None:
    with (
        Bed(ha=True) as bed,
        haclient.connect(bed.url()) as conn,
        conn.create_session() as session,
    ):
        producer = session.create_producer(Queue("slow"))
        with bed.proxies.toxic(bed.master().proxy, "latency", latency=300):
            start = time.monotonic()
            producer.send(TextMessage("late"))
            assert time.monotonic() - start >= 0.3


def test_external_brokers_and_toxiproxy_are_only_proxied() -> None:
    with (
        ToxiproxyServer.running() as server,
        BrokerThread() as first,
        BrokerThread() as second,
        Bed(broker_urls=[first.url, second.url], toxiproxy_url=server.url) as bed,
    ):
        assert bed.external and len(bed.members) == 2
        _send(bed.url(), "q", "one")
        assert first.queue_depth("q") == 1
        bed.kill(down=0.1)  # played on the network: every proxy down, then up
        bed.pause(0.2)  # a blackhole
        _send(bed.url(), "q", "two")
        assert sum(_depth(b, "q") for b in (first, second)) == 2
        client = ToxiproxyClient(server.url)
        assert len(client.proxies()) == 2
    assert first.broker.running is False


def test_the_bed_leaves_no_thread_and_no_proxy_behind() -> None:
    before = set(threading.enumerate())
    with ToxiproxyServer.running() as server:
        with Bed(ha=True, toxiproxy_url=server.url) as bed:
            bed.kill()
        assert ToxiproxyClient(server.url).proxies() == {}
    deadline = time.monotonic() + 5
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert set(threading.enumerate()) - before == set()
