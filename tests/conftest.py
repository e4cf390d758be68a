"""Fixtures shared by every test tier.

Tests that need a broker which is not installed skip on a developer's machine; CI sets
``HACLIENT_REQUIRE_BROKERS=1`` to turn those skips into failures.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest
from hypothesis import settings

from chaos.postgresql import PostgresServer
from chaos.rabbitmq import RabbitMQNode, start_all
from chaos.rabbitmq_tls import RabbitMQTls

REQUIRE_BROKERS = "HACLIENT_REQUIRE_BROKERS"

# Property tests have no deadline per example: a timing is measured in bench/, never asserted,
# and Hypothesis's default (200 ms) failed examples of tests/unit/test_failover_url.py on a
# machine another job kept busy (issue 41: deterministic under load).
settings.register_profile("haclient", deadline=None)
settings.load_profile("haclient")


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


@pytest.fixture
def two_rabbitmq_tls_nodes(
    rabbitmq_installed: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RabbitMQNode, RabbitMQNode]]:
    """Two independent RabbitMQ nodes with TLS and SASL EXTERNAL, sharing one test CA.

    Yields the two started nodes; for each ``node``:

    - ``node.amqps_url``: ``amqps://127.0.0.1:<node.tls_port>``, no user in it. The node's
      certificate names 127.0.0.1 (IP) and ``localhost`` (DNS); a client whose host name check
      knows DNS names only (proton's) must check ``localhost`` (SNI).
    - ``node.tls.ca_file``: the CA (PEM) that signed both nodes' and the client's certificates;
      the same file for both nodes.
    - ``node.tls.client_cert_file``, ``node.tls.client_key_file``: the client certificate and
      its unencrypted key (PEM), the same for both nodes. The nodes refuse a TLS client
      without a certificate.
    - ``node.tls.user``: ``haclient-tls``, the certificate's common name, the user EXTERNAL
      logs in (every permission on vhost ``/``; no password, so PLAIN cannot log it in).
    - ``node.url``: the plain listener, ``guest``/``guest`` over PLAIN as before.

    Function-scoped, as a test may kill a node (SIGKILL of ``node.vm_pid``). The nodes start
    side by side; both are stopped, by pid, whatever happened to them.
    """
    import trustme  # a test dependency; loaded only by the tests that use TLS

    tls = RabbitMQTls.from_ca(trustme.CA(), tmp_path_factory.mktemp("rabbitmq-tls"))
    nodes = (RabbitMQNode(tls=tls), RabbitMQNode(tls=tls))
    try:
        start_all(nodes)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


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


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A private PostgreSQL server (Debian's ``postgresql``: initdb into a temporary directory,
    127.0.0.1 on a free port, run as ``postgres`` when the tests run as root), shared by the
    session, stopped by its pid; skip (or fail, see above) when PostgreSQL or psycopg is
    missing."""
    if not PostgresServer.available():
        skip_or_fail(
            "PostgreSQL is not installed: no /usr/lib/postgresql/*/bin/postgres "
            "(`make test` installs Debian's postgresql when run as root)"
        )
    try:
        import psycopg  # noqa: F401  (the 'postgresql' extra)
    except ModuleNotFoundError:
        skip_or_fail("psycopg is not installed: pip install 'haclient[postgresql]'")
    with PostgresServer() as server:
        yield server


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """The ``postgresql://`` URL of a fresh database on the session's PostgreSQL server."""
    return postgres_server.create_database()
