"""Rule E6 (the redelivery policy, Qpid JMS's ``jms.redeliveryPolicy``) through both APIs, on the
reference broker: a message redelivered more often than ``max_redeliveries`` allows is never
handed out (``receive`` or listener, any acknowledge mode), the client settles it with
``redelivery_outcome``, counts it in ``statistics()`` and the metrics, and tells the
connection's listeners. Where the message ends up is the broker's business; the reference
broker puts ``rejected`` messages, and ``modified(delivery-failed)`` ones that reach its own
limit (``max_delivery_count``), in its dead-letter queue, ``released`` and ``modified`` ones
back in their queue (``undeliverable-here``: for other consumers only).

Not run on RabbitMQ: 3.10 gives messages back with ``released`` (E4), which leaves their
delivery-count at 0, so the policy never fires there.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from apikit import Api, Bed, eventually, make_api
from rulekit import TIMEOUT, leftovers, send, started
from test_metrics import scrape

from chaos.broker import BrokerThread
from haclient.destination import Queue
from haclient.message import Message
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio

LIMIT = 3  # the limited broker dead-letters a message whose delivery failed for the 3rd time


@pytest.fixture(scope="module")
def plain() -> Iterator[Bed]:
    """A reference broker without a redelivery limit of its own."""
    with BrokerThread() as broker:
        yield Bed("reference", broker.url, admin=broker, attach_timeout=10)


@pytest.fixture(scope="module")
def limited() -> Iterator[Bed]:
    """A reference broker that dead-letters a message at its ``LIMIT``-th failed delivery."""
    with BrokerThread(max_delivery_count=LIMIT) as broker:
        yield Bed("reference", broker.url, admin=broker, attach_timeout=10)


class Recorder:
    """A connection listener that keeps the dead-letter events (from any thread)."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()

    def message_dead_lettered(
        self, destination: Any, message_id: str | None, delivery_count: int, outcome: str
    ) -> None:
        with self._lock:
            self.events.append((destination, message_id, delivery_count, outcome))


async def _dead_letters(bed: Bed, body: str) -> list[Any]:
    """The bodies equal to ``body`` in the broker's dead-letter queue (shared by the tests)."""
    return [each for each in await leftovers(bed, "DLQ", wait=0.2) if each == body]


async def _give_back(session: Any, mode: AckMode) -> None:
    if mode is AckMode.TRANSACTED:
        await session.rollback()
    else:
        await session.recover()


@pytest.mark.parametrize("mode", [AckMode.CLIENT, AckMode.TRANSACTED], ids=["client", "transacted"])
async def test_E6_a_message_past_max_redeliveries_is_dead_lettered_never_handed_out(
    api: Api, limited: Bed, mode: AckMode
) -> None:
    queue = Queue(limited.unique("e6"))
    body = queue.name
    await send(limited, queue, body)
    recorder = Recorder()
    async with await started(api, limited, max_redeliveries=1) as connection:
        await connection.add_listener(recorder)
        session = await connection.create_session(mode)
        consumer = await session.create_consumer(queue)
        counts = []
        for _ in range(2):  # the first delivery and one redelivery are allowed
            message = await consumer.receive(TIMEOUT)
            assert message is not None and message.body == body
            counts.append(message.delivery_count)
            await _give_back(session, mode)
        assert await consumer.receive(0.3) is None  # the third delivery never comes out
        statistics = await connection.statistics()
        await eventually(lambda: recorder.events)
        types, samples = scrape(connection.target)
    assert counts == [1, 2]
    assert statistics.messages_dead_lettered == 1
    assert statistics.messages_received == 2  # the dead-lettered one is not counted received
    name = statistics.name
    assert samples[("haclient_messages_dead_lettered_total", frozenset({("connection", name)}))]
    assert types["haclient_messages_dead_lettered"] == "counter"
    assert recorder.events == [(queue, message.message_id, 3, "MODIFIED_FAILED_UNDELIVERABLE")]
    # modified(delivery-failed, undeliverable-here) made it the broker's 3rd failed delivery
    assert await _dead_letters(limited, body) == [body]
    assert await leftovers(limited, queue.name, wait=0.2) == []


async def test_E6_a_listener_is_never_called_with_it(api: Api, limited: Bed) -> None:
    queue = Queue(limited.unique("e6l"))
    body = queue.name
    await send(limited, queue, body)
    recorder = Recorder()
    calls: list[int] = []

    async def failing(message: Message) -> None:
        calls.append(message.delivery_count)
        raise RuntimeError("this message is poison")  # AUTO: given back, delivery failed

    async with await started(api, limited, max_redeliveries=1) as connection:
        await connection.add_listener(recorder)
        session = await connection.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(queue)
        await consumer.set_message_listener(api.listener(failing))
        await eventually(lambda: recorder.events)
        statistics = await connection.statistics()
    assert calls == [1, 2]
    assert statistics.messages_dead_lettered == 1
    assert [event[2:] for event in recorder.events] == [(3, "MODIFIED_FAILED_UNDELIVERABLE")]
    assert await _dead_letters(limited, body) == [body]


@pytest.mark.parametrize(
    ("outcome", "where"),
    [
        ("ACCEPTED", "gone"),
        ("REJECTED", "dead-letter queue"),
        ("RELEASED", "queue"),
        ("MODIFIED_FAILED", "queue"),
        ("MODIFIED_FAILED_UNDELIVERABLE", "queue, for other consumers"),
    ],
)
async def test_E6_each_outcome_is_the_disposition_qpid_jms_sends(
    plain: Bed, outcome: str, where: str
) -> None:
    """Each outcome on a broker without a limit of its own: only ``rejected`` dead-letters
    there; ``released`` and ``modified`` give it back (to this consumer again, except
    ``undeliverable-here``), where the client settles it again each time. The async core
    only: the blocking API forwards the option, as the tests above show."""
    api = make_api("aio")
    queue = Queue(plain.unique("e6o"))
    body = queue.name
    await send(plain, queue, body)
    options = {"max_redeliveries": 0, "redelivery_outcome": outcome}
    async with await started(api, plain, **options) as connection:
        session = await connection.create_session(AckMode.CLIENT)
        consumer = await session.create_consumer(queue)
        message = await consumer.receive(TIMEOUT)
        assert message is not None and message.delivery_count == 1
        await session.recover()
        assert await consumer.receive(0.3) is None
        await consumer.close()
        statistics = await connection.statistics()
    again = outcome in ("RELEASED", "MODIFIED_FAILED")  # back to this very consumer
    assert (
        statistics.messages_dead_lettered >= 1 if again else statistics.messages_dead_lettered == 1
    )
    left = await leftovers(plain, queue.name, wait=0.2)
    assert left == ([body] if where.startswith("queue") else [])
    assert await _dead_letters(plain, body) == ([body] if where == "dead-letter queue" else [])


async def test_E6_off_by_default_every_redelivery_is_handed_out(api: Api, plain: Bed) -> None:
    queue = Queue(plain.unique("e6d"))
    await send(plain, queue, "again")
    async with await started(api, plain, prefetch=1) as connection:
        session = await connection.create_session(AckMode.CLIENT)
        consumer = await session.create_consumer(queue)
        counts = []
        for _ in range(4):
            message = await consumer.receive(TIMEOUT)
            assert message is not None
            counts.append(message.delivery_count)
            await session.recover()
        statistics = await connection.statistics()
    assert counts == [1, 2, 3, 4]
    assert statistics.messages_dead_lettered == 0
