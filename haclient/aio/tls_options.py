"""The TLS options (``ssl_context=``, ``transport.*``) made into the engine's TLS settings.

How this works: ``tls_client_options`` is called for each ``amqps`` connection attempt with the
options as they apply to that broker (``ConnectionOptions.for_broker``), so that a renewed
certificate is read at the next reconnect; ``ConnectionOptions.build`` calls it once per
``amqps`` broker too, so that a bad option fails ``connect()`` at once. An ``ssl_context``
keyword is used as given. Otherwise a context is made: ``ssl.create_default_context()`` (the
system's trust store, chain and host name verified, TLS 1.2 at least), then each option changes
it: ``transport.contextProtocol`` as the versions Java's ``SSLContext`` of that name enables
(``_context_versions``), ``transport.enabledProtocols`` winning over it as in Qpid JMS. A file
that cannot be read, a wrong key password, an unknown version or cipher suite raises
``ConfigurationError`` naming the option and the file, before any byte is sent.

Files are read as PEM, or as PKCS12 where ``transport.storeType`` (``keyStoreType``,
``trustStoreType``) says so (``haclient.aio.pkcs12``, the ``pkcs12`` extra). A JKS store,
Java's own format, is refused with the ``keytool`` command that converts it to PKCS12.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence
from typing import Final, Protocol

from haclient.aio.pkcs12 import load_key_store, trusted_certificates
from haclient.amqp.config import TlsClientOptions
from haclient.errors import ConfigurationError
from haclient.options import TLS_VERSIONS

__all__ = ["TlsSettings", "tls_client_options"]

log = logging.getLogger("haclient.connection")

_VERSIONS: Final = dict(
    zip(
        TLS_VERSIONS,
        (
            ssl.TLSVersion.TLSv1,
            ssl.TLSVersion.TLSv1_1,
            ssl.TLSVersion.TLSv1_2,
            ssl.TLSVersion.TLSv1_3,
        ),
        strict=True,
    )
)
_DEFAULT_VERSIONS: Final = ("TLSv1.2", "TLSv1.3")
# TLS 1.3's suites: OpenSSL enables them all, and Python's ssl cannot choose among them.
_TLS13_SUITES: Final = frozenset(
    {
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_AES_128_CCM_SHA256",
        "TLS_AES_128_CCM_8_SHA256",
    }
)
_CA_CONVERT: Final = (
    "convert it to PEM: `keytool -exportcert -rfc -keystore STORE -alias ALIAS -file ca.pem` "
    "(JKS), or `openssl pkcs12 -in STORE -nokeys -out ca.pem` (PKCS12)"
)
_KEY_CONVERT: Final = (
    "convert it to PEM: `keytool -importkeystore -srckeystore STORE -destkeystore store.p12 "
    "-deststoretype PKCS12` (JKS), then `openssl pkcs12 -in store.p12 -out client.pem` "
    "(certificate and encrypted key; its password is transport.keyStorePassword)"
)


class TlsSettings(Protocol):
    """The TLS options ``tls_client_options`` reads (``haclient.aio.ConnectionOptions``'s)."""

    @property
    def ssl_context(self) -> ssl.SSLContext | None: ...
    @property
    def ca_file(self) -> str | None: ...
    @property
    def cert_file(self) -> str | None: ...
    @property
    def key_file(self) -> str | None: ...
    @property
    def key_password(self) -> str | None: ...
    @property
    def verify_host(self) -> bool: ...
    @property
    def trust_all(self) -> bool: ...
    @property
    def enabled_protocols(self) -> tuple[str, ...] | None: ...
    @property
    def disabled_protocols(self) -> tuple[str, ...] | None: ...
    @property
    def enabled_cipher_suites(self) -> tuple[str, ...] | None: ...
    @property
    def disabled_cipher_suites(self) -> tuple[str, ...] | None: ...
    @property
    def server_name(self) -> str | None: ...
    @property
    def context_protocol(self) -> str: ...
    @property
    def store_type(self) -> str | None: ...
    @property
    def key_store_type(self) -> str | None: ...
    @property
    def trust_store_type(self) -> str | None: ...
    @property
    def trust_store_password(self) -> str | None: ...


def tls_client_options(options: TlsSettings) -> TlsClientOptions:
    """The engine's TLS settings for one ``amqps`` broker (``options`` already for it).

    Raises:
        ConfigurationError: A file is missing, unreadable or not PEM, the key's password is
            wrong or missing, a TLS version or cipher suite is unknown or none is left.
    """
    if options.ssl_context is not None:
        # A context cannot be asked whether it holds a client certificate.
        return TlsClientOptions(
            context=options.ssl_context, peer_name=options.server_name, has_client_certificate=None
        )
    pkcs12 = _pkcs12(options.trust_store_type or options.store_type)
    context = _trust(options.ca_file, pkcs12=pkcs12, password=options.trust_store_password)
    if options.trust_all:  # ConnectionOptions.build warned (TrustAllWarning)
        log.warning("TLS trusts any certificate (transport.trustAll=true)")
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif not options.verify_host:
        context.check_hostname = False
    _versions(
        context, options.enabled_protocols, options.disabled_protocols, options.context_protocol
    )
    _ciphers(context, options.enabled_cipher_suites, options.disabled_cipher_suites)
    if options.enabled_cipher_suites and all(
        suite in _TLS13_SUITES for suite in options.enabled_cipher_suites
    ):
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        if context.maximum_version == ssl.TLSVersion.TLSv1_2:
            raise ConfigurationError(
                "transport.enabledCipherSuites names only TLS 1.3 suites, but TLS 1.3 is not "
                "enabled",
                option="transport.enabledCipherSuites",
            )
    if options.key_file and not options.cert_file:
        raise ConfigurationError(
            "transport.keyFile needs transport.certFile (the certificate it belongs to)",
            option="transport.keyFile",
        )
    if options.cert_file and _pkcs12(options.key_store_type or options.store_type):
        load_key_store(context, options.cert_file, options.key_password)
    elif options.cert_file:
        _client_certificate(context, options.cert_file, options.key_file, options.key_password)
    return TlsClientOptions(
        context=context,
        peer_name=options.server_name,
        has_client_certificate=options.cert_file is not None,
    )


def _pkcs12(store_type: str | None) -> bool:
    """Whether a ``transport.*StoreType`` names PKCS12 (any case, as Java reads it); any
    other name but JKS (refused by the option's check) is PEM."""
    return store_type is not None and store_type.upper() == "PKCS12"


def _trust(
    ca_file: str | None, *, pkcs12: bool = False, password: str | None = None
) -> ssl.SSLContext:
    """A client context trusting ``ca_file`` instead of the system's store, if given: PEM, or
    with ``pkcs12`` a PKCS12 store that ``password`` opens."""
    if ca_file is None:
        context = ssl.create_default_context()
    elif pkcs12:
        context = ssl.create_default_context(cadata=trusted_certificates(ca_file, password))
    else:
        option = "transport.trustStoreLocation"
        _check_pem(ca_file, option, _CA_CONVERT)
        try:
            context = ssl.create_default_context(cafile=ca_file)
        except ssl.SSLError as exc:
            raise ConfigurationError(
                f"{option}: {ca_file!r} holds no certificate OpenSSL can read ({exc.reason})",
                option=option,
            ) from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _check_pem(path: str, option: str, convert: str) -> None:
    """Raise ``ConfigurationError`` unless ``path`` is a readable PEM file."""
    try:
        with open(path, "rb") as file:
            head = file.read(65536)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigurationError(
            f"{option}: cannot read {path!r}: {reason}", option=option
        ) from None
    if b"-----BEGIN " not in head:
        raise ConfigurationError(
            f"{option}: {path!r} is not a PEM file (a Java key store?): {convert}",
            option=option,
        )


def _client_certificate(
    context: ssl.SSLContext, cert_file: str, key_file: str | None, password: str | None
) -> None:
    _check_pem(cert_file, "transport.certFile", _KEY_CONVERT)
    if key_file is not None:
        _check_pem(key_file, "transport.keyFile", _KEY_CONVERT)
    where = repr(key_file or cert_file)
    try:
        # A callable, so that OpenSSL never prompts on the terminal for an encrypted key.
        context.load_cert_chain(cert_file, key_file, lambda: password or "")
    except ssl.SSLError as exc:
        if password is None and _encrypted(key_file or cert_file):
            raise ConfigurationError(
                f"the private key in {where} is encrypted: give its password with "
                "transport.keyPassword (or transport.keyStorePassword)",
                option="transport.keyPassword",
            ) from None
        if password is not None and _encrypted(key_file or cert_file):
            raise ConfigurationError(
                f"transport.keyPassword does not decrypt the private key in {where}",
                option="transport.keyPassword",
            ) from None
        if exc.reason != "KEY_VALUES_MISMATCH":  # OpenSSL says only "PEM lib": which file?
            if not _reads_certificate(cert_file):
                option, path, what = "transport.certFile", cert_file, "certificate"
            else:
                option = "transport.keyFile" if key_file else "transport.certFile"
                path, what = key_file or cert_file, "private key"
            raise ConfigurationError(
                f"{option}: OpenSSL cannot read the {what} in {path!r} (a PEM {what} is expected)",
                option=option,
            ) from None
        raise ConfigurationError(
            f"the client certificate {cert_file!r} and the key in {where} cannot be used "
            f"together ({exc.reason or exc})",
            option="transport.certFile",
        ) from None


def _reads_certificate(path: str) -> bool:
    """Whether OpenSSL reads a certificate in ``path`` (PEM)."""
    try:
        ssl.create_default_context().load_verify_locations(path)
    except ssl.SSLError:
        return False
    return True


def _encrypted(path: str) -> bool:
    with open(path, "rb") as file:
        text = file.read()
    return b"ENCRYPTED" in text


def _context_versions(protocol: str) -> tuple[str, ...]:
    """The TLS versions Java's ``SSLContext.getInstance(protocol)`` enables on a client:
    SunJSSE's ``TLSv1.2`` context enables 1.2 and older, ``TLSv1.3`` 1.3 and older, ``TLS``
    (``SSL``, ``Default``) 1.3 and 1.2; and its ``jdk.tls.disabledAlgorithms`` turns TLS 1.0
    and 1.1 off (since 8u291 and 11.0.11), as ``_DEFAULT_VERSIONS`` leaves them out here."""
    if protocol not in TLS_VERSIONS:
        return _DEFAULT_VERSIONS
    newest = TLS_VERSIONS.index(protocol)
    return tuple(v for v in _DEFAULT_VERSIONS if TLS_VERSIONS.index(v) <= newest)


def _versions(
    context: ssl.SSLContext,
    enabled: Sequence[str] | None,
    disabled: Sequence[str] | None,
    protocol: str = "TLS",
) -> None:
    """Limit the context to the consecutive TLS versions enabled (else those the context
    ``protocol`` enables) and not disabled."""
    by_protocol = _context_versions(protocol)
    if enabled is None and disabled is None and by_protocol == _DEFAULT_VERSIONS:
        return
    allowed = [v for v in TLS_VERSIONS if v in (enabled or by_protocol)]
    allowed = [v for v in allowed if v not in (disabled or ())]
    option = "transport.enabledProtocols" if enabled else "transport.disabledProtocols"
    if not by_protocol and not enabled:
        raise ConfigurationError(
            f"transport.contextProtocol={protocol} enables only TLS versions older than 1.2, "
            "which are off (as Java's jdk.tls.disabledAlgorithms turns them off): name them "
            "in transport.enabledProtocols to use them",
            option="transport.contextProtocol",
        )
    if not allowed:
        raise ConfigurationError("no TLS version is left to use", option=option)
    first, last = TLS_VERSIONS.index(allowed[0]), TLS_VERSIONS.index(allowed[-1])
    if len(allowed) != last - first + 1:
        raise ConfigurationError(
            f"the TLS versions allowed must be consecutive, not {', '.join(allowed)}",
            option=option,
        )
    context.minimum_version = _VERSIONS[allowed[0]]
    context.maximum_version = _VERSIONS[allowed[-1]]


def _ciphers(
    context: ssl.SSLContext, enabled: Sequence[str] | None, disabled: Sequence[str] | None
) -> None:
    """Choose the cipher suites of TLS 1.2 and older; each name is checked on its own."""
    if disabled:
        for suite in disabled:
            if suite in _TLS13_SUITES:
                raise ConfigurationError(
                    f"the TLS 1.3 cipher suite {suite} cannot be turned off (Python's ssl "
                    "always offers every TLS 1.3 suite OpenSSL has)",
                    option="transport.disabledCipherSuites",
                )
    older = [s for s in enabled or () if s not in _TLS13_SUITES]
    names = [_openssl_name(s, "transport.enabledCipherSuites") for s in older]
    spec = ":".join(names) if names else "DEFAULT"
    if disabled:
        excluded = [_openssl_name(s, "transport.disabledCipherSuites") for s in disabled]
        spec += "".join(f":!{name}" for name in excluded)
    if names or disabled:
        try:
            context.set_ciphers(spec)
        except ssl.SSLError:
            raise ConfigurationError(
                "no cipher suite is left to use", option="transport.disabledCipherSuites"
            ) from None


def _openssl_name(suite: str, option: str) -> str:
    """OpenSSL's name of a cipher suite given by its OpenSSL or IANA (Java) name.

    Raises:
        ConfigurationError: OpenSSL knows no such suite.
    """
    name = _from_iana(suite) if suite.startswith(("TLS_", "SSL_")) else suite
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        probe.set_ciphers(name)
    except ssl.SSLError:
        raise ConfigurationError(
            f"{option}: unknown cipher suite {suite!r} (OpenSSL names such as "
            "ECDHE-RSA-AES128-GCM-SHA256, or IANA names such as "
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)",
            option=option,
        ) from None
    return name


def _from_iana(suite: str) -> str:
    """``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`` -> ``ECDHE-RSA-AES128-GCM-SHA256``."""
    exchange, _, cipher = suite[4:].partition("_WITH_")
    cipher = cipher.replace("AES_128", "AES128").replace("AES_256", "AES256")
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20_POLY1305")
    parts = [] if exchange == "RSA" else [exchange]  # OpenSSL leaves plain RSA unnamed
    return "-".join([*parts, cipher]).replace("_", "-")
