"""Fixtures of the rule tests: every test runs for api in {aio, aio on trio, blocking} x broker
in {reference, rabbitmq} (see ``apikit``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from apikit import API_NAMES, Api, Bed, make_api
from failoverkit import HaPair

from chaos.broker import BrokerThread
from chaos.rabbitmq import RabbitMQNode


@pytest.fixture(scope="module")
def reference_broker() -> Iterator[BrokerThread]:
    """A reference broker in a thread of its own, shared by one test module (tests use
    unique node names, so they do not see each other's messages)."""
    with BrokerThread() as broker:
        yield broker


@pytest.fixture(scope="module")
def activemq_broker() -> Iterator[BrokerThread]:
    """A reference broker in ActiveMQ mode (``mode="activemq"``), shared by one test module."""
    with BrokerThread(mode="activemq") as broker:
        yield broker


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[HaPair]:
    """A shared-store HA pair of reference brokers (``failoverkit.HaPair``) for one test."""
    with HaPair(tmp_path / "store") as running:
        yield running


API_VARIANTS = [
    *(pytest.param((name, "asyncio"), id=name) for name in API_NAMES),
    pytest.param(("aio", "trio"), id="aio-trio"),
]
"""(API, anyio backend): the async API promises asyncio and trio, so its tests run on both;
the blocking API runs its own asyncio loop whatever the test's is, so it runs once."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The trio variant runs against the reference broker only: what trio changes is the
    client's event loop, which RabbitMQ's own runs (on asyncio) already cover; this keeps the
    suite's added time modest."""
    dropped = [item for item in items if _trio_on_rabbitmq(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if not _trio_on_rabbitmq(item)]


def _trio_on_rabbitmq(item: pytest.Item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return params.get("api_variant") == ("aio", "trio") and (
        item.get_closest_marker("rabbitmq") is not None
    )


@pytest.fixture(params=API_VARIANTS)
def api_variant(request: pytest.FixtureRequest) -> tuple[str, str]:
    """The API under test and the event loop the test runs on."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def api(api_variant: tuple[str, str]) -> Api:
    """The API under test: ``aio`` (async core) or ``blocking`` (the ``haclient`` facade)."""
    return make_api(api_variant[0])


@pytest.fixture
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """asyncio, or trio for the async API's trio variant (tests without ``api``: asyncio)."""
    if "api_variant" in request.fixturenames:
        return request.getfixturevalue("api_variant")[1]  # type: ignore[no-any-return]
    return "asyncio"


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
