"""Brokers and listeners the failover rule tests share.

Each test gets its own reference brokers (``BrokerThread`` on free loopback ports), kills the one
in use with ``kill()`` (sockets reset, nothing said) and watches the connection through a
``Recorder``, a failover listener that keeps what it was told, thread-safely (the blocking API
calls listeners on a thread of its own). Where "nothing accepted is lost" matters, ``HaPair``
runs a shared-store pair instead: the standby takes over the store (and every message in it)
when the master dies.
"""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager, ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

import haclient.aio as aio
from chaos.broker import Broker, BrokerThread
from chaos.net import TcpServer, free_port
from haclient.destination import Queue
from haclient.message import Message, TextMessage

T = TypeVar("T")

TIMEOUT = 10.0


@contextmanager
def brokers(count: int, **options: Any) -> Iterator[list[BrokerThread]]:
    """``count`` independent reference brokers, stopped at the end."""
    with ExitStack() as stack:
        yield [stack.enter_context(BrokerThread(**options)) for _ in range(count)]


class _Member(Protocol):
    @property
    def url(self) -> str: ...


def failover_url(*members: _Member, method: str = "roundrobin", **options: Any) -> str:
    """``failover:(...)`` over ``members`` with a constant connect delay (10 ms unless given,
    no back-off: a URL with its own delays gets no fast phase and no jitter either) and
    generous retries, plus ``failover.<name>=value`` for each keyword. The 200 passes last at
    least 2 s a broker: a standby's takeover slowed down by a loaded machine is waited for, where
    200 passes without a delay were spent in a fraction of a second."""
    settings = {"method": method, "connectdelay": 10, "backoff": 1, "cyclecount": 200, **options}
    query = "&".join(f"failover.{name}={value}" for name, value in settings.items())
    return f"failover:({','.join(b.url for b in members)})?{query}"


class Recorder:
    """A failover listener (F14) that records every call, with the time it came."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self.events: list[tuple[str, Any, float]] = []

    def _add(self, name: str, value: Any) -> None:
        with self._lock:
            self.events.append((name, value, time.monotonic()))
            self._lock.notify_all()

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

    def wait_blocking(self, name: str, timeout: float = TIMEOUT) -> list[Any]:
        """The values of the events called ``name``, waiting (this thread) until there is one
        or ``timeout`` passed: the blocking API calls listeners on a thread of its own."""
        with self._lock:
            self._lock.wait_for(lambda: self.named(name), timeout)
            return self.named(name)

    async def wait_for(self, name: str, count: int = 1, timeout: float = TIMEOUT) -> list[Any]:
        """The values of the first ``count`` events called ``name``, waiting for them."""
        with anyio.fail_after(timeout):
            while len(self.named(name)) < count:
                await anyio.sleep(0.01)
        return self.named(name)


def port_of(broker: str) -> int:
    """The port in a broker URL as listeners report it (``amqp://127.0.0.1:PORT``)."""
    return int(broker.rsplit(":", 1)[1].split("?")[0].split("/")[0])


class HaPair:
    """A shared-store HA pair of reference brokers, run on an event loop in a thread of its own.

    The first broker serves; the second waits on the store's lock and takes over, with every
    stored message, when the first dies. ``kill_master()`` kills the serving one hard, waits for
    the standby to serve and starts the dead one again as the new standby. Everything is
    stopped on leaving the ``with`` block.
    """

    def __init__(self, store: Path, poll_interval: float = 0.02) -> None:
        self.members = [
            Broker(port=free_port(), store=store, ha_poll_interval=poll_interval) for _ in range(2)
        ]
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._tasks: list[Future[Any]] = []

    def __enter__(self) -> HaPair:
        self._portal_cm = start_blocking_portal()
        self._portal = self._portal_cm.__enter__()
        try:
            first, second = self.members
            self._tasks.append(self._portal.start_task_soon(self._serve, first))
            self._until(lambda: first.running)
            self._tasks.append(self._portal.start_task_soon(self._serve, second))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        for task in self._tasks:
            task.cancel()
        portal_cm, self._portal_cm, self._portal = self._portal_cm, None, None
        if portal_cm is not None:
            portal_cm.__exit__(None, None, None)

    @staticmethod
    async def _serve(broker: Broker) -> None:
        async with broker:  # as standby this waits for the store's lock first
            await anyio.sleep_forever()

    @staticmethod
    def _until(condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + TIMEOUT
        while not condition():
            if time.monotonic() > deadline:
                raise TimeoutError("the HA pair did not reach the expected state")
            time.sleep(0.005)

    @property
    def master(self) -> Broker:
        """The broker serving now."""
        return next(b for b in self.members if b.running)

    def call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the brokers' loop (their admin API is not thread-safe)."""
        assert self._portal is not None, "the HA pair is not running"
        return self._portal.call(fn, *args)

    def queue_depth(self, address: str) -> int:
        """Messages waiting on ``address`` of the serving broker."""
        return self.call(lambda: self.master.queue_depth(address))

    def unacked_count(self, address: str) -> int:
        """Messages of ``address`` the serving broker delivered and has not had settled."""
        return self.call(lambda: self.master.unacked_count(address))

    def kill_master(self) -> Broker:
        """Kill the serving broker hard and return the standby, which takes over within about
        one poll interval. The dead broker comes back as the new standby once it has."""
        master = self.master
        standby = next(b for b in self.members if b is not master)
        self.call(master.kill)
        assert self._portal is not None
        self._tasks.append(self._portal.start_task_soon(self._rejoin, master, standby))
        return standby

    @staticmethod
    async def _rejoin(old: Broker, standby: Broker) -> None:
        while not standby.running:  # started before, the old master would take the lock back
            await anyio.sleep(0.005)
        await old.start()


class Doorman(TcpServer):
    """A TCP listener that lets every connection in and shuts it at once, noting its own name
    in a log it shares with other doormen: the order of a failover's connect attempts."""

    def __init__(self, name: str, log: list[str]) -> None:
        super().__init__(lambda _: log.append(name))  # list.append is atomic
        self.name = name
        self.log = log

    @property
    def url(self) -> str:
        return f"amqp://{self.address}"


async def send_to(url: str, queue: str, *bodies: str) -> None:
    """Put text messages on ``queue`` of one broker, from a connection of its own (async core:
    the setup, not the rule under test)."""
    async with await aio.connect(url) as connection:
        session = await connection.create_session()
        producer = await session.create_producer(Queue(queue))
        for body in bodies:
            await producer.send(TextMessage(body))


@asynccontextmanager
async def on_one_broker(api: Any) -> AsyncIterator[tuple[BrokerThread, Any, Recorder]]:
    """One broker, and a started connection through ``api`` that retries it as good as forever
    (``singlebroker``, 1000 times 20 ms apart) with a ``Recorder`` listening; the connection is
    closed, then the broker stopped, on leaving the block."""
    with brokers(1) as (only,):
        recorder = Recorder()
        url = failover_url(only, method="singlebroker", retries=1000, connectdelay=20)
        async with await connected(api, url, recorder) as connection:
            yield only, connection, recorder


async def take_all(url: str, queue: str) -> list[str]:
    """Receive (AUTO) every text message left on ``queue``, from a connection of its own;
    their bodies, in order."""
    bodies = []
    async with await aio.connect(url) as connection:
        await connection.start()
        session = await connection.create_session()
        consumer = await session.create_consumer(Queue(queue))
        while (message := await consumer.receive(1.0)) is not None:
            bodies.append(text_of(message) or "")
    return bodies


def text_of(message: Message | None) -> str | None:
    """The body of a received text message; None when nothing was received."""
    return None if message is None else message.text  # type: ignore[attr-defined]


async def send_numbered(url: str, queue: str, prefix: str, count: int) -> list[str]:
    """``send_to`` ``count`` numbered messages (``prefix`` 0, 1 ...); return their bodies."""
    bodies = [f"{prefix}{n}" for n in range(count)]
    await send_to(url, queue, *bodies)
    return bodies


async def connected(api: Any, url: str, recorder: Recorder, **options: Any) -> Any:
    """A started connection through ``api`` whose failover events go to ``recorder``."""
    connection = await api.connect(url, **options)
    await connection.add_listener(recorder)
    await connection.start()
    return connection
