"""The broker's SASL server in memory: each mechanism, good and bad logins, hostile frames.

The client is the test's own (``saslkit``; SCRAM's side is scramp's), fed straight into the
server's SASL layer or a whole server engine, so every case is exact and takes no socket.
"""

from __future__ import annotations

import functools
import re
import ssl
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import symbol
from saslkit import (
    AUTH,
    INIT,
    OK,
    LayerWire,
    SaslClient,
    client_context,
    login,
    make_pki,
    outcome_of,
    scram_login,
    xoauth2,
)
from scramp import ScramClient

from chaos.amqp_server import server_engine
from chaos.broker.accounts import Accounts
from chaos.sasl_server import SaslServerLayer
from haclient.amqp.config import EngineConfig, Role, ServerAuth, TlsServerOptions
from haclient.amqp.engine import Engine
from haclient.amqp.sasl_frames import AMQP_HEADER, CHALLENGE, RESPONSE, SASL_HEADER, encode_frame
from haclient.errors import ConfigurationError

SCRAM = ["SCRAM-SHA-1", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def accounts(**options: object) -> Accounts:
    """A user alice (password s3cret), the token tok-1 for alice, client certificates."""
    settings: dict[str, object] = {
        "users": {"alice": "s3cret"},
        "tokens": {"tok-1": "alice"},
        "client_certificates": True,
    }
    settings.update(options)
    return Accounts(**settings)  # type: ignore[arg-type]


def layer(identity: str | None = None, **options: object) -> SaslServerLayer:
    return SaslServerLayer(accounts(**options).server_auth(), lambda: identity)


def client_of(server: SaslServerLayer) -> SaslClient:
    client = SaslClient(LayerWire(server))
    client.hello()
    return client


# SCRAM -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", SCRAM)
def test_scram_login_proves_both_sides_and_then_passes_amqp(mechanism: str) -> None:
    server = layer()
    wire = LayerWire(server)
    client = SaslClient(wire)
    client.hello()
    outcome = scram_login(client, mechanism, "alice", "s3cret")  # checks the server's proof
    assert outcome.code == OK and outcome.additional_data is not None
    assert outcome.additional_data.startswith(b"v=")
    assert server.user == "alice" and server.error is None
    wire.write(AMQP_HEADER)
    assert wire.passed == AMQP_HEADER  # from now on bytes go to the AMQP layer


@pytest.mark.parametrize("mechanism", SCRAM)
def test_scram_with_a_wrong_password_is_refused_with_auth(mechanism: str) -> None:
    server = layer()
    outcome = scram_login(client_of(server), mechanism, "alice", "wrong")
    assert outcome.code == AUTH and outcome.additional_data is None
    assert server.failed and server.user is None
    assert server.error is not None and server.error.name == "amqp:unauthorized-access"


def test_scram_of_an_unknown_user_is_refused_at_the_first_message() -> None:
    server = layer()
    assert scram_login(client_of(server), "SCRAM-SHA-256", "mallory", "s3cret").code == AUTH


def test_scram_client_first_may_answer_an_empty_challenge() -> None:
    outcome = scram_login(client_of(layer()), "SCRAM-SHA-512", "alice", "s3cret", initial=False)
    assert outcome.code == OK


def test_scram_keys_of_another_password_fail_the_clients_check() -> None:
    """The stored keys are all the broker knows: keys made from another password make the
    client's proof fail, so a broker cannot fake knowing the password."""
    client = client_of(SaslServerLayer(Accounts({"alice": "other"}).server_auth()))
    assert scram_login(client, "SCRAM-SHA-256", "alice", "s3cret").code == AUTH


def test_scram_may_not_act_for_another_user() -> None:
    client = client_of(layer())
    first = ScramClient(["SCRAM-SHA-256"], "alice", "s3cret").get_client_first()
    as_bob = first.replace("n,,", "n,a=bob,", 1).encode()
    assert outcome_of(client.init("SCRAM-SHA-256", as_bob)).code == AUTH


@functools.cache
def _shared_auth() -> ServerAuth:
    """One set of accounts for the many examples that only read it (salting takes time)."""
    return accounts().server_auth()


def _scram_halfway() -> tuple[SaslServerLayer, LayerWire, ScramClient]:
    server = SaslServerLayer(_shared_auth())
    wire = LayerWire(server)
    client = SaslClient(wire)
    client.hello()
    scram = ScramClient(["SCRAM-SHA-256"], "alice", "s3cret")
    frame = client.init("SCRAM-SHA-256", scram.get_client_first().encode())
    assert frame is not None and frame[0] == CHALLENGE
    scram.set_server_first(frame[1][0].decode())
    return server, wire, scram


def _other_nonce(scram: ScramClient) -> bytes:
    final = scram.get_client_final()
    nonce = final.split(",r=", 1)[1].split(",", 1)[0]
    return final.replace(nonce, nonce[:-1] + ("A" if nonce[-1] != "A" else "B")).encode()


HOSTILE: dict[str, Callable[[ScramClient], bytes]] = {
    "a second sasl-init": lambda s: encode_frame(INIT, [symbol("PLAIN"), b"\0alice\0s3cret"]),
    "an AMQP frame": lambda s: b"\x00\x00\x00\x08\x02\x00\x00\x00",
    "bytes that are no frame": lambda s: b"\xff" * 64,
    "an undecodable body": lambda s: b"\x00\x00\x00\x0c\x02\x01\x00\x00\xa0\xff\xff\xff",
    "a described string": lambda s: b"\x00\x00\x00\x0f\x02\x01\x00\x00\x00\x53\x43\xa1\x02hi",
    "a response of another type": lambda s: _response([symbol("not binary")]),
    "a client-final that is not UTF-8": lambda s: _response([b"\xff\xfe"]),
    "a client-final with another nonce": lambda s: _response([_other_nonce(s)]),
    "a client-final that is not SCRAM": lambda s: _response([b"hello"]),
    "a second protocol header": lambda s: SASL_HEADER,
}


def _response(fields: list[object]) -> bytes:
    return encode_frame(RESPONSE, fields)


@pytest.mark.parametrize("make", HOSTILE.values(), ids=list(HOSTILE))
def test_garbage_in_the_middle_of_scram_is_refused_at_once(
    make: Callable[[ScramClient], bytes],
) -> None:
    server, wire, scram = _scram_halfway()
    wire.write(make(scram))
    assert outcome_of(SaslClient(wire).frame()).code == AUTH
    assert server.failed and server.user is None and wire.passed == b""
    wire.write(AMQP_HEADER + b"more")  # nothing is read after the refusal
    assert wire.passed == b"" and wire.read() == b""


@pytest.mark.parametrize("garbage", [b"\xff" * 64, b"\x00\x00\x00\x08\x02\x00\x00\x00"])
def test_a_server_engine_ends_the_connection_after_garbage_mid_scram(garbage: bytes) -> None:
    """Through a whole engine: the refusal goes out and the engine is finished (no hang)."""
    config = EngineConfig(
        container_id="broker", role=Role.SERVER, server_auth=accounts().server_auth()
    )
    engine = server_engine(config)
    client = SaslClient(EngineWire(engine))
    client.hello()
    scram = ScramClient(["SCRAM-SHA-256"], "alice", "s3cret")
    frame = client.init("SCRAM-SHA-256", scram.get_client_first().encode())
    assert frame is not None and frame[0] == CHALLENGE
    client.wire.write(garbage)
    assert outcome_of(client.frame()).code == AUTH
    assert engine.is_finished and engine.user is None


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_after_the_client_first_never_log_in_or_raise(data: bytes) -> None:
    server, wire, _ = _scram_halfway()
    wire.write(data)
    assert wire.passed == b"" and server.user is None


# PLAIN, XOAUTH2, EXTERNAL, ANONYMOUS -----------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (b"\0alice\0s3cret", OK),
        (b"alice\0alice\0s3cret", OK),
        (b"\0alice\0wrong", AUTH),
        (b"bob\0alice\0s3cret", AUTH),  # alice may not act as bob
        (b"\0mallory\0s3cret", AUTH),
        (b"alice:s3cret", AUTH),
    ],
)
def test_plain_is_checked_against_the_salted_credentials(message: bytes, code: int) -> None:
    server = layer()
    assert login(LayerWire(server), "PLAIN", message).code == code
    assert server.user == ("alice" if code == OK else None)


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (xoauth2("alice", "tok-1"), OK),
        (xoauth2("bob", "tok-1"), AUTH),  # the token is alice's
        (xoauth2("alice", "tok-2"), AUTH),
        (b"user=alice\x01auth=Basic tok-1\x01\x01", AUTH),
        (b"user=alice\x01auth=Bearer tok-1", AUTH),
        (b"\xff\xfe", AUTH),
    ],
)
def test_xoauth2_accepts_a_known_token_as_its_user(message: bytes, code: int) -> None:
    server = layer()
    assert login(LayerWire(server), "XOAUTH2", message).code == code
    assert server.user == ("alice" if code == OK else None)


def test_a_revoked_token_is_refused_and_a_fresh_one_accepted() -> None:
    owner = accounts()
    auth = owner.server_auth()
    assert login(LayerWire(SaslServerLayer(auth)), "XOAUTH2", xoauth2("alice", "tok-1")).code == OK
    assert owner.revoke_token("tok-1") and not owner.revoke_token("tok-1")
    refused = login(LayerWire(SaslServerLayer(auth)), "XOAUTH2", xoauth2("alice", "tok-1"))
    assert refused.code == AUTH
    owner.add_token("tok-2", "alice")
    assert login(LayerWire(SaslServerLayer(auth)), "XOAUTH2", xoauth2("alice", "tok-2")).code == OK


def test_xoauth2_without_an_initial_response_is_asked_for_it() -> None:
    client = client_of(layer())
    frame = client.init("XOAUTH2", None)
    assert frame is not None and frame[0] == CHALLENGE and frame[1][0] == b""
    assert outcome_of(client.respond(xoauth2("alice", "tok-1"))).code == OK


@pytest.mark.parametrize(
    ("identity", "message", "code"),
    [
        ("app-1", None, OK),
        ("app-1", b"", OK),
        ("app-1", b"app-1", OK),
        ("app-1", b"admin", AUTH),  # the certificate's owner may not act as another
        (None, b"", AUTH),  # no verified certificate
    ],
)
def test_external_logs_in_as_the_verified_certificate(
    identity: str | None, message: bytes | None, code: int
) -> None:
    server = layer(identity)
    assert login(LayerWire(server), "EXTERNAL", message).code == code
    assert server.user == (identity if code == OK else None)


def test_an_open_broker_takes_any_plain_login_and_anonymous() -> None:
    auth = Accounts().server_auth()
    assert auth.mechanisms == ("PLAIN", "ANONYMOUS")
    assert login(LayerWire(SaslServerLayer(auth)), "PLAIN", b"\0anyone\0anything").code == OK
    assert login(LayerWire(SaslServerLayer(auth)), "ANONYMOUS", b"trace").code == OK
    wire = LayerWire(SaslServerLayer(auth))
    wire.write(AMQP_HEADER)  # no SASL at all
    assert wire.passed == AMQP_HEADER


def test_with_users_neither_anonymous_nor_a_bare_amqp_header_get_in() -> None:
    assert login(LayerWire(layer()), "ANONYMOUS", None).code == AUTH
    server = layer()
    wire = LayerWire(server)
    wire.write(AMQP_HEADER)
    assert wire.passed == b"" and server.failed
    assert wire.read() == SASL_HEADER  # the header the server speaks, then the end


def test_a_mechanism_not_offered_is_refused() -> None:
    restricted = SaslServerLayer(accounts(mechanisms=["SCRAM-SHA-256"]).server_auth())
    client = SaslClient(LayerWire(restricted))
    assert client.hello() == ["SCRAM-SHA-256"]
    assert outcome_of(client.init("PLAIN", b"\0alice\0s3cret")).code == AUTH
    assert restricted.failed


# What is offered -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "offered"),
    [
        ({}, ["PLAIN", "ANONYMOUS"]),
        ({"users": {"a": "p"}}, ["SCRAM-SHA-512", "SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN"]),
        ({"tokens": {}}, ["XOAUTH2", "PLAIN", "ANONYMOUS"]),
        ({"client_certificates": True}, ["EXTERNAL", "PLAIN", "ANONYMOUS"]),
        ({"users": {"a": "p"}, "mechanisms": ["PLAIN", "SCRAM-SHA-1"]}, ["PLAIN", "SCRAM-SHA-1"]),
    ],
)
def test_what_is_offered_follows_what_is_configured(
    options: dict[str, object], offered: list[str]
) -> None:
    client = SaslClient(LayerWire(SaslServerLayer(Accounts(**options).server_auth())))  # type: ignore[arg-type]
    assert client.hello() == offered


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"mechanisms": ["SCRAM-SHA-256"]}, "SCRAM-SHA-256 is not enabled (it needs a user)"),
        ({"mechanisms": ["EXTERNAL"]}, "needs client certificates"),
        ({"mechanisms": ["XOAUTH2"]}, "needs an OAuth token"),
        ({"users": {"a": "p"}, "mechanisms": ["ANONYMOUS"]}, "only without users"),
        ({"mechanisms": ["CRAM-MD5"]}, "unknown SASL mechanism 'CRAM-MD5'"),
        ({"mechanisms": []}, "no SASL mechanism"),
    ],
)
def test_a_mechanism_that_is_not_enabled_is_a_clear_error(
    options: dict[str, object], error: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        Accounts(**options)  # type: ignore[arg-type]


def test_only_salted_credentials_and_token_digests_are_kept() -> None:
    kept = accounts()
    held = repr(vars(kept)).encode()
    assert b"s3cret" not in held and b"tok-1" not in held


def test_server_auth_still_refuses_what_it_does_not_know() -> None:
    with pytest.raises(ConfigurationError, match="CRAM-MD5"):
        ServerAuth(("CRAM-MD5",))
    with pytest.raises(ConfigurationError, match="scram_credentials"):
        ServerAuth(("SCRAM-SHA-256",))


# EXTERNAL over TLS in memory -------------------------------------------------------------------


class EngineWire:
    """A whole server engine in memory, optionally behind a TLS client (``ssl.MemoryBIO``)."""

    def __init__(self, engine: Engine, tls: ssl.SSLContext | None = None) -> None:
        self.engine = engine
        self.tls = None
        if tls is not None:
            self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            self.tls = tls.wrap_bio(self.incoming, self.outgoing, server_hostname="broker.test")
            self._handshake()

    def _pump(self) -> bool:
        assert self.tls is not None
        sent = self.outgoing.read()
        if sent:
            self.engine.receive_data(sent)
        back = self.engine.data_to_send()
        self.incoming.write(back)
        return bool(sent or back)

    def _handshake(self) -> None:
        assert self.tls is not None
        for _ in range(10):
            try:
                self.tls.do_handshake()
                self._pump()
                return
            except ssl.SSLWantReadError:
                self._pump()
        raise AssertionError("no TLS handshake")

    def write(self, data: bytes) -> None:
        if self.tls is None:
            self.engine.receive_data(data)
            return
        self.tls.write(data)
        self._pump()

    def read(self) -> bytes:
        if self.tls is None:
            return self.engine.data_to_send()
        for _ in range(10):
            try:
                return self.tls.read(65536)
            except ssl.SSLWantReadError:
                if not self._pump():
                    return b""
            except (ssl.SSLError, ssl.SSLZeroReturnError):
                return b""
        return b""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return make_pki(Path(tmp_path_factory.mktemp("sasl-pki")))


def _tls_engine(pki: dict[str, str], client_ca: bool) -> Engine:
    ca = pki["ca"] if client_ca else None
    tls = TlsServerOptions(pki["server"], pki["server_key"], client_ca_file=ca)
    auth = Accounts({"alice": "s3cret"}, client_certificates=True).server_auth()
    config = EngineConfig(container_id="b", role=Role.SERVER, tls=tls, server_auth=auth)
    return server_engine(config)


def test_external_over_tls_is_the_client_certificates_common_name(pki: dict[str, str]) -> None:
    engine = _tls_engine(pki, client_ca=True)
    wire = EngineWire(engine, client_context(pki))
    assert login(wire, "EXTERNAL", b"").code == OK
    assert engine.user == "app-1"


def test_external_without_a_common_name_is_the_first_alternative_name(
    pki: dict[str, str],
) -> None:
    engine = _tls_engine(pki, client_ca=True)
    assert login(EngineWire(engine, client_context(pki, "nameless")), "EXTERNAL", b"").code == OK
    assert engine.user == "nobody@clients.test"


def test_external_as_another_identity_than_the_certificates_is_refused(
    pki: dict[str, str],
) -> None:
    engine = _tls_engine(pki, client_ca=True)
    assert login(EngineWire(engine, client_context(pki)), "EXTERNAL", b"intruder").code == AUTH
    assert engine.user is None


def test_external_is_refused_when_tls_verified_no_certificate(pki: dict[str, str]) -> None:
    """TLS without a client CA asks for no certificate: the one the client has is not seen."""
    engine = _tls_engine(pki, client_ca=False)
    assert login(EngineWire(engine, client_context(pki)), "EXTERNAL", b"").code == AUTH
    assert engine.user is None


def test_scram_over_tls_in_memory(pki: dict[str, str]) -> None:
    engine = _tls_engine(pki, client_ca=True)
    client = SaslClient(EngineWire(engine, client_context(pki)))
    client.hello()
    assert scram_login(client, "SCRAM-SHA-256", "alice", "s3cret").code == OK
    assert engine.user == "alice"
