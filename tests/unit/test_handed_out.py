"""``HandedOut`` (haclient.aio.dedup): which messages a session handed out before a failover,
for F8's redelivered mark. Pure bookkeeping, no event loop."""

from __future__ import annotations

from haclient.aio.dedup import HandedOut


def test_F8_a_message_handed_out_on_an_earlier_connection_was_delivered_before() -> None:
    handed = HandedOut(10)
    handed.add("q|ID:1", 0)
    assert handed.deliveries_before("q|ID:1", 0) == 0  # the same connection: the broker's word
    assert handed.deliveries_before("q|ID:1", 1) == 1  # after a failover: delivered once before
    handed.add("q|ID:1", 1)
    assert handed.deliveries_before("q|ID:1", 1) == 2  # and once more since
    assert handed.deliveries_before("q|ID:2", 1) == 0  # never handed out
    assert handed.deliveries_before(None, 1) == 0  # no id: never marked


def test_F8_a_consumed_message_is_forgotten_and_the_oldest_go_first() -> None:
    handed = HandedOut(2)
    handed.add("a", 0)
    handed.discard(["a", None])
    assert handed.deliveries_before("a", 1) == 0 and len(handed) == 0
    for key in ("a", "b", "c"):
        handed.add(key, 0)
    assert len(handed) == 2 and handed.deliveries_before("a", 1) == 0
    assert handed.deliveries_before("c", 1) == 1
    handed.add(None, 0)
    assert len(handed) == 2
