"""What crosses from the application's thread to the event loop, and what comes back: M11 (a
message reused after ``send()`` returned), F4 (a queued blocking send keeps its deadline), C9
(no outcome lost at close).

On the reference broker and on RabbitMQ (the ``bed`` fixture); M11 also through the async API on
asyncio and trio. "The broker goes away" is a TCP relay in front of the broker that drops every
connection and refuses new ones (``Relay.cut``), so that the same test runs on both.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

import pytest
from apikit import Api, Bed
from rulekit import TIMEOUT, started

import haclient
from chaos.broker import BrokerThread
from haclient import DeliveryMode, Queue, TextMessage
from haclient.errors import (
    AcknowledgeFailedError,
    ConnectionFailedError,
    FailoverTimeoutError,
    HAClientError,
)
from haclient.modes import AckMode

HANG = 15.0
QUEUED_AT_MOST = 10_000
"""NON_PERSISTENT sends queued without waiting, at most (F2, docs/api.md MessageProducer)."""
"""Upper bound, in seconds, for what must end well before failover gives up (20 s here)."""


class Relay:
    """A TCP relay from a free loopback port to ``host:port``; ``cut()`` drops every connection
    it carries and refuses new ones, as a broker that went away; ``hold()`` keeps back what
    the broker sends from then on (its answers never arrive), as a broker that stalls."""

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._cut = False
        self._held = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._upstream, timeout=TIMEOUT)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._cut:
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
            for source, sink, held in ((client, upstream, None), (upstream, client, self._held)):
                threading.Thread(target=self._pump, args=(source, sink, held), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, held: threading.Event | None) -> None:
        try:
            while data := source.recv(65536):
                if held is None or not held.is_set():
                    sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            with suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def hold(self) -> None:
        self._held.set()

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            sockets, self._sockets = self._sockets, []
        self._listener.close()
        for end in sockets:
            with suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()


@contextmanager
def relayed(bed: Bed, **options: str) -> Iterator[tuple[Relay, str]]:
    """A relay to ``bed``'s broker and a failover URL through it with ``options``."""
    parts = urlsplit(bed.url)
    assert parts.hostname is not None and parts.port is not None
    relay = Relay(parts.hostname, parts.port)
    login = f"{parts.username}:{parts.password}@" if parts.username else ""
    query = "&".join(f"{name}={value}" for name, value in options.items())
    try:
        yield relay, f"failover:(amqp://{login}127.0.0.1:{relay.port})?{query}"
    finally:
        relay.cut()


@contextmanager
def relayed_then_direct(bed: Bed) -> Iterator[tuple[Relay, str]]:
    """A relay to ``bed``'s broker and a failover URL through it first, then to the broker
    directly: once the relay is cut, failover reaches the same broker the other way."""
    parts = urlsplit(bed.url)
    login = f"{parts.username}:{parts.password}@" if parts.username else ""
    with relayed(bed) as (relay, _):
        yield (
            relay,
            (
                f"failover:(amqp://{login}127.0.0.1:{relay.port},"
                f"amqp://{login}{parts.hostname}:{parts.port})?failover.giveupafter=20000"
            ),
        )


@contextmanager
def closed_after(url: str, **options: Any) -> Iterator[haclient.Connection]:
    """A connection to ``url``, closed afterwards whatever its close raises (a failure the
    test provoked: the broker gone, a close that gave up waiting)."""
    conn = haclient.connect(url, **options)
    try:
        yield conn
    finally:
        with suppress(HAClientError):
            conn.close()


class Failures:
    """A connection listener that keeps what ``send_failed`` and failover tell it."""

    def __init__(self) -> None:
        self.lost: list[BaseException] = []
        self.told = threading.Event()
        self.failing_over = threading.Event()

    def send_failed(
        self, destination: object, message_id: str | None, error: BaseException
    ) -> None:
        self.lost.append(error)
        self.told.set()

    def failover_started(self, cause: BaseException) -> None:
        self.failing_over.set()


# M11 ---------------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("mode", [DeliveryMode.NON_PERSISTENT, DeliveryMode.PERSISTENT])
async def test_M11_a_message_changed_after_each_send_arrives_as_it_was_at_each_send(
    api: Api, bed: Bed, mode: DeliveryMode
) -> None:
    queue = Queue(bed.unique("m11"))
    count = 200
    async with await started(api, bed) as connection:
        session = await connection.create_session(AckMode.AUTO)
        producer = await session.create_producer(queue)
        message = TextMessage("")
        ids = []
        for n in range(count):  # one message object, reused as JMS allows once send() returned
            message.text = str(n)
            message.properties["n"] = n
            message.correlation_id = f"c-{n}"
            await producer.send(message, delivery_mode=mode)
            ids.append(message.message_id)
        await producer.flush()
        consumer = await session.create_consumer(queue)
        received = []
        for _ in range(count):
            got = await consumer.receive(TIMEOUT)
            assert got is not None, f"only {len(received)} of {count} arrived"
            received.append(got)
        assert await consumer.receive(0.2) is None
    assert [m.text for m in received] == [str(n) for n in range(count)]
    assert [m.properties["n"] for m in received] == list(range(count))
    assert [m.correlation_id for m in received] == [f"c-{n}" for n in range(count)]
    assert [m.message_id for m in received] == ids
    assert len(set(ids)) == count


def test_M11_a_message_reused_once_its_send_async_completed_arrives_as_it_was(bed: Bed) -> None:
    """A blocking ``send_async`` crosses to the loop as ``send`` does (encoded in the caller's
    thread); JMS lets the message be reused once its completion was called."""
    queue = Queue(bed.unique("m11-async"))
    count = 50
    with haclient.connect(bed.url, **bed.options()) as conn:
        conn.start()
        session = conn.create_session()
        producer = session.create_producer(queue)
        message = TextMessage("")
        completions: list[BaseException | None] = []
        threads: set[str] = set()
        for n in range(count):
            message.text = str(n)
            done = threading.Event()

            def completed(
                sent: object, error: BaseException | None, done: threading.Event = done
            ) -> None:
                assert sent is message
                completions.append(error)
                threads.add(threading.current_thread().name)
                done.set()

            producer.send_async(message, on_completion=completed)
            assert done.wait(TIMEOUT)
        consumer = session.create_consumer(queue)
        texts = []
        for _ in range(count):
            got = consumer.receive(TIMEOUT)
            assert got is not None, f"only {len(texts)} of {count} arrived"
            texts.append(got.text)  # type: ignore[attr-defined]
    assert completions == [None] * count
    assert texts == [str(n) for n in range(count)]
    assert all("dispatcher" in name for name in threads), threads


# F4 ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bound", ["timeout=1", "jms.sendTimeout=1000"])
def test_F4_queued_blocking_sends_keep_their_deadline_while_the_broker_is_gone(
    bed: Bed, bound: str
) -> None:
    """NON_PERSISTENT blocking sends are queued without waiting; with the broker gone the one
    whose deadline passed raises ``FailoverTimeoutError`` from the producer's next call (or a
    send waiting for room in a full queue raises it), long before failover gives up."""
    options = {"failover.giveupafter": "20000"}
    timeout: float | None = 1.0
    if bound.startswith("jms."):
        options["jms.sendTimeout"] = "1000"
        timeout = None
    with relayed(bed, **options) as (relay, url):
        listener = Failures()
        conn = haclient.connect(url, **bed.options())
        try:
            conn.add_listener(listener)
            producer = conn.create_session().create_producer(Queue(bed.unique("f4")))
            producer.delivery_mode = DeliveryMode.NON_PERSISTENT
            producer.send(TextMessage("before"))
            relay.cut()
            assert listener.failing_over.wait(HANG)
            started_at = time.monotonic()
            sent = 0
            with pytest.raises(FailoverTimeoutError):
                while time.monotonic() - started_at < HANG:
                    producer.send(TextMessage(f"m-{sent}"), timeout=timeout)
                    sent += 1
            assert time.monotonic() - started_at < HANG
        finally:
            with suppress(FailoverTimeoutError, ConnectionFailedError):
                conn.close()  # the other queued sends' failures (C9)


def test_F4_a_send_waiting_for_room_in_a_full_queue_is_bounded_by_its_timeout(bed: Bed) -> None:
    with relayed(bed, **{"failover.giveupafter": "20000"}) as (relay, url):
        listener = Failures()
        conn = haclient.connect(url, **bed.options())
        try:
            conn.add_listener(listener)
            producer = conn.create_session().create_producer(Queue(bed.unique("f4-room")))
            producer.delivery_mode = DeliveryMode.NON_PERSISTENT
            relay.cut()
            assert listener.failing_over.wait(HANG)
            for n in range(QUEUED_AT_MOST):  # queued without waiting, each with a long deadline
                producer.send(TextMessage(f"m-{n}"), timeout=HANG)
            started_at = time.monotonic()
            with pytest.raises(FailoverTimeoutError) as raised:
                producer.send(TextMessage("one too many"), timeout=0.5)  # waits for room
            assert time.monotonic() - started_at < HANG
            assert "room" in str(raised.value), raised.value
        finally:
            with suppress(HAClientError):
                conn.close()


# C9 ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("closing", ["producer", "session", "connection"])
def test_C9_a_queued_send_that_failed_is_raised_by_the_close_that_found_it(
    bed: Bed, closing: str
) -> None:
    """Two queued sends fail while the broker is gone; the close right after raises the first
    (after closing); the second goes to the listener's ``send_failed`` and the statistics."""
    with relayed(bed, **{"failover.giveupafter": "20000"}) as (relay, url):
        listener = Failures()
        conn = haclient.connect(url, **bed.options())
        conn.add_listener(listener)
        session = conn.create_session()
        producer = session.create_producer(Queue(bed.unique("c9")))
        producer.delivery_mode = DeliveryMode.NON_PERSISTENT
        relay.cut()
        assert listener.failing_over.wait(HANG)
        producer.send(TextMessage("first"), timeout=0.5)  # queued: returns at once
        producer.send(TextMessage("second"), timeout=0.5)
        closer = {"producer": producer, "session": session, "connection": conn}[closing]
        started_at = time.monotonic()
        try:
            with pytest.raises(FailoverTimeoutError):
                closer.close()
            assert time.monotonic() - started_at < HANG
            assert producer.is_closed
            closer.close()  # closed: idempotent, nothing left to raise
            assert listener.told.wait(HANG)
            assert len(listener.lost) == 1 and isinstance(listener.lost[0], FailoverTimeoutError)
            assert conn.statistics().sends_failed == 1
        finally:
            conn.close()


def test_C9_a_refusal_found_by_close_is_raised_by_it(reference_broker: BrokerThread) -> None:
    """The broker refuses a queued send (its queue was deleted under the producer: a refusal
    per message, which the reference broker makes on demand); nothing else is called before
    the session's close, which raises the refusal after closing."""
    queue = Queue(Bed.unique("c9-refused"))
    with haclient.connect(reference_broker.url) as conn:
        session = conn.create_session()
        producer = session.create_producer(queue)
        producer.delivery_mode = DeliveryMode.NON_PERSISTENT
        producer.send(TextMessage("accepted"))
        producer.flush()
        assert reference_broker.delete_node(queue.name)
        producer.send(TextMessage("refused"))  # queued: returns before the broker answers
        with pytest.raises(haclient.HAClientError, match="deleted"):
            session.close()
        assert session.is_closed
        session.close()  # idempotent


# A synchronous send in flight: at once (its outcome by callback) or the general way ------------
#
# A PERSISTENT blocking send that needs no wait first goes out in the loop turn that takes it
# and gets its outcome from the turn the broker's settlement arrives in (``send_encoded_then``:
# no task); the same send behind a pipelined send whose outcome has not come goes the general
# way (``send_encoded`` in the lane's task). ``Relay.hold`` keeps the broker's answers back:
# with it, the pipelined send stays unconfirmed (so the next goes the general way), and the
# PERSISTENT one stays in flight until the test drops the connection.

IN_FLIGHT_PATHS = ["at-once", "general"]


def _served(facade: object) -> Any:
    """For the test only: the loop's half of ``facade``'s connection (read from this thread:
    attribute reads the tests poll, never a call into the loop)."""
    from haclient.sync._served import Serving

    boundary = facade._boundary  # type: ignore[attr-defined]
    served = Serving.of(boundary.loop_thread, boundary)
    assert served is not None
    return served


def _until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``HANG``."""
    deadline = time.monotonic() + HANG
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def _sync_send_in_flight(producer: haclient.MessageProducer, path: str, **send: object) -> dict:
    """Start a PERSISTENT ``send`` by ``path`` on another thread, its outcome unanswered (the
    relay holds); return what it will tell: ``error`` (None: returned) once ``done`` is set."""
    if path == "general":  # a pipelined send first: unconfirmed while the relay holds
        producer.send(TextMessage("pipelined first"), delivery_mode=DeliveryMode.NON_PERSISTENT)
    outcome: dict = {"done": threading.Event(), "message": TextMessage("in flight")}

    def send_it() -> None:
        try:
            producer.send(outcome["message"], delivery_mode=DeliveryMode.PERSISTENT, **send)
            outcome["error"] = None
        except BaseException as exc:
            outcome["error"] = exc
        outcome["done"].set()

    threading.Thread(target=send_it, daemon=True).start()
    lane = _served(producer).lanes[producer._handle]  # type: ignore[attr-defined]
    _until(lambda: lane.sending is not None, "the send never waited for its outcome")
    assert not outcome["done"].is_set(), outcome
    return outcome


@pytest.mark.parametrize("path", IN_FLIGHT_PATHS)
def test_F11_a_blocking_sync_send_cut_off_before_its_outcome_is_sent_again_with_its_id(
    bed: Bed, path: str
) -> None:
    """The connection drops while the send waits for the broker's outcome: it is sent again,
    same id, on the next broker of the list, and ``send`` returns once that one accepted it."""
    with relayed_then_direct(bed) as (relay, url):
        queue = Queue(bed.unique("f11-in-flight"))
        with haclient.connect(url, **bed.options()) as conn:
            session = conn.create_session()
            producer = session.create_producer(queue)
            producer.send(TextMessage("before"))  # the link is attached
            relay.hold()
            outcome = _sync_send_in_flight(producer, path)
            relay.cut()
            assert outcome["done"].wait(HANG), "the send cut off never returned"
            assert outcome["error"] is None, outcome["error"]
            assert conn.statistics().messages_resent >= 1
            sent_id = outcome["message"].message_id
            conn.start()
            consumer = session.create_consumer(queue)
            got = []
            while (message := consumer.receive(1.0)) is not None:
                got.append(message)
    in_flight = [m for m in got if m.text == "in flight"]  # type: ignore[attr-defined]
    assert in_flight, [m.text for m in got]  # type: ignore[attr-defined]
    assert {m.message_id for m in in_flight} == {sent_id}


@pytest.mark.parametrize("path", IN_FLIGHT_PATHS)
@pytest.mark.parametrize("bound", ["timeout=1", "jms.sendTimeout=1000"])
def test_F4_a_blocking_sync_send_cut_off_with_no_broker_left_is_bounded_by_its_deadline(
    bed: Bed, path: str, bound: str
) -> None:
    """Its connection drops while it waits for its outcome and no broker answers again: the
    send raises ``FailoverTimeoutError`` at its deadline, long before failover gives up."""
    options = {"failover.giveupafter": "20000"}
    send: dict[str, object] = {"timeout": 1.0}
    if bound.startswith("jms."):
        options["jms.sendTimeout"] = "1000"
        send = {}
    with relayed(bed, **options) as (relay, url):
        conn = haclient.connect(url, **bed.options())
        try:
            producer = conn.create_session().create_producer(Queue(bed.unique("f4-in-flight")))
            producer.send(TextMessage("before"))
            relay.hold()
            started_at = time.monotonic()
            outcome = _sync_send_in_flight(producer, path, **send)
            relay.cut()
            assert outcome["done"].wait(HANG), "the send cut off was not bounded"
            assert isinstance(outcome["error"], FailoverTimeoutError), outcome["error"]
            assert time.monotonic() - started_at < HANG
        finally:
            with suppress(HAClientError):
                conn.close()


@pytest.mark.parametrize("path", IN_FLIGHT_PATHS)
def test_C9_a_blocking_sync_send_in_flight_when_its_connection_closes_gets_an_outcome(
    bed: Bed, path: str
) -> None:
    """The connection is closed (from another thread) while the send waits for an outcome the
    broker never gives: the send raises ``ClosedError`` once the close gave up waiting
    (``close_timeout``); it is not left waiting."""
    with relayed(bed, **{"jms.closeTimeout": "500"}) as (relay, url):
        conn = haclient.connect(url, **bed.options())
        try:
            producer = conn.create_session().create_producer(Queue(bed.unique("c9-in-flight")))
            producer.send(TextMessage("before"))
            relay.hold()
            outcome = _sync_send_in_flight(producer, path)
            started_at = time.monotonic()
            with suppress(HAClientError):
                conn.close()
            assert outcome["done"].wait(HANG), "the send was left waiting"
            assert isinstance(outcome["error"], haclient.ClosedError), outcome["error"]
            assert time.monotonic() - started_at < HANG
        finally:
            with suppress(HAClientError):
                conn.close()


def test_C9_a_refusal_of_a_blocking_sync_send_sent_at_once_is_raised_by_it(
    reference_broker: BrokerThread,
) -> None:
    """A PERSISTENT send that went at once, refused by the broker (its queue deleted under the
    producer): ``send`` raises the refusal, and the next send goes on."""
    queue = Queue(Bed.unique("c9-refused-at-once"))
    with haclient.connect(reference_broker.url) as conn:
        producer = conn.create_session().create_producer(queue)
        producer.send(TextMessage("accepted"))
        assert reference_broker.delete_node(queue.name)
        with pytest.raises(haclient.HAClientError, match="deleted"):
            producer.send(TextMessage("refused"))
        assert conn.statistics().sends_failed == 0  # raised to its caller: nothing lost


# An AUTO receive in flight: at once (its message by callback) or the general way -----------------
#
# A blocking AUTO receive whose message is prefetched takes it and sends its acknowledgement in
# the loop turn that takes the request, and gets its message from the turn the broker's
# settlement arrives in (``MessageConsumer.receive_then``: no task), where the broker grants
# receiver settle mode ``second`` (the reference broker), or from the turn the answer to a drain
# of the session's probe arrives in (``ack_confirmation="drain"``, as in ActiveMQ mode, once the
# probe was answered: the first receive's); with ``ack_confirmation="round-trip"`` the
# acknowledgement is confirmed by attaching a link and the receive goes the general way (a task
# of the request). RabbitMQ grants no mode ``second`` and has no drain: there "auto" is a link
# flow on the session's probe, which RabbitMQ answers with a flow of its own (at once as well,
# once the probe was answered), and "drain" falls back to the round trip (the general way).
# ``Relay.hold`` keeps the broker's confirmation back, so the receive stays in flight.

RECEIVE_PATHS = {"at-once": "auto", "at-once drain": "drain", "general": "round-trip"}


def _waiting(facade: object, call: Callable[[], object]) -> dict:
    """Start ``call`` on another thread while the broker's confirmation it waits for is held
    back (``facade``'s connection's); return what it will tell: ``message`` (what it
    returned) or ``error`` once ``done`` is set."""
    outcome: dict = {"done": threading.Event(), "message": None, "error": None}

    def call_it() -> None:
        try:
            outcome["message"] = call()
        except BaseException as exc:
            outcome["error"] = exc
        outcome["done"].set()

    threading.Thread(target=call_it, daemon=True).start()
    served = _served(facade)
    _until(lambda: bool(served.in_flight or served.tasks), "the call never waited")
    assert not outcome["done"].is_set(), outcome
    return outcome


def _receive_in_flight(consumer: haclient.MessageConsumer, **receive: object) -> dict:
    """``consumer.receive(**receive)`` waiting for its confirmation (``_waiting``)."""
    return _waiting(consumer, lambda: consumer.receive(**receive))  # type: ignore[arg-type]


def _assert_path(conn: haclient.Connection, kind: str, path: str) -> None:
    """The receive (or acknowledge) in flight went by ``path``: at once, no task of its
    request (mode ``second`` or a drain on the reference broker, a link flow on RabbitMQ), or
    the general way, a task of its request."""
    from haclient.sync._served import Serving

    served = Serving.of(conn._boundary.loop_thread, conn._boundary)  # read only, for the test
    assert served is not None
    at_once = path == "at-once" or (path == "at-once drain" and kind == "reference")
    assert (len(served.in_flight), len(served.tasks)) == ((1, 0) if at_once else (0, 1))


def _received_before(
    conn: haclient.Connection, queue: Queue, mode: AckMode, *bodies: str
) -> tuple[haclient.MessageConsumer, haclient.Message]:
    """A consumer of ``queue`` in a new ``mode`` session, "before" and ``bodies`` sent to it:
    the consumer and "before", received."""
    session = conn.create_session(mode)
    consumer = session.create_consumer(queue)
    producer = session.create_producer(queue)
    for body in ("before", *bodies):
        producer.send(TextMessage(body))
    first = consumer.receive(TIMEOUT)
    assert first is not None and first.body == "before"  # type: ignore[attr-defined]
    return consumer, first


def _prefetched(conn: haclient.Connection, queue: Queue, *bodies: str) -> haclient.MessageConsumer:
    """An AUTO consumer of ``queue`` that received "before" and has ``bodies`` prefetched."""
    consumer, _ = _received_before(conn, queue, AckMode.AUTO, *bodies)
    inner = _served(consumer).objects[consumer._handle]  # type: ignore[attr-defined]
    _until(
        lambda: inner._context.amqp().queued(inner._receiver) >= len(bodies),
        "the others never arrived in its prefetch",
    )
    return consumer


@pytest.mark.parametrize("path", RECEIVE_PATHS)
def test_A1_a_blocking_auto_receive_cut_off_before_its_confirmation_returns_it_in_doubt(
    bed: Bed, path: str
) -> None:
    """The connection drops while an AUTO receive waits for the broker's confirmation of its
    acknowledgement: once failover reached the next broker, the message is returned flagged
    ``ack_in_doubt`` and redelivered (F9), and no copy of it comes again (nothing twice,
    nothing lost)."""
    with relayed_then_direct(bed) as (relay, url):
        queue = Queue(bed.unique("a1-in-flight"))
        options = bed.options(ack_confirmation=RECEIVE_PATHS[path])
        with haclient.connect(url, **options) as conn:
            conn.start()
            consumer = _prefetched(conn, queue, "in flight", "after")
            relay.hold()
            outcome = _receive_in_flight(consumer, timeout=HANG)
            _assert_path(conn, bed.kind, path)
            relay.cut()
            assert outcome["done"].wait(HANG), "the receive cut off never returned"
            assert outcome["error"] is None, outcome["error"]
            message = outcome["message"]
            assert message is not None and message.body == "in flight"
            assert message.ack_in_doubt and message.redelivered
            rest = []
            while (more := consumer.receive(1.0)) is not None:
                rest.append(more.body)  # type: ignore[attr-defined]
    assert rest == ["after"]


@pytest.mark.parametrize("path", RECEIVE_PATHS)
def test_F4_a_blocking_auto_receive_cut_off_with_no_broker_left_ends_at_its_timeout(
    bed: Bed, path: str
) -> None:
    """Its connection drops while the receive waits for the confirmation and no broker answers
    again: the receive returns None at its own ``timeout``, long before failover gives up
    (the message stays held, in doubt, for a receive once the connection is back: F2)."""
    with relayed(bed, **{"failover.giveupafter": "20000"}) as (relay, url):
        conn = haclient.connect(url, **bed.options(ack_confirmation=RECEIVE_PATHS[path]))
        try:
            conn.start()
            consumer = _prefetched(conn, Queue(bed.unique("f4-receive")), "in flight")
            relay.hold()
            started_at = time.monotonic()
            outcome = _receive_in_flight(consumer, timeout=1.0)
            _assert_path(conn, bed.kind, path)
            relay.cut()
            assert outcome["done"].wait(HANG), "the receive cut off was not bounded"
            assert outcome["error"] is None, outcome["error"]
            assert outcome["message"] is None
            assert time.monotonic() - started_at < HANG
        finally:
            with suppress(HAClientError):
                conn.close()


@pytest.mark.parametrize("path", RECEIVE_PATHS)
def test_C9_a_blocking_auto_receive_in_flight_when_its_connection_closes_gets_an_outcome(
    bed: Bed, path: str
) -> None:
    """The connection is closed (from another thread) while an AUTO receive waits for a
    confirmation the broker never gives: the receive ends once the close gave up waiting
    (``close_timeout``): with the message flagged in doubt, None, or the error that ended it;
    it is not left waiting."""
    with relayed(bed, **{"jms.closeTimeout": "500"}) as (relay, url):
        conn = haclient.connect(url, **bed.options(ack_confirmation=RECEIVE_PATHS[path]))
        try:
            conn.start()
            consumer = _prefetched(conn, Queue(bed.unique("c9-receive")), "in flight")
            relay.hold()
            outcome = _receive_in_flight(consumer, timeout=HANG * 2)
            _assert_path(conn, bed.kind, path)
            started_at = time.monotonic()
            with suppress(HAClientError):
                conn.close()
            assert outcome["done"].wait(HANG), "the receive was left waiting"
            assert time.monotonic() - started_at < HANG
            message, error = outcome["message"], outcome["error"]
            if error is not None:
                assert isinstance(error, HAClientError), error
            elif message is not None:
                assert message.body == "in flight" and message.ack_in_doubt
        finally:
            with suppress(HAClientError):
                conn.close()


@pytest.mark.parametrize("path", RECEIVE_PATHS)
def test_C2_a_consumer_closed_while_an_auto_receive_awaits_its_confirmation_returns_it(
    reference_broker: BrokerThread, path: str
) -> None:
    """``consumer.close()`` from another thread while an AUTO receive waits for the broker's
    confirmation (the broker paused): the close waits for that receive (C2), which returns
    the message once the broker confirmed it (acknowledged, so never dropped); nothing of it
    stays on the queue."""
    queue = Queue(Bed.unique("c2-receive"))
    with haclient.connect(reference_broker.url, ack_confirmation=RECEIVE_PATHS[path]) as conn:
        conn.start()
        consumer = _prefetched(conn, queue, "in flight")
        reference_broker.pause()
        try:
            outcome = _receive_in_flight(consumer, timeout=HANG)
            _assert_path(conn, "reference", path)
            closed = threading.Event()
            closer = threading.Thread(target=lambda: (consumer.close(), closed.set()))
            closer.start()
            # the loop closed it; the close now waits for the receive in flight (C2)
            _until(lambda: bool(consumer._closed), "the close never reached the loop")  # type: ignore[attr-defined]
        finally:
            reference_broker.resume()
        assert outcome["done"].wait(HANG), "the receive was left waiting"
        assert closed.wait(HANG), "the close was left waiting"
        closer.join(HANG)
        assert outcome["error"] is None, outcome["error"]
        message = outcome["message"]
        assert message is not None and message.body == "in flight"
        assert not message.ack_in_doubt
        rest = conn.create_session().create_consumer(queue).receive(1.0)
    assert rest is None


@pytest.mark.parametrize("path", RECEIVE_PATHS)
def test_C2_a_consumer_close_waits_for_a_confirming_receive_no_longer_than_close_timeout(
    reference_broker: BrokerThread, path: str
) -> None:
    """``consumer.close()`` from another thread while an AUTO receive waits for a confirmation
    the broker holds back longer than ``close_timeout``: the close returns after
    ``close_timeout`` (it waited a fixed 30 s before), and the receive, still waiting, returns
    the message once the broker answers."""
    queue = Queue(Bed.unique("c2-close-bounded"))
    confirmation = RECEIVE_PATHS[path]
    with haclient.connect(
        reference_broker.url, ack_confirmation=confirmation, close_timeout=0.3
    ) as conn:
        conn.start()
        consumer = _prefetched(conn, queue, "in flight")
        reference_broker.pause()
        try:
            outcome = _receive_in_flight(consumer, timeout=HANG)
            _assert_path(conn, "reference", path)
            closed = threading.Event()
            closer = threading.Thread(target=lambda: (consumer.close(), closed.set()))
            closer.start()
            assert closed.wait(HANG), "the close waited past close_timeout for the receive"
            assert not outcome["done"].is_set(), "the receive ended without the broker's answer"
        finally:
            reference_broker.resume()
        closer.join(HANG)
        assert outcome["done"].wait(HANG), "the receive was left waiting"
        assert outcome["error"] is None, outcome["error"]
        message = outcome["message"]
        assert message is not None and message.body == "in flight"
        assert not message.ack_in_doubt
        rest = conn.create_session().create_consumer(queue).receive(1.0)
    assert rest is None


# A CLIENT acknowledge in flight: at once (its outcome by callback) or the general way ------------
#
# A blocking ``message.acknowledge()`` in a CLIENT (or INDIVIDUAL) session that needs no wait
# first settles the session's deliveries in the loop turn that takes the request and gets its
# outcome from the turn the broker's confirmation arrives in (``TrackedAcknowledger.then``: no
# task), confirmed as the AUTO receive's is (``RECEIVE_PATHS``); with ``ack_confirmation=
# "round-trip"``, on a traced connection (its request carries the caller's trace context) or
# with a failover report owed (F8) it goes the general way (a task of the request).

ACK_PATHS = {**RECEIVE_PATHS, "traced": "auto"}


def _ack_options(bed: Bed | None, path: str, **options: object) -> dict[str, Any]:
    """``connect()`` keywords for ``path`` (on ``bed``'s broker, or the reference broker)."""
    options["ack_confirmation"] = ACK_PATHS[path]
    if path == "traced":
        from opentelemetry.sdk.trace import TracerProvider

        options["tracer_provider"] = TracerProvider()
    return options if bed is None else bed.options(**options)


def _delivered(
    conn: haclient.Connection, queue: Queue, *bodies: str, mode: AckMode = AckMode.CLIENT
) -> tuple[haclient.MessageConsumer, list[haclient.Message]]:
    """A consumer of ``queue`` in a new ``mode`` session that received and acknowledged
    "before" (so that the session's confirmation exchange was answered once, A6) and then
    received ``bodies``, not acknowledged: the consumer and those messages."""
    consumer, first = _received_before(conn, queue, mode, *bodies)
    first.acknowledge()
    received = []
    for body in bodies:
        message = consumer.receive(TIMEOUT)
        assert message is not None and message.body == body  # type: ignore[attr-defined]
        received.append(message)
    return consumer, received


def _left_on(url: str, queue: Queue, **options: object) -> list[str]:
    """The bodies a new consumer of ``queue`` gets (each acknowledged), sorted."""
    bodies = []
    with haclient.connect(url, **options) as conn:
        conn.start()
        consumer = conn.create_session().create_consumer(queue)
        while (message := consumer.receive(1.0)) is not None:
            bodies.append(message.body)  # type: ignore[attr-defined]
    return sorted(bodies)


@pytest.mark.parametrize("path", ACK_PATHS)
def test_A2_a_blocking_client_acknowledge_returns_once_the_broker_confirmed(
    reference_broker: BrokerThread, path: str
) -> None:
    """A CLIENT acknowledge goes at once where nothing waits first (its request makes no
    task), else the general way; either way it returns once the broker confirmed (the broker
    paused: it waits), and the messages it acknowledged are gone from the queue."""
    queue = Queue(Bed.unique("a2-confirmed"))
    with haclient.connect(reference_broker.url, **_ack_options(None, path)) as conn:
        conn.start()
        _, (a, b) = _delivered(conn, queue, "a", "b")
        reference_broker.pause()
        try:
            outcome = _waiting(conn, lambda: b.acknowledge(timeout=HANG))
            _assert_path(conn, "reference", path)
            assert not outcome["done"].wait(0.2), "acknowledge returned before the broker confirmed"
        finally:
            reference_broker.resume()
        assert outcome["done"].wait(HANG), "the acknowledge was left waiting"
        assert outcome["error"] is None, outcome["error"]
        assert conn.statistics().acknowledgements["client"] == 3
        a.acknowledge()  # acknowledged with b already: nothing left to do
    assert _left_on(reference_broker.url, queue) == []


@pytest.mark.parametrize("mode", [AckMode.CLIENT, AckMode.INDIVIDUAL], ids=lambda m: m.name)
@pytest.mark.parametrize("path", ACK_PATHS)
def test_A2_a_blocking_acknowledge_removes_what_it_acknowledged_and_nothing_else(
    bed: Bed, path: str, mode: AckMode
) -> None:
    """CLIENT: ``b.acknowledge()`` acknowledges every message the session delivered so far
    (a, b); INDIVIDUAL: b alone. Those are gone from the broker; the session's other messages
    (delivered later and not acknowledged, or prefetched) come back after the connection
    closed."""
    queue = Queue(bed.unique("a2-removes"))
    with haclient.connect(bed.url, **_ack_options(bed, path)) as conn:
        conn.start()
        consumer, (_a, b) = _delivered(conn, queue, "a", "b", mode=mode)
        producer = conn.create_session().create_producer(queue)
        for body in ("c", "d"):
            producer.send(TextMessage(body))
        b.acknowledge()
        c = consumer.receive(TIMEOUT)  # delivered after the acknowledge: not acknowledged
        assert c is not None and c.body == "c"  # type: ignore[attr-defined]
    expected = ["c", "d"] if mode is AckMode.CLIENT else ["a", "c", "d"]
    assert _left_on(bed.url, queue, **bed.options()) == expected


@pytest.mark.parametrize("path", ACK_PATHS)
def test_A2_a_blocking_client_acknowledge_cut_off_before_its_confirmation_raises_in_doubt(
    bed: Bed, path: str
) -> None:
    """The connection drops while a CLIENT acknowledge waits for the broker's confirmation:
    it raises ``AcknowledgeFailedError`` flagged ``in_doubt`` (F8), by either path; after
    the failover to the next broker nothing of the session comes again (the broker applied
    the acknowledgement, or the duplicate window suppresses its copies) and nothing is left."""
    queue = Queue(bed.unique("a2-in-flight"))
    with (
        relayed_then_direct(bed) as (relay, url),
        haclient.connect(url, **_ack_options(bed, path)) as conn,
    ):
        conn.start()
        consumer, (_a, b) = _delivered(conn, queue, "a", "b")
        relay.hold()
        outcome = _waiting(conn, lambda: b.acknowledge(timeout=HANG))
        _assert_path(conn, bed.kind, path)
        relay.cut()
        assert outcome["done"].wait(HANG), "the acknowledge cut off never returned"
        error = outcome["error"]
        assert isinstance(error, AcknowledgeFailedError) and error.in_doubt, error
        assert consumer.receive(1.0) is None
    assert _left_on(bed.url, queue, **bed.options()) == []


@pytest.mark.parametrize("path", ACK_PATHS)
def test_F4_a_blocking_client_acknowledge_cut_off_with_no_broker_left_is_bounded(
    bed: Bed, path: str
) -> None:
    """The connection drops while a CLIENT acknowledge waits for the confirmation and no
    broker answers again: the acknowledge raises ``AcknowledgeFailedError`` (in doubt) without
    waiting for the failover, and the next one, waiting at the gate, raises
    ``FailoverTimeoutError`` at its ``timeout``; both long before failover gives up."""
    with (
        relayed(bed, **{"failover.giveupafter": "20000"}) as (relay, url),
        closed_after(url, **_ack_options(bed, path)) as conn,
    ):
        conn.start()
        _, (a, b) = _delivered(conn, Queue(bed.unique("f4-ack")), "a", "b")
        relay.hold()
        started_at = time.monotonic()
        outcome = _waiting(conn, lambda: b.acknowledge(timeout=1.0))
        _assert_path(conn, bed.kind, path)
        relay.cut()
        assert outcome["done"].wait(HANG), "the acknowledge cut off was not bounded"
        error = outcome["error"]
        assert isinstance(error, AcknowledgeFailedError) and error.in_doubt, error
        with pytest.raises(FailoverTimeoutError):
            a.acknowledge(timeout=1.0)
        assert time.monotonic() - started_at < HANG


@pytest.mark.parametrize("path", ACK_PATHS)
def test_C9_a_blocking_client_acknowledge_in_flight_when_its_connection_closes_gets_an_outcome(
    bed: Bed, path: str
) -> None:
    """The connection is closed (from another thread) while a CLIENT acknowledge waits for a
    confirmation the broker never gives: the acknowledge raises (``ClosedError``, or the
    in-doubt ``AcknowledgeFailedError`` of the connection's end) once the close gave up
    waiting; it is not left waiting."""
    with (
        relayed(bed, **{"jms.closeTimeout": "500"}) as (relay, url),
        closed_after(url, **_ack_options(bed, path)) as conn,
    ):
        conn.start()
        _, (b,) = _delivered(conn, Queue(bed.unique("c9-ack")), "b")
        relay.hold()
        outcome = _waiting(conn, lambda: b.acknowledge(timeout=HANG * 2))
        _assert_path(conn, bed.kind, path)
        started_at = time.monotonic()
        with suppress(HAClientError):
            conn.close()
        assert outcome["done"].wait(HANG), "the acknowledge was left waiting"
        assert time.monotonic() - started_at < HANG
        assert isinstance(outcome["error"], HAClientError), outcome["error"]


def test_F8_a_blocking_client_acknowledge_owing_a_failover_report_raises_it_then_goes_on(
    bed: Bed,
) -> None:
    """A failover came while a message was delivered and not acknowledged: the next
    acknowledge raises ``AcknowledgeFailedError`` (not in doubt: nothing was acknowledged,
    F8) instead of settling at once, and the message comes again, redelivered; acknowledging
    that copy goes through and leaves nothing."""
    queue = Queue(bed.unique("f8-ack"))
    completed = threading.Event()

    class Completed:
        def failover_completed(self, broker: object, downtime: float) -> None:
            completed.set()

    with relayed_then_direct(bed) as (relay, url), haclient.connect(url, **bed.options()) as conn:
        conn.add_listener(Completed())
        conn.start()
        consumer, (a,) = _delivered(conn, queue, "a")
        relay.cut()
        assert completed.wait(HANG), "the failover never completed"
        with pytest.raises(AcknowledgeFailedError) as raised:
            a.acknowledge(timeout=HANG)
        assert not raised.value.in_doubt
        again = consumer.receive(TIMEOUT)
        assert again is not None and again.body == "a"  # type: ignore[attr-defined]
        assert again.redelivered
        again.acknowledge(timeout=HANG)
        assert consumer.receive(0.5) is None
    assert _left_on(bed.url, queue, **bed.options()) == []


@contextmanager
def _request_tasks(conn: haclient.Connection) -> Iterator[list[str]]:
    """For the test: the tasks the loop makes meanwhile for requests (``Served._run``: the
    general way), by the operation's name (the loop's task factory is set on the loop)."""
    loop = conn._boundary.loop_thread.loop  # type: ignore[attr-defined]
    made: list[str] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        if getattr(coro, "__qualname__", "") == "Served._run":
            made.append(coro.cr_frame.f_locals["request"].op.name)
        return asyncio.Task(coro, loop=loop, **kwargs)

    def set_factory(chosen: Any) -> None:
        done = threading.Event()
        loop.call_soon_threadsafe(lambda: (loop.set_task_factory(chosen), done.set()))
        assert done.wait(HANG)

    set_factory(factory)
    try:
        yield made
    finally:
        set_factory(None)


@pytest.mark.parametrize("mode", [AckMode.CLIENT, AckMode.INDIVIDUAL], ids=lambda m: m.name)
def test_A2_blocking_receives_and_acknowledges_that_wait_for_nothing_first_make_no_task(
    bed: Bed, mode: AckMode
) -> None:
    """With nothing to wait for first (messages prefetched, connected, the session's
    confirmation exchange answered once, not traced), a blocking CLIENT (INDIVIDUAL) receive
    and each message's ``acknowledge()`` make no task of the loop: the message is given in
    the loop turn that takes the request, the acknowledge's outcome from the turn that brings
    the broker's confirmation. The general way makes a task per call. Every message is gone
    afterwards."""
    queue = Queue(bed.unique("a2-no-task"))
    count = 20
    with haclient.connect(bed.url, **bed.options()) as conn:
        conn.start()
        consumer, _ = _delivered(conn, queue, mode=mode)
        producer = conn.create_session().create_producer(queue)
        for n in range(count):
            producer.send(TextMessage(f"m-{n}"))
        inner = _served(consumer).objects[consumer._handle]  # type: ignore[attr-defined]
        _until(
            lambda: inner._context.amqp().queued(inner._receiver) >= count,
            "the messages never arrived in its prefetch",
        )
        with _request_tasks(conn) as made:
            for n in range(count):
                message = consumer.receive(TIMEOUT)
                assert message is not None and message.body == f"m-{n}"  # type: ignore[attr-defined]
                message.acknowledge()
        assert made == []
    assert _left_on(bed.url, queue, **bed.options()) == []
