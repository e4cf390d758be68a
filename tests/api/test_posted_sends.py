"""The blocking API's NON_PERSISTENT sends are posted: queued without waiting for the event
loop, sent by it in order (``haclient.aio.posted``).

Against the reference broker run in this process on a free loopback port. What is checked is
what a user sees: headers set on return, every message received once and in order (mixed with
PERSISTENT sends), nothing lost to a close right after, errors raised where the docs say, and
sends that return while the loop is busy elsewhere. No timing asserts except generous bounds.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import pytest
from blockingkit import FailoverSeen

import haclient
from chaos.broker import BrokerThread
from haclient import DeliveryMode, Queue, TextMessage

HANG = 10.0
_names = itertools.count(1)


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    with BrokerThread() as thread:
        yield thread


@pytest.fixture
def queue() -> Queue:
    return Queue(f"posted-{next(_names)}")


def receive_all(url: str, queue: Queue, count: int) -> list[str]:
    with haclient.connect(url) as conn:
        conn.start()
        consumer = conn.create_session(haclient.AckMode.NO_ACK).create_consumer(queue)
        bodies = []
        for _ in range(count):
            message = consumer.receive(timeout=HANG)
            assert message is not None, f"only {len(bodies)} of {count} arrived"
            bodies.append(message.body)  # type: ignore[attr-defined]
        assert consumer.receive(timeout=0.2) is None
    return bodies


def test_posted_sends_set_their_headers_and_keep_order_with_persistent_ones(
    broker: BrokerThread, queue: Queue
) -> None:
    bodies = [f"m-{n}" for n in range(600)]
    with haclient.connect(broker.url) as conn:
        producer = conn.create_session().create_producer(queue)
        ids = set()
        for n, body in enumerate(bodies):
            message = TextMessage(body)
            persistent = n % 50 == 49
            mode = DeliveryMode.PERSISTENT if persistent else DeliveryMode.NON_PERSISTENT
            producer.send(message, delivery_mode=mode)
            assert message.message_id is not None  # set on return, as JMS says
            assert message.delivery_mode is mode
            ids.add(message.message_id)
        assert len(ids) == len(bodies)
    assert receive_all(broker.url, queue, len(bodies)) == bodies


@pytest.mark.parametrize("closing", ["producer", "session", "connection"])
def test_a_close_right_after_posted_sends_sends_them_all_first(
    broker: BrokerThread, queue: Queue, closing: str
) -> None:
    bodies = [f"m-{n}" for n in range(3000)]
    conn = haclient.connect(broker.url)
    session = conn.create_session()
    producer = session.create_producer(queue)
    producer.delivery_mode = DeliveryMode.NON_PERSISTENT
    for body in bodies:
        producer.send(TextMessage(body))
    {"producer": producer, "session": session, "connection": conn}[closing].close()
    conn.close()
    assert receive_all(broker.url, queue, len(bodies)) == bodies


def test_posted_sends_return_while_the_loop_is_busy_and_go_out_after(
    broker: BrokerThread, queue: Queue
) -> None:
    """No hop per send: with the event loop held up, sends still return."""
    with haclient.connect(broker.url) as conn:
        producer = conn.create_session().create_producer(queue)
        producer.delivery_mode = DeliveryMode.NON_PERSISTENT
        holding, released, loop_free = threading.Event(), threading.Event(), threading.Event()

        def hold_the_loop() -> None:
            holding.set()
            released.wait(HANG)
            loop_free.set()

        conn._boundary.loop_thread.loop.call_soon_threadsafe(hold_the_loop)
        assert holding.wait(HANG)
        try:
            for n in range(100):
                producer.send(TextMessage(f"m-{n}"))
            assert not loop_free.is_set()  # every send returned while the loop was held
        finally:
            released.set()
        producer.flush()
    assert receive_all(broker.url, queue, 100) == [f"m-{n}" for n in range(100)]


def test_a_message_that_cannot_be_sent_fails_its_own_send(
    broker: BrokerThread, queue: Queue
) -> None:
    with haclient.connect(broker.url) as conn:
        producer = conn.create_session().create_producer(queue)
        producer.delivery_mode = DeliveryMode.NON_PERSISTENT
        message = TextMessage("bad")
        message.properties["when"] = object()  # not a JMS type: found at the send
        with pytest.raises(haclient.MessageFormatError, match="when"):
            producer.send(message)
        producer.send(TextMessage("good"))
        producer.flush()
    assert receive_all(broker.url, queue, 1) == ["good"]


def test_a_posted_send_that_failed_on_the_loop_is_raised_by_the_next_call(
    queue: Queue,
) -> None:
    """With the broker gone and ``failover.timeout`` set, the posted send's wait times out on
    the loop; the producer's next call raises that ``FailoverTimeoutError``."""
    with BrokerThread() as own:
        url = own.url + "?failover.timeout=200"
        with haclient.connect(url) as conn:
            producer = conn.create_session().create_producer(queue)
            producer.delivery_mode = DeliveryMode.NON_PERSISTENT
            seen = FailoverSeen()
            conn.add_listener(seen)
            own.kill()
            assert seen.started.wait(HANG)
            producer.send(TextMessage("lost"))  # posted: returns at once
            with pytest.raises(haclient.FailoverTimeoutError):
                producer.flush()
