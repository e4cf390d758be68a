"""The server side of the engine: the byte layers a broker puts below proton's AMQP transport
(TLS, then SASL), and ``server_engine`` that gives a server-role ``Engine`` its layers.

Only the test bed serves AMQP, so this lives here and not in the client's wheel; the engine
takes the layers through its ``layers`` argument (``haclient.amqp.engine.ByteLayer``).

Why our own: proton's built-in SASL (the Python wheel has no Cyrus) can only *offer* ANONYMOUS
and EXTERNAL, so a broker that checks PLAIN logins must run the SASL exchange itself. Because that
exchange must see decrypted bytes, server-side TLS cannot stay inside proton either; it is done
with the standard library's ``ssl.MemoryBIO``, which is as I/O-free as the rest of the engine.

Each layer turns bytes from below into bytes for above (``receive``) and bytes from above into
bytes for below (``send``); ``eof`` flags travel upward with the data.
"""

from __future__ import annotations

import enum
import ssl
import struct

from proton import UNDESCRIBED, Array, Data, Described, symbol, ubyte, ulong

from haclient.amqp.config import EngineConfig, Role, ServerAuth, TlsServerOptions
from haclient.amqp.engine import ByteLayer, Engine
from haclient.amqp.types import TLS_FAILED, ErrorCondition

__all__ = ["SaslServerLayer", "TlsServerLayer", "server_engine"]

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
_SASL_MECHANISMS = 0x40
_SASL_INIT = 0x41
_SASL_OUTCOME = 0x44
_OUTCOME_OK = 0
_OUTCOME_AUTH = 1
_MAX_SASL_FRAME = 65536


def _sasl_frame(descriptor: int, fields: list[object]) -> bytes:
    data = Data()
    data.put_object(Described(ulong(descriptor), fields))
    body = bytes(data.encode())
    return struct.pack(">IBBH", 8 + len(body), 2, 1, 0) + body


class _SaslState(enum.Enum):
    HEADER = "header"
    INIT = "init"
    DONE = "done"  # authenticated: bytes pass through
    FAILED = "failed"


class SaslServerLayer:
    """The server side of the SASL exchange (ANONYMOUS and PLAIN).

    Rule 1: nothing reaches the AMQP layer before a successful outcome.
    Rule 2: a refused login sends the outcome ``auth`` and then ends the stream.
    A peer that skips SASL (plain AMQP header) is let through only when the server allows
    anonymous access.
    """

    def __init__(self, auth: ServerAuth | None) -> None:
        self._auth = auth
        self._state = _SaslState.HEADER
        self._buffer = b""
        self._output = b""
        self._held = b""
        self.user: str | None = None
        self.error: ErrorCondition | None = None
        self.eof = False  # EOF passes through; TLS below reports it

    @property
    def failed(self) -> bool:
        """True once the exchange ended without a login; the stream must end."""
        return self._state is _SaslState.FAILED

    def _allows_anonymous(self) -> bool:
        return self._auth is None or "ANONYMOUS" in self._auth.mechanisms

    def receive(self, data: bytes) -> bytes:
        """Consume bytes from the peer; return those meant for the AMQP layer."""
        if self._state is _SaslState.DONE:
            return data
        if self._state is _SaslState.FAILED:
            return b""
        self._buffer += data
        if self._state is _SaslState.HEADER:
            if len(self._buffer) < 8:
                return b""
            header, self._buffer = self._buffer[:8], self._buffer[8:]
            if header == AMQP_HEADER and self._allows_anonymous():
                self._state = _SaslState.DONE
                rest, self._buffer = self._buffer, b""
                return header + rest
            if header != SASL_HEADER:
                self._fail("amqp:connection:framing-error", f"unexpected header {header!r}")
                self._output += SASL_HEADER
                return b""
            mechanisms = self._auth.mechanisms if self._auth else ("ANONYMOUS",)
            offered = Array(UNDESCRIBED, Data.SYMBOL, *(symbol(m) for m in mechanisms))
            self._output += SASL_HEADER + _sasl_frame(_SASL_MECHANISMS, [offered])
            self._state = _SaslState.INIT
        return self._read_init()

    def _read_init(self) -> bytes:
        if len(self._buffer) < 8:
            return b""
        size, doff, frame_type = struct.unpack(">IBB", self._buffer[:6])
        if frame_type != 1 or size > _MAX_SASL_FRAME or size < 8 or doff < 2:
            self._fail("amqp:connection:framing-error", "malformed SASL frame")
            return b""
        if len(self._buffer) < size:
            return b""
        body, self._buffer = self._buffer[doff * 4 : size], self._buffer[size:]
        try:
            data = Data()
            data.decode(body)
            data.rewind()
            data.next()
            frame = data.get_object()
            fields = [*list(frame.value), None, None, None]
            descriptor = int(frame.descriptor)
        except Exception as exc:  # proton raises a zoo of types for garbage
            self._fail("amqp:decode-error", f"undecodable SASL frame: {exc}")
            return b""
        if descriptor != _SASL_INIT:
            self._fail("amqp:connection:framing-error", f"expected sasl-init, got {descriptor:#x}")
            return b""
        mechanism = str(fields[0])
        response = bytes(fields[1] or b"")
        if self._login(mechanism, response):
            self._output += _sasl_frame(_SASL_OUTCOME, [ubyte(_OUTCOME_OK), None])
            self._state = _SaslState.DONE
            rest, self._buffer = self._buffer, b""
            return rest
        self._output += _sasl_frame(_SASL_OUTCOME, [ubyte(_OUTCOME_AUTH), None])
        self._fail("amqp:unauthorized-access", f"SASL {mechanism} login refused")
        return b""

    def _login(self, mechanism: str, response: bytes) -> bool:
        offered = self._auth.mechanisms if self._auth else ("ANONYMOUS",)
        if mechanism not in offered:
            return False
        if mechanism == "ANONYMOUS":
            check = self._auth.authenticate if self._auth else None
            return check is None or check("ANONYMOUS", None, None)
        parts = response.split(b"\x00")
        if len(parts) != 3:
            return False
        user, password = parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
        assert self._auth is not None
        if self._auth.authenticate("PLAIN", user, password):
            self.user = user
            return True
        return False

    def _fail(self, name: str, description: str) -> None:
        self._state = _SaslState.FAILED
        self.error = ErrorCondition(name, description)

    @property
    def has_output(self) -> bool:
        """True when ``send`` would return bytes even with nothing from the AMQP layer."""
        return bool(self._output) or (self._state is _SaslState.DONE and bool(self._held))

    def send(self, data: bytes) -> bytes:
        """Bytes from the AMQP layer, prefixed by any SASL frames still to go out."""
        if self._state is not _SaslState.DONE:
            # Rule 1 in the other direction: AMQP output waits for a successful outcome.
            self._held += data
            data = b""
        elif self._held:
            data, self._held = self._held + data, b""
        if self._output:
            data, self._output = self._output + data, b""
        return data


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
    without one).

    Raises:
        ValueError: ``config`` is a client's.
    """
    if config.role is not Role.SERVER:
        raise ValueError("server_engine needs a server-role EngineConfig")
    layers: list[ByteLayer] = []
    if isinstance(config.tls, TlsServerOptions):
        layers.append(TlsServerLayer(config.tls))
    layers.append(SaslServerLayer(config.server_auth))
    return Engine(config, layers)
