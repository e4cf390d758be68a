"""haclient's JMS-style APIs, async (``haclient.aio``) and blocking (``import haclient``), against
python-qpid-proton, same broker, same run.

Run from the repository root::

    .venv/bin/python -m bench.jms --count 5000 --pipelined-count 20000 --rounds 3

One run starts the reference broker (``python -m chaos.broker.cli`` in its own process, on a free
loopback port, stopped by its pid at the end), the reference broker in ActiveMQ mode (the same
with ``--activemq``: receiver settle mode ``second`` granted as ``first``, ``queue://`` prefixes,
as ActiveMQ 5.x's AMQP transport), the reference broker serving TLS only (``reference-tls``:
``--tls-cert``/``--tls-key`` with a certificate for ``localhost`` from a CA made for the run;
haclient connects to ``amqps://localhost:PORT?transport.trustStoreLocation=CA``, proton with an
``SSLDomain`` trusting that CA and checking the name: both verify the certificate; ``--no-tls``
skips it) and, when it is installed, a private RabbitMQ node (``chaos.rabbitmq.RabbitMQNode``).
With both reference brokers, ``tls ...`` lines say what TLS adds to each implementation's CPU
per message and takes from its rate. On each broker, in each round, it measures the async API
(impl ``haclient``), the blocking API (impl ``blocking``: ``haclient.connect``, the same calls
without ``await``, on the process's shared event-loop thread) and proton:

1. sync send: ``MessageProducer.send`` of PERSISTENT text messages (each send returns once the
   broker accepted it) against ``proton.utils.BlockingConnection``'s sender (``send`` waits for
   the settlement). Goal: haclient >= 1.2x BlockingConnection.
2. pipelined send: NON_PERSISTENT sends, then ``producer.flush()`` (every message accepted)
   against a ``proton.reactor.Container`` sender that sends as credit allows and counts
   accepted settlements. Goal: haclient >= 1.5x the Container. The Container sends a bare
   body; the row ``pipelined JMS-shaped`` is the same Container sending messages with the
   sections of haclient's (message-id, address, creation time, JMS annotations), and the
   ``like for like`` line gives each API's pipelined rate over it.
3. receive with each acknowledge mode (AUTO; CLIENT acknowledging every 100; DUPS_OK;
   TRANSACTED committing every 100; NO_ACK) against ``BlockingConnection.create_receiver(addr,
   credit=prefetch)`` + ``receive()`` + ``accept()``. Goals: AUTO (acknowledgements
   confirmed by the broker) >= 0.9x haclient's own sync send rate on the same broker, and
   <= 150 us of this process's CPU per message. ``receive CLIENT each`` acknowledges every
   message (``message.acknowledge()``, one round trip each).

The blocking API runs sync send, pipelined send, receive AUTO and receive CLIENT each. Its goals,
on each broker: sync send >= 1.2x ``BlockingConnection``; pipelined send >= 1.5x the
``Container``; receive AUTO >= 0.9x its own sync send; CPU per sync send <= 1.15x the async API's.

Every phase first moves ``--warmup`` messages on the same link (not timed), then times
``--count`` (``--pipelined-count`` for the pipelined sends) more; the queues for the receive
phases are filled beforehand (not timed), and the send phases' queues are emptied afterwards
(not timed; what they held is checked, in order). Each round uses new queue names; the order
of the implementations rotates from round to round; each timed interval starts after a full
garbage collection (``Clock.start``). The brokers are measured one at a time, each stopped
before the next starts. The table shows the median over ``--rounds`` rounds.
Every phase checks itself (all accepted; every message received once, in order, with its text;
the queue empty afterwards) and stops the run with ``BenchError`` otherwise.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import anyio
import proton
import trustme
from proton import Message as ProtonMessage
from proton import SSLDomain, byte, symbol
from proton.handlers import MessagingHandler
from proton.reactor import Container
from proton.utils import BlockingConnection

import haclient
import haclient.aio as aio
from bench.broker import ActiveMQModeBroker, BrokerProcess, TlsBroker, broker_cpu
from bench.throughput import HOST, PASSWORD, USER, BenchError, check, machine_info
from chaos.rabbitmq import RabbitMQNode
from haclient.destination import Queue
from haclient.errors import NotImplementedByBrokerError
from haclient.message import DeliveryMode, TextMessage
from haclient.modes import AckMode
from haclient.sync import Connection

T = TypeVar("T")

REFERENCE = "reference"
ACTIVEMQ_MODE = "activemq-mode"
REFERENCE_TLS = "reference-tls"
TLS_HOST = "localhost"
"""The name the TLS target's certificate is for, and both clients connect to (and check)."""
RABBITMQ = "rabbitmq"
HACLIENT = "haclient"
"""The async API, ``haclient.aio``."""
BLOCKING = "blocking"
"""The blocking API, ``import haclient``."""
PROTON = "proton"
IMPLS = (HACLIENT, BLOCKING, PROTON)
ACK_EVERY = 100


@dataclass(frozen=True)
class Receive:
    """A receive phase: its acknowledge mode, how often the application acknowledges (CLIENT:
    ``message.acknowledge()``) or commits (TRANSACTED), 0 for never, and whether the blocking
    API runs it too."""

    mode: AckMode
    every: int = 0
    blocking: bool = False

    @property
    def test(self) -> str:
        return f"receive {self.mode.name}" + (" each" if self.every == 1 else "")

    def due(self, n: int, message: Any, session: Any) -> Callable[[], Any] | None:
        """What to call after the ``n``-th message (from 1): ``message.acknowledge`` (CLIENT)
        or ``session.commit`` (TRANSACTED) every ``every`` messages, else None. Both APIs
        have these names; the async caller awaits what the call returns."""
        if not self.every or n % self.every:
            return None
        action: Callable[[], Any] = (
            message.acknowledge if self.mode is AckMode.CLIENT else session.commit
        )
        return action

    def last(self, total: int, session: Any) -> Callable[[], Any] | None:
        """What to call after the last of ``total`` messages, for those after the last
        ``due`` call (``session.acknowledge`` or ``session.commit``), else None."""
        if not self.every or total % self.every == 0:
            return None
        action: Callable[[], Any] = (
            session.acknowledge if self.mode is AckMode.CLIENT else session.commit
        )
        return action


RECEIVES = (
    Receive(AckMode.AUTO, blocking=True),
    Receive(AckMode.CLIENT, ACK_EVERY),
    Receive(AckMode.CLIENT, 1, blocking=True),
    Receive(AckMode.DUPS_OK),
    Receive(AckMode.TRANSACTED, ACK_EVERY),
    Receive(AckMode.NO_ACK),
)
SYNC_SEND = "sync send"
PIPELINED_SEND = "pipelined send"
PIPELINED_JMS = "pipelined JMS-shaped"
"""The Container sending messages shaped as haclient's (``ProtonJmsShapedSender``): the
like-for-like reference for the pipelined send (measured for proton only)."""
RECEIVE_AUTO = RECEIVES[0].test
TESTS = (SYNC_SEND, PIPELINED_SEND, *(r.test for r in RECEIVES))
TABLE_TESTS = (SYNC_SEND, PIPELINED_SEND, PIPELINED_JMS, *(r.test for r in RECEIVES))
PIPELINED_GOAL = 1.5
"""Pipelined send: haclient at least this many times proton's ``Container``."""
SYNC_SEND_GOAL = 1.2
"""Sync send: haclient at least this many times proton's ``BlockingConnection``."""
AUTO_OVER_SYNC_GOAL = 0.9
"""Receive AUTO: at least this share of haclient's own sync send rate on the same broker."""
AUTO_CPU_GOAL_US = 150.0
"""Receive AUTO: at most this much of this process's CPU per message (us)."""
BLOCKING_CPU_GOAL = 1.15
"""Sync send: the blocking API's CPU per message at most this many times the async API's."""
EMPTY_WAIT = 0.3
WATCHDOG = "bench-jms-watchdog"
"""The name of the thread that closes a blocking phase's connection when it takes too long."""


# Brokers and workload ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A running broker: where it listens, how raw proton names a queue there and, when it
    serves TLS, the CA file (PEM) that signed its certificate."""

    name: str
    port: int
    pid: int | None
    queue_prefix: str
    ca: str | None = None

    @property
    def url(self) -> str:
        """haclient's URL: ``amqps://localhost`` trusting ``ca`` when the broker serves TLS."""
        if self.ca is None:
            return self.proton_url
        return f"{self.proton_url}?transport.trustStoreLocation={self.ca}"

    @property
    def proton_url(self) -> str:
        """proton's URL: the TLS options go in ``ssl_domain()``."""
        if self.ca is None:
            return f"amqp://{HOST}:{self.port}"
        return f"amqps://{TLS_HOST}:{self.port}"

    def ssl_domain(self) -> SSLDomain | None:
        """proton's TLS client side for this broker (None: plain AMQP): trusts ``ca`` only and
        checks the certificate's name, as haclient does."""
        if self.ca is None:
            return None
        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        domain.set_trusted_ca_db(self.ca)
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
        return domain

    def proton_address(self, queue: str) -> str:
        """haclient applies the prefix itself (``Queue(name)``); raw proton needs it spelt out."""
        return self.queue_prefix + queue


@dataclass(frozen=True)
class Settings:
    count: int
    pipelined_count: int
    warmup: int
    prefetch: int
    size: int
    timeout: float

    def bodies(self, count: int) -> list[str]:
        """``warmup + count`` distinct text bodies of ``size`` characters."""
        out = []
        for n in range(self.warmup + count):
            head = f"m-{n:08d}-"
            out.append(head + "x" * max(0, self.size - len(head)))
        return out


class Clock:
    """Wall-clock and process CPU time of one timed interval, and the broker's CPU time in it
    (``broker_pid``)."""

    def __init__(self, broker_pid: int | None = None) -> None:
        self.wall = self.cpu = self.broker_cpu = 0.0
        self._wall0 = self._cpu0 = self._broker0 = 0.0
        self._broker_pid = broker_pid

    def start(self) -> None:
        """Start timing, after a full garbage collection (not timed): the process keeps the
        garbage of every phase before, of both implementations, and a full collection that
        falls inside a phase walks all of it (0.6-0.8 s at 2 million objects late in a run,
        doubling that phase's CPU per message); each phase pays for its own garbage only."""
        gc.collect()
        self._broker0 = broker_cpu(self._broker_pid) or 0.0
        self._wall0 = time.perf_counter()
        self._cpu0 = time.process_time()

    def stop(self) -> None:
        self.wall = time.perf_counter() - self._wall0
        self.cpu = time.process_time() - self._cpu0
        self.broker_cpu = (broker_cpu(self._broker_pid) or 0.0) - self._broker0


@dataclass
class Measurement:
    broker: str
    test: str
    impl: str
    round: int
    messages: int
    seconds: float
    cpu_seconds: float
    ack_confirmation: str | None = None
    broker_cpu_seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    @property
    def cpu_us_per_message(self) -> float:
        return self.cpu_seconds / self.messages * 1e6

    @property
    def broker_cpu_us_per_message(self) -> float:
        return self.broker_cpu_seconds / self.messages * 1e6


# haclient.aio ------------------------------------------------------------------------------------


TRACING: dict[str, Any] = {}
"""``--tracing``: the keyword that makes haclient's connections trace (empty: they do not)."""


async def _connect(target: Target, **options: Any) -> aio.Connection:
    return await aio.connect(
        target.url,
        client_id=f"bench-jms-{uuid.uuid4().hex[:8]}",
        username=USER,
        password=PASSWORD,
        **TRACING,
        **options,
    )


async def ha_send(
    target: Target, queue: str, bodies: Sequence[str], warmup: int, mode: DeliveryMode
) -> Clock:
    """PERSISTENT: each ``send`` waits for the broker's accept; NON_PERSISTENT: ``flush()`` at
    the end waits for all of them."""
    clock = Clock(target.pid)
    async with (
        await _connect(target) as conn,
        await conn.create_session(AckMode.AUTO) as session,
    ):
        producer = await session.create_producer(Queue(queue))
        producer.delivery_mode = mode
        for body in bodies[:warmup]:
            await producer.send(TextMessage(body))
        await producer.flush()
        clock.start()
        for body in bodies[warmup:]:
            await producer.send(TextMessage(body))
        await producer.flush()
        clock.stop()
        await producer.close()
    return clock


async def ha_fill(target: Target, queue: str, bodies: Sequence[str]) -> None:
    """Fill a queue for a receive phase (NON_PERSISTENT, pipelined, not timed)."""
    async with (
        await _connect(target) as conn,
        await conn.create_session(AckMode.AUTO) as session,
    ):
        producer = await session.create_producer(Queue(queue))
        producer.delivery_mode = DeliveryMode.NON_PERSISTENT
        for body in bodies:
            await producer.send(TextMessage(body))
        await producer.flush()
        await producer.close()


async def ha_drain(target: Target, queue: str, bodies: Sequence[str], timeout: float) -> None:
    """Take every message of a send phase off its queue (NO_ACK, not timed) and check that
    they are ``bodies``, in order: the broker then holds no more than each phase left it."""
    async with await _connect(target, prefetch=1000) as conn:
        await conn.start()
        async with await conn.create_session(AckMode.NO_ACK) as session:
            consumer = await session.create_consumer(Queue(queue))
            with anyio.fail_after(timeout):
                for n, body in enumerate(bodies):
                    message = await consumer.receive()
                    text = getattr(message, "text", None)
                    check(text == body, f"{queue}: message {n} is {text!r}, sent {body!r}")


async def ha_receive(
    target: Target, queue: str, settings: Settings, total: int, receive: Receive
) -> tuple[Clock, list[str | None], str]:
    """Receive ``total`` messages as ``receive`` says; the clock runs after the warm-up, up to
    the last message handed out and acknowledged as the mode says (CLIENT and TRANSACTED: the
    last ``acknowledge()``/``commit()`` included; DUPS_OK: its lazy flush is not)."""
    clock = Clock(target.pid)
    texts: list[str | None] = []
    label = f"haclient {receive.test}"
    async with await _connect(target, prefetch=settings.prefetch) as conn:
        await conn.start()
        async with await conn.create_session(receive.mode) as session:
            consumer = await session.create_consumer(Queue(queue))
            with anyio.fail_after(settings.timeout):
                for n in range(1, total + 1):
                    if n == settings.warmup + 1:
                        clock.start()
                    message = await consumer.receive()
                    if message is None:
                        raise BenchError(f"{label}: closed after {n - 1}")
                    texts.append(message.text)
                    if call := receive.due(n, message, session):
                        await call()
                if call := receive.last(total, session):
                    await call()
                clock.stop()
            confirmation = session.ack_confirmation.value
            extra = await consumer.receive(timeout=0.2)
            check(extra is None, f"{label}: more messages than were sent")
            await consumer.close()
    return clock, texts, confirmation


def run_async(fn: Callable[[], Awaitable[T]]) -> T:
    return anyio.run(fn, backend="asyncio")


# The blocking API (import haclient) -------------------------------------------------------------
# The same phases as the async ones above, call for call, without ``await``; a watchdog closes
# the connection if a phase outlives the timeout (a blocked call then returns or raises).


@contextmanager
def _blocking_connection(target: Target, timeout: float, **options: Any) -> Iterator[Connection]:
    conn = haclient.connect(
        target.url,
        client_id=f"bench-jms-{uuid.uuid4().hex[:8]}",
        username=USER,
        password=PASSWORD,
        **TRACING,
        **options,
    )
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        conn.close()

    watchdog = threading.Timer(timeout, expire)
    watchdog.name, watchdog.daemon = WATCHDOG, True
    watchdog.start()
    try:
        with conn:
            yield conn
    finally:
        watchdog.cancel()
        watchdog.join()
        if expired.is_set():  # what the phase raised (the closed connection) says less
            raise BenchError(f"{target.name}: a blocking phase outlived {timeout:g} s")


def bl_send(
    target: Target,
    queue: str,
    bodies: Sequence[str],
    warmup: int,
    mode: DeliveryMode,
    timeout: float,
    **options: Any,
) -> Clock:
    """``ha_send`` through the blocking API (``options``: ``haclient.connect``'s)."""
    clock = Clock(target.pid)
    with (
        _blocking_connection(target, timeout, **options) as conn,
        conn.create_session(AckMode.AUTO) as session,
    ):
        producer = session.create_producer(Queue(queue))
        producer.delivery_mode = mode
        for body in bodies[:warmup]:
            producer.send(TextMessage(body))
        producer.flush()
        clock.start()
        for body in bodies[warmup:]:
            producer.send(TextMessage(body))
        producer.flush()
        clock.stop()
        producer.close()
    return clock


def bl_receive(
    target: Target,
    queue: str,
    settings: Settings,
    total: int,
    receive: Receive,
    **options: Any,
) -> tuple[Clock, list[str | None], str]:
    """``ha_receive`` through the blocking API (``options``: ``haclient.connect``'s)."""
    clock = Clock(target.pid)
    texts: list[str | None] = []
    label = f"blocking {receive.test}"
    options.setdefault("prefetch", settings.prefetch)
    with _blocking_connection(target, settings.timeout, **options) as conn:
        conn.start()
        with conn.create_session(receive.mode) as session:
            consumer = session.create_consumer(Queue(queue))
            for n in range(1, total + 1):
                if n == settings.warmup + 1:
                    clock.start()
                message = consumer.receive()
                if message is None:
                    raise BenchError(f"{label}: closed after {n - 1}")
                texts.append(message.text)
                if call := receive.due(n, message, session):
                    call()
            if call := receive.last(total, session):
                call()
            clock.stop()
            confirmation = session.ack_confirmation.value
            extra = consumer.receive(timeout=0.2)
            check(extra is None, f"{label}: more messages than were sent")
            consumer.close()
    return clock, texts, confirmation


# proton ------------------------------------------------------------------------------------------


def _blocking(target: Target) -> BlockingConnection:
    return BlockingConnection(
        target.proton_url,
        ssl_domain=target.ssl_domain(),
        timeout=60,
        user=USER,
        password=PASSWORD,
        allowed_mechs="PLAIN",
        allow_insecure_mechs=True,
    )


def proton_sync_send(target: Target, address: str, bodies: Sequence[str], warmup: int) -> Clock:
    """``BlockingConnection`` sender: each ``send`` returns once the broker settled it."""
    clock = Clock(target.pid)
    conn = _blocking(target)
    try:
        sender = conn.create_sender(address)
        for n, body in enumerate(bodies):
            if n == warmup:
                clock.start()
            delivery = sender.send(ProtonMessage(body=body, durable=True))
            if delivery.remote_state != proton.Delivery.ACCEPTED:
                raise BenchError(f"proton sync send: message {n} settled {delivery.remote_state}")
        clock.stop()
    finally:
        conn.close()
    return clock


# proton is read as untyped (pyproject.toml): its handler base class is Any to mypy.
class ProtonPipelinedSender(MessagingHandler):  # type: ignore[misc]
    """A ``Container`` sender: sends as credit allows, counts accepted. The warm-up messages
    are sent and accepted first; then the clock starts and the rest go."""

    def __init__(self, target: Target, address: str, bodies: Sequence[str], warmup: int) -> None:
        super().__init__(prefetch=0)
        self.target = target
        self.address = address
        self.bodies = bodies
        self.warmup = warmup
        self.limit = warmup
        self.sent = self.accepted = 0
        self.clock = Clock(target.pid)
        self.error: str | None = None
        self.connection: Any = None

    def on_start(self, event: Any) -> None:
        self.connection = event.container.connect(
            url=self.target.proton_url,
            ssl_domain=self.target.ssl_domain(),
            user=USER,
            password=PASSWORD,
            allowed_mechs="PLAIN",
            allow_insecure_mechs=True,
        )
        event.container.create_sender(self.connection, self.address)
        if self.warmup == 0:
            self.limit = len(self.bodies)
            self.clock.start()

    def on_sendable(self, event: Any) -> None:
        self._send(event.sender)

    def _send(self, sender: Any) -> None:
        while sender.credit > 0 and self.sent < self.limit:
            sender.send(ProtonMessage(body=self.bodies[self.sent], durable=False))
            self.sent += 1

    def on_accepted(self, event: Any) -> None:
        self.accepted += 1
        if self.accepted == self.warmup and self.limit == self.warmup:
            self.limit = len(self.bodies)
            self.clock.start()
            self._send(event.link)
        elif self.accepted == len(self.bodies):
            self.clock.stop()
            event.connection.close()

    def on_rejected(self, event: Any) -> None:
        self._fail("a message was rejected")

    def on_released(self, event: Any) -> None:
        self._fail("a message was released")

    def on_transport_error(self, event: Any) -> None:
        self._fail(f"transport error: {event.transport.condition}")

    def _fail(self, error: str) -> None:
        self.error = self.error or error
        if self.connection is not None:
            self.connection.close()

    def measure(self) -> Clock:
        Container(self).run()
        if self.error is not None:
            raise BenchError(f"proton pipelined send: {self.error}")
        check(
            self.accepted == len(self.bodies),
            f"proton pipelined send: {self.accepted} accepted of {len(self.bodies)}",
        )
        return self.clock


class ProtonJmsShapedSender(ProtonPipelinedSender):
    """The ``Container`` sender of ``ProtonPipelinedSender``, each message carrying the sections
    haclient's NON_PERSISTENT ``TextMessage`` carries (a message-id of the same length, the
    address, the creation time, the JMS type and destination annotations): what a broker does
    with the same messages from another client, the like-for-like reference for the pipelined
    send. A bare body costs RabbitMQ about half the CPU of haclient's message."""

    _ANNOTATIONS: ClassVar[dict[Any, Any]] = {
        symbol("x-opt-jms-msg-type"): byte(5),  # TextMessage
        symbol("x-opt-jms-dest"): byte(0),  # a queue
    }

    def _send(self, sender: Any) -> None:
        prefix = f"ID:bench-jms-{os.getpid():08x}:{uuid.uuid4().hex}:2:"
        while sender.credit > 0 and self.sent < self.limit:
            self.sent += 1
            message = ProtonMessage(
                body=self.bodies[self.sent - 1],
                durable=False,
                id=f"{prefix}{self.sent}",
                address=self.address,
                creation_time=time.time(),
                annotations=self._ANNOTATIONS,
            )
            sender.send(message)


def proton_receive(
    target: Target, address: str, settings: Settings, total: int
) -> tuple[Clock, list[str]]:
    """``BlockingConnection`` receiver with ``credit=prefetch``: ``receive()`` + ``accept()``."""
    clock = Clock(target.pid)
    texts: list[str] = []
    conn = _blocking(target)
    try:
        receiver = conn.create_receiver(address, credit=settings.prefetch)
        for n in range(total):
            if n == settings.warmup:
                clock.start()
            message = receiver.receive(timeout=settings.timeout)
            texts.append(message.body)
            receiver.accept()
        clock.stop()
        try:
            receiver.receive(timeout=0.2)
        except proton.Timeout:
            pass
        else:
            raise BenchError("proton receive: more messages than were sent")
    finally:
        conn.close()
    return clock, texts


def assert_queue_empty(target: Target, address: str, label: str) -> None:
    """A fresh receiver finds nothing: every acknowledgement reached the broker."""
    conn = _blocking(target)
    try:
        receiver = conn.create_receiver(address, credit=1)
        try:
            message = receiver.receive(timeout=EMPTY_WAIT)
        except proton.Timeout:
            return
        receiver.release()
        raise BenchError(f"{label}: {message.body!r} still on the queue after the phase")
    finally:
        conn.close()


# One round on one broker -------------------------------------------------------------------------


class Runner:
    def __init__(self, settings: Settings, run_id: str, impls: Sequence[str] = IMPLS) -> None:
        self.settings = settings
        self.run_id = run_id
        self.impls = tuple(impls)
        self.results: list[Measurement] = []
        self.unsupported: dict[tuple[str, str], str] = {}
        self.sync_bodies = settings.bodies(settings.count)
        self.pipelined_bodies = settings.bodies(settings.pipelined_count)

    def queue(self, target: Target, test: str, impl: str, rnd: int) -> str:
        return f"jms-{self.run_id}-{target.name}-{test.replace(' ', '-')}-{impl}-r{rnd}"

    def record(
        self,
        target: Target,
        test: str,
        impl: str,
        rnd: int,
        messages: int,
        clock: Clock,
        confirmation: str | None = None,
        *,
        quiet: bool = False,
    ) -> None:
        check(clock.wall > 0, f"{target.name} {test} {impl}: the clock did not run")
        m = Measurement(
            target.name,
            test,
            impl,
            rnd,
            messages,
            clock.wall,
            clock.cpu,
            confirmation,
            clock.broker_cpu,
        )
        self.results.append(m)
        if quiet:
            return
        extra = f", acks {confirmation}" if confirmation else ""
        print(
            f"round {rnd + 1} {target.name:<13} {test:<19} {impl:<8} {m.rate:>9,.0f} msgs/s "
            f"({m.seconds:.2f} s, CPU {m.cpu_us_per_message:.0f} us/msg{extra})",
            file=sys.stderr,
        )

    def check_texts(self, label: str, got: Sequence[str | None], total: int) -> None:
        expected = self.sync_bodies[:total]
        check(len(got) == total, f"{label}: got {len(got)} messages, sent {total}")
        if list(got) != expected:
            first = next(i for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b)
            raise BenchError(
                f"{label}: message {first} is {got[first]!r}, sent {expected[first]!r}"
            )

    def round(self, target: Target, rnd: int) -> None:
        shift = rnd % len(self.impls)
        order = self.impls[shift:] + self.impls[:shift]
        for impl in order:
            self.sync_send(target, impl, rnd)
        for impl in order:
            self.pipelined_send(target, impl, rnd)
        receivers: list[tuple[str, Receive | None]] = [
            (impl, receive)
            for receive in RECEIVES
            for impl in order
            if impl == HACLIENT or (impl == BLOCKING and receive.blocking)
        ]
        receivers.append((PROTON, None))  # proton's one receiver, the baseline of every mode
        if rnd % 2:
            receivers.reverse()
        for impl, receive in receivers:
            self.receive(target, impl, receive, rnd)

    def send(
        self, impl: str, target: Target, queue: str, bodies: Sequence[str], mode: DeliveryMode
    ) -> Clock:
        """One haclient send phase, async or blocking."""
        s = self.settings
        if impl == BLOCKING:
            return bl_send(target, queue, bodies, s.warmup, mode, s.timeout)
        return run_async(lambda: ha_send(target, queue, bodies, s.warmup, mode))

    def sync_send(self, target: Target, impl: str, rnd: int) -> None:
        s = self.settings
        queue = self.queue(target, "sync", impl, rnd)
        if impl == PROTON:
            clock = proton_sync_send(
                target, target.proton_address(queue), self.sync_bodies, s.warmup
            )
        else:
            clock = self.send(impl, target, queue, self.sync_bodies, DeliveryMode.PERSISTENT)
        self.record(target, SYNC_SEND, impl, rnd, s.count, clock)
        self.drain(target, queue, self.sync_bodies)

    def pipelined_send(self, target: Target, impl: str, rnd: int) -> None:
        s = self.settings
        queue = self.queue(target, "pipelined", impl, rnd)
        if impl == PROTON:
            sender = ProtonPipelinedSender(
                target, target.proton_address(queue), self.pipelined_bodies, s.warmup
            )
            clock = sender.measure()
        else:
            bodies = self.pipelined_bodies
            clock = self.send(impl, target, queue, bodies, DeliveryMode.NON_PERSISTENT)
        self.record(target, PIPELINED_SEND, impl, rnd, s.pipelined_count, clock)
        self.drain(target, queue, self.pipelined_bodies)
        if impl == PROTON:  # the like-for-like reference, right after the Container's own
            queue = self.queue(target, "pipelined-jms", impl, rnd)
            shaped = ProtonJmsShapedSender(
                target, target.proton_address(queue), self.pipelined_bodies, s.warmup
            )
            self.record(target, PIPELINED_JMS, impl, rnd, s.pipelined_count, shaped.measure())
            self.drain(target, queue, self.pipelined_bodies)

    def drain(self, target: Target, queue: str, bodies: Sequence[str]) -> None:
        """Empty a send phase's queue (checking what it held): a broker holding the messages
        of every phase before gets slower round by round (RabbitMQ's AUTO by a fifth over
        five rounds), which would fall on the later phases only."""
        timeout = self.settings.timeout
        run_async(lambda: ha_drain(target, queue, bodies, timeout))
        assert_queue_empty(target, target.proton_address(queue), f"{target.name} {queue}")

    def receive(self, target: Target, impl: str, receive: Receive | None, rnd: int) -> None:
        """One receive phase of ``impl``; ``receive`` None: proton's receiver, the baseline
        of every receive test."""
        s = self.settings
        test = "receive" if receive is None else receive.test
        queue = self.queue(target, test, impl, rnd)
        total = s.warmup + s.count
        bodies = self.sync_bodies[:total]
        run_async(lambda: ha_fill(target, queue, bodies))
        label = f"{target.name} {test} {impl}"
        confirmation = None
        texts: Sequence[str | None]
        try:
            if receive is None:
                clock, texts = proton_receive(target, target.proton_address(queue), s, total)
            elif impl == BLOCKING:
                clock, texts, confirmation = bl_receive(target, queue, s, total, receive)
            else:
                clock, texts, confirmation = run_async(
                    lambda: ha_receive(target, queue, s, total, receive)
                )
        except NotImplementedByBrokerError as exc:  # RabbitMQ 3.x: no transactions
            print(f"round {rnd + 1} {label}: not supported: {exc}", file=sys.stderr)
            self.unsupported[(target.name, test)] = str(exc)
            return
        self.check_texts(label, texts, total)
        assert_queue_empty(target, target.proton_address(queue), label)
        if receive is None:
            for other in RECEIVES:
                quiet = other is not RECEIVES[0]
                self.record(target, other.test, PROTON, rnd, s.count, clock, quiet=quiet)
        else:
            self.record(target, test, impl, rnd, s.count, clock, confirmation)


# Results -----------------------------------------------------------------------------------------


def median_rate(results: Sequence[Measurement], broker: str, test: str, impl: str) -> float | None:
    rates = [m.rate for m in results if (m.broker, m.test, m.impl) == (broker, test, impl)]
    return statistics.median(rates) if rates else None


def median_cpu(
    results: Sequence[Measurement], broker: str, test: str, impl: str, *, of_broker: bool = False
) -> float | None:
    """Median CPU per message (us) of this process, or of the broker with ``of_broker``."""
    cpu = [
        m.broker_cpu_us_per_message if of_broker else m.cpu_us_per_message
        for m in results
        if (m.broker, m.test, m.impl) == (broker, test, impl)
    ]
    return statistics.median(cpu) if cpu and all(cpu) else None


def pipelined_ceiling(results: Sequence[Measurement], broker: str) -> dict[str, Any] | None:
    """How fast haclient's messages could go pipelined to ``broker`` on this machine, from CPU.

    The broker's CPU per message bounds the rate on the cores it can use (the reference
    broker: one, a Python process; RabbitMQ: all), and client and broker share this machine's
    cores. What a message costs the broker depends on the message: haclient sends JMS messages
    (annotations, id, address, timestamp: about 170 bytes here) and the Container a bare body
    (45 bytes), and RabbitMQ spends much more on a message past about 70 bytes. So the bound
    uses the broker's CPU on haclient's own messages: with a client that costs nothing it is
    the most *any* client sending those messages can reach; with haclient's CPU, what it can;
    with the blocking API's, what that can, if its two threads (caller and loop, one GIL) took
    turns without a gap.
    """
    ours_broker = median_cpu(results, broker, PIPELINED_SEND, HACLIENT, of_broker=True)
    theirs_broker = median_cpu(results, broker, PIPELINED_SEND, PROTON, of_broker=True)
    container = median_rate(results, broker, PIPELINED_SEND, PROTON)
    ours = median_cpu(results, broker, PIPELINED_SEND, HACLIENT)
    blocking = median_cpu(results, broker, PIPELINED_SEND, BLOCKING)
    if ours_broker is None or theirs_broker is None or not container or ours is None:
        return None
    cores = os.cpu_count() or 1
    broker_cores = cores if broker == RABBITMQ else 1

    def ceiling(client_us: float) -> float:
        return 1e6 / max(ours_broker / broker_cores, client_us, (ours_broker + client_us) / cores)

    return {
        "broker_cpu_us": ours_broker,
        "broker_cpu_us_container": theirs_broker,
        "broker_cores": broker_cores,
        "any_client_msgs_per_s": ceiling(0.0),
        "any_client_over_container": ceiling(0.0) / container,
        "haclient_msgs_per_s": ceiling(ours),
        "haclient_over_container": ceiling(ours) / container,
        "blocking_msgs_per_s": None if blocking is None else ceiling(blocking),
        "blocking_over_container": None if blocking is None else ceiling(blocking) / container,
    }


def ceiling_line(broker: str, c: dict[str, Any]) -> str:
    return (
        f"ceiling {broker}: pipelined, broker CPU {c['broker_cpu_us']:.0f} us per haclient "
        f"message ({c['broker_cpu_us_container']:.0f} per Container message) on "
        f"{c['broker_cores']} core(s): with haclient's messages a client costing nothing could "
        f"reach {c['any_client_msgs_per_s']:,.0f} msgs/s = {c['any_client_over_container']:.2f}x "
        f"Container; at haclient's CPU {c['haclient_msgs_per_s']:,.0f} = "
        f"{c['haclient_over_container']:.2f}x"
        + (
            ""
            if c.get("blocking_msgs_per_s") is None
            else f", at the blocking API's {c['blocking_msgs_per_s']:,.0f} = "
            f"{c['blocking_over_container']:.2f}x"
        )
    )


def like_for_like(results: Sequence[Measurement], broker: str) -> dict[str, Any] | None:
    """The pipelined send against the Container sending the same messages (``PIPELINED_JMS``):
    each API's rate over it, and what the broker spent on a message of each."""
    shaped = median_rate(results, broker, PIPELINED_JMS, PROTON)
    if not shaped:
        return None
    return {
        "container_msgs_per_s": shaped,
        "broker_cpu_us": median_cpu(results, broker, PIPELINED_JMS, PROTON, of_broker=True),
        "bare_broker_cpu_us": median_cpu(results, broker, PIPELINED_SEND, PROTON, of_broker=True),
        "haclient_over_container": _ratio(
            median_rate(results, broker, PIPELINED_SEND, HACLIENT), shaped
        ),
        "blocking_over_container": _ratio(
            median_rate(results, broker, PIPELINED_SEND, BLOCKING), shaped
        ),
    }


def like_for_like_line(broker: str, c: dict[str, Any]) -> str:
    return (
        f"like for like {broker}: pipelined, the Container sending haclient's message shape "
        f"{c['container_msgs_per_s']:,.0f} msgs/s (broker CPU {_fmt(c['broker_cpu_us'])} us a "
        f"message, {_fmt(c['bare_broker_cpu_us'])} for a bare body): haclient "
        f"{_fmt(c['haclient_over_container'], '.2f')}x, blocking "
        f"{_fmt(c['blocking_over_container'], '.2f')}x"
    )


def _fmt(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def _confirmation(results: Sequence[Measurement], broker: str, test: str) -> str:
    seen = {
        m.ack_confirmation
        for m in results
        if m.broker == broker and m.test == test and m.impl != PROTON and m.ack_confirmation
    }
    return ",".join(sorted(seen)) or "-"


def _ratio(ours: float | None, theirs: float | None) -> float | None:
    return ours / theirs if ours and theirs else None


def table(
    results: Sequence[Measurement],
    brokers: Sequence[str],
    unsupported: dict[tuple[str, str], str],
) -> tuple[str, dict[str, Any]]:
    lines = [
        "msgs/s: median over the rounds; CPU: this process's CPU per message (us), median;",
        "haclient = the async API (haclient.aio), blocking = the blocking API (import haclient);",
        "ha/pr, bl/pr: msgs/s over proton's; bl-ha: blocking CPU - async CPU per message (us)",
        f"{'broker':<14}{'test':<21}{'haclient':>10}{'blocking':>10}{'proton':>10}"
        f"{'ha/pr':>7}{'bl/pr':>7}{'ha CPU':>8}{'bl CPU':>8}{'pr CPU':>8}{'bl-ha':>7}"
        "  ack confirmation",
    ]
    summary: dict[str, Any] = {}
    for broker in brokers:
        cells: dict[str, Any] = {}
        for test in TABLE_TESTS:
            rate = {impl: median_rate(results, broker, test, impl) for impl in IMPLS}
            cpu = {impl: median_cpu(results, broker, test, impl) for impl in IMPLS}
            if not any(rate.values()):
                continue
            ratio = _ratio(rate[HACLIENT], rate[PROTON])
            blocking_ratio = _ratio(rate[BLOCKING], rate[PROTON])
            blocking_cpu, haclient_cpu = cpu[BLOCKING], cpu[HACLIENT]
            extra_cpu = (
                blocking_cpu - haclient_cpu
                if blocking_cpu is not None and haclient_cpu is not None
                else None
            )
            confirmation = _confirmation(results, broker, test) if "receive" in test else ""
            if (broker, test) in unsupported:
                confirmation = "not supported by the broker"
            cells[test] = {
                "haclient_msgs_per_s": rate[HACLIENT],
                "blocking_msgs_per_s": rate[BLOCKING],
                "proton_msgs_per_s": rate[PROTON],
                "ratio": ratio,
                "blocking_ratio": blocking_ratio,
                "blocking_extra_cpu_us": extra_cpu,
                "ack_confirmation": confirmation or None,
            }
            lines.append(
                f"{broker:<14}{test:<21}{_fmt(rate[HACLIENT]):>10}{_fmt(rate[BLOCKING]):>10}"
                f"{_fmt(rate[PROTON]):>10}{_fmt(ratio, '.2f'):>7}{_fmt(blocking_ratio, '.2f'):>7}"
                f"{_fmt(cpu[HACLIENT]):>8}{_fmt(cpu[BLOCKING]):>8}{_fmt(cpu[PROTON]):>8}"
                f"{_fmt(extra_cpu, '+.0f'):>7}  {confirmation}"
            )
        auto = median_rate(results, broker, RECEIVE_AUTO, HACLIENT)
        for other in ("NO_ACK", "DUPS_OK"):
            rate_other = median_rate(results, broker, f"receive {other}", HACLIENT)
            if auto and rate_other:
                cells[f"auto_over_{other.lower()}"] = auto / rate_other
                lines.append(
                    f"{broker:<14}cost of confirmed acks: AUTO/{other} = {auto / rate_other:.2f}"
                )
        summary[broker] = cells
        lines.append("")
    for broker in brokers:
        summary[broker]["goals"] = goals = broker_goals(results, broker, summary[broker])
        summary[broker]["blocking_goals"] = blocking = blocking_goals(
            results, broker, summary[broker]
        )
        lines.extend(goal_line(broker, goal) for goal in [*goals, *blocking])
    for broker in brokers:
        summary[broker]["pipelined_ceiling"] = ceiling = pipelined_ceiling(results, broker)
        if ceiling is not None:
            lines.append(ceiling_line(broker, ceiling))
        summary[broker]["like_for_like"] = alike = like_for_like(results, broker)
        if alike is not None:
            lines.append(like_for_like_line(broker, alike))
    if REFERENCE in brokers and REFERENCE_TLS in brokers:
        summary[REFERENCE_TLS]["tls_cost"] = cost = tls_cost(results)
        lines.extend(tls_cost_lines(cost))
    return "\n".join(lines), summary


def tls_cost(results: Sequence[Measurement]) -> dict[str, dict[str, dict[str, float | None]]]:
    """What TLS costs each implementation, from the medians of the same run: per send test and
    receive AUTO, this process's CPU per message on ``reference-tls`` minus that on the plain
    ``reference`` broker (us) and the rate over TLS over the plain one."""
    cost: dict[str, dict[str, dict[str, float | None]]] = {}
    for test in (SYNC_SEND, PIPELINED_SEND, RECEIVE_AUTO):
        cost[test] = {}
        for impl in IMPLS:
            plain = median_cpu(results, REFERENCE, test, impl)
            tls = median_cpu(results, REFERENCE_TLS, test, impl)
            cost[test][impl] = {
                "extra_cpu_us": tls - plain if tls is not None and plain is not None else None,
                "rate_ratio": _ratio(
                    median_rate(results, REFERENCE_TLS, test, impl),
                    median_rate(results, REFERENCE, test, impl),
                ),
            }
    return cost


def tls_cost_lines(cost: dict[str, dict[str, dict[str, float | None]]]) -> list[str]:
    """``tls sync send: CPU per message +9 us haclient, ...; msgs/s x0.93 haclient, ...``."""
    lines = []
    for test, impls in cost.items():
        measured = {impl: c for impl, c in impls.items() if c["rate_ratio"] is not None}
        if not measured:
            continue
        cpu = ", ".join(f"{_fmt(c['extra_cpu_us'], '+.0f')} us {i}" for i, c in measured.items())
        rate = ", ".join(f"{_fmt(c['rate_ratio'], '.2f')}x {i}" for i, c in measured.items())
        lines.append(
            f"tls {test}: {REFERENCE_TLS} - {REFERENCE} CPU per message {cpu}; "
            f"msgs/s {REFERENCE_TLS}/{REFERENCE} {rate}"
        )
    return lines


def broker_goals(
    results: Sequence[Measurement], broker: str, cells: dict[str, Any]
) -> list[dict[str, Any]]:
    """The goals for the async API on one broker (see the module docstring), from the
    medians: each with its value and verdict."""
    auto_cpu = median_cpu(results, broker, RECEIVE_AUTO, HACLIENT)
    return [
        *_goals(results, broker, cells, HACLIENT),
        _goal("receive AUTO CPU per message", "<=", AUTO_CPU_GOAL_US, " us", auto_cpu),
    ]


def blocking_goals(
    results: Sequence[Measurement], broker: str, cells: dict[str, Any]
) -> list[dict[str, Any]]:
    """The goals for the blocking API on one broker (none when it was not measured):
    those of the async API, against its own sync send, and its CPU per sync send against the
    async API's."""
    if not any(m.broker == broker and m.impl == BLOCKING for m in results):
        return []
    cpu = _ratio(
        median_cpu(results, broker, SYNC_SEND, BLOCKING),
        median_cpu(results, broker, SYNC_SEND, HACLIENT),
    )
    return [
        *_goals(results, broker, cells, BLOCKING),
        _goal("sync send CPU per message blocking/haclient", "<=", BLOCKING_CPU_GOAL, "x", cpu),
    ]


def _goals(
    results: Sequence[Measurement], broker: str, cells: dict[str, Any], impl: str
) -> list[dict[str, Any]]:
    """The goals the async and the blocking API share: against proton, and AUTO against the
    API's own sync send."""
    key = "ratio" if impl == HACLIENT else "blocking_ratio"
    auto_over_sync = _ratio(
        median_rate(results, broker, RECEIVE_AUTO, impl),
        median_rate(results, broker, SYNC_SEND, impl),
    )
    return [
        _goal(
            f"pipelined send {impl}/Container",
            ">=",
            PIPELINED_GOAL,
            "x",
            cells.get(PIPELINED_SEND, {}).get(key),
        ),
        _goal(
            f"sync send {impl}/BlockingConnection",
            ">=",
            SYNC_SEND_GOAL,
            "x",
            cells.get(SYNC_SEND, {}).get(key),
        ),
        _goal(f"receive AUTO / {impl} sync send", ">=", AUTO_OVER_SYNC_GOAL, "x", auto_over_sync),
    ]


def _goal(name: str, op: str, goal: float, unit: str, value: float | None) -> dict[str, Any]:
    met = None if value is None else (value >= goal if op == ">=" else value <= goal)
    return {"name": name, "op": op, "goal": goal, "unit": unit, "value": value, "met": met}


def goal_line(broker: str, goal: dict[str, Any]) -> str:
    """``goal reference: sync send haclient/BlockingConnection >= 1.2x: 1.06 -> MISSED``."""
    cpu = goal["unit"] == " us"
    target = f"{goal['goal']:g}{goal['unit']}"
    verdict = {None: "-", True: "MET", False: "MISSED"}[goal["met"]]
    value = _fmt(goal["value"], ".0f" if cpu else ".2f")
    return f"goal {broker}: {goal['name']} {goal['op']} {target}: {value} -> {verdict}"


# Profile -----------------------------------------------------------------------------------------


def profile(runner: Runner, target: Target, test: str, impl: str, top: int) -> None:
    """One more phase of ``test`` under cProfile (the receive queue is filled first, outside
    the profile); print the top functions. ``impl`` blocking: the connection gets a private
    event-loop thread (``private_loop=True``), started while ``threading.setprofile`` is set so
    that it profiles itself too, and each thread's profile is printed."""
    s = runner.settings
    queue = runner.queue(target, f"profile-{test}", impl, 0)
    total = s.warmup + s.count
    receive = next((r for r in RECEIVES if r.test == test), None)
    if receive is not None:
        run_async(lambda: ha_fill(target, queue, runner.sync_bodies[:total]))
    bodies = runner.pipelined_bodies if test == PIPELINED_SEND else runner.sync_bodies
    mode = DeliveryMode.NON_PERSISTENT if test == PIPELINED_SEND else DeliveryMode.PERSISTENT

    async def call_async() -> Any:
        if receive is None:
            return await ha_send(target, queue, bodies, s.warmup, mode)
        return await ha_receive(target, queue, s, total, receive)

    def call_blocking() -> Any:
        if receive is None:
            return bl_send(target, queue, bodies, s.warmup, mode, s.timeout, private_loop=True)
        return bl_receive(target, queue, s, total, receive, private_loop=True)

    profilers = {threading.current_thread().name: cProfile.Profile()}

    def profile_new_thread(frame: object, event: str, arg: object) -> None:
        sys.setprofile(None)
        profilers[threading.current_thread().name] = profiler = cProfile.Profile()
        profiler.enable()

    main = profilers[threading.current_thread().name]
    if impl == BLOCKING:
        threading.setprofile(profile_new_thread)
    main.enable()
    try:
        if impl == HACLIENT:
            run_async(call_async)
        else:
            call_blocking()
    finally:
        main.disable()
        threading.setprofile(None)
    for thread, profiler in profilers.items():
        if thread == WATCHDOG:
            continue
        for key in ("tottime", "cumulative"):
            stream = io.StringIO()
            stats = pstats.Stats(profiler, stream=stream)
            stats.sort_stats(key).print_stats(top)
            text = stream.getvalue()
            print(
                f"\n== profile: {impl} {test} on {target.name}, thread {thread}, top {top} by {key}"
            )
            print(text[text.find("   ncalls") :].rstrip())


# Orchestration -----------------------------------------------------------------------------------


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.jms",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--count", type=int, default=5_000, help="messages per sync/receive phase")
    parser.add_argument(
        "--pipelined-count", type=int, default=20_000, help="messages per pipelined send phase"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds (median reported)")
    parser.add_argument("--warmup", type=int, default=200, help="untimed messages first")
    parser.add_argument("--prefetch", type=int, default=1000, help="consumer prefetch / credit")
    parser.add_argument("--size", type=int, default=32, help="text body length in characters")
    rabbit = parser.add_mutually_exclusive_group()
    rabbit.add_argument(
        "--rabbitmq",
        action="store_true",
        default=None,
        help="also measure RabbitMQ (default: when installed)",
    )
    rabbit.add_argument("--no-rabbitmq", dest="rabbitmq", action="store_false")
    parser.add_argument("--no-reference", action="store_true", help="skip the reference broker")
    parser.add_argument(
        "--no-activemq-mode",
        action="store_true",
        help="skip the reference broker in ActiveMQ mode (--activemq)",
    )
    tls = parser.add_mutually_exclusive_group()
    tls.add_argument(
        "--tls",
        action="store_true",
        default=True,
        help=f"measure the reference broker over TLS too, as {REFERENCE_TLS} (the default)",
    )
    tls.add_argument("--no-tls", dest="tls", action="store_false")
    parser.add_argument(
        "--no-blocking", action="store_true", help="skip the blocking API (import haclient)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="haclient's connections trace (an OpenTelemetry SDK provider whose batch "
        "processor drops the spans; bench.tracing compares on, off and before)",
    )
    parser.add_argument(
        "--profile",
        metavar="TEST",
        choices=TESTS,
        help=f"afterwards, one haclient phase under cProfile: {', '.join(TESTS)}",
    )
    parser.add_argument(
        "--profile-impl",
        choices=(HACLIENT, BLOCKING),
        default=HACLIENT,
        help="the API --profile profiles (blocking: each of its threads)",
    )
    parser.add_argument("--profile-top", type=int, default=25)
    return parser


def _reference(
    name: str, kind: type[BrokerProcess], queue_prefix: str
) -> Callable[[ExitStack], Target]:
    """How to start a reference broker process as target ``name`` (stopped when the stack
    closes)."""

    def start(stack: ExitStack) -> Target:
        work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-jms-")))
        print(f"starting the {name} broker ...", file=sys.stderr)
        proc = stack.enter_context(kind(f"jms-{name}", work_dir, store=False))
        print(f"{name} broker pid {proc.pid} ready on port {proc.port}", file=sys.stderr)
        return Target(name, proc.port, proc.pid, queue_prefix)

    return start


def _reference_tls(stack: ExitStack) -> Target:
    """Start the reference broker serving TLS only, with a certificate for ``localhost`` from a
    CA made for this run (stopped, and its files removed, when the stack closes)."""
    work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-jms-")))
    ca, cert, key = _tls_files(work_dir)
    print(f"starting the {REFERENCE_TLS} broker ...", file=sys.stderr)
    proc = stack.enter_context(
        TlsBroker(f"jms-{REFERENCE_TLS}", work_dir, store=False, cert=cert, key=key)
    )
    print(f"{REFERENCE_TLS} broker pid {proc.pid} ready on port {proc.port}", file=sys.stderr)
    return Target(REFERENCE_TLS, proc.port, proc.pid, "", ca=str(ca))


def _tls_files(work_dir: Path) -> tuple[Path, Path, Path]:
    """A new CA and a server certificate for ``TLS_HOST`` it signs, written to ``work_dir`` as
    PEM files: (the CA's certificate, the server's certificate chain, the server's key).
    trustme, as the tests use: bench runs in the dev environment, which has it."""
    ca = trustme.CA()
    server = ca.issue_cert(TLS_HOST)
    ca_path, cert_path, key_path = (work_dir / n for n in ("ca.pem", "server.pem", "server.key"))
    ca.cert_pem.write_to_path(str(ca_path))
    cert_path.write_bytes(b"".join(pem.bytes() for pem in server.cert_chain_pems))
    server.private_key_pem.write_to_path(str(key_path))
    return ca_path, cert_path, key_path


def _rabbitmq(stack: ExitStack) -> Target:
    """Start a private RabbitMQ node (stopped when the stack closes)."""
    print("starting a private RabbitMQ node ...", file=sys.stderr)
    node = stack.enter_context(RabbitMQNode())
    print(f"RabbitMQ ready on port {node.port} in {node.start_seconds:.1f} s", file=sys.stderr)
    return Target(RABBITMQ, node.port, node.vm_pid, "/queue/")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if min(args.count, args.pipelined_count, args.rounds) < 1 or args.warmup < 0:
        parser.error("--count, --pipelined-count and --rounds must be positive")
    if args.warmup % ACK_EVERY:
        parser.error(f"--warmup must be a multiple of {ACK_EVERY}")
    rabbitmq = RabbitMQNode.available() if args.rabbitmq is None else args.rabbitmq
    if rabbitmq and not RabbitMQNode.available():
        parser.error("--rabbitmq: rabbitmq-server is not installed")
    signal.signal(signal.SIGTERM, _interrupt)
    if args.tracing:
        from bench.tracing import tracer_provider

        TRACING["tracer_provider"] = tracer_provider()
    settings = Settings(
        count=args.count,
        pipelined_count=args.pipelined_count,
        warmup=args.warmup,
        prefetch=args.prefetch,
        size=args.size,
        timeout=60.0 + max(args.count, args.pipelined_count) / 100,
    )
    impls = [impl for impl in IMPLS if not (args.no_blocking and impl == BLOCKING)]
    runner = Runner(settings, uuid.uuid4().hex[:6], impls)
    machine = machine_info()
    log = sys.stderr
    starters = [
        start
        for start, wanted in (
            (_reference(REFERENCE, BrokerProcess, ""), not args.no_reference),
            (_reference(ACTIVEMQ_MODE, ActiveMQModeBroker, "queue://"), not args.no_activemq_mode),
            (_reference_tls, args.tls),
            (_rabbitmq, rabbitmq),
        )
        if wanted
    ]
    if not starters:
        parser.error("no broker to measure")
    names: list[str] = []
    for n, start in enumerate(starters):
        # One broker at a time, all its rounds, then stopped: an idle broker still costs CPU
        # (RabbitMQ's schedulers spin after work) that would fall on the next broker's phases.
        with ExitStack() as stack:
            target = start(stack)
            names.append(target.name)
            for rnd in range(args.rounds):
                runner.round(target, rnd)
            if args.profile and n == 0:
                profile(runner, target, args.profile, args.profile_impl, args.profile_top)
            print(f"stopping the {target.name} broker ...", file=log)
    text, summary = table(runner.results, names, runner.unsupported)
    print(
        f"\n{machine['date_utc']}, {machine['cpus']} CPUs ({machine['cpu_model']}), "
        f"Python {machine['python']}, proton {machine['proton']}, haclient {machine['git']}"
    )
    print(
        f"{args.rounds} round(s) per broker, one broker at a time; {settings.count} messages per "
        f"sync send and receive phase, {settings.pipelined_count} per pipelined send, "
        f"{settings.warmup} warm-up messages first; {settings.size}-character text bodies; "
        f"prefetch/credit {settings.prefetch}"
    )
    print(text)
    if args.json:
        config = {k: v for k, v in vars(args).items() if k != "json"}
        document = {
            "config": config,
            "machine": machine,
            "summary": summary,
            "measurements": [asdict(m) | {"rate": m.rate} for m in runner.results],
        }
        with open(args.json, "w") as f:
            json.dump(document, f, indent=2)
            f.write("\n")
        print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
