"""The client's SASL layer (``haclient.amqp.sasl``) against a SASL server in memory.

The server side here is the test's own: it offers mechanisms, checks PLAIN and XOAUTH2 logins
against a table and runs SCRAM with ``scramp``'s server. RFC 7677's SCRAM-SHA-256 exchange is
checked byte for byte with a scripted broker.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Array, Data, Described, symbol
from scramp import ScramException, ScramMechanism

from haclient.amqp import ClientAuth, Engine, EngineConfig, TransportClosed
from haclient.amqp.codec import decode_value
from haclient.amqp.config import SASL_MECHANISMS
from haclient.amqp.sasl import SASL_FAILED, SaslClientLayer, choose_mechanism
from haclient.amqp.sasl import SaslFailure as _Failure
from haclient.amqp.sasl_frames import SASL_HEADER, encode_frame
from haclient.errors import AuthenticationError, ConfigurationError, error_from_condition

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
UNAUTHORIZED = "amqp:unauthorized-access"
PASSWORD = "canary-pw-7f3a"  # must appear in no error, repr or log
TOKEN = "canary-token-91c2"

# RFC 7677, section 3: user "user", password "pencil".
RFC_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _mechanisms_frame(*names: str) -> bytes:
    return encode_frame(0x40, [Array(Data.NULL, Data.SYMBOL, *(symbol(n) for n in names))])


def _outcome(code: int, additional: bytes | None = None) -> bytes:
    from proton import ubyte

    return encode_frame(0x44, [ubyte(code), additional])


def _frames(data: bytes) -> list[tuple[int, list[Any]]]:
    """The SASL frames in ``data`` (a SASL header first is skipped)."""
    if data.startswith(SASL_HEADER):
        data = data[8:]
    out = []
    while data:
        size = struct.unpack(">I", data[:4])[0]
        value, _ = decode_value(data[8:size])
        assert isinstance(value, Described)
        out.append((int(value.descriptor), list(value.value)))
        data = data[size:]
    return out


class Broker:
    """A SASL server for the tests: offers ``offered``, accepts the logins ``users`` allows
    (PLAIN, SCRAM) and ``tokens`` (XOAUTH2), ANONYMOUS and EXTERNAL always."""

    def __init__(
        self,
        offered: tuple[str, ...],
        users: dict[str, str] | None = None,
        tokens: dict[str, str] | None = None,
        *,
        final_as_challenge: bool = False,
    ) -> None:
        self.offered = offered
        self.users = users or {}
        self.tokens = tokens or {}
        self.final_as_challenge = final_as_challenge
        self.init: tuple[str, bytes | None] | None = None
        self.logged_in: str | None = None
        self._scram: Any = None
        self._buffer = b""

    def receive(self, data: bytes) -> bytes:
        """Bytes from the client; returns the answer."""
        self._buffer += data
        out = b""
        if self._buffer.startswith(SASL_HEADER):
            self._buffer = self._buffer[8:]
            out += SASL_HEADER + _mechanisms_frame(*self.offered)
        while len(self._buffer) >= 8:
            size = struct.unpack(">I", self._buffer[:4])[0]
            if len(self._buffer) < size:
                break
            [(code, fields)] = _frames(self._buffer[:size])
            self._buffer = self._buffer[size:]
            out += self._on_frame(code, fields)
        return out

    def _on_frame(self, code: int, fields: list[Any]) -> bytes:
        if code == 0x41:
            self.init = (str(fields[0]), fields[1])
            return self._on_init(str(fields[0]), fields[1] or b"")
        assert code == 0x43, hex(code)
        if self._scram is None:  # the empty answer to a server-final challenge
            return _outcome(0)
        server, self._scram = self._scram, None
        try:
            server.set_client_final(fields[0].decode())
        except ScramException:
            return _outcome(1, server.get_server_final().encode())
        final = server.get_server_final().encode()
        self.logged_in = "scram"
        if self.final_as_challenge:
            return encode_frame(0x42, [final])
        return _outcome(0, final)

    def _on_init(self, mechanism: str, response: bytes) -> bytes:
        if mechanism in ("ANONYMOUS", "EXTERNAL"):
            self.logged_in = mechanism
            return _outcome(0)
        if mechanism == "PLAIN":
            _, user, password = response.decode().split("\0")
            ok = self.users.get(user) == password
            return _outcome(0 if ok else 1)
        if mechanism == "XOAUTH2":
            fields = dict(part.split("=", 1) for part in response.decode().split("\x01") if part)
            token = fields["auth"].removeprefix("Bearer ")
            ok = self.tokens.get(token) == fields["user"]
            return _outcome(0 if ok else 1)
        scram = ScramMechanism(mechanism)

        def auth_info(user: str) -> Any:
            if user not in self.users:
                raise ScramException("unknown user")
            return scram.make_auth_info(self.users[user], iteration_count=4096)

        self._scram = scram.make_server(auth_info)
        self._scram.set_client_first(response.decode())
        return encode_frame(0x42, [self._scram.get_server_first().encode()])


def _exchange(layer: SaslClientLayer, broker: Broker) -> None:
    for _ in range(20):
        out = layer.send(b"")
        if not out:
            return
        answer = broker.receive(out)
        if answer:
            layer.receive(answer)
    raise AssertionError("the exchange did not end")


def _login(
    auth: ClientAuth, broker: Broker, *, secure: bool = False, nonce: str | None = None
) -> SaslClientLayer:
    layer = SaslClientLayer(auth, secure=secure, nonce=nonce)
    _exchange(layer, broker)
    return layer


def _assert_no_secret(*texts: object) -> None:
    for text in texts:
        assert PASSWORD not in str(text) and TOKEN not in str(text), text


USERS = {"alice": PASSWORD}


# --- RFC 7677 ------------------------------------------------------------------------------------


def _rfc_layer() -> tuple[SaslClientLayer, list[tuple[int, list[Any]]]]:
    """A layer that sent its client-final message in RFC 7677's exchange."""
    layer = SaslClientLayer(ClientAuth("user", "pencil"), nonce=RFC_NONCE)
    assert layer.send(AMQP_HEADER) == SASL_HEADER  # the AMQP header is held
    layer.receive(SASL_HEADER + _mechanisms_frame("SCRAM-SHA-256", "PLAIN"))
    [(code, fields)] = _frames(layer.send(b""))
    assert code == 0x41 and fields[0] == "SCRAM-SHA-256" and fields[1] == RFC_CLIENT_FIRST
    layer.receive(encode_frame(0x42, [RFC_SERVER_FIRST]))
    sent = _frames(layer.send(b""))
    return layer, sent


def test_T3_scram_sha_256_follows_rfc_7677_byte_for_byte() -> None:
    layer, [(code, fields)] = _rfc_layer()
    assert code == 0x43 and fields == [RFC_CLIENT_FINAL]
    assert layer.receive(_outcome(0, RFC_SERVER_FINAL) + AMQP_HEADER) == AMQP_HEADER
    assert layer.error is None and layer.mechanism == "SCRAM-SHA-256"
    assert layer.send(b"open") == AMQP_HEADER + b"open"  # held until the outcome, then sent
    assert layer.receive(b"more") == b"more"


def test_scram_server_final_may_come_as_a_challenge() -> None:
    layer, _ = _rfc_layer()
    layer.receive(encode_frame(0x42, [RFC_SERVER_FINAL]))
    assert _frames(layer.send(b"")) == [(0x43, [b""])]
    assert layer.receive(_outcome(0) + AMQP_HEADER) == AMQP_HEADER
    assert layer.error is None


def test_T3_a_server_signature_that_does_not_match_is_an_authentication_error() -> None:
    layer, _ = _rfc_layer()
    forged = b"v=" + base64.b64encode(b"\0" * 32)
    assert layer.receive(_outcome(0, forged) + AMQP_HEADER) == b""
    assert layer.error is not None and layer.error.name == SASL_FAILED
    assert "could not prove it knows the password" in str(layer.error.description)
    assert layer.send(b"open") == b""  # nothing of AMQP goes out
    error = error_from_condition(layer.error.name, layer.error.description)
    assert isinstance(error, AuthenticationError) and not error.retriable


def test_an_outcome_without_the_server_signature_is_refused() -> None:
    layer, _ = _rfc_layer()
    layer.receive(_outcome(0))
    assert layer.error is not None and layer.error.name == SASL_FAILED
    assert "did not prove" in str(layer.error.description)


@pytest.mark.parametrize(
    ("server_first", "says"),
    [
        (b"r=somebody-else,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "challenge is not valid"),
        (b"r=rOprNGfwEbeRWgbNEkqOxx,s=!!!,i=4096", "challenge is not valid"),
        (b"\xff\xfe", "challenge is not valid"),
        (b"garbage", "challenge is not valid"),
        (b"r=rOprNGfwEbeRWgbNEkqOxx,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=99999999999", "iterations"),
    ],
)
def test_a_bad_scram_challenge_is_refused_without_computing(server_first: bytes, says: str) -> None:
    layer = SaslClientLayer(ClientAuth("user", "pencil"), nonce=RFC_NONCE)
    layer.send(b"")
    layer.receive(SASL_HEADER + _mechanisms_frame("SCRAM-SHA-256"))
    layer.send(b"")
    layer.receive(encode_frame(0x42, [server_first]))
    assert layer.error is not None and layer.error.name == SASL_FAILED
    assert says in str(layer.error.description)


def test_a_server_error_in_place_of_the_signature_is_a_refusal() -> None:
    layer, _ = _rfc_layer()
    layer.receive(encode_frame(0x42, [b"e=invalid-proof"]))
    assert layer.error is not None and layer.error.name == UNAUTHORIZED
    assert "refused the SCRAM-SHA-256 login: invalid-proof" in str(layer.error.description)


# --- Every mechanism -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["SCRAM-SHA-1", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("final_as_challenge", [False, True])
def test_scram_logs_in_and_verifies_the_server(name: str, final_as_challenge: bool) -> None:
    broker = Broker((name, "PLAIN"), USERS, final_as_challenge=final_as_challenge)
    layer = _login(ClientAuth("alice", PASSWORD), broker)  # plain socket: SCRAM needs no consent
    assert layer.error is None and broker.logged_in == "scram"
    assert layer.mechanism == name


@pytest.mark.parametrize("name", ["SCRAM-SHA-1", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_with_a_wrong_password_is_refused(name: str) -> None:
    layer = _login(ClientAuth("alice", "not-" + PASSWORD), Broker((name,), USERS))
    assert layer.error is not None and layer.error.name == UNAUTHORIZED
    assert f"refused the SASL {name} login (outcome auth)" in str(layer.error.description)
    _assert_no_secret(layer.error, repr(layer))


def test_plain_sends_user_and_password() -> None:
    broker = Broker(("PLAIN",), USERS)
    layer = _login(ClientAuth("alice", PASSWORD), broker, secure=True)
    assert layer.error is None and broker.init == ("PLAIN", f"\0alice\0{PASSWORD}".encode())
    _assert_no_secret(repr(layer), repr(ClientAuth("alice", PASSWORD)))


def test_the_layer_passes_bytes_through_once_logged_in_so_the_engine_can_leave_it_out() -> None:
    layer = SaslClientLayer(ClientAuth("alice", PASSWORD), secure=True)
    assert not layer.passes_through  # the exchange is ahead
    _exchange(layer, Broker(("PLAIN",), USERS))
    assert layer.error is None and layer.passes_through
    assert layer.send(b"frame") == b"frame" and layer.receive(b"frame") == b"frame"
    assert not layer.has_output and layer.passes_through


def test_a_refused_layer_never_passes_bytes_through() -> None:
    layer = _login(ClientAuth("alice", "nope"), Broker(("PLAIN",), USERS), secure=True)
    assert layer.error is not None and not layer.passes_through


def test_plain_with_a_wrong_password_is_refused() -> None:
    layer = _login(ClientAuth("alice", "nope"), Broker(("PLAIN",), USERS), secure=True)
    assert layer.error is not None and layer.error.name == UNAUTHORIZED


def test_xoauth2_sends_the_token_as_a_bearer() -> None:
    broker = Broker(("XOAUTH2",), tokens={TOKEN: "alice"})
    layer = _login(ClientAuth("alice", TOKEN), broker, secure=True)
    assert layer.error is None and layer.mechanism == "XOAUTH2"
    assert broker.init == ("XOAUTH2", f"user=alice\x01auth=Bearer {TOKEN}\x01\x01".encode())


def test_xoauth2_with_a_revoked_token_is_refused_without_quoting_it() -> None:
    broker = Broker(("XOAUTH2",), tokens={})
    layer = _login(ClientAuth("alice", TOKEN), broker, secure=True)
    assert layer.error is not None and layer.error.name == UNAUTHORIZED
    _assert_no_secret(layer.error, repr(layer))


def test_plain_answers_a_challenge_empty() -> None:
    layer = SaslClientLayer(ClientAuth("alice", PASSWORD), secure=True)
    layer.send(b"")
    layer.receive(SASL_HEADER + _mechanisms_frame("PLAIN"))
    layer.send(b"")
    layer.receive(encode_frame(0x42, [b""]))
    assert _frames(layer.send(b"")) == [(0x43, [b""])]
    assert layer.receive(_outcome(0) + AMQP_HEADER) == AMQP_HEADER


def test_xoauth2_answers_an_error_challenge_and_reads_the_refusal() -> None:
    layer = SaslClientLayer(ClientAuth("alice", TOKEN), secure=True)
    layer.send(b"")
    layer.receive(SASL_HEADER + _mechanisms_frame("XOAUTH2"))
    layer.send(b"")
    layer.receive(encode_frame(0x42, [b'{"status":"401"}']))
    assert _frames(layer.send(b"")) == [(0x43, [b""])]
    layer.receive(_outcome(1))
    assert layer.error is not None and layer.error.name == UNAUTHORIZED


@pytest.mark.parametrize("name", ["ANONYMOUS", "EXTERNAL"])
def test_anonymous_and_external_send_an_empty_response(name: str) -> None:
    broker = Broker((name,))
    auth = ClientAuth(client_certificate=True)
    layer = _login(auth, broker, secure=True)
    assert layer.error is None and broker.init == (name, b"")


# --- Choice --------------------------------------------------------------------------------------

ALL = SASL_MECHANISMS


@pytest.mark.parametrize(
    ("auth", "secure", "offered", "chosen"),
    [
        (ClientAuth("u", "p", allow_insecure=True), False, ALL, "SCRAM-SHA-512"),
        (ClientAuth("u", "p", client_certificate=True), True, ALL, "EXTERNAL"),
        (ClientAuth("u", "p", client_certificate=True), False, ALL, "SCRAM-SHA-512"),
        (ClientAuth("u", "p"), True, ("PLAIN", "SCRAM-SHA-1", "ANONYMOUS"), "SCRAM-SHA-1"),
        (ClientAuth("u", "p"), True, ("SCRAM-SHA-256", "SCRAM-SHA-1"), "SCRAM-SHA-256"),
        (ClientAuth("u", "p"), True, ("XOAUTH2", "PLAIN", "ANONYMOUS"), "PLAIN"),
        (ClientAuth("u", "p"), True, ("XOAUTH2", "ANONYMOUS"), "XOAUTH2"),
        (ClientAuth("u", "p"), True, ("ANONYMOUS", "CRAM-MD5", "GSSAPI"), "ANONYMOUS"),
        (ClientAuth("u", "t\u00e9"), True, ("XOAUTH2", "ANONYMOUS"), "ANONYMOUS"),
        (ClientAuth(), True, ALL, "ANONYMOUS"),
        (ClientAuth("u", "p", mechanisms=("PLAIN",)), True, ALL, "PLAIN"),
        (ClientAuth("u", "p", mechanisms=("scram-sha-1", "PLAIN")), True, ALL, "SCRAM-SHA-1"),
    ],
)
def test_T2_the_strongest_usable_mechanism_the_broker_offers_is_chosen(
    auth: ClientAuth, secure: bool, offered: tuple[str, ...], chosen: str
) -> None:
    assert choose_mechanism(offered, auth, secure) == chosen


def test_T2_no_mechanism_in_common_names_both_sides() -> None:
    auth = ClientAuth("alice", PASSWORD, mechanisms=("SCRAM-SHA-256", "PLAIN"))
    layer = _login(auth, Broker(("GSSAPI", "PLAIN")))  # PLAIN over a plain socket: no
    assert layer.error is not None and layer.error.name == UNAUTHORIZED
    text = str(layer.error.description)
    assert "the broker offers GSSAPI, PLAIN" in text
    assert "haclient allows SCRAM-SHA-256, PLAIN" in text
    assert "PLAIN would send the password readable over a plain socket" in text
    _assert_no_secret(text)
    assert layer.send(AMQP_HEADER) == b""


def test_anonymous_only_client_against_a_login_broker() -> None:
    with pytest.raises(_Failure, match=r"offers PLAIN; .*\(PLAIN needs a username and password\)"):
        choose_mechanism(("PLAIN",), ClientAuth(), True)


# --- Configuration -------------------------------------------------------------------------------


def test_an_unknown_mechanism_is_a_configuration_error_listing_the_supported() -> None:
    with pytest.raises(ConfigurationError, match=r"'CRAM-MD5'.*supported: EXTERNAL, SCRAM-SHA-512"):
        ClientAuth("u", "p", mechanisms=("CRAM-MD5",))


def test_scram_only_needs_no_consent_over_a_plain_socket() -> None:
    EngineConfig(container_id="c", auth=ClientAuth("u", "p", mechanisms=("SCRAM-SHA-256",)))
    with pytest.raises(ConfigurationError, match="XOAUTH2 would send the password in clear text"):
        EngineConfig(container_id="c", auth=ClientAuth("u", "p", mechanisms=("XOAUTH2",)))


# --- Garbage -------------------------------------------------------------------------------------


def _frame(body: bytes, frame_type: int = 1, size: int | None = None, doff: int = 2) -> bytes:
    return struct.pack(">IBBH", size or 8 + len(body), doff, frame_type, 0) + body


@pytest.mark.parametrize(
    ("after_header", "condition"),
    [
        (_frame(b"\x00\x53\x40\x45", frame_type=0), "amqp:connection:framing-error"),
        (_frame(b"", size=4), "amqp:connection:framing-error"),
        (_frame(b"", size=10**6), "amqp:connection:framing-error"),
        (_frame(b"\x00\x00\x00\x00", doff=7), "amqp:connection:framing-error"),
        (_frame(b"\xff\xfe\xfd"), "amqp:decode-error"),
        (_frame(b"\x00\x53\x40\xc0\x10"), "amqp:decode-error"),  # truncated list
        (_frame(b"\xa1\x03abc"), "amqp:decode-error"),  # not described
        (encode_frame(0x44, [0, None]), "amqp:connection:framing-error"),  # outcome too early
        (encode_frame(0x40, [123]), "amqp:connection:framing-error"),  # mechanisms not symbols
    ],
)
def test_garbage_sasl_frames_fail_at_once(after_header: bytes, condition: str) -> None:
    layer = SaslClientLayer(ClientAuth("u", PASSWORD), secure=True)
    layer.send(b"")
    assert layer.receive(SASL_HEADER + after_header) == b""
    assert layer.error is not None and layer.error.name == condition, layer.error
    assert layer.receive(b"more") == b"" and layer.send(b"x") == b""


def test_garbage_after_the_init_fails_at_once() -> None:
    layer = SaslClientLayer(ClientAuth("u", PASSWORD), secure=True)
    layer.send(b"")
    layer.receive(SASL_HEADER + _mechanisms_frame("PLAIN"))
    layer.send(b"")
    layer.receive(encode_frame(0x40, [symbol("PLAIN")]))  # mechanisms again
    assert layer.error is not None and layer.error.name == "amqp:connection:framing-error"


def test_a_heartbeat_frame_is_skipped_and_bytes_may_come_one_at_a_time() -> None:
    broker = Broker(("PLAIN",), USERS)
    layer = SaslClientLayer(ClientAuth("alice", PASSWORD), secure=True)
    answer = broker.receive(layer.send(b""))
    for i in range(len(answer)):
        assert layer.receive(answer[i : i + 1]) == b""
    answer = _frame(b"") + broker.receive(layer.send(b"")) + AMQP_HEADER
    received = b"".join(layer.receive(answer[i : i + 1]) for i in range(len(answer)))
    assert layer.error is None and received == AMQP_HEADER


def test_a_non_sasl_answer_is_quoted_escaped() -> None:
    layer = SaslClientLayer(ClientAuth())
    layer.receive(b"\x1b[2J\x00HTTP/1.1 400")
    assert layer.error is not None and layer.error.name == "amqp:connection:framing-error"
    assert "\\x1b" in str(layer.error.description)


# --- Through the engine --------------------------------------------------------------------------


def _engine_against(
    answer: Callable[[bytes], bytes], auth: ClientAuth | None = None
) -> TransportClosed:
    engine = Engine(EngineConfig(container_id="c", auth=auth or ClientAuth()))
    engine.open()
    for _ in range(10):
        out = engine.data_to_send()
        reply = answer(out) if out else b""
        if reply:
            engine.receive_data(reply)
        for event in engine.events():
            if isinstance(event, TransportClosed):
                return event
        if not out and not reply:
            engine.receive_data(b"")
    raise AssertionError("the engine did not end")


def test_the_engine_names_amqp_0_9_1_as_before() -> None:
    closed = _engine_against(lambda out: b"AMQP\x00\x00\x09\x01")
    assert closed.error is not None and "AMQP 0-9-1" in str(closed.error.description)
    assert "rabbitmq_amqp1_0" in str(closed.error.description)


def test_the_engine_holds_its_amqp_header_until_the_outcome_and_reports_a_refusal() -> None:
    broker = Broker(("SCRAM-SHA-256",), USERS)
    sent: list[bytes] = []

    def answer(out: bytes) -> bytes:
        sent.append(out)
        return broker.receive(out)

    closed = _engine_against(answer, ClientAuth("alice", "wrong", mechanisms=("SCRAM-SHA-256",)))
    assert AMQP_HEADER not in b"".join(sent)
    assert closed.error is not None and closed.error.name == UNAUTHORIZED
    _assert_no_secret(closed.error)


def test_the_engine_logs_in_with_scram_and_opens() -> None:
    broker = Broker(("SCRAM-SHA-512", "PLAIN"), USERS)
    engine = Engine(
        EngineConfig(container_id="c", auth=ClientAuth("alice", PASSWORD, allow_insecure=True))
    )
    engine.open()
    sent = []
    for _ in range(5):
        out = engine.data_to_send()
        sent.append(out)
        if out and not out.startswith(AMQP_HEADER):
            engine.receive_data(broker.receive(out))
    assert broker.logged_in == "scram"
    assert engine.head == SASL_HEADER
    assert sent[-2].startswith(AMQP_HEADER) and not sent[-1]  # then proton's header and Open


@settings(max_examples=300, deadline=None)
@given(
    prefix=st.sampled_from([b"", SASL_HEADER, SASL_HEADER + _mechanisms_frame("SCRAM-SHA-256")]),
    junk=st.binary(max_size=200),
    cuts=st.lists(st.integers(0, 400), max_size=4),
)
def test_any_bytes_either_wait_or_fail_and_never_raise(
    prefix: bytes, junk: bytes, cuts: list[int]
) -> None:
    layer = SaslClientLayer(ClientAuth("user", PASSWORD), nonce=RFC_NONCE)
    data = prefix + junk
    for start, end in zip([0, *sorted(cuts)], [*sorted(cuts), len(data)], strict=True):
        layer.receive(data[start:end])
        layer.send(b"")
    if layer.error is not None:
        assert layer.receive(b"x") == b"" and layer.send(b"y") == b""
        _assert_no_secret(layer.error)
