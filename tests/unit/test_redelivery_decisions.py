"""Rule E6's decisions (``haclient.aio.redelivery``) and its two options, as Qpid JMS reads them."""

from __future__ import annotations

import pytest

from failover.url import parse_url
from haclient.aio.options import ConnectionOptions
from haclient.aio.redelivery import dead_letter_outcome, exceeds
from haclient.amqp.types import Accepted, Modified, Rejected, Released
from haclient.errors import ConfigurationError
from haclient.options import CLIENT_OPTIONS


def test_E6_the_redelivery_count_is_the_delivery_count_minus_one() -> None:
    assert not exceeds(1, 0)  # the first delivery is never a redelivery
    assert exceeds(2, 0)
    assert not exceeds(6, 5) and exceeds(7, 5)  # five redeliveries allowed, the sixth is not
    assert not any(exceeds(count, -1) for count in (1, 2, 1000))  # -1: off


def test_E6_each_outcome_is_the_disposition_qpid_jms_sends() -> None:
    assert dead_letter_outcome("ACCEPTED", None) == Accepted()
    assert dead_letter_outcome("REJECTED", None) == Rejected()
    assert dead_letter_outcome("RELEASED", None) == Released()
    assert dead_letter_outcome("MODIFIED_FAILED", None) == Modified(delivery_failed=True)
    default = dead_letter_outcome("MODIFIED_FAILED_UNDELIVERABLE", "ActiveMQ")
    assert default == Modified(delivery_failed=True, undeliverable_here=True)


def test_E6_rabbitmq_gets_rejected_for_modified_which_would_end_its_session() -> None:
    for name in ("MODIFIED_FAILED", "MODIFIED_FAILED_UNDELIVERABLE"):
        assert dead_letter_outcome(name, "RabbitMQ") == Rejected()
    assert dead_letter_outcome("RELEASED", "RabbitMQ") == Released()


def _options(query: str, **keywords: object) -> ConnectionOptions:
    url = f"amqp://broker:5672?{query}" if query else "amqp://broker:5672"
    return ConnectionOptions.build(parse_url(url, options=CLIENT_OPTIONS), keywords)


def test_E6_the_options_default_to_qpid_jms_defaults() -> None:
    options = _options("")
    assert options.max_redeliveries == -1
    assert options.redelivery_outcome == "MODIFIED_FAILED_UNDELIVERABLE"


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("REJECTED", "REJECTED"),
        ("rejected", "REJECTED"),  # Qpid JMS reads the name in any case ...
        ("Modified_Failed", "MODIFIED_FAILED"),
        ("1", "ACCEPTED"),  # ... or its number
        ("3", "RELEASED"),
        ("5", "MODIFIED_FAILED_UNDELIVERABLE"),
    ],
)
def test_E6_a_qpid_jms_url_sets_the_policy(text: str, name: str) -> None:
    query = f"jms.redeliveryPolicy.maxRedeliveries=5&jms.redeliveryPolicy.outcome={text}"
    options = _options(query)
    assert (options.max_redeliveries, options.redelivery_outcome) == (5, name)
    printed = "&".join(f"{key}={value}" for key, value in options.url_options().items())
    assert _options(printed) == options  # prints back as the name


@pytest.mark.parametrize(
    "query",
    [
        "jms.redeliveryPolicy.outcome=DISCARD",
        "jms.redeliveryPolicy.outcome=6",
        "jms.redeliveryPolicy.maxRedeliveries=-2",
        "jms.redeliveryPolicy.maxRedeliveries=many",
    ],
)
def test_E6_a_bad_value_names_the_option(query: str) -> None:
    with pytest.raises(ConfigurationError, match="redeliveryPolicy"):
        _options(query)


def test_E6_keywords_take_the_names_and_win_over_the_url() -> None:
    options = _options(
        "jms.redeliveryPolicy.maxRedeliveries=5",
        max_redeliveries=0,
        redelivery_outcome="REJECTED",
    )
    assert (options.max_redeliveries, options.redelivery_outcome) == (0, "REJECTED")
    with pytest.raises(ConfigurationError, match="redelivery_outcome"):
        _options("", redelivery_outcome="rejected")
