"""What an engine is told before it starts: identity, limits, authentication, TLS.

Frozen dataclasses that validate themselves, so a wrong setting fails when it is made, with a
message naming it, not later inside proton.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from failover.errors import ConfigurationError

__all__ = [
    "ClientAuth",
    "EngineConfig",
    "Role",
    "ServerAuth",
    "TlsClientOptions",
    "TlsServerOptions",
]


class Role(enum.Enum):
    """Which end of the connection the engine plays."""

    CLIENT = "client"
    SERVER = "server"


@dataclass(frozen=True, slots=True)
class ClientAuth:
    """SASL for the client role.

    With a username, PLAIN is used; without one, ANONYMOUS. PLAIN sends the password in the
    clear, so over a plain socket it needs ``allow_insecure=True`` (the engine refuses
    otherwise); over TLS it is always allowed.
    """

    username: str | None = None
    password: str | None = None
    mechanisms: tuple[str, ...] | None = None
    allow_insecure: bool = False

    def __post_init__(self) -> None:
        if self.password is not None and self.username is None:
            raise ConfigurationError("a SASL password was given without a username")

    def __repr__(self) -> str:  # never show the password
        return f"ClientAuth(username={self.username!r}, mechanisms={self.mechanisms!r})"


Authenticator = Callable[[str, str | None, str | None], bool]
"""``(mechanism, username, password) -> accepted?`` for the server role."""


@dataclass(frozen=True, slots=True)
class ServerAuth:
    """SASL for the server role: the mechanisms offered and how to check a login.

    ``authenticate`` is asked about what the server sees: ``("PLAIN", user, password)``,
    ``("XOAUTH2", user, token)``, ``("EXTERNAL", identity, None)`` with the identity of the
    verified TLS client certificate, ``("ANONYMOUS", None, None)``. SCRAM never shows the
    password: ``scram_credentials(mechanism, user)`` gives the user's stored credentials, the
    RFC 5802 ``(salt, stored_key, server_key, iteration_count)`` (None: no such user), and the
    proofs are checked against them. A SCRAM mechanism is offered only with that lookup.
    """

    mechanisms: tuple[str, ...] = ("PLAIN", "ANONYMOUS")
    authenticate: Authenticator = field(default=lambda mechanism, user, password: True)
    scram_credentials: Callable[[str, str], tuple[bytes, bytes, bytes, int] | None] | None = None

    def __post_init__(self) -> None:
        known = ("SCRAM-SHA-1", "SCRAM-SHA-256", "SCRAM-SHA-512", "EXTERNAL", "XOAUTH2")
        unknown = set(self.mechanisms) - {*known, "PLAIN", "ANONYMOUS"}
        if unknown:
            raise ConfigurationError(f"unsupported SASL mechanism(s): {sorted(unknown)}")
        if not self.mechanisms:
            raise ConfigurationError("ServerAuth needs at least one SASL mechanism")
        scram = [m for m in self.mechanisms if m.startswith("SCRAM-")]
        if scram and self.scram_credentials is None:
            raise ConfigurationError(f"{scram[0]} needs scram_credentials (the stored keys)")


@dataclass(frozen=True, slots=True)
class TlsClientOptions:
    """TLS for the client role (``amqps://``), done by proton's SSL layer.

    Verification is on by default: the broker's certificate must chain to ``ca_file`` (or the
    system store) and name ``peer_name`` (default: the host connected to).
    """

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = field(default=None, repr=False)  # a secret: never shown
    verify: bool = True
    peer_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigurationError("a client certificate needs both cert_file and key_file")


@dataclass(frozen=True, slots=True)
class TlsServerOptions:
    """TLS for the server role: the server's certificate chain and key.

    With ``client_ca_file`` set, clients must present a certificate that chains to it.
    """

    cert_file: str
    key_file: str
    key_password: str | None = field(default=None, repr=False)  # a secret: never shown
    client_ca_file: str | None = None


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Everything an engine needs to know before the first byte.

    Attributes:
        container_id: Our container id (the JMS client id for a client).
        hostname: The virtual host named in Open (and the TLS peer name by default).
        idle_timeout: Seconds of silence after which the peer is declared dead; heartbeats
            are sent so the peer sees traffic at least twice as often as it asked. None: off.
        max_frame_size: Largest frame we accept.
        properties: Connection properties for our Open frame.
        offered_capabilities / desired_capabilities: Connection capabilities for Open.
        auth: Client SASL (client role); None disables the SASL layer.
        server_auth: Server SASL (server role); None accepts a peer without SASL too.
        tls: ``TlsClientOptions`` (client) or ``TlsServerOptions`` (server), or None.
    """

    container_id: str
    role: Role = Role.CLIENT
    hostname: str | None = None
    idle_timeout: float | None = None
    max_frame_size: int | None = None
    properties: Mapping[str, Any] | None = None
    offered_capabilities: tuple[str, ...] = ()
    desired_capabilities: tuple[str, ...] = ()
    auth: ClientAuth | None = field(default_factory=ClientAuth)
    server_auth: ServerAuth | None = None
    tls: TlsClientOptions | TlsServerOptions | None = None

    def __post_init__(self) -> None:
        if not self.container_id:
            raise ConfigurationError("container_id must be a non-empty string")
        if self.idle_timeout is not None and self.idle_timeout <= 0:
            raise ConfigurationError(f"idle_timeout must be positive, not {self.idle_timeout!r}")
        if self.max_frame_size is not None and self.max_frame_size < 512:
            raise ConfigurationError("max_frame_size must be at least 512 (AMQP 1.0 minimum)")
        if self.role is Role.CLIENT:
            if isinstance(self.tls, TlsServerOptions):
                raise ConfigurationError("a client engine needs TlsClientOptions, not server ones")
            auth = self.auth
            if auth and auth.username and self.tls is None and not auth.allow_insecure:
                raise ConfigurationError(
                    "SASL PLAIN would send the password in clear text over a plain socket: "
                    "use amqps:// (TLS) or allow it explicitly with allow_insecure=True"
                )
        elif isinstance(self.tls, TlsClientOptions):
            raise ConfigurationError("a server engine needs TlsServerOptions, not client ones")
