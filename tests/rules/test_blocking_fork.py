"""C8: a process forked after blocking connections were used (``multiprocessing``'s 'fork' start
method, the default on Linux with Python 3.11) gets a fresh runtime on first use, and the
connections it inherited raise ``IllegalStateError`` naming the fork.

On the reference broker and on RabbitMQ (the ``bed`` fixture). The pool starts after the
parent used one connection and closed it (what used to make a child's ``connect()`` hang) and
while another is still open; each worker makes connections of its own and sends with them, and
the parent's open connection still works afterwards (the children never touched its socket).
"""

from __future__ import annotations

import multiprocessing
import os

import pytest
from apikit import Bed

import haclient
from haclient import DeliveryMode, Queue, TextMessage
from haclient.errors import IllegalStateError

HANG = 30.0
"""Upper bound, in seconds, for anything that should happen at once (a worker's whole task)."""

_inherited: list[haclient.Connection] = []
"""The parent's open connection, as each forked worker inherits it."""


def _in_worker(url: str, queue_name: str, n: int) -> tuple[int, str]:
    """In a forked worker: try the inherited connection, then send with one of its own."""
    inherited = _inherited[0]
    try:
        inherited.create_session()
    except IllegalStateError as exc:
        said = str(exc)
    else:
        said = "no error"
    inherited.close()  # quiet, and touches nothing of the parent's
    with haclient.connect(url) as conn:
        producer = conn.create_session().create_producer(Queue(queue_name))
        producer.send(TextMessage(f"worker-{n}"), delivery_mode=DeliveryMode.NON_PERSISTENT)
        producer.send(TextMessage(f"worker-{n}-persistent"))
    return os.getpid(), said


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_C8_a_forked_worker_pool_gets_a_fresh_runtime_and_refuses_the_parents_connections(
    bed: Bed,
) -> None:
    queue = Queue(bed.unique("fork"))
    with haclient.connect(bed.url) as used:  # used and closed before the fork
        used.create_session().create_producer(queue).send(TextMessage("parent-before"))
    parent = haclient.connect(bed.url)
    try:
        parent.start()
        session = parent.create_session()
        consumer = session.create_consumer(queue)
        message = consumer.receive(timeout=HANG)
        assert message is not None and message.body == "parent-before"  # type: ignore[attr-defined]
        _inherited[:] = [parent]
        context = multiprocessing.get_context("fork")
        with context.Pool(2) as pool:
            results = pool.starmap_async(
                _in_worker, [(bed.url, queue.name, n) for n in range(4)]
            ).get(timeout=HANG)
        workers = {pid for pid, _ in results}
        assert os.getpid() not in workers
        for _, said in results:
            assert "fork" in said, said
        expected = {f"worker-{n}" for n in range(4)} | {f"worker-{n}-persistent" for n in range(4)}
        got = set()
        while len(got) < len(expected):
            message = consumer.receive(timeout=HANG)
            assert message is not None, f"only {sorted(got)} arrived"
            got.add(message.body)  # type: ignore[attr-defined]
        assert got == expected
        # The parent's connection, open during the fork, is untouched and still works.
        session.create_producer(queue).send(TextMessage("parent-after"))
        message = consumer.receive(timeout=HANG)
        assert message is not None and message.body == "parent-after"  # type: ignore[attr-defined]
    finally:
        _inherited.clear()
        parent.close()
