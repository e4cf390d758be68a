"""The client's TLS: Python's ``ssl`` over memory buffers, below proton's AMQP framing.

How this works: ``TlsClientLayer`` is the byte layer (``haclient.amqp.engine.ByteLayer``) nearest
the socket. It wraps an ``ssl.SSLContext`` around two ``ssl.MemoryBIO``: bytes from the socket
go into one, TLS records for the socket come out of the other, and the ``ssl.SSLObject`` between
them does the handshake and the record layer. Nothing here touches a socket, so the engine stays
sans-IO. The context decides what is checked (chain, host name, versions, ciphers); the layer
sends the server name (SNI) and reports a refused handshake in plain words.

Invariants:
    Rule 1: the ClientHello is ready before anything arrives (``has_output`` is True at once).
    Rule 2: plain bytes from above wait until the handshake is done, then go out in order.
    Rule 3: a failed handshake or a TLS alert sets ``error`` (``TLS_FAILED``); an EOF, with or
        without close_notify, only sets ``eof``: a broker that went away is a lost connection,
        which failover retries, not a question of trust.
"""

from __future__ import annotations

import re
import ssl
from typing import Final

from haclient.amqp.types import TLS_FAILED, ErrorCondition
from haerrors import ConfigurationError

__all__ = ["TlsClientLayer", "describe_tls_error"]

_READ_SIZE: Final = 65536  # bytes asked of the SSLObject per read: many records at once

# OpenSSL's X509_V_ERR_* codes, said in plain words (the verify message follows in brackets).
_VERIFY_REASONS: Final = {
    2: "is issued by a certificate authority that is not trusted",
    9: "is not valid yet (check the clocks)",
    10: "has expired",
    18: "is self-signed and not trusted",
    19: "chains to a certificate authority that is not trusted",
    20: "is issued by a certificate authority that is not trusted",
    21: "is issued by a certificate authority that is not trusted",
    23: "has been revoked",
    26: "may not be used by a TLS server",
}
_HOSTNAME_MISMATCH: Final = 62
_IP_MISMATCH: Final = 64

# TLS alerts and handshake errors (``SSLError.reason``), said in plain words.
_REASONS: Final = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the broker requires a client certificate and none "
    "was given",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the broker refused the client certificate",
    "TLSV1_ALERT_UNKNOWN_CA": "the broker does not trust the client certificate's issuer",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN": "the broker refused the client certificate",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the broker says the client certificate has expired",
    "TLSV1_ALERT_ACCESS_DENIED": "the broker refused the client certificate",
    "SSLV3_ALERT_HANDSHAKE_FAILURE": "the broker ended the handshake: no TLS version and cipher "
    "suite in common, or it wants a client certificate",
    "TLSV1_ALERT_PROTOCOL_VERSION": "the client and the broker have no TLS version in common",
    "UNSUPPORTED_PROTOCOL": "the client and the broker have no TLS version in common",
    "NO_PROTOCOLS_AVAILABLE": "no TLS version is left enabled on the client",
    "NO_SHARED_CIPHER": "the client and the broker have no cipher suite in common",
    "NO_CIPHERS_AVAILABLE": "no cipher suite is left enabled on the client",
}
_NOT_TLS: Final = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG")
_SSL_SUFFIX: Final = re.compile(r"\s*\(_ssl\.c:\d+\)$")


class TlsClientLayer:
    """Client-side TLS over memory buffers (``ssl.SSLObject``), as a ``ByteLayer``.

    Args:
        context: What to trust and check; used as given (never changed).
        server_name: The name sent as SNI and checked against the certificate when the context
            checks host names (an IP address is checked, not sent).

    Raises:
        ConfigurationError: The context checks host names and ``server_name`` is None, or it
            allows no TLS version or cipher suite.
    """

    def __init__(self, context: ssl.SSLContext, server_name: str | None) -> None:
        if context.check_hostname and not server_name:
            raise ConfigurationError("TLS checks the broker's host name, but none was given")
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._incoming, self._outgoing, server_side=False, server_hostname=server_name
        )
        self._server_name = server_name
        self._handshaken = False
        self._waiting = bytearray()  # plain bytes from above, sent once the handshake is done
        self._first = b""  # the peer's first bytes, to recognise a plain-AMQP answer
        self.error: ErrorCondition | None = None
        self.eof = False
        self.user: str | None = None  # the identity is SASL's, above
        self._handshake()  # Rule 1: the ClientHello goes into the outgoing buffer now
        if self.error is not None:  # the context allows nothing (no version, no cipher suite)
            raise ConfigurationError(f"TLS cannot start: {self.error.description}")

    @property
    def is_handshaken(self) -> bool:
        """True once the handshake has succeeded."""
        return self._handshaken

    @property
    def has_output(self) -> bool:
        """True when TLS records (handshake, data, alerts) wait to go out."""
        return self._outgoing.pending > 0

    @property
    def passes_through(self) -> bool:
        """Never: every byte is encrypted or decrypted."""
        return False

    def receive(self, data: bytes) -> bytes:
        """Decrypt what arrived (``b""``: EOF); return the plain bytes for the layer above."""
        if self.error is not None or self.eof:
            return b""
        if data:
            if len(self._first) < 8:
                self._first += data[: 8 - len(self._first)]
            self._incoming.write(data)
        else:
            self._incoming.write_eof()
        if not self._handshaken and not self._handshake():
            if not data and self.error is None:
                self.eof = True
            return b""
        return self._read()

    def send(self, data: bytes) -> bytes:
        """Encrypt bytes from above (held until the handshake is done); return what to write."""
        if data and self.error is None:
            if self._handshaken:
                try:
                    self._tls.write(data)
                except ssl.SSLError as exc:
                    self._fail(exc)
            else:
                self._waiting += data
        return self._outgoing.read()

    def _handshake(self) -> bool:
        """One handshake step; True once it is done (Rule 2: the waiting bytes follow it)."""
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            return False
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
            self.eof = True
            return False
        except ssl.SSLError as exc:
            self._fail(exc)
            return False
        self._handshaken = True
        if self._waiting:
            waiting, self._waiting = bytes(self._waiting), bytearray()
            self._tls.write(waiting)
        return True

    def _read(self) -> bytes:
        chunks: list[bytes] = []
        tls, incoming = self._tls, self._incoming
        try:
            # A read returns one record at most; stop when nothing is left rather than on
            # SSLWantReadError, an exception per batch of input on the hot path.
            while incoming.pending or tls.pending() or not chunks:
                chunk = tls.read(_READ_SIZE)
                if not chunk:
                    self.eof = True
                    break
                chunks.append(chunk)
        except ssl.SSLWantReadError:
            pass
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
            self.eof = True  # Rule 3
        except ssl.SSLError as exc:  # an alert after the handshake (TLS 1.3's client checks)
            self._fail(exc)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _fail(self, exc: ssl.SSLError) -> None:
        reason = describe_tls_error(exc, self._server_name, self._first)
        self.error = ErrorCondition(TLS_FAILED, reason)


def describe_tls_error(exc: ssl.SSLError, server_name: str | None, first: bytes = b"") -> str:
    """Why the TLS handshake or session failed, in plain words, OpenSSL's own text in brackets.

    ``certificate verify failed: the broker's certificate has expired (certificate has
    expired, verify code 10)``.

    Args:
        exc: What ``ssl`` raised.
        server_name: The name the certificate was checked against.
        first: The first bytes the peer sent (to recognise a peer that does not speak TLS).
    """
    if isinstance(exc, ssl.SSLCertVerificationError):
        code = exc.verify_code
        message = exc.verify_message.rstrip(".")
        if code == _HOSTNAME_MISMATCH:
            plain = f"the broker's certificate is not valid for the host name {server_name!r}"
        elif code == _IP_MISMATCH:
            plain = f"the broker's certificate is not valid for the IP address {server_name!r}"
        else:
            plain = f"the broker's certificate {_VERIFY_REASONS.get(code) or 'was refused'}"
        return f"certificate verify failed: {plain} ({message}, verify code {code})"
    reason = exc.reason or ""
    openssl = _SSL_SUFFIX.sub("", str(exc.args[1] if len(exc.args) > 1 else exc))
    if reason in _NOT_TLS and first.startswith(b"AMQP"):
        return "the broker answered in plain AMQP, not TLS: use amqp:// or the broker's TLS port"
    if reason in _NOT_TLS:
        return f"the peer does not speak TLS on this port ({openssl})"
    said = _REASONS.get(reason)
    return f"{said} ({openssl})" if said else f"TLS failed: {openssl}"
