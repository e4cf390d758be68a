"""A SASL client written for the tests: it drives the broker's SASL server frame by frame.

The haclient client's own SASL is not used, so these tests prove the server alone. SCRAM's
client side is scramp's, which also checks the server's final signature. ``SaslClient`` talks
to a ``Wire``: a server layer in memory (``LayerWire``) or a socket (``SocketWire``, plain or
TLS). Imported by name (``from saslkit import ...``), like ``brokerkit``.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import trustme
from proton import symbol
from scramp import ScramClient

from chaos.sasl_server import SaslServerLayer
from haclient.amqp.sasl_frames import (
    AMQP_HEADER,
    CHALLENGE,
    INIT,
    MECHANISMS,
    OUTCOME,
    RESPONSE,
    SASL_HEADER,
    encode_frame,
    read_frame,
)

OK = 0
AUTH = 1
TIMEOUT = 5.0


class Wire(Protocol):
    def write(self, data: bytes) -> None: ...

    def read(self) -> bytes:
        """Some bytes from the server; ``b""``: nothing more will come."""
        ...


class LayerWire:
    """The server's SASL layer in memory; what it lets through to AMQP is in ``passed``."""

    def __init__(self, layer: SaslServerLayer) -> None:
        self.layer = layer
        self.passed = b""

    def write(self, data: bytes) -> None:
        self.passed += self.layer.receive(data)

    def read(self) -> bytes:
        return self.layer.send(b"")


class SocketWire:
    """A connected socket (``ssl.SSLSocket`` for TLS)."""

    def __init__(self, sock: socket.socket) -> None:
        sock.settimeout(TIMEOUT)
        self.sock = sock

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self) -> bytes:
        try:
            return self.sock.recv(65536)
        except (ConnectionError, ssl.SSLError):
            return b""


OPENED: list[socket.socket] = []
"""Every socket ``connect`` made; ``close_all`` closes them (a test's fixture calls it)."""


def connect(port: int, tls: ssl.SSLContext | None = None) -> SocketWire:
    """A socket to the broker on 127.0.0.1 (TLS with the name ``broker.test`` when given)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    OPENED.append(sock)
    if tls is not None:
        sock = tls.wrap_socket(sock, server_hostname="broker.test")
        OPENED.append(sock)
    return SocketWire(sock)


def close_all() -> None:
    """Close every socket ``connect`` made."""
    while OPENED:
        OPENED.pop().close()


@contextmanager
def sockets() -> Iterator[None]:
    """Close the sockets made inside on leaving (before the broker stops: a broker waits a
    while for connections that never finished their login to answer its Close)."""
    try:
        yield
    finally:
        close_all()


@dataclass
class Outcome:
    """How a login ended: the outcome code (None: the stream ended without one)."""

    code: int | None
    additional_data: bytes | None = None


class SaslClient:
    """The client's end of one SASL exchange."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.buffer = b""

    def _more(self) -> bool:
        data = self.wire.read()
        self.buffer += data
        return bool(data)

    def frame(self) -> tuple[int, list[Any]] | None:
        """The server's next frame; None when the stream ends first."""
        while True:
            decoded = read_frame(self.buffer)
            if decoded is not None:
                descriptor, fields, size = decoded
                self.buffer = self.buffer[size:]
                return descriptor, fields
            if not self._more():
                return None

    def header(self) -> bytes:
        """The server's 8-byte protocol header (fewer when the stream ended)."""
        while len(self.buffer) < 8 and self._more():
            pass
        header, self.buffer = self.buffer[:8], self.buffer[8:]
        return header

    def hello(self) -> list[str]:
        """Send the SASL header; the mechanisms the server offers, in its order."""
        self.wire.write(SASL_HEADER)
        assert self.header() == SASL_HEADER
        frame = self.frame()
        assert frame is not None and frame[0] == MECHANISMS
        return [str(m) for m in frame[1][0].elements]

    def send(self, descriptor: int, fields: list[object]) -> tuple[int, list[Any]] | None:
        self.wire.write(encode_frame(descriptor, fields))
        return self.frame()

    def init(self, mechanism: str, initial: bytes | None) -> tuple[int, list[Any]] | None:
        return self.send(INIT, [symbol(mechanism), initial])

    def respond(self, data: bytes) -> tuple[int, list[Any]] | None:
        return self.send(RESPONSE, [data])


def outcome_of(frame: tuple[int, list[Any]] | None) -> Outcome:
    """The outcome a frame carries (the stream's end: code None)."""
    if frame is None:
        return Outcome(None)
    descriptor, fields = frame
    assert descriptor == OUTCOME, f"expected sasl-outcome, got {descriptor:#x}"
    return Outcome(int(fields[0]), fields[1])


def scram_login(
    client: SaslClient, mechanism: str, user: str, password: str, *, initial: bool = True
) -> Outcome:
    """A whole SCRAM login; an ``ok`` outcome's server signature is checked by scramp
    (``set_server_final`` raises when it is wrong). ``initial=False`` sends the client-first
    message as the answer to an empty challenge instead of in the sasl-init."""
    scram = ScramClient([mechanism], user, password)
    first = scram.get_client_first().encode()
    frame = client.init(mechanism, first if initial else None)
    if not initial:
        assert frame is not None and frame[0] == CHALLENGE and frame[1][0] == b""
        frame = client.respond(first)
    if frame is None or frame[0] == OUTCOME:
        return outcome_of(frame)
    assert frame[0] == CHALLENGE
    scram.set_server_first(frame[1][0].decode())
    outcome = outcome_of(client.respond(scram.get_client_final().encode()))
    if outcome.code == OK:
        assert outcome.additional_data is not None
        scram.set_server_final(outcome.additional_data.decode())
    return outcome


def xoauth2(user: str, token: str) -> bytes:
    """The XOAUTH2 initial response."""
    return f"user={user}\x01auth=Bearer {token}\x01\x01".encode()


def login(wire: Wire, mechanism: str, initial: bytes | None = None) -> Outcome:
    """A one-message login (PLAIN, XOAUTH2, EXTERNAL, ANONYMOUS) from the first byte."""
    client = SaslClient(wire)
    client.hello()
    return outcome_of(client.init(mechanism, initial))


def amqp_follows(wire: Wire) -> bool:
    """After an ``ok`` outcome: the server answers an AMQP header with its own."""
    wire.write(AMQP_HEADER)
    return SaslClient(wire).header() == AMQP_HEADER


def make_pki(root: Path) -> dict[str, str]:
    """A CA, a broker certificate for ``broker.test`` and 127.0.0.1, and client certificates
    with the common names ``app-1`` (``client``) and none at all (``nameless``), as PEM files."""
    ca = trustme.CA()
    files: dict[str, str] = {"ca": str(root / "ca.pem")}
    ca.cert_pem.write_to_path(files["ca"])
    certificates = {
        "server": ca.issue_cert("broker.test", "127.0.0.1"),
        "client": ca.issue_cert("app-1@clients.test", common_name="app-1"),
        "nameless": ca.issue_cert("nobody@clients.test"),
    }
    for name, certificate in certificates.items():
        files[name] = str(root / f"{name}.pem")
        files[f"{name}_key"] = str(root / f"{name}.key")
        certificate.cert_chain_pems[0].write_to_path(files[name])
        certificate.private_key_pem.write_to_path(files[f"{name}_key"])
    return files


def client_context(pki: dict[str, str], certificate: str | None = "client") -> ssl.SSLContext:
    """A TLS client context trusting the test CA, with a client certificate when named."""
    context = ssl.create_default_context(cafile=pki["ca"])
    if certificate is not None:
        context.load_cert_chain(pki[certificate], pki[f"{certificate}_key"])
    return context
