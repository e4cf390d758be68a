"""Fixtures shared by every test tier.

Tests that need a broker which is not installed skip on a developer's machine; CI sets
``HACLIENT_REQUIRE_BROKERS=1`` to turn those skips into failures.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from chaos.rabbitmq import RabbitMQNode

REQUIRE_BROKERS = "HACLIENT_REQUIRE_BROKERS"


def skip_or_fail(reason: str) -> None:
    """Skip the test, or fail it when ``HACLIENT_REQUIRE_BROKERS=1`` says brokers are required."""
    if os.environ.get(REQUIRE_BROKERS) == "1":
        pytest.fail(f"{reason}, and {REQUIRE_BROKERS}=1 forbids skipping", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Run anyio tests on asyncio; override this fixture (or parametrize it) for trio."""
    return "asyncio"


@pytest.fixture(scope="session")
def rabbitmq_installed() -> None:
    """Skip (or fail, see above) unless Debian's ``rabbitmq-server`` is installed."""
    if not RabbitMQNode.available():
        skip_or_fail(
            "RabbitMQ is not installed: no rabbitmq-server on PATH or in /usr/sbin "
            "(`make test` installs Debian's rabbitmq-server when run as root)"
        )


@pytest.fixture(scope="session")
def rabbitmq(rabbitmq_installed: None) -> Iterator[RabbitMQNode]:
    """A private RabbitMQ node with the AMQP 1.0 plugin, shared by the whole session."""
    with RabbitMQNode() as node:
        yield node


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    """Debian's ``prometheus`` server; skip (or fail, see above) when it is not installed."""
    found = shutil.which("prometheus") or shutil.which("prometheus", path="/usr/bin:/usr/sbin")
    if found is None:
        skip_or_fail(
            "Prometheus is not installed: no prometheus on PATH "
            "(`make test` installs Debian's prometheus when run as root)"
        )
    assert found is not None
    return found
