"""Destinations and their AMQP mapping: addresses, prefixes, capabilities, type annotations."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any

import pytest

from haclient.amqp.types import Byte
from haclient.destination import (
    NO_PREFIXES,
    Destination,
    DestinationPrefixes,
    Queue,
    TemporaryQueue,
    TemporaryTopic,
    Topic,
    address_of,
    capability_of,
    destination_from_address,
    destination_from_capabilities,
    type_annotation,
)
from haclient.errors import ConfigurationError, InvalidDestinationError

ACTIVEMQ = DestinationPrefixes(queue="queue://", topic="topic://")

ALL: list[tuple[Destination, str, int]] = [
    (Queue("orders"), "queue", 0),
    (Topic("prices"), "topic", 1),
    (TemporaryQueue("amq.tmp.q1"), "temporary-queue", 2),
    (TemporaryTopic("amq.tmp.t1"), "temporary-topic", 3),
]


@pytest.mark.parametrize("cls", [Queue, Topic, TemporaryQueue, TemporaryTopic])
@pytest.mark.parametrize("bad", ["", None, 3])
def test_empty_or_non_str_names_are_refused(cls: Any, bad: Any) -> None:
    with pytest.raises(InvalidDestinationError):
        cls(bad)


def test_destinations_are_frozen_values() -> None:
    assert Queue("a") == Queue("a") and hash(Queue("a")) == hash(Queue("a"))
    assert Queue("a") != Topic("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        Queue("a").name = "b"  # type: ignore[misc]


def test_temporary_destinations_compare_by_address() -> None:
    assert TemporaryQueue("x") == TemporaryQueue("x")
    assert TemporaryQueue("x") != TemporaryQueue("y")
    assert TemporaryQueue("x") != TemporaryTopic("x")
    assert TemporaryQueue("x").name == TemporaryQueue("x").address == "x"


@pytest.mark.parametrize("cls", [TemporaryQueue, TemporaryTopic])
def test_F6_a_temporary_destination_keeps_its_identity_when_its_node_moves(cls: Any) -> None:
    """F6: failover re-creates the node under a new address; the object follows it, and
    equality and hash do not change, so dicts and sets keyed by it still find it."""
    inbox = cls("tmp.old")
    shallow, deep = copy.copy(inbox), copy.deepcopy(inbox)
    table = {inbox: "requests"}
    members = {inbox}
    before = hash(inbox)
    inbox._follow("tmp.new")  # what the connection does at failover
    assert inbox.address == inbox.name == "tmp.new"
    assert str(inbox).endswith("://tmp.new")
    assert hash(inbox) == before
    assert table[inbox] == "requests" and inbox in members
    for duplicate in (shallow, deep):
        assert duplicate == inbox and hash(duplicate) == before
        assert duplicate.address == "tmp.new"  # copies follow the node too
        assert table[duplicate] == "requests"
    assert inbox == cls("tmp.old")  # identity: the address it was made with
    assert inbox != cls("tmp.new")
    assert "tmp.old" in repr(inbox) and "tmp.new" in repr(inbox)


@pytest.mark.parametrize("cls", [TemporaryQueue, TemporaryTopic])
def test_a_pickled_temporary_destination_keeps_identity_and_address(cls: Any) -> None:
    inbox = cls("tmp.old")
    inbox._follow("tmp.new")
    again = pickle.loads(pickle.dumps(inbox))
    assert type(again) is cls
    assert again == inbox and hash(again) == hash(inbox)
    assert again.address == "tmp.new"
    fresh = pickle.loads(pickle.dumps(cls("plain")))
    assert fresh == cls("plain") and fresh.address == "plain" and repr(fresh) == repr(cls("plain"))


def test_temporary_destinations_have_no_settable_address() -> None:
    inbox = TemporaryQueue("x")
    with pytest.raises(AttributeError):
        inbox.address = "y"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        inbox.other = 1  # type: ignore[attr-defined]
    with pytest.raises(InvalidDestinationError):
        inbox._follow("")


def test_address_is_the_name() -> None:
    assert Queue("orders").address == "orders"
    assert Topic("prices").address == "prices"
    assert str(Queue("orders")) == "queue://orders"
    assert str(TemporaryTopic("t")) == "temp-topic://t"


@pytest.mark.parametrize(("destination", "capability", "type_byte"), ALL)
def test_capability_and_type_annotation(
    destination: Destination, capability: str, type_byte: int
) -> None:
    assert capability_of(destination) == capability
    annotation = type_annotation(destination)
    assert type(annotation) is Byte and annotation == type_byte


def test_non_destinations_are_refused() -> None:
    with pytest.raises(InvalidDestinationError):
        capability_of("orders")  # type: ignore[arg-type]
    with pytest.raises(InvalidDestinationError):
        address_of("orders")  # type: ignore[arg-type]
    with pytest.raises(InvalidDestinationError):
        type_annotation(None)  # type: ignore[arg-type]


def test_prefixes_are_applied_to_queues_and_topics_only() -> None:
    assert address_of(Queue("orders"), ACTIVEMQ) == "queue://orders"
    assert address_of(Topic("prices"), ACTIVEMQ) == "topic://prices"
    # Temporary destinations hold the broker's address already.
    assert address_of(TemporaryQueue("tmp1"), ACTIVEMQ) == "tmp1"
    assert address_of(TemporaryTopic("tmp2"), ACTIVEMQ) == "tmp2"
    # A name that already carries the prefix is not prefixed twice (as Qpid JMS).
    assert address_of(Queue("queue://orders"), ACTIVEMQ) == "queue://orders"
    assert address_of(Queue("orders")) == "orders"


def test_prefixes_from_open_properties() -> None:
    props = {"queue-prefix": "queue://", "topic-prefix": "topic://", "product": "ActiveMQ"}
    assert DestinationPrefixes.from_open_properties(props) == ACTIVEMQ
    assert DestinationPrefixes.from_open_properties(None) == NO_PREFIXES
    assert DestinationPrefixes.from_open_properties({"queue-prefix": 5}) == NO_PREFIXES


def test_bad_prefix_config_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError) as info:
        DestinationPrefixes(queue=None)  # type: ignore[arg-type]
    assert info.value.option == "queue-prefix"


@pytest.mark.parametrize(("destination", "capability", "type_byte"), ALL)
def test_address_round_trip_with_annotation(
    destination: Destination, capability: str, type_byte: int
) -> None:
    for prefixes in (NO_PREFIXES, ACTIVEMQ):
        address = address_of(destination, prefixes)
        back = destination_from_address(address, type_annotation(destination), prefixes=prefixes)
        assert back == destination


def test_prefix_tells_the_type_when_no_annotation() -> None:
    assert destination_from_address("queue://a", prefixes=ACTIVEMQ) == Queue("a")
    assert destination_from_address("topic://b", prefixes=ACTIVEMQ) == Topic("b")
    # Without annotation or prefix: the consumer's destination type, else a queue.
    assert destination_from_address("c", prefixes=ACTIVEMQ) == Queue("c")
    assert destination_from_address("c", default=Topic("x")) == Topic("c")
    assert destination_from_address("c", default=TemporaryTopic("x")) == TemporaryTopic("c")
    assert destination_from_address(None) is None
    assert destination_from_address("") is None


def test_annotation_wins_over_prefix_and_strips_only_its_own() -> None:
    # Typed as a topic: only the topic prefix is stripped (Qpid JMS).
    assert destination_from_address("queue://a", Byte(1), prefixes=ACTIVEMQ) == Topic("queue://a")
    assert destination_from_address("topic://a", Byte(1), prefixes=ACTIVEMQ) == Topic("a")


@pytest.mark.parametrize(
    ("legacy", "expected"),
    [
        ("queue", Queue("a")),
        ("topic", Topic("a")),
        ("temporary,queue", TemporaryQueue("a")),
        ("topic , temporary", TemporaryTopic("a")),
        ("bogus", Queue("a")),
    ],
)
def test_legacy_string_annotations(legacy: str, expected: Destination) -> None:
    assert destination_from_address("a", legacy) == expected


def test_unknown_annotation_values_fall_back() -> None:
    assert destination_from_address("a", Byte(9), default=Topic("t")) == Topic("a")
    assert destination_from_address("a", True) == Queue("a")


@pytest.mark.parametrize(
    ("capabilities", "expected"),
    [
        (("temporary-queue",), TemporaryQueue("dyn")),
        (("temporary-topic",), TemporaryTopic("dyn")),
        (("topic",), Topic("dyn")),
        (("queue",), Queue("dyn")),
        ((), Queue("dyn")),
    ],
)
def test_destination_from_capabilities(
    capabilities: tuple[str, ...], expected: Destination
) -> None:
    assert destination_from_capabilities("dyn", capabilities) == expected


def test_item19_str_of_a_temporary_destination_shows_its_scheme_once() -> None:
    activemq = "temp-queue://ID:host-39455-1764100000000-1:1:1"  # ActiveMQ's dynamic address
    assert str(TemporaryQueue(activemq)) == activemq
    assert str(TemporaryTopic("temp-topic://ID:h-1:1:1")) == "temp-topic://ID:h-1:1:1"
    assert str(TemporaryQueue("amq.tmp.q1")) == "temp-queue://amq.tmp.q1"
