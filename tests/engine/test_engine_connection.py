"""Connection-level behaviour of the engine: heartbeats, close, SASL, TLS, garbage."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme
from enginekit import AcceptAll, make_pair

from haclient.amqp import (
    ClientAuth,
    ConnectionRemoteClose,
    ConnectionRemoteOpen,
    Engine,
    EngineConfig,
    ErrorCondition,
    Role,
    ServerAuth,
    TlsClientOptions,
    TlsServerOptions,
    TransportClosed,
)
from haclient.errors import ConfigurationError


def closed_error(events: list[object]) -> ErrorCondition | None:
    [closed] = [e for e in events if isinstance(e, TransportClosed)]
    return closed.error


# Heartbeats ------------------------------------------------------------------------------------


def test_heartbeats_keep_an_idle_connection_alive() -> None:
    pair = make_pair(
        EngineConfig(container_id="c", idle_timeout=1.0),
        EngineConfig(container_id="s", role=Role.SERVER, idle_timeout=1.0),
    )
    AcceptAll(pair)
    pair.client.open()
    pair.pump()
    now = 0.0
    while now < 30.0:  # thirty idle timeouts with no application traffic
        pair.client.tick(now)
        pair.server.tick(now)
        pair.pump()
        now += 0.25
    assert not pair.of_type("client", TransportClosed)
    assert not pair.of_type("server", TransportClosed)


def test_a_silent_peer_is_detected_after_about_two_idle_timeouts() -> None:
    pair = make_pair(
        EngineConfig(container_id="c", idle_timeout=1.0),
        EngineConfig(container_id="s", role=Role.SERVER),
    )
    AcceptAll(pair)
    pair.client.open()
    pair.pump()
    assert pair.of_type("server", ConnectionRemoteOpen)[0].idle_timeout == 1.0
    # From now on the server says nothing: its bytes are never delivered.
    now, detected_at = 0.0, None
    while now < 10.0 and detected_at is None:
        pair.client.tick(now)
        pair.client.data_to_send()
        pair.client_events.extend(pair.client.events())
        if pair.of_type("client", TransportClosed):
            detected_at = now
        now += 0.05
    assert detected_at is not None
    assert 1.5 <= detected_at <= 2.5, detected_at
    assert pair.client.is_finished
    error = closed_error(pair.client_events)
    assert error is not None and error.name == "haclient:connection-lost"
    assert "idle timeout" in (error.description or "")


def test_tick_returns_the_next_deadline_only_when_timers_run() -> None:
    quiet = Engine(EngineConfig(container_id="c"))
    assert quiet.tick(0.0) is None
    beating = make_pair(
        EngineConfig(container_id="c", idle_timeout=1.0),
        EngineConfig(container_id="s", role=Role.SERVER, idle_timeout=1.0),
    )
    AcceptAll(beating)
    beating.client.open()
    beating.pump()
    deadline = beating.client.tick(0.0)
    assert deadline is not None and 0.0 < deadline <= 2.0


# Close -----------------------------------------------------------------------------------------


def test_remote_close_with_an_error_condition_reaches_the_client() -> None:
    pair = make_pair()
    AcceptAll(pair)
    pair.client.open()
    pair.pump()
    pair.server.close(ErrorCondition("amqp:connection:forced", "broker shutting down", {"k": 1}))
    pair.pump()
    [close] = pair.of_type("client", ConnectionRemoteClose)
    assert close.error == ErrorCondition("amqp:connection:forced", "broker shutting down", {"k": 1})
    assert pair.client.is_finished and pair.server.is_finished
    assert closed_error(pair.server_events) is None  # orderly for the side that closed


def test_orderly_close_ends_both_transports_without_error() -> None:
    pair = make_pair()
    AcceptAll(pair)
    pair.client.open()
    pair.pump()
    pair.client.close()
    pair.pump()
    assert closed_error(pair.client_events) is None
    assert pair.client.is_finished and pair.server.is_finished


def test_eof_before_close_is_reported_as_an_abort() -> None:
    pair = make_pair()
    AcceptAll(pair)
    pair.client.open()
    pair.pump()
    pair.client.receive_data(b"")
    pair.client.data_to_send()  # the driver flushes after every read; the head closes then
    error = closed_error(pair.client.events())
    assert error is not None and error.name == "haclient:connection-lost"


def test_garbage_from_the_peer_is_a_framing_error() -> None:
    client = Engine(EngineConfig(container_id="c"))
    client.open()
    client.data_to_send()
    client.receive_data(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    client.data_to_send()
    error = closed_error(client.events())
    assert error is not None and error.name == "amqp:connection:framing-error"


# SASL ------------------------------------------------------------------------------------------


def _server_with_login(users: dict[str, str]) -> EngineConfig:
    def check(mechanism: str, user: str | None, password: str | None) -> bool:
        return mechanism == "PLAIN" and user is not None and users.get(user) == password

    return EngineConfig(
        container_id="s",
        role=Role.SERVER,
        server_auth=ServerAuth(mechanisms=("PLAIN",), authenticate=check),
    )


def test_sasl_plain_accepted() -> None:
    pair = make_pair(
        EngineConfig(container_id="c", auth=ClientAuth("alice", "s3cret", allow_insecure=True)),
        _server_with_login({"alice": "s3cret"}),
    )
    AcceptAll(pair)
    pair.client.open()
    pair.pump()
    [opened] = pair.of_type("server", ConnectionRemoteOpen)
    assert opened.user == "alice"
    assert pair.of_type("client", ConnectionRemoteOpen)


def test_sasl_plain_refused() -> None:
    pair = make_pair(
        EngineConfig(container_id="c", auth=ClientAuth("alice", "wrong", allow_insecure=True)),
        _server_with_login({"alice": "s3cret"}),
    )
    AcceptAll(pair)
    pair.client.open()
    pair.pump()
    assert not pair.of_type("server", ConnectionRemoteOpen)
    error = closed_error(pair.client_events)
    assert error is not None and error.name == "amqp:unauthorized-access"
    assert pair.server.is_finished


def test_anonymous_refused_when_the_server_requires_plain() -> None:
    pair = make_pair(EngineConfig(container_id="c"), _server_with_login({"alice": "x"}))
    AcceptAll(pair)
    pair.client.open()
    pair.pump()
    error = closed_error(pair.client_events)
    assert error is not None and error.name == "amqp:unauthorized-access"


def test_plain_over_a_plain_socket_needs_explicit_consent() -> None:
    with pytest.raises(ConfigurationError, match="clear text"):
        EngineConfig(container_id="c", auth=ClientAuth("alice", "s3cret"))


# TLS -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    ca = trustme.CA()
    cert = ca.issue_cert("broker.test", "127.0.0.1")
    root = tmp_path_factory.mktemp("pki")
    paths = {
        "ca": root / "ca.pem",
        "cert": root / "server.pem",
        "key": root / "server.key",
    }
    client = ca.issue_cert("app-1@clients.test")
    paths["client_cert"] = root / "client.pem"
    paths["client_key"] = root / "client.key"
    client.cert_chain_pems[0].write_to_path(str(paths["client_cert"]))
    client.private_key_pem.write_to_path(str(paths["client_key"]))
    ca.cert_pem.write_to_path(str(paths["ca"]))
    cert.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    cert.private_key_pem.write_to_path(str(paths["key"]))
    return {k: str(Path(v)) for k, v in paths.items()}


def _tls_pair(pki: dict[str, str], peer_name: str, auth: ClientAuth | None = None):  # type: ignore[no-untyped-def]
    client = EngineConfig(
        container_id="c",
        hostname=peer_name,
        auth=auth or ClientAuth(),
        tls=TlsClientOptions(ca_file=pki["ca"]),
    )
    server = EngineConfig(
        container_id="s",
        role=Role.SERVER,
        tls=TlsServerOptions(cert_file=pki["cert"], key_file=pki["key"]),
        server_auth=ServerAuth(
            mechanisms=("PLAIN", "ANONYMOUS"),
            authenticate=lambda m, u, p: m == "ANONYMOUS" or (u, p) == ("bob", "pw"),
        ),
    )
    pair = make_pair(client, server)
    AcceptAll(pair)
    return pair


def test_tls_handshake_with_a_verified_certificate(pki: dict[str, str]) -> None:
    pair = _tls_pair(pki, "broker.test", ClientAuth("bob", "pw"))  # PLAIN is fine under TLS
    pair.client.open()
    pair.pump()
    [opened] = pair.of_type("client", ConnectionRemoteOpen)
    assert opened.container_id == "s"
    assert pair.of_type("server", ConnectionRemoteOpen)[0].user == "bob"


def test_tls_hostname_mismatch_is_refused(pki: dict[str, str]) -> None:
    pair = _tls_pair(pki, "evil.example")
    pair.client.open()
    pair.pump()
    assert not pair.of_type("client", ConnectionRemoteOpen)
    error = closed_error(pair.client_events)
    assert error is not None and error.name == "haclient:tls-failed"
    assert "certificate verify failed" in (error.description or "")


def _client_cert_pair(pki: dict[str, str], with_cert: bool):  # type: ignore[no-untyped-def]
    tls = TlsClientOptions(
        ca_file=pki["ca"],
        cert_file=pki["client_cert"] if with_cert else None,
        key_file=pki["client_key"] if with_cert else None,
    )
    server = EngineConfig(
        container_id="s",
        role=Role.SERVER,
        tls=TlsServerOptions(pki["cert"], pki["key"], client_ca_file=pki["ca"]),
    )
    pair = make_pair(EngineConfig(container_id="c", hostname="broker.test", tls=tls), server)
    AcceptAll(pair)
    return pair


def test_tls_client_certificate_accepted(pki: dict[str, str]) -> None:
    pair = _client_cert_pair(pki, with_cert=True)
    pair.client.open()
    pair.pump()
    assert pair.of_type("client", ConnectionRemoteOpen)
    assert pair.of_type("server", ConnectionRemoteOpen)


def test_tls_server_requiring_a_client_certificate_refuses_one_without(pki: dict[str, str]) -> None:
    pair = _client_cert_pair(pki, with_cert=False)
    pair.client.open()
    pair.pump()
    assert not pair.of_type("server", ConnectionRemoteOpen)
    client_error = closed_error(pair.client_events)
    server_error = closed_error(pair.server_events)
    assert client_error is not None and client_error.name == "haclient:tls-failed"
    assert "certificate required" in (client_error.description or "")
    assert server_error is not None and server_error.name == "haclient:tls-failed"


def test_tls_client_needs_both_certificate_and_key() -> None:
    with pytest.raises(ConfigurationError, match="cert_file and key_file"):
        TlsClientOptions(cert_file="client.pem")
