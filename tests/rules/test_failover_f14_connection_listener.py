"""F14 under Qpid JMS's names: a port of a Java ``JmsConnectionListener`` hears the same events
at the same moments, through both APIs.

Independent reference brokers (``failoverkit``); the connection starts on the first, which
``kill()`` resets without a word, and fails over to the second. The listener is given to
``connect(..., listener=...)``, as Qpid JMS's ``addConnectionListener`` comes before ``start()``.
"""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest
from apikit import Api, eventually
from failoverkit import TIMEOUT, brokers, failover_url, port_of

from failover.listeners import ConnectionListener
from failover.url import BrokerURL
from haclient.errors import ConnectionFailedError

pytestmark = pytest.mark.anyio


class JavaPort(ConnectionListener):
    """A port of a Java listener, with haclient's ``failover_started`` too; records calls
    (thread-safe: the blocking API calls listeners on a thread of its own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[tuple[str, Any]] = []

    def _add(self, name: str, value: Any) -> None:
        with self._lock:
            self._events.append((name, value))

    @property
    def events(self) -> list[tuple[str, Any]]:
        with self._lock:
            return list(self._events)

    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def on_connection_established(self, broker: BrokerURL) -> None:
        self._add("established", broker)

    def on_connection_interrupted(self, broker: BrokerURL) -> None:
        self._add("interrupted", broker)

    def on_connection_restored(self, broker: BrokerURL) -> None:
        self._add("restored", broker)

    def on_connection_failure(self, error: BaseException) -> None:
        self._add("failure", error)

    def failover_started(self, cause: BaseException) -> None:
        self._add("started", cause)


async def test_F14_a_java_listener_hears_established_interrupted_and_restored(api: Api) -> None:
    with brokers(2) as (first, second):
        port = JavaPort()
        url = failover_url(first, second)
        async with await api.connect(url, listener=port):
            await eventually(lambda: port.names() == ["established"], TIMEOUT)
            first.kill()
            await eventually(lambda: len(port.events) == 4, TIMEOUT)
    (_, established), _, (_, interrupted), (_, restored) = port.events
    # haclient's name first on the same listener, then Qpid JMS's
    assert port.names() == ["established", "started", "interrupted", "restored"]
    assert isinstance(established, BrokerURL)
    assert port_of(str(established)) == port_of(str(interrupted)) == first.port
    assert port_of(str(restored)) == second.port


async def test_F14_a_java_listener_hears_failure_when_failover_gives_up(api: Api) -> None:
    with brokers(1) as (only,):
        port = JavaPort()
        url = failover_url(only, method="singlebroker", retries=2, cyclecount=1)
        async with await api.connect(url, listener=port) as connection:
            only.kill()
            await eventually(lambda: "failure" in port.names(), TIMEOUT)
            assert port.names() == ["established", "started", "interrupted", "failure"]
            assert isinstance(port.events[-1][1], BaseException)
            assert (await connection.statistics()).failovers_failed == 1


async def test_F14_a_java_listener_hears_failure_when_the_first_connect_gives_up(
    api: Api,
) -> None:
    with brokers(1) as (stopped,):
        stopped.kill()  # refuses connections from now on
        port = JavaPort()
        with anyio.fail_after(TIMEOUT), pytest.raises(ConnectionFailedError) as gave_up:
            await api.connect(failover_url(stopped, cyclecount=1), listener=port)
    # called before connect() raised, with the failure it raised from
    assert port.names() == ["failure"]
    assert gave_up.value.cause is port.events[0][1]


async def test_F14_a_listener_added_after_connect_hears_no_established(api: Api) -> None:
    with brokers(2) as (first, second):
        port = JavaPort()
        async with await api.connect(failover_url(first, second)) as connection:
            await connection.add_listener(port)
            first.kill()
            await eventually(lambda: "restored" in port.names(), TIMEOUT)
            await connection.remove_listener(port)
    assert port.names() == ["started", "interrupted", "restored"]
