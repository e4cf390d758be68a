"""The RabbitMQ test node over TLS: a client certificate logs in with SASL EXTERNAL, and the node
refuses a client without one, with one from another CA, or with one naming nobody it knows.

The client is python-qpid-proton's own blocking API, not haclient: this proves the test bed,
whatever the client's TLS does. Proton checks the node's name against DNS names only, so it
checks ``localhost`` (SNI), which the node's certificate names beside 127.0.0.1.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from proton import ConnectionException, Message, SSLDomain
from proton.utils import BlockingConnection

from chaos.rabbitmq import RabbitMQNode
from chaos.rabbitmq_tls import RabbitMQTls

pytestmark = [
    pytest.mark.rabbitmq,
    pytest.mark.xdist_group("rabbitmq-tls"),  # one worker: the module's TLS node started once
]

TIMEOUT = 10.0


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def node(
    rabbitmq_installed: None, ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RabbitMQNode]:
    """One TLS node for the module, stopped by pid at the end."""
    tls = RabbitMQTls.from_ca(ca, tmp_path_factory.mktemp("rabbitmq-tls"))
    with RabbitMQNode(tls=tls) as started:
        yield started


def _domain(ca_file: Path, identity: tuple[Path, Path] | None) -> SSLDomain:
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    if identity is not None:
        domain.set_credentials(str(identity[0]), str(identity[1]), None)
    domain.set_trusted_ca_db(str(ca_file))
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    return domain


def _connect(node: RabbitMQNode, identity: tuple[Path, Path] | None) -> BlockingConnection:
    """A proton connection to the node's TLS port that allows EXTERNAL only."""
    assert node.tls is not None
    return BlockingConnection(
        node.amqps_url,
        timeout=TIMEOUT,
        ssl_domain=_domain(node.tls.ca_file, identity),
        sni="localhost",
        sasl_enabled=True,
        allowed_mechs="EXTERNAL",
    )


def _identity(node: RabbitMQNode) -> tuple[Path, Path]:
    assert node.tls is not None
    assert node.tls.client_cert_file is not None and node.tls.client_key_file is not None
    return node.tls.client_cert_file, node.tls.client_key_file


def _issue(ca: trustme.CA, directory: Path, user: str) -> tuple[Path, Path]:
    """A client certificate from ``ca`` whose common name is ``user``, and its key."""
    issued = ca.issue_cert(f"{user}.client.invalid", common_name=user)
    cert, key = directory / f"{user}.pem", directory / f"{user}.key"
    issued.cert_chain_pems[0].write_to_path(cert)
    issued.private_key_pem.write_to_path(key)
    return cert, key


def _round_trip(node: RabbitMQNode) -> None:
    """Send one message to a new queue over EXTERNAL and receive it back."""
    address = f"/queue/tls-{uuid.uuid4().hex[:8]}"
    connection = _connect(node, _identity(node))
    try:
        assert connection.conn.transport.sasl().mech == "EXTERNAL"
        connection.create_sender(address).send(Message(body="over TLS"))
        receiver = connection.create_receiver(address)
        message = receiver.receive(timeout=TIMEOUT)
        receiver.accept()
        assert message.body == "over TLS"
    finally:
        connection.close()


def test_a_client_certificate_logs_in_with_external_and_round_trips(node: RabbitMQNode) -> None:
    assert node.tls is not None and node.tls.user == "haclient-tls"
    assert node.amqps_url == f"amqps://127.0.0.1:{node.tls_port}"
    assert node.tls_port not in (node.port, None)
    _round_trip(node)


def test_a_client_without_a_certificate_is_refused(node: RabbitMQNode) -> None:
    with pytest.raises(ConnectionException, match="certificate required"):
        _connect(node, None)


def test_a_certificate_from_another_ca_is_refused(node: RabbitMQNode, tmp_path: Path) -> None:
    with pytest.raises(ConnectionException, match="unknown ca"):
        _connect(node, _issue(trustme.CA(), tmp_path, "haclient-tls"))


def test_a_certificate_naming_an_unknown_user_is_refused(
    node: RabbitMQNode, ca: trustme.CA, tmp_path: Path
) -> None:
    with pytest.raises(ConnectionException, match=r"Authentication failed \[mech=EXTERNAL\]"):
        _connect(node, _issue(ca, tmp_path, "nobody"))


def test_the_plain_listener_still_logs_guest_in_with_plain(node: RabbitMQNode) -> None:
    connection = BlockingConnection(
        f"amqp://{node.host}:{node.port}",
        timeout=TIMEOUT,
        sasl_enabled=True,
        allowed_mechs="PLAIN",
        user="guest",
        password="guest",
    )
    connection.close()


def test_the_plain_listener_does_not_offer_external(node: RabbitMQNode) -> None:
    """EXTERNAL needs a client certificate, so only the TLS listener offers it."""
    with pytest.raises(ConnectionException, match=r"Authentication failed \[mech=none\]"):
        BlockingConnection(
            f"amqp://{node.host}:{node.port}",
            timeout=TIMEOUT,
            sasl_enabled=True,
            allowed_mechs="EXTERNAL",
        )


@pytest.mark.slow
def test_two_tls_nodes_share_one_ca_and_one_client_identity(
    two_rabbitmq_tls_nodes: tuple[RabbitMQNode, RabbitMQNode],
) -> None:
    first, second = two_rabbitmq_tls_nodes
    assert first.tls is second.tls
    assert first.tls_port != second.tls_port
    for node in two_rabbitmq_tls_nodes:
        _round_trip(node)
