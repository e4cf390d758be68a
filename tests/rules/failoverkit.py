"""Brokers and listeners the failover rule tests share.

Each test gets its own reference brokers (``BrokerThread`` on free loopback ports), kills the one
in use with ``kill()`` (sockets reset, nothing said) and watches the connection through a
``Recorder``, a failover listener that keeps what it was told, thread-safely (the blocking API
calls listeners on a thread of its own).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import anyio

from chaos.broker import BrokerThread

TIMEOUT = 10.0


@contextmanager
def brokers(count: int, **options: Any) -> Iterator[list[BrokerThread]]:
    """``count`` independent reference brokers, stopped at the end."""
    with ExitStack() as stack:
        yield [stack.enter_context(BrokerThread(**options)) for _ in range(count)]


def failover_url(*members: BrokerThread, method: str = "roundrobin", **options: Any) -> str:
    """``failover:(...)`` over ``members`` with zero connect delay and generous retries,
    plus ``failover.<name>=value`` for each keyword."""
    settings = {"method": method, "connectdelay": 0, "cyclecount": 200, **options}
    query = "&".join(f"failover.{name}={value}" for name, value in settings.items())
    return f"failover:({','.join(b.url for b in members)})?{query}"


class Recorder:
    """A failover listener (F14) that records every call, with the time it came."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: list[tuple[str, Any, float]] = []

    def _add(self, name: str, value: Any) -> None:
        with self._lock:
            self.events.append((name, value, time.monotonic()))

    def failover_started(self, cause: BaseException) -> None:
        self._add("started", cause)

    def failover_completed(self, broker: object, downtime: float) -> None:
        self._add("completed", str(broker))

    def failover_failed(self, cause: BaseException) -> None:
        self._add("failed", cause)

    def resource_not_restored(self, resource: object, error: BaseException) -> None:
        self._add("not_restored", (resource, error))

    def named(self, name: str) -> list[Any]:
        with self._lock:
            return [value for event, value, _ in self.events if event == name]

    async def wait_for(self, name: str, count: int = 1, timeout: float = TIMEOUT) -> list[Any]:
        """The values of the first ``count`` events called ``name``, waiting for them."""
        with anyio.fail_after(timeout):
            while len(self.named(name)) < count:
                await anyio.sleep(0.01)
        return self.named(name)


def port_of(broker: str) -> int:
    """The port in a broker URL as listeners report it (``amqp://127.0.0.1:PORT``)."""
    return int(broker.rsplit(":", 1)[1].split("?")[0].split("/")[0])
