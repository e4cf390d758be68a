"""The client's TLS layer (``haclient.amqp.tls``) in memory: the ClientHello at once, SNI, a
peer that is not TLS, an EOF that is a lost connection and not a TLS failure, and the
resolved ``TlsClientOptions``."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import trustme
from enginekit import AcceptAll, make_pair

from haclient.amqp import (
    ConnectionRemoteOpen,
    Engine,
    EngineConfig,
    ErrorCondition,
    Role,
    TlsClientOptions,
    TlsServerOptions,
    TransportClosed,
)
from haclient.amqp.tls import TlsClientLayer
from haclient.amqp.types import CONNECTION_LOST, TLS_FAILED
from haclient.errors import ConfigurationError


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def files(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("tls-layer")
    cert = ca.issue_cert("broker.test")
    cert.cert_chain_pems[0].write_to_path(str(root / "server.pem"))
    cert.private_key_pem.write_to_path(str(root / "server.key"))
    return {"cert": str(root / "server.pem"), "key": str(root / "server.key")}


def _context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


def _ending(events: list[object]) -> ErrorCondition | None:
    [closed] = [e for e in events if isinstance(e, TransportClosed)]
    return closed.error


def test_the_client_hello_is_ready_before_anything_arrives(ca: trustme.CA) -> None:
    layer = TlsClientLayer(_context(ca), "broker.test")
    assert layer.has_output and not layer.is_handshaken
    hello = layer.send(b"")
    assert hello[:1] == b"\x16"  # a handshake record
    assert b"broker.test" in hello  # SNI
    assert not layer.has_output


def test_a_context_that_checks_host_names_needs_one(ca: trustme.CA) -> None:
    with pytest.raises(ConfigurationError, match="host name"):
        TlsClientLayer(_context(ca), None)


def test_an_engine_with_an_ssl_context_talks_to_a_tls_server(
    ca: trustme.CA, files: dict[str, str]
) -> None:
    tls = TlsClientOptions(context=_context(ca), peer_name="broker.test")
    server = EngineConfig("s", role=Role.SERVER, tls=TlsServerOptions(files["cert"], files["key"]))
    pair = make_pair(EngineConfig("c", hostname="127.0.0.1", tls=tls), server)
    AcceptAll(pair)
    pair.client.open()
    pair.pump()
    assert pair.of_type("client", ConnectionRemoteOpen)


def test_a_peer_answering_in_plain_amqp_is_named(ca: trustme.CA) -> None:
    client = Engine(EngineConfig("c", hostname="broker.test", tls=TlsClientOptions(_context(ca))))
    pair = make_pair(EngineConfig("c"), EngineConfig("s", role=Role.SERVER))
    pair.client = client
    client.open()
    pair.pump()
    error = _ending(pair.client_events)
    assert error is not None and error.name == TLS_FAILED
    assert "plain AMQP, not TLS" in (error.description or "")


def test_an_eof_during_the_handshake_is_a_lost_connection(ca: trustme.CA) -> None:
    client = Engine(EngineConfig("c", hostname="broker.test", tls=TlsClientOptions(_context(ca))))
    client.open()
    assert client.data_to_send()
    client.receive_data(b"")
    client.data_to_send()  # the driver writes what is left; the transport then ends
    error = _ending(client.events())
    assert error is not None and error.name == CONNECTION_LOST


def test_tls_client_options_take_a_context_or_files_not_both(
    ca: trustme.CA, files: dict[str, str], tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match="a context or PEM files"):
        TlsClientOptions(context=_context(ca), ca_file=files["cert"])
    assert TlsClientOptions(cert_file=files["cert"], key_file=files["key"]).has_client_certificate
    assert not TlsClientOptions().has_client_certificate
    with pytest.raises(ConfigurationError, match="cannot be used"):
        TlsClientOptions(ca_file=str(tmp_path / "missing.pem")).ssl_context()


def test_a_context_that_allows_no_version_fails_at_once(ca: trustme.CA) -> None:
    context = _context(ca)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ConfigurationError, match="no TLS version is left"):
        TlsClientLayer(context, "broker.test")
