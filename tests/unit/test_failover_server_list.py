"""F12 parsing: the Open frame's ``failover-server-list`` and membership message lists."""

from __future__ import annotations

import pytest

from failover.url import merge_broker_lists, parse_url
from haclient.aio.membership import advertised_brokers, membership_brokers
from haclient.amqp.types import Symbol
from haclient.errors import ConfigurationError
from haclient.options import CLIENT_OPTIONS


def test_server_list_entries_become_brokers() -> None:
    server_list = [
        {Symbol("hostname"): "a.example", Symbol("port"): 5673, Symbol("scheme"): "amqp"},
        {Symbol("network-host"): "10.0.0.2", Symbol("port"): 5671, Symbol("scheme"): "amqps"},
        {Symbol("hostname"): "::1", Symbol("port"): 5672},
    ]
    brokers = advertised_brokers(server_list)
    assert [(b.scheme, b.host, b.port) for b in brokers] == [
        ("amqp", "a.example", 5673),
        ("amqps", "10.0.0.2", 5671),
        ("amqp", "::1", 5672),
    ]


@pytest.mark.parametrize(
    "bad",
    [
        [{Symbol("port"): 5672}],  # no host
        [{Symbol("hostname"): "h", Symbol("port"): "x"}],  # not a port
        [{Symbol("hostname"): "h", Symbol("scheme"): "http"}],  # not AMQP
        ["amqp://h:1"],  # not a map
    ],
)
def test_bad_server_list_entries_are_skipped(bad: list[object]) -> None:
    assert advertised_brokers(bad) == []


def test_a_server_list_that_is_no_list_is_ignored() -> None:
    assert advertised_brokers("amqp://h:1") == []
    assert advertised_brokers(None) == []


def test_membership_urls_are_comma_separated() -> None:
    brokers = membership_brokers("amqp://a:1, amqps://b:2,")
    assert [(b.scheme, b.host, b.port) for b in brokers] == [("amqp", "a", 1), ("amqps", "b", 2)]
    assert membership_brokers("") == []


@pytest.mark.parametrize("bad", ["not a url", "failover:(amqp://a:1)", 42, None])
def test_bad_membership_lists_raise_naming_the_problem(bad: object) -> None:
    with pytest.raises(ConfigurationError):
        membership_brokers(bad)


def test_an_advertised_plain_entry_cannot_downgrade_a_tls_seed() -> None:
    seed = parse_url("amqps://seed:5671", options=CLIENT_OPTIONS).brokers
    learned = membership_brokers("amqp://plain:5672,amqps://tls:5671")
    merged = merge_broker_lists(seed, learned, secure=True)
    assert [b.host for b in merged] == ["tls", "seed"]
