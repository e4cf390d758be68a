"""TLS as users configure it: ``ssl_context=`` and the ``transport.*`` URL options against the
reference broker serving TLS (certificates from trustme), and each bad input's error.

The brokers run in threads of this process (``BrokerThread``) on free ports of 127.0.0.1.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

import haclient
from chaos.broker import BrokerThread
from haclient import Queue, TextMessage
from haclient.aio.options import ConnectionOptions, TrustAllWarning
from haclient.aio.tls_options import tls_client_options
from haclient.amqp.config import TlsServerOptions
from haclient.errors import AuthenticationError, ConfigurationError, HAClientError

BUDGET = 10.0  # seconds any refusal must take at most (the connect budget)


class Pki:
    """Files of one test CA: the server certificates (good, misnamed, expired), a client
    certificate (plain key, and encrypted key), and a second CA nobody trusts."""

    def __init__(self, root: Path) -> None:
        self.root = root
        ca = trustme.CA()
        self.ca = self._write("ca.pem", ca.cert_pem.bytes())
        self.cert, self.key = self._issue(ca, "server", "localhost", "127.0.0.1")
        self.other_cert, self.other_key = self._issue(ca, "other", "other.test")
        yesterday = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
        expired = ca.issue_cert(
            "localhost",
            "127.0.0.1",
            not_before=yesterday - datetime.timedelta(days=30),
            not_after=yesterday,
        )
        self.expired_cert = self._write("expired.pem", expired.cert_chain_pems[0].bytes())
        self.expired_key = self._write("expired.key", expired.private_key_pem.bytes())
        self.client_cert, self.client_key = self._issue(ca, "client", "app@clients.test")
        client = ca.issue_cert("app2@clients.test")
        both = client.cert_chain_pems[0].bytes() + client.private_key_pem.bytes()
        self.client_pem = self._write("client-both.pem", both)
        key = serialization.load_pem_private_key(client.private_key_pem.bytes(), None)
        encrypted = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"k3y-pass"),
        )
        self.client_cert2 = self._write("client2.pem", client.cert_chain_pems[0].bytes())
        self.encrypted_key = self._write("client2.key", encrypted)
        self.stranger_ca = self._write("stranger.pem", trustme.CA().cert_pem.bytes())
        self.not_pem = self._write("store.p12", b"\x30\x82\x05\x00binary key store")

    def _write(self, name: str, data: bytes) -> str:
        path = self.root / name
        path.write_bytes(data)
        return str(path)

    def _issue(self, ca: trustme.CA, name: str, *identities: str) -> tuple[str, str]:
        cert = ca.issue_cert(*identities)
        return (
            self._write(f"{name}.pem", cert.cert_chain_pems[0].bytes()),
            self._write(f"{name}.key", cert.private_key_pem.bytes()),
        )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("tls-pki"))


def _broker(tls: TlsServerOptions) -> Iterator[int]:
    with BrokerThread(tls=tls) as broker:
        yield broker.port


@pytest.fixture(scope="module")
def port(pki: Pki) -> Iterator[int]:
    """A broker with a certificate for localhost and 127.0.0.1."""
    yield from _broker(TlsServerOptions(pki.cert, pki.key))


@pytest.fixture(scope="module")
def misnamed_port(pki: Pki) -> Iterator[int]:
    """A broker whose certificate names other.test only."""
    yield from _broker(TlsServerOptions(pki.other_cert, pki.other_key))


@pytest.fixture(scope="module")
def expired_port(pki: Pki) -> Iterator[int]:
    yield from _broker(TlsServerOptions(pki.expired_cert, pki.expired_key))


@pytest.fixture(scope="module")
def mutual_port(pki: Pki) -> Iterator[int]:
    """A broker that requires a client certificate issued by the test CA."""
    yield from _broker(TlsServerOptions(pki.cert, pki.key, client_ca_file=pki.ca))


@pytest.fixture(scope="module")
def tls12_port(pki: Pki) -> Iterator[int]:
    """A broker that has no TLS 1.3."""
    yield from _broker(TlsServerOptions(pki.cert, pki.key, maximum_version=ssl.TLSVersion.TLSv1_2))


def _round_trip(url: str, **keywords: object) -> str:
    """Connect, send one message and receive it; the text received."""
    with haclient.connect(url, **keywords) as conn:
        conn.start()
        with conn.create_session() as session:
            session.create_producer(Queue("tls")).send(TextMessage("over TLS"))
            received = session.create_consumer(Queue("tls")).receive(timeout=10)
            assert isinstance(received, TextMessage)
            return str(received.text)


def _refused(url: str, error: type[HAClientError] = AuthenticationError, **kw: object) -> str:
    """Connect, expecting ``error`` within the budget; its message."""
    started = time.monotonic()
    with pytest.raises(error) as info:
        haclient.connect(url, **kw).close()
    assert time.monotonic() - started < BUDGET
    assert "Traceback" not in str(info.value)
    return str(info.value)


def _q(**options: str) -> str:
    return "&".join(f"transport.{name}={value}" for name, value in options.items())


# --- Trusting a private CA -----------------------------------------------------------------------


def test_a_private_ca_through_the_trust_store_location(pki: Pki, port: int) -> None:
    url = f"amqps://localhost:{port}?{_q(trustStoreLocation=pki.ca)}"
    assert _round_trip(url) == "over TLS"


def test_a_private_ca_through_ca_file_on_one_broker_of_a_failover_url(pki: Pki, port: int) -> None:
    url = f"failover:(amqps://localhost:{port}?{_q(caFile=pki.ca)})"
    assert _round_trip(url) == "over TLS"


def test_a_private_ca_through_an_ssl_context(pki: Pki, port: int) -> None:
    context = ssl.create_default_context(cafile=pki.ca)
    assert _round_trip(f"amqps://localhost:{port}", ssl_context=context) == "over TLS"


def test_T1_the_ssl_context_wins_over_the_url_options(pki: Pki, port: int) -> None:
    url = f"amqps://localhost:{port}?{_q(trustStoreLocation=pki.stranger_ca)}"
    context = ssl.create_default_context(cafile=pki.ca)
    assert _round_trip(url, ssl_context=context) == "over TLS"


def test_an_ssl_context_keyword_of_another_type_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"ssl_context must be an ssl\.SSLContext"):
        haclient.connect("amqps://localhost:1", ssl_context="/etc/ca.pem")


def test_T1_the_system_store_alone_does_not_trust_a_private_ca(pki: Pki, port: int) -> None:
    text = _refused(f"amqps://localhost:{port}")
    assert f"localhost:{port}" in text
    assert "certificate verify failed" in text and "not trusted" in text


def test_a_ca_that_did_not_issue_the_certificate_is_refused(pki: Pki, port: int) -> None:
    text = _refused(f"amqps://localhost:{port}?{_q(trustStoreLocation=pki.stranger_ca)}")
    assert "not trusted" in text and f"localhost:{port}" in text


# --- Host names ----------------------------------------------------------------------------------


def test_T1_a_host_name_the_certificate_does_not_have_is_refused(
    pki: Pki, misnamed_port: int
) -> None:
    text = _refused(f"amqps://localhost:{misnamed_port}?{_q(trustStoreLocation=pki.ca)}")
    assert "not valid for the host name 'localhost'" in text
    assert f"localhost:{misnamed_port}" in text


def test_verify_host_false_accepts_the_misnamed_certificate(pki: Pki, misnamed_port: int) -> None:
    url = f"amqps://localhost:{misnamed_port}?{_q(trustStoreLocation=pki.ca, verifyHost='false')}"
    assert _round_trip(url) == "over TLS"


def test_T1_server_name_is_the_name_checked(pki: Pki, misnamed_port: int) -> None:
    url = f"amqps://127.0.0.1:{misnamed_port}?{_q(trustStoreLocation=pki.ca)}"
    assert _round_trip(url, server_name="other.test") == "over TLS"
    text = _refused(url, server_name="third.test")
    assert "'third.test'" in text


def test_T1_trust_all_checks_nothing_and_warns(pki: Pki, misnamed_port: int) -> None:
    url = f"amqps://localhost:{misnamed_port}?transport.trustAll=true"
    with pytest.warns(TrustAllWarning, match="not checked"):
        assert _round_trip(url) == "over TLS"


def test_T1_an_expired_certificate_is_refused(pki: Pki, expired_port: int) -> None:
    text = _refused(f"amqps://localhost:{expired_port}?{_q(trustStoreLocation=pki.ca)}")
    assert "has expired" in text and f"localhost:{expired_port}" in text


# --- Versions and cipher suites ----------------------------------------------------------------


def test_tls_1_3_only(pki: Pki, port: int) -> None:
    url = f"amqps://localhost:{port}?{_q(trustStoreLocation=pki.ca, enabledProtocols='TLSv1.3')}"
    assert _round_trip(url) == "over TLS"


def test_a_broker_without_tls_1_3_refuses_a_client_that_wants_only_it(
    pki: Pki, tls12_port: int
) -> None:
    base = f"amqps://localhost:{tls12_port}?{_q(trustStoreLocation=pki.ca)}"
    assert _round_trip(base) == "over TLS"
    text = _refused(base, enabled_protocols="TLSv1.3")
    assert "no TLS version in common" in text


def test_disabled_protocols_leave_the_rest(pki: Pki, tls12_port: int) -> None:
    url = f"amqps://localhost:{tls12_port}?{_q(trustStoreLocation=pki.ca)}"
    text = _refused(url, disabled_protocols=("TLSv1.2",))
    assert "no TLS version in common" in text


def test_the_context_protocol_is_javas_default_tls_versions(pki: Pki, port: int) -> None:
    base = f"amqps://localhost:{port}?{_q(trustStoreLocation=pki.ca)}"

    def versions(**keywords: object) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
        options = ConnectionOptions(ca_file=pki.ca, **keywords)  # type: ignore[arg-type]
        context = tls_client_options(options).context
        assert context is not None
        return context.minimum_version, context.maximum_version

    v12, v13 = ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3
    assert versions(context_protocol="TLSv1.2") == (v12, v12)  # Java's TLSv1.2 context
    assert versions(context_protocol="TLSv1.3")[0] == v12
    # transport.enabledProtocols wins, as it does in Qpid JMS (the engine's list is replaced)
    assert versions(context_protocol="TLSv1.2", enabled_protocols=("TLSv1.3",)) == (v13, v13)
    assert _round_trip(base + "&transport.contextProtocol=TLSv1.2") == "over TLS"
    text = _refused(
        base + "&transport.contextProtocol=TLSv1.2",
        ConfigurationError,
        disabled_protocols=("TLSv1.2",),
    )
    assert "no TLS version is left" in text
    with pytest.raises(ConfigurationError, match=r"older than 1\.2.*transport\.enabledProtocols"):
        haclient.connect(base + "&transport.contextProtocol=TLSv1.1")
    with pytest.raises(ConfigurationError, match=r"transport\.contextProtocol"):
        haclient.connect(base + "&transport.contextProtocol=TLSv9")


def test_an_unknown_protocol_name_is_refused_by_the_url_parser() -> None:
    named = r"transport\.enabledProtocols names TLS version 'TLSv1\.4', which is not supported"
    with pytest.raises(ConfigurationError, match=named):
        haclient.connect("amqps://localhost:1?transport.enabledProtocols=TLSv1.4")


def test_cipher_suites_by_openssl_or_iana_name(pki: Pki, tls12_port: int) -> None:
    base = f"amqps://localhost:{tls12_port}?{_q(trustStoreLocation=pki.ca)}"
    iana = "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"  # trustme's keys are ECDSA
    assert _round_trip(base, enabled_cipher_suites=(iana,)) == "over TLS"
    assert _round_trip(base + "&transport.enabledCipherSuites=ECDHE-ECDSA-AES128-GCM-SHA256")
    text = _refused(base, enabled_cipher_suites=("ECDHE-RSA-AES128-GCM-SHA256",))
    assert "cipher" in text


def test_tls_1_3_suites_only_mean_tls_1_3_only(pki: Pki, port: int, tls12_port: int) -> None:
    suites = ("TLS_AES_256_GCM_SHA384",)
    url = f"amqps://localhost:{port}?{_q(trustStoreLocation=pki.ca)}"
    assert _round_trip(url, enabled_cipher_suites=suites) == "over TLS"
    url12 = f"amqps://localhost:{tls12_port}?{_q(trustStoreLocation=pki.ca)}"
    assert "no TLS version in common" in _refused(url12, enabled_cipher_suites=suites)
    text = _refused(
        url, ConfigurationError, enabled_cipher_suites=suites, enabled_protocols="TLSv1.2"
    )
    assert "only TLS 1.3 suites" in text


def test_an_unknown_cipher_suite_is_a_configuration_error(pki: Pki, port: int) -> None:
    url = f"amqps://localhost:{port}?{_q(enabledCipherSuites='TLS_NO_SUCH_CIPHER')}"
    text = _refused(url, ConfigurationError)
    assert "unknown cipher suite 'TLS_NO_SUCH_CIPHER'" in text


# --- Client certificates -----------------------------------------------------------------------


def test_mutual_tls_with_cert_and_key_files(pki: Pki, mutual_port: int) -> None:
    url = (
        f"amqps://localhost:{mutual_port}?"
        f"{_q(trustStoreLocation=pki.ca, certFile=pki.client_cert, keyFile=pki.client_key)}"
    )
    assert _round_trip(url) == "over TLS"


def test_mutual_tls_with_a_key_store_location_holding_both(pki: Pki, mutual_port: int) -> None:
    url = (
        f"amqps://localhost:{mutual_port}?"
        f"{_q(trustStoreLocation=pki.ca, keyStoreLocation=pki.client_pem, keyAlias='app2')}"
    )
    assert _round_trip(url) == "over TLS"


def test_mutual_tls_with_an_encrypted_key(pki: Pki, mutual_port: int) -> None:
    url = (
        f"amqps://localhost:{mutual_port}?{_q(trustStoreLocation=pki.ca)}"
        f"&{_q(certFile=pki.client_cert2, keyFile=pki.encrypted_key, keyStorePassword='k3y-pass')}"
    )
    assert _round_trip(url) == "over TLS"


# --- PKCS12 stores (transport.storeType=PKCS12) ---------------------------------------------------


@pytest.fixture(scope="module")
def p12(pki: Pki) -> dict[str, str]:
    """PKCS12 stores of the test CA, as Java's keytool and openssl make them: a trust store
    (Java's kind, its certificate a trusted entry), a key store with the client's key and
    certificate (password ``store-pass``), and a trust store without a password."""
    ca = x509.load_pem_x509_certificate(Path(pki.ca).read_bytes())
    cert = x509.load_pem_x509_certificate(Path(pki.client_cert).read_bytes())
    key = serialization.load_pem_private_key(Path(pki.client_key).read_bytes(), None)
    assert isinstance(key, pkcs12.PKCS12PrivateKeyTypes)
    trusted = pkcs12.PKCS12Certificate(ca, b"myca")
    files = {
        "trust": pkcs12.serialize_java_truststore(
            [trusted], serialization.BestAvailableEncryption(b"trust-pass")
        ),
        "trust-open": pkcs12.serialize_key_and_certificates(
            None, None, None, [ca], serialization.NoEncryption()
        ),
        "keys": pkcs12.serialize_key_and_certificates(
            b"app", key, cert, None, serialization.BestAvailableEncryption(b"store-pass")
        ),
    }
    return {name: pki._write(f"{name}.p12", data) for name, data in files.items()}


def test_pkcs12_trust_and_key_stores_as_java_applications_give_them(
    p12: dict[str, str], mutual_port: int
) -> None:
    url = (
        f"amqps://localhost:{mutual_port}?"
        + _q(storeType="PKCS12", trustStoreLocation=p12["trust"], trustStorePassword="trust-pass")
        + "&"
        + _q(keyStoreLocation=p12["keys"], keyStorePassword="store-pass", keyAlias="app")
    )
    assert _round_trip(url) == "over TLS"
    both = dict(ca_file=p12["trust-open"], cert_file=p12["keys"], key_password="store-pass")
    assert (
        _round_trip(
            f"amqps://localhost:{mutual_port}", store_type="pkcs12", **both
        )  # keywords, any case; a trust store without a password
        == "over TLS"
    )


def test_a_pkcs12_store_that_cannot_be_read_says_which_and_never_shows_the_password(
    pki: Pki, p12: dict[str, str], port: int
) -> None:
    base = f"amqps://localhost:{port}?transport.trustStoreType=PKCS12&"
    wrong = _q(trustStoreLocation=p12["trust"], trustStorePassword="not-the-s3cret")
    with pytest.raises(ConfigurationError, match=r"cannot be read as a PKCS12 store") as info:
        haclient.connect(base + wrong)
    assert info.value.option == "transport.trustStoreLocation"
    assert "not-the-s3cret" not in str(info.value)
    with pytest.raises(ConfigurationError, match=r"check the file"):
        haclient.connect(base + _q(trustStoreLocation=pki.ca))  # PEM, not PKCS12
    keys = _q(keyStoreType="PKCS12", keyStoreLocation=p12["trust-open"])
    with pytest.raises(ConfigurationError, match="no private key") as info:
        haclient.connect(f"amqps://localhost:{port}?{_q(trustStoreLocation=pki.ca)}&{keys}")
    assert info.value.option == "transport.keyStoreLocation"


def test_a_jks_store_is_refused_with_the_keytool_command() -> None:
    with pytest.raises(ConfigurationError, match=r"keytool -importkeystore .*PKCS12"):
        haclient.connect("amqps://localhost:1?transport.storeType=JKS")


def test_a_broker_requiring_a_client_certificate_refuses_a_client_without(
    pki: Pki, mutual_port: int
) -> None:
    text = _refused(f"amqps://localhost:{mutual_port}?{_q(trustStoreLocation=pki.ca)}")
    assert "requires a client certificate" in text and f"localhost:{mutual_port}" in text


def test_a_client_certificate_the_broker_does_not_trust_is_refused(
    pki: Pki, mutual_port: int, tmp_path: Path
) -> None:
    stranger = trustme.CA().issue_cert("app@clients.test")
    cert, key = tmp_path / "c.pem", tmp_path / "c.key"
    stranger.cert_chain_pems[0].write_to_path(str(cert))
    stranger.private_key_pem.write_to_path(str(key))
    url = f"amqps://localhost:{mutual_port}?{_q(trustStoreLocation=pki.ca)}"
    text = _refused(url, cert_file=str(cert), key_file=str(key))
    assert "client certificate" in text and f"localhost:{mutual_port}" in text


# --- Bad files: ConfigurationError at connect(), naming the option and the file -----------------


def test_a_missing_ca_file(port: int, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    text = _refused(
        f"amqps://localhost:{port}?{_q(trustStoreLocation=missing)}", ConfigurationError
    )
    assert "transport.trustStoreLocation" in text and str(missing) in text
    assert "No such file" in text


def test_a_java_key_store_is_refused_with_how_to_convert_it(pki: Pki, port: int) -> None:
    text = _refused(
        f"amqps://localhost:{port}?{_q(trustStoreLocation=pki.not_pem)}", ConfigurationError
    )
    assert "not a PEM file" in text and "keytool" in text and "openssl pkcs12" in text
    text = _refused(f"amqps://localhost:{port}", ConfigurationError, cert_file=pki.not_pem)
    assert "transport.certFile" in text and "keytool -importkeystore" in text


def test_an_unreadable_key_file(pki: Pki, port: int, tmp_path: Path) -> None:
    missing = tmp_path / "client.key"
    text = _refused(
        f"amqps://localhost:{port}",
        ConfigurationError,
        cert_file=pki.client_cert,
        key_file=str(missing),
    )
    assert "transport.keyFile" in text and str(missing) in text


def test_a_wrong_or_missing_key_password(pki: Pki, port: int) -> None:
    url = f"amqps://localhost:{port}?{_q(certFile=pki.client_cert2, keyFile=pki.encrypted_key)}"
    text = _refused(url + "&transport.keyPassword=wrong-one", ConfigurationError)
    assert "does not decrypt the private key" in text and pki.encrypted_key in text
    assert "wrong-one" not in text
    text = _refused(url, ConfigurationError)
    assert "is encrypted: give its password" in text


def test_a_key_that_is_not_the_certificates(pki: Pki, port: int) -> None:
    text = _refused(
        f"amqps://localhost:{port}", ConfigurationError, cert_file=pki.client_cert, key_file=pki.key
    )
    assert "cannot be used together" in text


def test_tls_secrets_are_masked(pki: Pki) -> None:
    factory = haclient.ConnectionFactory(
        f"amqps://localhost:1?transport.keyStorePassword=canary-1&{_q(trustStorePassword='canary-2')}",
        key_password="canary-3",
    )
    shown = repr(factory) + repr(factory.options) + str(factory.options.url_options())
    assert "canary" not in shown


def test_a_port_that_accepts_and_says_nothing_names_the_tls_handshake() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel accepts; nobody answers
        port = silent.getsockname()[1]
        url = f"amqps://localhost:{port}?jms.connectTimeout=300"
        started = time.monotonic()
        with pytest.raises(HAClientError, match="did not finish the TLS handshake"):
            haclient.connect(url).close()
        assert time.monotonic() - started < BUDGET


def test_transport_options_in_every_place_a_url_takes_them(pki: Pki) -> None:
    """Connection-wide, per broker, and Qpid JMS's failover.nested. spelling for every broker."""
    for url in (
        f"amqps://h?transport.trustStoreLocation={pki.ca}",
        f"failover:(amqps://a?transport.caFile={pki.ca},amqps://b)",
        f"failover:(amqps://a,amqps://b)?failover.nested.transport.trustStoreLocation={pki.ca}",
    ):
        factory = haclient.ConnectionFactory(url)
        assert factory.options.for_broker(factory.url.brokers[0]).ca_file == pki.ca, url
