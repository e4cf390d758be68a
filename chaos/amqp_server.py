"""The server side of the engine: the byte layers a broker puts below proton's AMQP transport
(TLS here, then SASL in ``chaos.sasl_server``), and ``server_engine`` that gives a server-role
``Engine`` its layers.

Only the test bed serves AMQP, so this lives here and not in the client's wheel; the engine
takes the layers through its ``layers`` argument (``haclient.amqp.engine.ByteLayer``).

Why our own: proton's built-in SASL (the Python wheel has no Cyrus) can only *offer* ANONYMOUS
and EXTERNAL, so a broker that checks PLAIN, SCRAM or XOAUTH2 logins must run the SASL exchange
itself. Because that exchange must see decrypted bytes, and EXTERNAL the client's certificate,
server-side TLS cannot stay inside proton either; it is done with the standard library's
``ssl.MemoryBIO``, which is as I/O-free as the rest of the engine.

Each layer turns bytes from below into bytes for above (``receive``) and bytes from above into
bytes for below (``send``); ``eof`` flags travel upward with the data.
"""

from __future__ import annotations

import ssl
from typing import Any

from chaos.sasl_server import SaslServerLayer
from haclient.amqp.config import EngineConfig, Role, TlsServerOptions
from haclient.amqp.engine import Engine
from haclient.amqp.types import TLS_FAILED, ErrorCondition

__all__ = ["SaslServerLayer", "TlsServerLayer", "server_engine"]


class TlsServerLayer:
    """Server-side TLS over memory buffers (``ssl.SSLObject``)."""

    def __init__(self, options: TlsServerOptions) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(options.cert_file, options.key_file, options.key_password)
        if options.client_ca_file:
            context.load_verify_locations(options.client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        if options.maximum_version is not None:
            context.maximum_version = options.maximum_version
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._handshaken = False
        self._pending_plain = b""
        self.error: ErrorCondition | None = None
        self.eof = False
        self.user: str | None = None  # the login is SASL's

    @property
    def peer_identity(self) -> str | None:
        """The identity of the client certificate the handshake verified, if any: its common
        name (CN), or for a certificate without one its first subject alternative name.

        Only a server given ``client_ca_file`` asks for one; without it, or before the
        handshake ends, there is none.
        """
        if not self._handshaken:
            return None
        certificate = self._tls.getpeercert()  # {} for a certificate that was not verified
        subject: Any = (certificate or {}).get("subject", ())
        names = [value for rdn in subject for name, value in rdn if name == "commonName"]
        alternatives: Any = (certificate or {}).get("subjectAltName", ())
        names += [value for _, value in alternatives]
        return str(names[0]) if names else None

    def receive(self, data: bytes) -> bytes:
        """Decrypt what arrived; sets ``eof`` when the peer ended the TLS stream."""
        if data:
            self._incoming.write(data)
        else:
            self._incoming.write_eof()
        plain = bytearray()
        try:
            if not self._handshaken:
                self._tls.do_handshake()
                self._handshaken = True
                if self._pending_plain:
                    self._tls.write(self._pending_plain)
                    self._pending_plain = b""
            while True:
                chunk = self._tls.read(65536)
                if not chunk:
                    self.eof = True
                    break
                plain += chunk
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            pass
        except ssl.SSLZeroReturnError:
            self.eof = True
        except ssl.SSLError as exc:
            self.error = ErrorCondition(TLS_FAILED, f"TLS failed: {exc}")
            self.eof = True
        if not data and not self.eof:
            self.eof = True
        return bytes(plain)

    @property
    def has_output(self) -> bool:
        """True when TLS records (handshake, alerts) wait to go out."""
        return self._outgoing.pending > 0

    @property
    def passes_through(self) -> bool:
        """Never: every byte is encrypted or decrypted."""
        return False

    def send(self, data: bytes) -> bytes:
        """Encrypt bytes from above; include handshake records waiting to go out."""
        if data:
            if self._handshaken:
                self._tls.write(data)
            else:
                self._pending_plain += data
        return self._outgoing.read()


def server_engine(config: EngineConfig) -> Engine:
    """A server-role engine with its layers: TLS when ``config.tls`` is set, then SASL.

    SASL accepts ``config.server_auth``'s mechanisms (ANONYMOUS, or a plain AMQP header,
    without one); EXTERNAL sees the identity of the client certificate TLS verified.

    Raises:
        ValueError: ``config`` is a client's.
    """
    if config.role is not Role.SERVER:
        raise ValueError("server_engine needs a server-role EngineConfig")
    if not isinstance(config.tls, TlsServerOptions):
        return Engine(config, [SaslServerLayer(config.server_auth)])
    tls = TlsServerLayer(config.tls)
    sasl = SaslServerLayer(config.server_auth, lambda: tls.peer_identity)
    return Engine(config, [tls, sasl])
