"""Throughput and latency of haclient's AMQP engine against python-qpid-proton, on one RabbitMQ.

Run from the repository root::

    .venv/bin/python -m bench.throughput --messages 20000 --repeat 2 --json bench/results.json

One run starts one private RabbitMQ node (``chaos.rabbitmq.RabbitMQNode``, always stopped at the
end) and measures, on that broker, with the same queue naming, message count and payloads:

- ``haclient``: ``open_connection`` + ``send_nowait`` after ``wait_for_credit``, then
  ``wait_settled`` for every delivery (all must be Accepted); then a receiver with a credit window,
  accepting each message.
- ``proton``: proton's own ``Container`` + ``MessagingHandler`` (a sender that sends while it has
  credit and counts accepted settlements; a receiver that accepts each message).
- ``raw``: proton's engine objects pumped by a plain blocking socket loop (the minimal baseline).

Send rate: messages / (first transfer queued .. last Accepted settlement seen). Receive rate:
messages / (first message handed to the application .. last message accepted). Every phase
checks its own result (all Accepted, every message received once and in order, the queue empty
afterwards) and stops the run with an error otherwise.

By default the payloads are encoded once before the clock starts and both sides move bytes (the
engines are compared, not the codecs); ``--codec`` encodes and decodes inside the timed loops
(haclient's ``encode_message``/``decode_message``; proton's ``Message`` objects).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import socket
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import anyio
import proton
from proton import Collector, Connection, Endpoint, Event, Message, Transport
from proton.handlers import IncomingMessageHandler, MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

from chaos.rabbitmq import RabbitMQNode
from haclient.amqp import Accepted, ClientAuth, EngineConfig
from haclient.amqp.codec import AmqpMessage, decode_message, encode_message
from haclient.amqp.connection import open_connection

HOST = "127.0.0.1"
USER = "guest"
PASSWORD = "guest"
IMPLS = ("haclient", "proton", "raw")
ACCEPTED = proton.Delivery.ACCEPTED


class BenchError(RuntimeError):
    """A measurement miscounted or failed: its numbers must not be used."""


# Workload -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """What every implementation sends: the same bodies, encoded the same way."""

    bodies: list[str]
    payloads: list[bytes]
    codec: bool
    window: int
    timeout: float

    @property
    def count(self) -> int:
        return len(self.bodies)


def make_workload(count: int, size: int, codec: bool, window: int) -> Workload:
    """``count`` distinct text bodies of ``size`` characters, as durable messages."""
    bodies = []
    for n in range(count):
        head = f"m-{n:08d}-"
        bodies.append(head + "x" * max(0, size - len(head)))
    payloads = [bytes(Message(body=b, durable=True).encode()) for b in bodies]
    return Workload(bodies, payloads, codec, window, timeout=60.0 + count / 200)


class Progress:
    """A throttled progress line on stderr (``label done/total``), cleared when finished."""

    def __init__(self, label: str, total: int) -> None:
        self.label = label
        self.total = total
        self.step = max(1, total // 20)
        self._next = 0
        self.enabled = sys.stderr.isatty() or os.environ.get("BENCH_PROGRESS") == "1"

    def update(self, done: int) -> None:
        if self.enabled and (done >= self._next or done == self.total):
            self._next = done + self.step
            sys.stderr.write(f"\r  {self.label}: {done}/{self.total}   ")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * (len(self.label) + 30) + "\r")
            sys.stderr.flush()


def check(condition: bool, message: str) -> None:
    if not condition:
        raise BenchError(message)


def check_received(impl: str, work: Workload, got: Sequence[Any]) -> None:
    """Every message exactly once, in order, with the body that was sent.

    Raw payloads are decoded here, after the clock stopped: the broker adds its own sections
    (message annotations, header), so the bytes differ from those sent.
    """
    check(
        len(got) == work.count,
        f"{impl} receive: got {len(got)} messages, sent {work.count}",
    )
    bodies = list(got) if work.codec else [_body(payload) for payload in got]
    if bodies != work.bodies:
        first = next(i for i, (a, b) in enumerate(zip(bodies, work.bodies, strict=True)) if a != b)
        raise BenchError(
            f"{impl} receive: message {first} is {bodies[first]!r}, sent {work.bodies[first]!r}"
        )


class Timer:
    """Wall-clock and process CPU time of one timed interval."""

    __slots__ = ("_cpu0", "_wall0", "cpu", "foreign", "started", "wall")

    def __init__(self) -> None:
        self.foreign: float | None = None
        self.started = False
        self._wall0 = self._cpu0 = 0.0
        self.wall = self.cpu = 0.0

    def start(self) -> None:
        self.started = True
        self._wall0 = time.perf_counter()
        self._cpu0 = time.process_time()

    def stop(self) -> None:
        self.wall = time.perf_counter() - self._wall0
        self.cpu = time.process_time() - self._cpu0


@dataclass
class Phase:
    impl: str
    phase: str
    round: int
    messages: int
    seconds: float
    cpu_seconds: float
    foreign_load: float | None = None

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    @property
    def cpu_us_per_message(self) -> float:
        """Client CPU (this process, all threads) per message, in microseconds."""
        return self.cpu_seconds / self.messages * 1e6


class ForeignLoad:
    """How busy the machine was with work other than this process and the broker.

    From /proc: all CPUs' busy time minus this process's and the broker VM's, as a share of the
    machine (1.0 = every CPU busy with other work). A phase measured while other work ran is
    slower for reasons that are not the client's.
    """

    def __init__(self, broker_pid: int | None) -> None:
        self.broker_pid = broker_pid
        self._start = self._sample()

    def _sample(self) -> tuple[int, int, int]:
        try:
            with open("/proc/stat") as f:
                values = [int(v) for v in f.readline().split()[1:9]]
            busy = sum(values) - values[3] - values[4]
            own = _process_jiffies("self") + (
                _process_jiffies(str(self.broker_pid)) if self.broker_pid else 0
            )
            return busy, sum(values), own
        except (OSError, ValueError):
            return 0, 0, 0

    def share(self) -> float | None:
        busy0, total0, own0 = self._start
        busy1, total1, own1 = self._sample()
        if total1 <= total0:
            return None
        return max(0.0, (busy1 - busy0) - (own1 - own0)) / (total1 - total0)


def _process_jiffies(pid: str) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime


BROKER_PID: int | None = None
"""The broker VM's pid, for ``ForeignLoad`` (set once the node runs)."""


# haclient ---------------------------------------------------------------------------------------


def haclient_config() -> EngineConfig:
    auth = ClientAuth(USER, PASSWORD, allow_insecure=True)
    return EngineConfig(container_id=f"bench-{uuid.uuid4().hex[:8]}", auth=auth)


async def haclient_send(port: int, address: str, work: Workload) -> Timer:
    progress = Progress(f"haclient send {address}", work.count)
    async with open_connection(HOST, port, haclient_config()) as conn:
        session = await conn.open_session()
        sender = await conn.open_sender(address, session=session)
        await conn.wait_for_credit(sender)
        with anyio.fail_after(work.timeout):
            clock = Timer()
            clock.start()
            deliveries = []
            if work.codec:
                for body in work.bodies:
                    await conn.wait_for_credit(sender)
                    payload = encode_message(AmqpMessage(body=body, durable=True))
                    deliveries.append(conn.send_nowait(sender, payload))
            else:
                for payload in work.payloads:
                    await conn.wait_for_credit(sender)
                    deliveries.append(conn.send_nowait(sender, payload))
            accepted = 0
            for n, delivery in enumerate(deliveries, 1):
                outcome = await conn.wait_settled(delivery)
                if outcome != Accepted():
                    raise BenchError(f"haclient send: delivery {n} settled with {outcome!r}")
                accepted += 1
                progress.update(n)
            clock.stop()
    progress.close()
    check(accepted == work.count, f"haclient send: {accepted} accepted of {work.count}")
    return clock


async def haclient_receive(port: int, address: str, work: Workload) -> tuple[Timer, list[Any]]:
    progress = Progress(f"haclient receive {address}", work.count)
    half = max(1, work.window // 2)
    got: list[Any] = []
    async with open_connection(HOST, port, haclient_config()) as conn:
        session = await conn.open_session()
        receiver = await conn.open_receiver(address, session=session, credit=work.window)
        clock = Timer()
        with anyio.fail_after(work.timeout):
            while len(got) < work.count:
                message = await conn.receive(receiver)
                if message is None:
                    raise BenchError(f"haclient receive: receiver closed after {len(got)}")
                if not got:
                    clock.start()
                if work.codec:
                    got.append(decode_message(message.payload).body)
                else:
                    got.append(message.payload)
                conn.settle(message, Accepted())
                if len(got) % half == 0:
                    conn.flow(receiver, half)
                    progress.update(len(got))
            clock.stop()
        extra = await conn.receive(receiver, timeout=0.2)
        check(extra is None, "haclient receive: more messages than were sent")
        check(receiver.unsettled == 0, f"haclient receive: {receiver.unsettled} left unsettled")
    progress.close()
    return clock, got


async def haclient_latency(port: int, address: str, payload: bytes, count: int) -> list[float]:
    samples: list[float] = []
    async with open_connection(HOST, port, haclient_config()) as conn:
        session = await conn.open_session()
        sender = await conn.open_sender(address, session=session)
        with anyio.fail_after(60 + count * 0.05):
            for n in range(count + 20):  # the first 20 warm up
                start = time.perf_counter()
                outcome = await conn.send(sender, payload)
                elapsed = time.perf_counter() - start
                if outcome != Accepted():
                    raise BenchError(f"haclient latency: send {n} settled with {outcome!r}")
                if n >= 20:
                    samples.append(elapsed)
    return samples


# proton Container + MessagingHandler -----------------------------------------------------------


def proton_url(port: int) -> str:
    return f"amqp://{HOST}:{port}"


def proton_connect(container: Container, port: int) -> Any:
    return container.connect(
        url=proton_url(port),
        user=USER,
        password=PASSWORD,
        allowed_mechs="PLAIN",
        allow_insecure_mechs=True,
    )


# proton is read as untyped (pyproject.toml): its handler base class is Any to mypy.
class _ProtonBase(MessagingHandler):  # type: ignore[misc]
    def __init__(self, port: int, address: str, work: Workload, label: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.port = port
        self.address = address
        self.work = work
        self.progress = Progress(f"{label} {address}", work.count)
        self.clock = Timer()
        self.error: str | None = None
        self.timer: Any = None
        self.connection: Any = None

    def on_start(self, event: Any) -> None:
        self.connection = proton_connect(event.container, self.port)
        self.timer = event.container.schedule(self.work.timeout, self)
        self.open_link(event.container)

    def open_link(self, container: Container) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        self.progress.close()
        if self.timer is not None:
            self.timer.cancel()
        self.connection.close()

    def fail(self, error: str) -> None:
        if self.error is None:
            self.error = error
        self.finish()

    def on_timer_task(self, event: Any) -> None:
        self.timer = None
        self.fail(f"timed out after {self.work.timeout:g} s")

    def on_transport_error(self, event: Any) -> None:
        condition = event.transport.condition
        self.fail(f"transport error: {condition}")

    def run(self) -> None:
        Container(self).run()
        if self.error is not None:
            raise BenchError(f"{self.progress.label}: {self.error}")


class ProtonSender(_ProtonBase):
    def __init__(self, port: int, address: str, work: Workload) -> None:
        super().__init__(port, address, work, "proton send", prefetch=0)
        self.sent = 0
        self.accepted = 0
        self.settled = 0

    def open_link(self, container: Container) -> None:
        container.create_sender(self.connection, self.address)

    def on_sendable(self, event: Any) -> None:
        if not self.clock.started:
            self.clock.start()
        sender = event.sender
        work = self.work
        while sender.credit > 0 and self.sent < work.count:
            if work.codec:
                sender.send(Message(body=work.bodies[self.sent], durable=True))
            else:
                sender.delivery(str(self.sent + 1))
                sender.stream(work.payloads[self.sent])
                sender.advance()
            self.sent += 1

    def on_settled(self, event: Any) -> None:
        self.settled += 1
        state = event.delivery.remote_state
        if state != ACCEPTED:
            self.fail(f"delivery {self.settled} settled with {state}")
            return
        self.accepted += 1
        self.progress.update(self.accepted)
        if self.accepted == self.work.count:
            self.clock.stop()
            self.finish()

    def measure(self) -> Timer:
        self.run()
        check(self.sent == self.work.count, f"proton send: sent {self.sent} of {self.work.count}")
        check(
            self.accepted == self.settled == self.work.count,
            f"proton send: {self.accepted} accepted, {self.settled} settled of {self.work.count}",
        )
        return self.clock


class ProtonReceiver(_ProtonBase):
    """Accepts each message. Without ``--codec`` it takes the raw bytes, as haclient does."""

    def __init__(self, port: int, address: str, work: Workload) -> None:
        super().__init__(port, address, work, "proton receive", prefetch=work.window)
        self.got: list[Any] = []
        if not work.codec:
            # Our on_delivery takes the bytes instead of proton decoding a Message; the
            # FlowController (the credit window) stays.
            handlers: list[Any] = self.__dict__["handlers"]
            self.handlers = [h for h in handlers if not isinstance(h, IncomingMessageHandler)]

    def open_link(self, container: Container) -> None:
        container.create_receiver(self.connection, self.address)

    def _received(self, value: Any) -> None:
        if not self.got:
            self.clock.start()
        self.got.append(value)
        n = len(self.got)
        self.progress.update(n)
        if n == self.work.count:
            self.clock.stop()
            # Look for a message too many for a moment, then close.
            self.timer.cancel()
            self.timer = None
            self._container.schedule(0.2, _Call(self.finish))

    def on_start(self, event: Any) -> None:
        self._container = event.container
        super().on_start(event)

    def on_delivery(self, event: Any) -> None:
        dlv = event.delivery
        link = dlv.link
        if self.work.codec or not link.is_receiver:
            return
        if dlv.readable and not dlv.partial:
            data = link.recv(dlv.pending)
            link.advance()
            dlv.update(ACCEPTED)
            dlv.settle()
            self._received(data)

    def on_message(self, event: Any) -> None:  # --codec only; auto_accept accepts it
        self._received(event.message.body)

    def measure(self) -> tuple[Timer, list[Any]]:
        self.run()
        return self.clock, self.got


class _Call:
    """A container timer handler that calls a function."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.fn = fn

    def on_timer_task(self, event: Any) -> None:
        self.fn()


# proton is read as untyped (pyproject.toml): its handler base class is Any to mypy.
class ProtonLatency(MessagingHandler):  # type: ignore[misc]
    """Send one message, wait for its settlement, send the next (proton's Container)."""

    def __init__(self, port: int, address: str, count: int) -> None:
        super().__init__(prefetch=0)
        self.port = port
        self.address = address
        self.count = count
        self.samples: list[float] = []
        self.done = 0
        self.start = 0.0
        self.error: str | None = None
        self.connection: Any = None
        self.waiting = False

    def on_start(self, event: Any) -> None:
        self.connection = proton_connect(event.container, self.port)
        event.container.create_sender(self.connection, self.address)

    def on_sendable(self, event: Any) -> None:
        if not self.waiting and self.done < self.count + 20:
            self._send(event.sender)

    def _send(self, sender: Any) -> None:
        self.waiting = True
        self.start = time.perf_counter()
        sender.send(Message(body="latency", durable=True))

    def on_settled(self, event: Any) -> None:
        elapsed = time.perf_counter() - self.start
        self.waiting = False
        if event.delivery.remote_state != ACCEPTED:
            self.error = f"send {self.done} settled with {event.delivery.remote_state}"
            self.connection.close()
            return
        if self.done >= 20:
            self.samples.append(elapsed)
        self.done += 1
        if self.done < self.count + 20:
            if event.link.credit > 0:
                self._send(event.link)
        else:
            self.connection.close()

    def measure(self) -> list[float]:
        Container(self).run()
        if self.error:
            raise BenchError(f"proton latency: {self.error}")
        check(len(self.samples) == self.count, "proton latency: wrong sample count")
        return self.samples


def proton_blocking_latency(port: int, address: str, count: int) -> list[float]:
    samples: list[float] = []
    conn = BlockingConnection(
        proton_url(port),
        timeout=30,
        user=USER,
        password=PASSWORD,
        allowed_mechs="PLAIN",
        allow_insecure_mechs=True,
    )
    try:
        sender = conn.create_sender(address)
        for n in range(count + 20):
            start = time.perf_counter()
            delivery = sender.send(Message(body="latency", durable=True))
            elapsed = time.perf_counter() - start
            if delivery.remote_state != ACCEPTED:
                raise BenchError(f"proton blocking latency: send {n} got {delivery.remote_state}")
            if n >= 20:
                samples.append(elapsed)
    finally:
        conn.close()
    return samples


def assert_queue_empty(port: int, address: str, impl: str) -> None:
    """After a receive phase: nothing is left (every accept reached the broker)."""
    conn = BlockingConnection(
        proton_url(port),
        timeout=10,
        user=USER,
        password=PASSWORD,
        allowed_mechs="PLAIN",
        allow_insecure_mechs=True,
    )
    try:
        receiver = conn.create_receiver(address, credit=10)
        try:
            receiver.receive(timeout=0.5)
        except proton.Timeout:
            return
        raise BenchError(f"{impl}: queue {address} still holds messages after the receive phase")
    finally:
        conn.close()


# raw proton engine over a blocking socket --------------------------------------------------------


class RawClient:
    """proton's Connection/Transport/Collector pumped by a blocking socket: the minimal loop."""

    def __init__(self, port: int, timeout: float) -> None:
        self.connection = Connection()
        self.connection.container = f"bench-raw-{uuid.uuid4().hex[:8]}"
        self.connection.user = USER
        self.connection.password = PASSWORD
        self.transport = Transport()
        sasl = self.transport.sasl()
        sasl.allowed_mechs("PLAIN")
        sasl.allow_insecure_mechs = True
        self.transport.bind(self.connection)
        self.collector = Collector()
        self.connection.collect(self.collector)
        self.sock = socket.create_connection((HOST, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.settimeout(timeout)
        self.deadline = time.monotonic() + timeout
        self.closed = False
        self.connection.open()
        self.session = self.connection.session()
        self.session.open()

    def flush(self) -> None:
        transport = self.transport
        while (pending := transport.pending()) > 0:
            self.sock.sendall(transport.peek(pending))
            transport.pop(pending)

    def read(self) -> None:
        if time.monotonic() > self.deadline:
            raise BenchError("raw: timed out")
        data = self.sock.recv(65536)
        transport = self.transport
        if not data:
            transport.close_tail()
            return
        view = memoryview(data)
        while view:
            capacity = transport.capacity()
            if capacity <= 0:
                raise BenchError(f"raw: transport capacity {capacity}")
            transport.push(bytes(view[:capacity]))
            view = view[capacity:]

    def events(self) -> list[Event]:
        out = []
        collector = self.collector
        while (event := collector.peek()) is not None:
            out.append(event)
            if event.type == Event.TRANSPORT_ERROR:
                raise BenchError(f"raw: transport error {self.transport.condition}")
            if event.type == Event.TRANSPORT_CLOSED:
                self.closed = True
            collector.pop()
        return out

    def close(self) -> None:
        self.connection.close()
        try:
            while not self.closed and not self.connection.state & Endpoint.REMOTE_CLOSED:
                self.flush()
                self.read()
                self.events()
            self.flush()
        finally:
            self.sock.close()


def raw_send(port: int, address: str, work: Workload) -> Timer:
    progress = Progress(f"raw send {address}", work.count)
    client = RawClient(port, work.timeout)
    sender = client.session.sender(f"bench-raw-sender-{address}")
    sender.target.address = address
    sender.open()
    sent = accepted = 0
    clock = Timer()
    try:
        while accepted < work.count:
            if sender.credit > 0 and sent < work.count and not clock.started:
                clock.start()
            while sender.credit > 0 and sent < work.count:
                if work.codec:
                    Message(body=work.bodies[sent], durable=True).send(sender, str(sent + 1))
                else:
                    sender.delivery(str(sent + 1))
                    sender.stream(work.payloads[sent])
                    sender.advance()
                sent += 1
            client.flush()
            client.read()
            for event in client.events():
                if event.type == Event.DELIVERY:
                    dlv = event.delivery
                    if dlv.settled:
                        if dlv.remote_state != ACCEPTED:
                            raise BenchError(f"raw send: delivery settled with {dlv.remote_state}")
                        dlv.settle()
                        accepted += 1
                        progress.update(accepted)
            if client.closed:
                raise BenchError(f"raw send: connection closed after {accepted}")
        clock.stop()
    finally:
        progress.close()
        client.close()
    check(sent == accepted == work.count, f"raw send: {sent} sent, {accepted} accepted")
    return clock


def raw_receive(port: int, address: str, work: Workload) -> tuple[Timer, list[Any]]:
    progress = Progress(f"raw receive {address}", work.count)
    client = RawClient(port, work.timeout)
    receiver = client.session.receiver(f"bench-raw-receiver-{address}")
    receiver.source.address = address
    receiver.open()
    receiver.flow(work.window)
    half = max(1, work.window // 2)
    got: list[Any] = []
    clock = Timer()
    try:
        while len(got) < work.count:
            client.flush()
            client.read()
            for event in client.events():
                if event.type != Event.DELIVERY:
                    continue
                dlv = event.delivery
                if dlv.readable and not dlv.partial:
                    if not got:
                        clock.start()
                    data = receiver.recv(dlv.pending)
                    receiver.advance()
                    got.append(_body(data) if work.codec else data)
                    dlv.update(ACCEPTED)
                    dlv.settle()
                    if len(got) % half == 0:
                        receiver.flow(half)
                        progress.update(len(got))
            if client.closed:
                raise BenchError(f"raw receive: connection closed after {len(got)}")
        clock.stop()
    finally:
        progress.close()
        client.close()
    return clock, got


def _body(data: bytes) -> Any:
    message = Message()
    message.decode(data)
    return message.body


def raw_latency(port: int, address: str, payload: bytes, count: int) -> list[float]:
    client = RawClient(port, 60 + count * 0.05)
    sender = client.session.sender(f"bench-raw-latency-{address}")
    sender.target.address = address
    sender.open()
    samples: list[float] = []
    try:
        while sender.credit <= 0:
            client.flush()
            client.read()
            client.events()
        for n in range(count + 20):
            start = time.perf_counter()
            dlv = sender.delivery(str(n + 1))
            sender.stream(payload)
            sender.advance()
            while not dlv.settled:
                client.flush()
                client.read()
                client.events()
                if client.closed:
                    raise BenchError("raw latency: connection closed")
            elapsed = time.perf_counter() - start
            if dlv.remote_state != ACCEPTED:
                raise BenchError(f"raw latency: send {n} settled with {dlv.remote_state}")
            dlv.settle()
            if n >= 20:
                samples.append(elapsed)
    finally:
        client.close()
    return samples


# Orchestration -----------------------------------------------------------------------------------


def run_phase(
    impl: str, phase: str, port: int, address: str, work: Workload
) -> tuple[Timer, list[Any] | None]:
    """Run one phase; return its seconds and, for a receive phase, what was received."""
    if impl == "haclient":
        try:
            if phase == "send":
                return anyio.run(haclient_send, port, address, work), None
            return anyio.run(haclient_receive, port, address, work)
        except TimeoutError as exc:
            raise BenchError(f"haclient {phase}: timed out after {work.timeout:g} s") from exc
    if impl == "proton":
        if phase == "send":
            return ProtonSender(port, address, work).measure(), None
        return ProtonReceiver(port, address, work).measure()
    if impl == "raw":
        if phase == "send":
            return raw_send(port, address, work), None
        return raw_receive(port, address, work)
    raise ValueError(impl)


def measure_phase(impl: str, phase: str, port: int, address: str, work: Workload) -> Timer:
    """Run one phase and check what it received (after the clock stopped)."""
    load = ForeignLoad(BROKER_PID)
    clock, got = run_phase(impl, phase, port, address, work)
    clock.foreign = load.share()
    if got is not None:
        check_received(impl, work, got)
    check(clock.wall > 0, f"{impl} {phase}: the clock did not run")
    return clock


def percentile(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return ordered[index]


@dataclass
class Results:
    config: dict[str, Any]
    machine: dict[str, Any]
    phases: list[Phase] = field(default_factory=list)
    latency: dict[str, dict[str, float]] = field(default_factory=dict)

    def _of(self, impl: str, phase: str | None) -> list[Phase]:
        return [p for p in self.phases if p.impl == impl and phase in (None, p.phase)]

    def _median(self, impl: str, phase: str, attr: str) -> float | None:
        values = [getattr(p, attr) for p in self.phases if p.impl == impl and p.phase == phase]
        return statistics.median(values) if values else None

    def median_rate(self, impl: str, phase: str) -> float | None:
        return self._median(impl, phase, "rate")

    def median_cpu(self, impl: str, phase: str) -> float | None:
        return self._median(impl, phase, "cpu_us_per_message")

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for impl in {p.impl for p in self.phases}:
            out[impl] = {
                f"{ph}_{what}": fn(impl, ph)
                for ph in ("send", "receive")
                for what, fn in (
                    ("msgs_per_s", self.median_rate),
                    ("cpu_us_per_msg", self.median_cpu),
                )
            }
        ratios = {}
        for phase in ("send", "receive"):
            ours = self.median_rate("haclient", phase)
            for other in ("proton", "raw"):
                theirs = self.median_rate(other, phase)
                if ours and theirs:
                    ratios[f"haclient/{other} {phase}"] = ours / theirs
        out["ratios_msgs_per_s"] = ratios
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "machine": self.machine,
            "summary": self.summary(),
            "latency_ms": self.latency,
            "phases": [
                asdict(p) | {"rate": p.rate, "cpu_us_per_message": p.cpu_us_per_message}
                for p in self.phases
            ],
        }

    def table(self) -> str:
        lines = []
        c = self.config
        lines.append(
            f"{c['messages']} messages x {c['repeat']} round(s), payload {c['payload_bytes']} B "
            f"encoded, durable, credit window {c['window']}, codec in loop: {c['codec']}"
        )
        lines.append(
            "msgs/s: median (best) over the rounds; CPU: this process's CPU time per message in "
            "us, median (lowest); other load: highest share of the machine busy with other work"
        )
        lines.append(
            f"{'implementation':<15}{'send msgs/s':>18}{'receive msgs/s':>18}"
            f"{'send CPU us':>15}{'recv CPU us':>15}{'other load':>12}"
        )
        for impl in IMPLS:
            cells = []
            for phase in ("send", "receive"):
                rates = [p.rate for p in self._of(impl, phase)]
                cells.append(
                    f"{statistics.median(rates):,.0f} ({max(rates):,.0f})" if rates else "-"
                )
            for phase in ("send", "receive"):
                cpus = [p.cpu_us_per_message for p in self._of(impl, phase)]
                cells.append(f"{statistics.median(cpus):.1f} ({min(cpus):.1f})" if cpus else "-")
            loads = [p.foreign_load for p in self._of(impl, None) if p.foreign_load is not None]
            if not self._of(impl, None):
                continue
            load = _percent(max(loads)) if loads else "?"
            lines.append(
                f"{impl:<15}{cells[0]:>18}{cells[1]:>18}{cells[2]:>15}{cells[3]:>15}{load:>12}"
            )
        for name, ratio in self.summary()["ratios_msgs_per_s"].items():
            lines.append(f"ratio msgs/s {name:<24}{ratio:>6.2f}")
        if self.latency:
            lines.append("")
            lines.append(
                f"latency: one durable send, wait until settled "
                f"({c['latency_samples']} samples after 20 warm-up)"
            )
            lines.append(f"{'implementation':<18}{'p50 ms':>9}{'p99 ms':>9}{'mean ms':>9}")
            for impl, stats in self.latency.items():
                lines.append(
                    f"{impl:<18}{stats['p50']:>9.3f}{stats['p99']:>9.3f}{stats['mean']:>9.3f}"
                )
        return "\n".join(lines)


def _percent(share: float | None) -> str:
    return "?" if share is None else f"{share:.0%}"


def machine_info() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if "model name" in ln), "")
    except OSError:
        pass
    return {
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "proton": getattr(proton, "VERSION", None) and ".".join(map(str, proton.VERSION)),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "git": _git_state(),
        "anyio": anyio.__version__ if hasattr(anyio, "__version__") else _version("anyio"),
    }


def _git_state() -> str | None:
    """The commit measured, with ``+dirty`` when haclient/ has uncommitted changes."""
    import subprocess

    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "haclient"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("+dirty" if dirty else "")


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


def latency_stats(samples: Sequence[float]) -> dict[str, float]:
    return {
        "p50": percentile(samples, 50) * 1000,
        "p99": percentile(samples, 99) * 1000,
        "mean": statistics.fmean(samples) * 1000,
        "samples": len(samples),
    }


def profile(
    impls: Sequence[str], port: int, run_id: str, work: Workload, top: int, out_dir: str | None
) -> None:
    """Profile one send + receive of each implementation (not timed; cProfile skews times)."""
    for impl in impls:
        address = f"/queue/bench-{run_id}-{impl}-profile"
        profiler = cProfile.Profile()
        profiler.enable()
        run_phase(impl, "send", port, address, work)
        _, got = run_phase(impl, "receive", port, address, work)
        profiler.disable()
        assert got is not None
        check_received(impl, work, got)
        if out_dir:
            path = os.path.join(out_dir, f"profile-{impl}.pstats")
            profiler.dump_stats(path)
            print(f"profile of {impl} written to {path}")
        views: list[tuple[str, str | None]] = [("tottime", None), ("cumulative", None)]
        if impl == "haclient":
            views += [("tottime", "haclient/amqp"), ("cumulative", "haclient/amqp")]
        for key, only in views:
            stream = io.StringIO()
            stats = pstats.Stats(profiler, stream=stream)
            stats.sort_stats(key)
            if only:
                stats.print_stats(only, top)
            else:
                stats.print_stats(top)
            text = stream.getvalue()
            body = text[text.find("   ncalls") :]
            where = f" in {only}" if only else ""
            title = f"send + receive of {work.count}, top {top}{where} by {key}"
            print(f"\n== profile {impl}: {title}")
            print(_short_paths(body.rstrip()))


def _short_paths(text: str) -> str:
    """Paths in a pstats listing relative to the repository or to site-packages."""
    for prefix in sorted({os.getcwd() + os.sep, *_site_dirs()}, key=len, reverse=True):
        text = text.replace(prefix, "")
    return text


def _site_dirs() -> list[str]:
    import site

    return [d + os.sep for d in site.getsitepackages()] + [os.path.dirname(os.__file__) + os.sep]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.throughput",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--messages", type=int, default=20_000, help="messages per phase")
    parser.add_argument("--repeat", type=int, default=2, help="alternating rounds")
    parser.add_argument("--size", type=int, default=32, help="text body length in characters")
    parser.add_argument("--window", type=int, default=500, help="receiver credit window")
    parser.add_argument("--latency", type=int, default=1000, help="sync sends (0: skip)")
    parser.add_argument(
        "--impl",
        action="append",
        choices=IMPLS,
        help="implementation(s) to measure (default: all)",
    )
    parser.add_argument("--codec", action="store_true", help="encode/decode inside the loops")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--profile", action="store_true", help="profile one extra round")
    parser.add_argument("--profile-impl", action="append", choices=IMPLS, help="default haclient")
    parser.add_argument("--profile-top", type=int, default=30)
    parser.add_argument("--profile-dir", help="write the .pstats files here")
    args = parser.parse_args(argv)
    impls: list[str] = args.impl or list(IMPLS)
    if args.messages < 1 or args.repeat < 1:
        parser.error("--messages and --repeat must be positive")

    work = make_workload(args.messages, args.size, args.codec, args.window)
    run_id = uuid.uuid4().hex[:6]
    results = Results(
        config={
            "messages": args.messages,
            "repeat": args.repeat,
            "body_chars": args.size,
            "payload_bytes": len(work.payloads[0]),
            "window": args.window,
            "codec": args.codec,
            "latency_samples": args.latency,
            "impls": impls,
        },
        machine=machine_info(),
    )
    log = sys.stderr
    print("starting a private RabbitMQ node ...", file=log)
    global BROKER_PID
    with RabbitMQNode() as node:
        BROKER_PID = node.vm_pid
        print(f"RabbitMQ ready on port {node.port} in {node.start_seconds:.1f} s", file=log)
        for rnd in range(args.repeat):
            order = impls if rnd % 2 == 0 else list(reversed(impls))
            for impl in order:
                address = f"/queue/bench-{run_id}-{impl}-r{rnd}"
                for phase in ("send", "receive"):
                    clock = measure_phase(impl, phase, node.port, address, work)
                    result = Phase(
                        impl, phase, rnd, work.count, clock.wall, clock.cpu, clock.foreign
                    )
                    results.phases.append(result)
                    print(
                        f"round {rnd + 1} {impl:<9} {phase:<8} {result.rate:>10,.0f} msgs/s "
                        f"({clock.wall:.2f} s, client CPU {result.cpu_us_per_message:.1f} us/msg, "
                        f"other load {_percent(result.foreign_load)})",
                        file=log,
                    )
                assert_queue_empty(node.port, address, impl)
        if args.latency:
            payload = work.payloads[0]
            n = args.latency
            runs: list[tuple[str, Callable[[str], list[float]]]] = []
            if "haclient" in impls:
                runs.append(
                    ("haclient", lambda a: anyio.run(haclient_latency, node.port, a, payload, n))
                )
            if "proton" in impls:
                runs.append(("proton", lambda a: ProtonLatency(node.port, a, n).measure()))
                runs.append(("proton-blocking", lambda a: proton_blocking_latency(node.port, a, n)))
            if "raw" in impls:
                runs.append(("raw", lambda a: raw_latency(node.port, a, payload, n)))
            for name, fn in runs:
                print(f"latency {name} ...", file=log)
                samples = fn(f"/queue/bench-{run_id}-{name}-latency")
                check(len(samples) == n, f"{name} latency: {len(samples)} samples of {n}")
                results.latency[name] = latency_stats(samples)
        if args.profile:
            profile(
                args.profile_impl or ["haclient"],
                node.port,
                run_id,
                work,
                args.profile_top,
                args.profile_dir,
            )
    results.machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print()
    print(
        f"{results.machine['date_utc']}, {results.machine['cpus']} CPUs "
        f"({results.machine['cpu_model']}), Python {results.machine['python']}, "
        f"proton {results.machine['proton']}, haclient {results.machine['git']}, "
        "load average (1/5/15 min) "
        f"{results.machine['load_average_at_start']} at start, "
        f"{results.machine['load_average_at_end']} at end"
    )
    print(results.table())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results.to_json(), f, indent=2)
            f.write("\n")
        print(f"\nresults written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
