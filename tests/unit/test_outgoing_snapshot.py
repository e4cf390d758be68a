"""M11's snapshot (``haclient.outgoing``): what a blocking send hands to the event loop is the
message as it was at the send, and encoding it again for another connection (after failover)
gives what encoding the message there would have given."""

from __future__ import annotations

import pytest

from haclient.destination import DestinationPrefixes, Queue, TemporaryQueue, Topic
from haclient.message import (
    BytesMessage,
    DeliveryMode,
    Int,
    MapMessage,
    Message,
    StreamMessage,
    TextMessage,
)
from haclient.outgoing import EncodingTerms, OutgoingEncoder, stamp

HERE = EncodingTerms(0, DestinationPrefixes(), None)
THERE = EncodingTerms(1, DestinationPrefixes(queue="queue://", topic="topic://"), b"alice")


def stamped(message: Message, destination: Queue | Topic | TemporaryQueue) -> Message:
    stamp(
        message,
        destination,
        delivery_mode=DeliveryMode.NON_PERSISTENT,
        priority=7,
        time_to_live=60.0,
        delivery_delay=2.0,
        message_id="ID:test:1:1",
        now=1_700_000_000.0,
    )
    return message


MESSAGES = [
    TextMessage("héllo", properties={"n": Int(3), "s": "x"}),
    BytesMessage(b"\x00\x01"),
    MapMessage({"a": 1, "b": "two"}),
    StreamMessage([1, "a", 2.5]),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_M11_a_snapshot_is_the_message_as_it_was_when_sent(message: Message) -> None:
    encoder = OutgoingEncoder()
    message = stamped(message, Queue("orders"))
    message.correlation_id = "c-1"
    message.reply_to = Topic("replies")
    snapshot = encoder.snapshot(message, HERE)
    expected = OutgoingEncoder().encode(message, HERE.prefixes, None, stamp_user_id=True)
    message.properties["n"] = Int(4)  # reused after send() returned: the snapshot keeps its own
    message.correlation_id = "c-2"
    assert snapshot.payload == expected
    assert snapshot.message_id == "ID:test:1:1"
    assert snapshot.delivery_mode is DeliveryMode.NON_PERSISTENT
    assert snapshot.destination == Queue("orders")


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_M11_encoded_again_for_another_connection_is_what_encoding_it_there_gives(
    message: Message,
) -> None:
    temporary = TemporaryQueue("temp-1")
    message = stamped(message, temporary)
    message.reply_to = Queue("replies")
    snapshot = OutgoingEncoder().snapshot(message, HERE)
    temporary._follow("temp-2")  # failover moved it (F6): same identity, new address
    again = OutgoingEncoder().again(snapshot, THERE)
    assert again == OutgoingEncoder().encode(
        message, THERE.prefixes, THERE.user_id, stamp_user_id=True
    )
