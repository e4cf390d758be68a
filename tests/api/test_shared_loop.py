"""Blocking connections share one event-loop thread, and none holds up another.

A slow listener, a connection that is failing over and a broker that does not answer all
leave the other connections on the same loop free to work. Against reference brokers run in
this process on free loopback ports. No timing asserts except generous upper bounds.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import suppress

import pytest
from blockingkit import FailoverSeen, on_loop

import haclient
from chaos.broker import BrokerThread
from haclient import Message, Queue, TextMessage

HANG = 10.0
_names = itertools.count(1)


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    with BrokerThread() as thread:
        yield thread


@pytest.fixture
def queue() -> Queue:
    return Queue(f"shared-loop-{next(_names)}")


def round_trip(conn: haclient.Connection, queue: Queue, body: str) -> str | None:
    """Send ``body`` and receive it again, each call bounded."""
    with conn.create_session(timeout=HANG) as session:
        session.create_producer(queue, timeout=HANG).send(TextMessage(body), timeout=HANG)
        message = session.create_consumer(queue, timeout=HANG).receive(timeout=HANG)
    return None if message is None else message.body  # type: ignore[attr-defined]


def test_listener_threads_exist_only_for_sessions_with_a_listener(
    broker: BrokerThread, queue: Queue
) -> None:
    with haclient.connect(broker.url) as conn:
        conn.start()
        before = threading.active_count()
        sessions = [conn.create_session() for _ in range(5)]
        for session in sessions:
            session.create_consumer(queue)
        assert threading.active_count() == before  # no thread per session or connection
        got = threading.Event()
        sessions[0].create_consumer(Queue(f"{queue.name}-listened")).set_message_listener(
            lambda message: got.set()
        )
        sessions[1].create_producer(Queue(f"{queue.name}-listened")).send(TextMessage("x"))
        assert got.wait(HANG)
        assert threading.active_count() > before  # the one listener session's dispatcher


def test_a_slow_listener_does_not_hold_up_another_connection(
    broker: BrokerThread, queue: Queue
) -> None:
    release = threading.Event()
    entered = threading.Event()

    def slow(message: Message) -> None:
        entered.set()
        release.wait(HANG)

    with haclient.connect(broker.url) as slow_conn, haclient.connect(broker.url) as other:
        assert slow_conn._boundary.loop_thread is other._boundary.loop_thread
        slow_conn.start()
        other.start()
        listened = Queue(f"{queue.name}-slow")
        session = slow_conn.create_session()
        session.create_consumer(listened).set_message_listener(slow)
        session.create_producer(listened).send(TextMessage("hold"))
        assert entered.wait(HANG)
        try:
            assert round_trip(other, queue, "free") == "free"
        finally:
            release.set()


def test_a_connection_failing_over_does_not_hold_up_another(queue: Queue) -> None:
    with (
        BrokerThread() as steady,
        BrokerThread() as lost,
        haclient.connect(steady.url) as other,
        haclient.connect(lost.url) as failing,
    ):
        other.start()
        failing.create_session()
        seen = FailoverSeen()
        failing.add_listener(seen)
        lost.kill()  # `failing` retries against a port that refuses, on the shared loop
        assert seen.started.wait(HANG)
        assert failing.state.name != "CONNECTED"
        assert round_trip(other, queue, "during failover") == "during failover"
        blocked = threading.Thread(target=lambda: _swallow(failing.create_session))
        blocked.start()  # waits at the gate of `failing`
        assert round_trip(other, queue, "while one waits") == "while one waits"
        failing.close()  # releases the blocked call
        blocked.join(HANG)
        assert not blocked.is_alive()


def _swallow(call: Callable[[], object]) -> None:
    with suppress(haclient.HAClientError):
        call()


def test_a_broker_that_does_not_answer_does_not_hold_up_another_connection(
    broker: BrokerThread, queue: Queue
) -> None:
    with (
        BrokerThread() as silent,
        haclient.connect(broker.url) as other,
        haclient.connect(silent.url) as stuck,
    ):
        other.start()
        session = stuck.create_session()
        silent.pause()  # reads and writes nothing from now on
        try:
            waiting = threading.Thread(
                target=lambda: _swallow(lambda: session.create_producer(queue, timeout=HANG))
            )
            waiting.start()  # its attach is never answered
            assert round_trip(other, queue, "beside a silent broker") == ("beside a silent broker")
        finally:
            silent.resume()
        waiting.join(HANG)
        assert not waiting.is_alive()


def test_calls_work_on_a_loop_in_asyncio_debug_mode(broker: BrokerThread, queue: Queue) -> None:
    """In debug mode asyncio refuses calls from other threads into the loop: a blocking call
    makes none (it only writes to the loop's doorbell), so everything works there."""
    with haclient.connect(broker.url, private_loop=True) as conn:
        loop = conn._boundary.loop_thread.loop
        assert loop is not None
        on_loop(conn, lambda: loop.set_debug(True))
        conn.start()
        assert round_trip(conn, queue, "in debug mode") == "in debug mode"
