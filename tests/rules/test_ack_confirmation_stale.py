"""A6: an acknowledgement is confirmed by the broker's answer to its own exchange, never by a
late answer to an earlier one whose wait was cancelled.

A confirmation exchange (a drain, or a flow on RabbitMQ) is answered by the broker after it
processed what came before on the session. When the wait for an answer is cancelled (the
caller's cancel scope, Ctrl-C on the blocking API), the answer still comes, later: the next
exchange on the same probe must not take it for its own, or an ``acknowledge()`` returns before
the broker saw the acknowledgement (a drop right then and the message comes back, unflagged).

The tests run through a relay that can hold back each direction (kept, and passed on when
released): the broker's answer to the cancelled exchange is held until the next exchange was
written and held on its way to the broker; then only the old answer is let through.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from urllib.parse import urlsplit

import anyio
import pytest
from apikit import Bed

import haclient.aio as aio
from chaos.broker import BrokerThread
from chaos.rabbitmq import RabbitMQNode
from haclient.destination import Queue
from haclient.message import TextMessage
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio

TIMEOUT = 20.0
HELD = 1.0
"""Seconds an acknowledgement must still be waiting while its own exchange is held back."""


class _Direction:
    """One direction of the relay: passes bytes on, or keeps them while held."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held = False
        self.kept: list[bytes] = []
        self.sink: socket.socket | None = None

    def pass_on(self, data: bytes) -> None:
        with self.lock:
            if self.held or self.sink is None:
                self.kept.append(data)
                return
            self.sink.sendall(data)

    def hold(self) -> None:
        with self.lock:
            self.held = True

    def release(self) -> None:
        with self.lock:
            self.held = False
            kept, self.kept = self.kept, []
            if self.sink is not None:
                for data in kept:
                    self.sink.sendall(data)


class HoldingRelay:
    """A TCP relay of one connection from a free loopback port to ``host:port``; ``up`` (client
    to broker) and ``down`` (broker to client) each hold back what comes while held."""

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self.up = _Direction()
        self.down = _Direction()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with suppress(OSError):
            client, _ = self._listener.accept()
            broker = socket.create_connection(self._upstream, timeout=TIMEOUT)
            broker.settimeout(None)
            self._sockets += [client, broker]
            self.up.sink, self.down.sink = broker, client
            for source, direction in ((client, self.up), (broker, self.down)):
                threading.Thread(target=_pump, args=(source, direction), daemon=True).start()

    def close(self) -> None:
        self._listener.close()
        for end in self._sockets:
            with suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()


def _pump(source: socket.socket, direction: _Direction) -> None:
    with suppress(OSError):
        while data := source.recv(65536):
            direction.pass_on(data)


@contextmanager
def relayed(url: str) -> Iterator[tuple[HoldingRelay, str]]:
    """A relay to the broker of ``url`` and a plain URL through it (one attempt: no failover)."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    relay = HoldingRelay(parts.hostname, parts.port)
    login = f"{parts.username}:{parts.password}@" if parts.username else ""
    try:
        yield relay, f"amqp://{login}127.0.0.1:{relay.port}"
    finally:
        relay.close()


def connection_queued(consumer: aio.MessageConsumer) -> int:
    """Messages prefetched by ``consumer`` (read only, for the test)."""
    receiver = consumer._receiver
    current = consumer._context.connection.current
    return 0 if receiver is None or current is None else current.amqp.queued(receiver)


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``TIMEOUT``."""
    deadline = anyio.current_time() + TIMEOUT
    while not condition():
        assert anyio.current_time() < deadline, what
        await anyio.sleep(0.005)


async def _late_answer_confirms_nothing(url: str, chosen: str, expected: str) -> None:
    queue = Queue(Bed.unique(f"stale-{chosen}"))
    with relayed(url) as (relay, through):
        async with await aio.connect(through, ack_confirmation=chosen) as connection:
            await connection.start()
            session = await connection.create_session(AckMode.CLIENT)
            producer = await session.create_producer(queue)
            for body in ("first", "cancelled", "held"):
                await producer.send(TextMessage(body))
            consumer = await session.create_consumer(queue)
            first = await consumer.receive(TIMEOUT)
            assert first is not None and first.body == "first"
            await first.acknowledge()  # the probe is answered once: later exchanges wait on
            assert session.ack_confirmation.value == expected
            cancelled = await consumer.receive(TIMEOUT)
            assert cancelled is not None
            await _until(lambda: connection_queued(consumer) >= 1, "the last never prefetched")
            relay.down.hold()  # the broker's answer to the next exchange is kept back
            with anyio.move_on_after(0.3) as scope:
                await cancelled.acknowledge()
            assert scope.cancelled_caught, "the exchange was answered although held back"
            held = await consumer.receive(TIMEOUT)  # prefetched: no exchange with the broker
            assert held is not None and held.body == "held"
            relay.up.hold()  # the next exchange never reaches the broker while held
            confirmed = anyio.Event()

            async def acknowledge_held() -> None:
                await held.acknowledge()
                confirmed.set()

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(acknowledge_held)
                await _until(lambda: bool(relay.up.kept), "the exchange was never written")
                relay.down.release()  # the late answer to the cancelled exchange arrives
                with anyio.move_on_after(HELD):
                    await confirmed.wait()
                assert not confirmed.is_set(), (
                    "acknowledge() returned on the late answer to a cancelled exchange: the "
                    "broker had not seen this acknowledgement"
                )
                relay.up.release()
                with anyio.fail_after(TIMEOUT):
                    await confirmed.wait()
    async with await aio.connect(url) as connection:  # nothing comes back
        await connection.start()
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(queue)
        assert [m.body for m in [await consumer.receive(1.0)] if m is not None] in (
            [],
            ["cancelled"],  # its acknowledgement was in doubt when cancelled: may come again
        )


async def test_A6_a_late_answer_to_a_cancelled_drain_does_not_confirm_the_next(
    reference_broker: BrokerThread,
) -> None:
    with anyio.fail_after(TIMEOUT * 2):
        await _late_answer_confirms_nothing(reference_broker.url, "drain", "drain")


@pytest.mark.rabbitmq
async def test_A6_a_late_answer_to_a_cancelled_link_flow_does_not_confirm_the_next(
    rabbitmq: RabbitMQNode,
) -> None:
    with anyio.fail_after(TIMEOUT * 2):
        await _late_answer_confirms_nothing(rabbitmq.url, "auto", "link-flow")
