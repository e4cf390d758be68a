"""What a TLS RabbitMQ node is configured with, checked without starting one."""

from __future__ import annotations

import base64
import hashlib
import ssl
from pathlib import Path

import pytest
import trustme
from cryptography import x509
from cryptography.x509.oid import NameOID

from chaos.rabbitmq import RabbitMQNode, RabbitMQNodeError
from chaos.rabbitmq_tls import RabbitMQTls, config_lines, definitions


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> RabbitMQTls:
    return RabbitMQTls.from_ca(trustme.CA(), tmp_path_factory.mktemp("tls"))


def test_from_ca_writes_a_node_and_a_client_identity_that_the_ca_verifies(
    tls: RabbitMQTls,
) -> None:
    assert tls.user == "haclient-tls" and tls.require_client_cert
    assert tls.client_cert_file is not None and tls.client_key_file is not None
    for cert, key in ((tls.cert_file, tls.key_file), (tls.client_cert_file, tls.client_key_file)):
        ssl.create_default_context().load_cert_chain(cert, key)  # the key matches
    client = x509.load_pem_x509_certificate(tls.client_cert_file.read_bytes())
    common_names = client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    assert [name.value for name in common_names] == ["haclient-tls"]
    server = x509.load_pem_x509_certificate(tls.cert_file.read_bytes())
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_the_config_asks_for_client_certificates_and_offers_external(tls: RabbitMQTls) -> None:
    lines = config_lines(tls, "127.0.0.1", 5671, Path("/n/tls"), Path("/n/d.json")).splitlines()
    for expected in (
        "listeners.ssl.default = 127.0.0.1:5671",
        "ssl_options.cacertfile = /n/tls/ca.pem",
        "ssl_options.verify = verify_peer",
        "ssl_options.fail_if_no_peer_cert = true",
        "auth_mechanisms.1 = PLAIN",
        "auth_mechanisms.3 = EXTERNAL",
        "ssl_cert_login_from = common_name",
        "definitions.local.path = /n/d.json",
    ):
        assert expected in lines


def test_the_definitions_keep_guest_and_give_certificate_users_no_password() -> None:
    found = definitions(["alice"])
    users = {user["name"]: user for user in found["users"]}
    assert users["alice"]["password_hash"] == ""
    salted = base64.b64decode(users["guest"]["password_hash"])
    assert salted[4:] == hashlib.sha256(salted[:4] + b"guest").digest()
    assert {(p["user"], p["vhost"], p["read"]) for p in found["permissions"]} == {
        ("guest", "/", ".*"),
        ("alice", "/", ".*"),
    }


def test_required_client_certificates_need_a_client_identity_for_the_probe(
    tls: RabbitMQTls,
) -> None:
    with pytest.raises(ValueError, match="readiness probe"):
        RabbitMQTls(tls.ca_file, tls.cert_file, tls.key_file)
    with pytest.raises(ValueError, match="go together"):
        RabbitMQTls(tls.ca_file, tls.cert_file, tls.key_file, client_cert_file=tls.cert_file)
    with pytest.raises(ValueError, match="guest"):
        RabbitMQTls(tls.ca_file, tls.cert_file, tls.key_file, False, ("guest",))


def test_a_node_without_tls_has_no_tls_port() -> None:
    with pytest.raises(RabbitMQNodeError, match="no TLS listener"):
        _ = RabbitMQNode().amqps_url
