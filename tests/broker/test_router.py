"""The router's seams: the explicit queue policy, dead-letter copies and publisher origins."""

from __future__ import annotations

import pytest
from brokerkit import message

from chaos.broker.nodes import Queue, StoredMessage, Topic
from chaos.broker.router import Router
from chaos.broker.schedule import NodePolicy

pytestmark = pytest.mark.anyio


async def test_every_queue_the_router_creates_takes_its_policy() -> None:
    policy = NodePolicy(max_delivery_count=3, queue_policies={"special": 5})
    router = Router(policy=policy)
    queue = router.lookup("plain")
    special = router.lookup("special")
    temporary = router.create_temporary("queue", owner=1)
    topic = router.lookup("topic://news")
    assert isinstance(queue, Queue) and isinstance(special, Queue)
    assert isinstance(temporary, Queue) and isinstance(topic, Topic)
    subscription = router.subscribe(topic)
    router.dead_letter(router.new_message(message("dead")))
    dlq = router.find("DLQ")
    assert isinstance(dlq, Queue)
    for node in (queue, special, temporary, subscription, dlq):
        assert node.policy is policy
    assert (queue.max_deliveries, special.max_deliveries) == (3, 5)


async def test_a_router_without_a_policy_gives_its_queues_a_default_one() -> None:
    one, other = Router(), Router()
    queue = one.lookup("q")
    assert isinstance(queue, Queue)
    assert queue.policy is one.policy and one.policy is not other.policy
    assert queue.max_deliveries is None and queue.policy.scheduler is None


async def test_dead_letter_copies_get_fresh_ids() -> None:
    router = Router()
    original = router.new_message(message("dead"))
    router.dead_letter(original)
    router.dead_letter(original.copy())
    dlq = router.find("DLQ")
    assert isinstance(dlq, Queue)
    ids = [m.id for m in dlq.messages]
    assert len(set(ids)) == 2 and original.id not in ids


async def test_origin_is_kept_by_copies_and_accepts_filters_topic_subscribers() -> None:
    router = Router()
    published = router.new_message(message("news"), origin="publisher")
    assert published.origin == "publisher" and published.copy().origin == "publisher"
    assert router.new_message(message("other")).origin is None

    class Picky(Queue):
        def accepts(self, message: StoredMessage) -> bool:
            return message.origin != "publisher"

    topic = Topic("news")
    picky, plain = Picky("picky"), Queue("plain")
    topic.subscriptions += [picky, plain]
    topic.publish(published)
    assert (picky.depth, plain.depth) == (0, 1)
    [got] = plain.messages
    assert got.origin == "publisher"
