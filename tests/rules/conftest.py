"""Fixtures of the rule tests: every test runs for api in {aio, blocking} x broker in
{reference, rabbitmq} (see ``apikit``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from apikit import API_NAMES, Api, Bed, make_api

from chaos.broker import BrokerThread
from chaos.rabbitmq import RabbitMQNode


@pytest.fixture(scope="module")
def reference_broker() -> Iterator[BrokerThread]:
    """A reference broker in a thread of its own, shared by one test module (tests use
    unique node names, so they do not see each other's messages)."""
    with BrokerThread() as broker:
        yield broker


@pytest.fixture(params=API_NAMES)
def api(request: pytest.FixtureRequest) -> Api:
    """The API under test: ``aio`` (async core) or ``blocking`` (the ``haclient`` facade)."""
    return make_api(request.param)


@pytest.fixture(
    params=["reference", pytest.param("rabbitmq", marks=pytest.mark.rabbitmq)],
)
def bed(request: pytest.FixtureRequest) -> Bed:
    """The broker under test (see ``apikit.Bed``)."""
    if request.param == "reference":
        broker: BrokerThread = request.getfixturevalue("reference_broker")
        return Bed("reference", broker.url, admin=broker, attach_timeout=10)
    node: RabbitMQNode = request.getfixturevalue("rabbitmq")
    # RabbitMQ leaves attaches of features it lacks unanswered: keep that wait short.
    return Bed("rabbitmq", node.url, attach_timeout=3)
