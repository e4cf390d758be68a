"""The trust rules (T1-T4, T6) end to end, through both APIs: reference brokers serving TLS with
trustme's certificates and every SASL mechanism, on free ports of 127.0.0.1.

Which mechanism a login used is proved twice: the broker offers only the mechanism under test
(``sasl_mechanisms=``), or, where the choice is the point, the client's DEBUG record
``logging in with <mechanism>`` says what it chose; the broker's DEBUG record of the open names
the user it authenticated (the certificate's identity for EXTERNAL, the token's owner for
XOAUTH2, none for ANONYMOUS). T5 (no secret is shown) has its own module,
tests/rules/test_no_secret_leaks.py.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import trustme
from apikit import Api, eventually
from cryptography.hazmat.primitives import serialization
from failoverkit import TIMEOUT, Recorder, failover_url, port_of

from chaos.broker import BrokerThread
from haclient.amqp.config import TlsServerOptions
from haclient.destination import Queue
from haclient.errors import AuthenticationError, ConfigurationError, HAClientError
from haclient.message import TextMessage

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

PASSWORD = "trust-pw-5c1e"
KEY_PASSWORD = "trust-keypw-a9d0"
CLIENT_NAME = "app@clients.test"  # the client certificate's identity: EXTERNAL's user
BUDGET = 10.0  # the connect budget: only catches a hang
AT_ONCE = 5.0  # what "at once" means for a refusal by local brokers
# Retry for as long as the time budget lasts: only a refusal ends the connect early (F15).
FOREVER = {"cyclecount": -1, "startup.cyclecount": -1, "giveupafter": 120_000}


class Pki:
    """One CA's files: the brokers' certificates (good, misnamed, expired), the client's
    certificate with a plain and an encrypted key, and a CA nobody trusts."""

    def __init__(self, root: Path) -> None:
        self.root = root
        ca, stranger = trustme.CA(), trustme.CA()
        self.ca = self._write("ca.pem", ca.cert_pem.bytes())
        self.stranger_ca = self._write("stranger.pem", stranger.cert_pem.bytes())
        self.server = self._server(ca.issue_cert("localhost", "127.0.0.1"), "server")
        self.misnamed = self._server(ca.issue_cert("other.test"), "misnamed")
        self.foreign = self._server(stranger.issue_cert("localhost", "127.0.0.1"), "foreign")
        yesterday = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
        expired = ca.issue_cert(
            "127.0.0.1", not_before=yesterday - datetime.timedelta(days=30), not_after=yesterday
        )
        self.expired = self._server(expired, "expired")
        client = ca.issue_cert(CLIENT_NAME)
        self.client_cert = self._write("client.pem", client.cert_chain_pems[0].bytes())
        self.client_key = self._write("client.key", client.private_key_pem.bytes())
        key = serialization.load_pem_private_key(client.private_key_pem.bytes(), None)
        encrypted = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(KEY_PASSWORD.encode()),
        )
        self.encrypted_key = self._write("client-encrypted.key", encrypted)
        self.garbage_key = self._write("garbage.key", b"-----BEGIN PRIVATE KEY-----\nnot a key\n")

    def _write(self, name: str, data: bytes) -> str:
        path = self.root / name
        path.write_bytes(data)
        return str(path)

    def _server(self, cert: trustme.LeafCert, name: str) -> TlsServerOptions:
        return TlsServerOptions(
            self._write(f"{name}.pem", cert.cert_chain_pems[0].bytes()),
            self._write(f"{name}.key", cert.private_key_pem.bytes()),
        )

    def mutual(self) -> TlsServerOptions:
        """The good certificate, and client certificates of this CA required."""
        return TlsServerOptions(self.server.cert_file, self.server.key_file, client_ca_file=self.ca)

    @property
    def client(self) -> dict[str, str]:
        """The keywords of the client certificate."""
        return {"cert_file": self.client_cert, "key_file": self.client_key}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("trust-pki"))


@pytest.fixture
def logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """The client's SASL choice and the broker's opens, at DEBUG."""
    caplog.set_level(logging.DEBUG, logger="haclient.amqp")
    caplog.set_level(logging.DEBUG, logger="chaos.broker")
    return caplog


def amqps(broker: BrokerThread) -> str:
    return f"amqps://127.0.0.1:{broker.port}"


def chosen(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The mechanisms the client logged in with, in order (its DEBUG records)."""
    marker = "; logging in with "
    return [r.getMessage().split(marker)[1] for r in caplog.records if marker in r.getMessage()]


def broker_users(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The users the brokers' opens name (their DEBUG records)."""
    return [
        r.getMessage().rsplit("user ", 1)[1]
        for r in caplog.records
        if r.name.startswith("chaos.broker") and " open: container " in r.getMessage()
    ]


async def round_trip(connection: Any, queue: str) -> None:
    """A message sent and received on ``connection`` (started)."""
    await connection.start()
    session = await connection.create_session()
    producer = await session.create_producer(Queue(queue))
    await producer.send(TextMessage(queue))
    consumer = await session.create_consumer(Queue(queue))
    received = await consumer.receive(TIMEOUT)
    assert received is not None and received.text == queue
    await session.close()


# --- T2: each mechanism logs in, and the strongest is chosen ---------------------------------

LOGINS: dict[str, tuple[dict[str, Any], str]] = {
    # mechanism: (broker options beyond the mechanism, the user the broker names)
    "SCRAM-SHA-512": ({"users": {"app": PASSWORD}}, "'app'"),
    "SCRAM-SHA-256": ({"users": {"app": PASSWORD}}, "'app'"),
    "SCRAM-SHA-1": ({"users": {"app": PASSWORD}}, "'app'"),
    "PLAIN": ({"users": {"app": PASSWORD}}, "'app'"),
    "EXTERNAL": ({"users": {"app": PASSWORD}}, f"'{CLIENT_NAME}'"),
    "XOAUTH2": ({"oauth_tokens": {"tok-1": "app"}}, "'app'"),
    "ANONYMOUS": ({}, "None"),
}


@pytest.mark.parametrize("mechanism", list(LOGINS))
async def test_T2_each_mechanism_logs_in_over_tls_and_a_message_goes_through(
    api: Api, pki: Pki, logged: pytest.LogCaptureFixture, mechanism: str
) -> None:
    options, user = LOGINS[mechanism]
    tls = pki.mutual() if mechanism == "EXTERNAL" else pki.server
    keywords: dict[str, Any] = {"ca_file": pki.ca}
    if mechanism == "EXTERNAL":
        keywords.update(pki.client)
    elif mechanism == "XOAUTH2":
        keywords.update(username="app", token_provider=lambda: "tok-1")
    elif mechanism != "ANONYMOUS":
        keywords.update(username="app", password=PASSWORD)
    with BrokerThread(tls=tls, sasl_mechanisms=(mechanism,), **options) as broker:
        with anyio.fail_after(BUDGET):
            async with await api.connect(amqps(broker), **keywords) as connection:
                await round_trip(connection, f"login-{mechanism}")
    assert chosen(logged) == [mechanism]
    assert broker_users(logged) == [user]


CHOICES = [
    # (client certificate, amqp.saslMechanisms, what is chosen)
    pytest.param(True, None, "EXTERNAL", id="certificate-external"),
    pytest.param(False, None, "SCRAM-SHA-512", id="password-scram-512"),
    pytest.param(False, "PLAIN,SCRAM-SHA-1", "SCRAM-SHA-1", id="restricted-scram-1"),
    pytest.param(True, "PLAIN", "PLAIN", id="restricted-plain"),
]


@pytest.mark.parametrize(("certificate", "allowed", "expected"), CHOICES)
async def test_T2_the_strongest_mechanism_offered_and_allowed_is_chosen(
    api: Api,
    pki: Pki,
    logged: pytest.LogCaptureFixture,
    certificate: bool,
    allowed: str | None,
    expected: str,
) -> None:
    tls = pki.mutual() if certificate else pki.server
    keywords: dict[str, Any] = {"ca_file": pki.ca, "username": "app", "password": PASSWORD}
    if certificate:
        keywords.update(pki.client)
    every = {"users": {"app": PASSWORD}, "oauth_tokens": {PASSWORD: "app"}}
    with BrokerThread(tls=tls, **every) as broker:
        url = amqps(broker) + (f"?amqp.saslMechanisms={allowed}" if allowed else "")
        with anyio.fail_after(BUDGET):
            async with await api.connect(url, **keywords) as connection:
                await round_trip(connection, f"choice-{expected}")
    assert chosen(logged) == [expected]
    assert broker_users(logged) == [f"'{CLIENT_NAME}'" if expected == "EXTERNAL" else "'app'"]


async def test_T2_no_mechanism_in_common_is_refused_at_once_naming_both_sides(
    api: Api, pki: Pki
) -> None:
    with BrokerThread(
        tls=pki.server, users={"app": PASSWORD}, sasl_mechanisms=("SCRAM-SHA-256",)
    ) as broker:
        url = f"{amqps(broker)}?amqp.saslMechanisms=PLAIN"
        started = time.monotonic()
        with anyio.fail_after(BUDGET), pytest.raises(AuthenticationError) as refused:
            await api.connect(url, ca_file=pki.ca, username="app", password=PASSWORD)
        assert time.monotonic() - started < AT_ONCE
    text = str(refused.value)
    assert "no SASL mechanism in common" in text, text
    assert "the broker offers SCRAM-SHA-256" in text and "haclient allows PLAIN" in text, text


# --- T3: SCRAM proves both sides --------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_T3_a_scram_login_with_a_wrong_password_is_refused_without_it(
    api: Api, pki: Pki, mechanism: str
) -> None:
    with BrokerThread(tls=pki.server, users={"app": PASSWORD}) as broker:
        url = f"{amqps(broker)}?amqp.saslMechanisms={mechanism}"
        with anyio.fail_after(BUDGET), pytest.raises(AuthenticationError) as refused:
            await api.connect(url, ca_file=pki.ca, username="app", password="not-" + PASSWORD)
    text = str(refused.value)
    assert f"127.0.0.1:{broker.port}" in text and mechanism in text, text
    assert PASSWORD not in text


# --- T4: a token provider is called before every connect --------------------------------------


async def test_T4_a_revoked_token_is_replaced_by_the_providers_fresh_one_at_failover(
    api: Api, pki: Pki
) -> None:
    tokens = ["tok-old"]
    calls: list[str] = []

    def provider() -> str:
        calls.append(tokens[-1])
        return tokens[-1]

    logins: dict[str, Any] = {"tls": pki.server, "oauth_tokens": {"tok-old": "app"}}
    with BrokerThread(**logins) as first, BrokerThread(**logins) as second:
        url = failover_url(first, second).replace("amqp://", "amqps://")
        recorder = Recorder()
        with anyio.fail_after(3 * BUDGET):
            async with await api.connect(
                url, ca_file=pki.ca, username="app", token_provider=provider
            ) as connection:
                await connection.add_listener(recorder)
                await round_trip(connection, "token-before")
                for broker in (first, second):  # the old token expires; the open connection stays
                    broker.revoke_token("tok-old")
                    broker.add_token("tok-new", "app")
                tokens.append("tok-new")
                await round_trip(connection, "token-still-open")
                first.kill()
                await eventually(lambda: recorder.named("completed"), TIMEOUT)
                assert port_of(recorder.named("completed")[0]) == second.port
                await round_trip(connection, "token-after")
    # Once for the first connect, then before each attempt of the failover (the dead broker's
    # too, if the walk tries it first): every later call gave the fresh token.
    assert calls[0] == "tok-old" and calls[1:] and set(calls[1:]) == {"tok-new"}, calls


# --- T1 and F15: refused trust ----------------------------------------------------------------


async def test_T1_F15_a_broker_whose_certificate_is_refused_is_skipped(api: Api, pki: Pki) -> None:
    with BrokerThread(tls=pki.misnamed) as misnamed, BrokerThread(tls=pki.server) as good:
        url = failover_url(misnamed, good, **FOREVER).replace("amqp://", "amqps://")
        with anyio.fail_after(BUDGET):
            async with await api.connect(url, ca_file=pki.ca) as connection:
                assert port_of(str(connection.broker)) == good.port
                await round_trip(connection, "trusted-second")


async def test_T1_F15_when_every_certificate_is_refused_connect_gives_up_at_once(
    api: Api, pki: Pki
) -> None:
    with BrokerThread(tls=pki.misnamed) as misnamed, BrokerThread(tls=pki.foreign) as foreign:
        url = failover_url(misnamed, foreign, **FOREVER).replace("amqp://", "amqps://")
        started = time.monotonic()
        with anyio.fail_after(BUDGET), pytest.raises(AuthenticationError) as refused:
            await api.connect(url, ca_file=pki.ca)
        assert time.monotonic() - started < AT_ONCE
    text = str(refused.value)
    assert text.startswith("every broker refused the connection: "), text
    assert f"127.0.0.1:{misnamed.port}" in text and f"127.0.0.1:{foreign.port}" in text, text
    assert "certificate is not valid for the IP address '127.0.0.1'" in text, text
    assert "issued by a certificate authority that is not trusted" in text, text


# --- T6: bad input is a clear error, without traceback noise ---------------------------------


def _bad_inputs(pki: Pki) -> dict[str, tuple[type[HAClientError], dict[str, Any], str]]:
    """case: (the error, connect's keywords, what its message must say); the broker is
    ``trust_brokers``' good one."""
    password = {"username": "app", "password": PASSWORD}
    return {
        "missing key file": (
            ConfigurationError,
            {"cert_file": pki.client_cert, "key_file": str(pki.root / "absent.key")},
            "transport.keyFile: cannot read",
        ),
        "unreadable key file": (
            ConfigurationError,
            {"cert_file": pki.client_cert, "key_file": pki.garbage_key},
            "transport.keyFile: OpenSSL cannot read the private key in",
        ),
        "wrong key password": (
            ConfigurationError,
            {"cert_file": pki.client_cert, "key_file": pki.encrypted_key, "key_password": "no"},
            "does not decrypt the private key",
        ),
        "no mechanism allowed": (
            AuthenticationError,
            {**password, "sasl_mechanisms": ("EXTERNAL",)},
            "the broker offers SCRAM-SHA-512, SCRAM-SHA-256, SCRAM-SHA-1, XOAUTH2, PLAIN; "
            "haclient allows EXTERNAL",
        ),
        "scram wrong password": (
            AuthenticationError,
            {"username": "app", "password": "wrong", "sasl_mechanisms": ("SCRAM-SHA-256",)},
            "refused the login of user 'app': amqp:unauthorized-access: the broker refused the "
            "SASL SCRAM-SHA-256 login",
        ),
        "revoked token": (
            AuthenticationError,
            {"username": "app", "token_provider": lambda: "tok-revoked"},
            "refused the SASL XOAUTH2 login (outcome auth) (the connection ended) (check the "
            "token token_provider returns)",
        ),
    }


BAD_INPUTS = [
    "expired certificate",
    "wrong CA",
    "host name mismatch",
    "missing key file",
    "unreadable key file",
    "wrong key password",
    "no mechanism allowed",
    "scram wrong password",
    "revoked token",
]


@pytest.fixture(scope="module")
def trust_brokers(pki: Pki) -> Iterator[dict[str, BrokerThread]]:
    """The brokers the bad inputs meet: one with the good certificate (every login; the token
    ``tok-revoked`` was accepted once and revoked), one whose certificate has expired, one
    whose certificate names other.test only."""
    logins: dict[str, Any] = {"users": {"app": PASSWORD}, "oauth_tokens": {"tok-revoked": "app"}}
    with (
        BrokerThread(tls=pki.server, **logins) as good,
        BrokerThread(tls=pki.expired) as expired,
        BrokerThread(tls=pki.misnamed) as misnamed,
    ):
        good.revoke_token("tok-revoked")
        yield {"good": good, "expired": expired, "misnamed": misnamed}


@pytest.mark.parametrize("case", BAD_INPUTS)
async def test_T6_bad_input_is_a_clear_error_without_traceback_noise(
    api: Api,
    pki: Pki,
    trust_brokers: dict[str, BrokerThread],
    caplog: pytest.LogCaptureFixture,
    case: str,
) -> None:
    good = trust_brokers["good"]
    tls_cases: dict[str, tuple[type[HAClientError], str, dict[str, Any], str]] = {
        "expired certificate": (
            AuthenticationError,
            amqps(trust_brokers["expired"]),
            {"ca_file": pki.ca},
            "has expired",
        ),
        "wrong CA": (AuthenticationError, amqps(good), {"ca_file": pki.stranger_ca}, "not trusted"),
        "host name mismatch": (
            AuthenticationError,
            amqps(trust_brokers["misnamed"]),
            {"ca_file": pki.ca},
            "not valid for the IP address",
        ),
    }
    if case in tls_cases:
        error, url, keywords, says = tls_cases[case]
    else:
        error, keywords, says = _bad_inputs(pki)[case]
        url, keywords = amqps(good), {"ca_file": pki.ca, **keywords}
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    with anyio.fail_after(BUDGET), pytest.raises(error) as caught:
        await api.connect(url, **keywords)
    assert time.monotonic() - started < AT_ONCE
    text = str(caught.value)
    assert says.lower() in text.lower(), text
    assert "Traceback" not in text and PASSWORD not in text and KEY_PASSWORD not in text
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING and r.exc_info]
    assert noisy == [], [f"{r.name}: {r.getMessage()}" for r in noisy]
