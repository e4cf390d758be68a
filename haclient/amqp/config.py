"""What an engine is told before it starts: identity, limits, authentication, TLS.

Frozen dataclasses that validate themselves, so a wrong setting fails when it is made, with a
message naming it, not later inside proton.
"""

from __future__ import annotations

import enum
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from haerrors import ConfigurationError

__all__ = [
    "CLEAR_TEXT_MECHANISMS",
    "SASL_MECHANISMS",
    "ClientAuth",
    "EngineConfig",
    "Role",
    "ServerAuth",
    "TlsClientOptions",
    "TlsServerOptions",
    "sasl_names",
]


class Role(enum.Enum):
    """Which end of the connection the engine plays."""

    CLIENT = "client"
    SERVER = "server"


#: The SASL mechanisms the client can use, strongest first: the order in which it chooses among
#: those the broker offers (Qpid JMS's priorities, ``haclient.amqp.sasl``).
SASL_MECHANISMS: Final = (
    "EXTERNAL",
    "SCRAM-SHA-512",
    "SCRAM-SHA-256",
    "SCRAM-SHA-1",
    "PLAIN",
    "XOAUTH2",
    "ANONYMOUS",
)
#: The mechanisms that send the password (or token) itself, readable by anyone on the wire
#: unless TLS protects it.
CLEAR_TEXT_MECHANISMS: Final = frozenset({"PLAIN", "XOAUTH2"})


def sasl_names(value: object) -> tuple[str, ...]:
    """How mechanism names are read (``amqp.saslMechanisms``, ``ClientAuth.mechanisms``): a comma
    list or a sequence of names, upper-cased, each once, in the order given.

    Raises:
        ValueError: Completing "<option> ...": not names, none, or one not supported (named,
            with the supported ones).
    """
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ValueError(f"must be a comma-separated str or a sequence of str, not {value!r}")
    names: list[str] = []
    for item in items:
        name = item.strip().upper()
        if name and name not in SASL_MECHANISMS:
            raise ValueError(
                f"names SASL mechanism {item.strip()!r}, which is not supported "
                f"(supported: {', '.join(SASL_MECHANISMS)})"
            )
        if name and name not in names:
            names.append(name)
    if not names:
        raise ValueError(f"must name at least one SASL mechanism, not {value!r}")
    return tuple(names)


@dataclass(frozen=True, slots=True)
class ClientAuth:
    """SASL for the client role: the credentials, and which mechanisms may be used.

    The client uses the strongest mechanism the broker offers among ``mechanisms`` (None: all
    of ``SASL_MECHANISMS``) for which it has what the mechanism needs: EXTERNAL a TLS client
    certificate (``client_certificate``), SCRAM, PLAIN and XOAUTH2 a username and password
    (XOAUTH2's password is the token), ANONYMOUS nothing. PLAIN and XOAUTH2 send the password
    readable, so over a plain socket they need ``allow_insecure=True`` (the engine refuses
    otherwise, or leave them out of ``mechanisms``); SCRAM never sends it and needs no consent.
    """

    username: str | None = None
    password: str | None = field(default=None, repr=False)  # a secret: never shown
    mechanisms: tuple[str, ...] | None = None
    allow_insecure: bool = False
    client_certificate: bool = False
    """True when the TLS layer presents a client certificate (what EXTERNAL logs in with)."""

    def __post_init__(self) -> None:
        if self.password is not None and self.username is None:
            raise ConfigurationError("a SASL password was given without a username")
        if self.mechanisms is not None:
            try:
                names = sasl_names(self.mechanisms)
            except ValueError as exc:
                raise ConfigurationError(f"ClientAuth.mechanisms {exc}") from None
            object.__setattr__(self, "mechanisms", names)

    @property
    def allowed(self) -> tuple[str, ...]:
        """The mechanisms that may be used, strongest first."""
        allowed = self.mechanisms or SASL_MECHANISMS
        return tuple(name for name in SASL_MECHANISMS if name in allowed)

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
    """TLS for the client role (``amqps://``): an ``ssl.SSLContext`` and the name to check.

    The resolved form: ``context`` decides what is trusted and checked (chain, host name,
    versions, ciphers, the client certificate), ``peer_name`` is sent as SNI and checked against
    the certificate when the context checks host names (None: the host connected to, the
    engine's ``hostname``). ``has_client_certificate`` says whether the context holds a client
    certificate (SASL EXTERNAL needs one); None: nobody can tell (an application's context).
    ``haclient.aio.tls_options`` builds these from the connection's options.

    Without a ``context``, one is made from the PEM files given here, the engine's shorthand:
    the system's trust store, or ``ca_file``; ``verify=False`` checks nothing;
    ``cert_file``/``key_file`` (``key_password``) is the client certificate.

    Raises:
        ConfigurationError: From the constructor: a certificate without its key (or the reverse),
            or a context given together with PEM files.
    """

    context: ssl.SSLContext | None = None
    peer_name: str | None = None
    has_client_certificate: bool | None = False
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = field(default=None, repr=False)  # a secret: never shown
    verify: bool = True

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigurationError("a client certificate needs both cert_file and key_file")
        files = (self.ca_file, self.cert_file, self.key_file)
        if self.context is not None and (any(files) or not self.verify):
            raise ConfigurationError("give TlsClientOptions a context or PEM files, not both")
        if self.cert_file is not None:
            object.__setattr__(self, "has_client_certificate", True)

    def ssl_context(self) -> ssl.SSLContext:
        """The context to use: ``context``, or one made from the PEM files (read now).

        Raises:
            ConfigurationError: A file cannot be read, or the key's password is wrong.
        """
        if self.context is not None:
            return self.context
        try:
            context = ssl.create_default_context(cafile=self.ca_file)
            if not self.verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if self.cert_file and self.key_file:
                password = self.key_password
                # Never let OpenSSL prompt on the terminal for an encrypted key's password.
                context.load_cert_chain(self.cert_file, self.key_file, password or _no_password)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(f"the TLS files cannot be used: {exc}") from None
        return context


def _no_password() -> str:
    return ""


@dataclass(frozen=True, slots=True)
class TlsServerOptions:
    """TLS for the server role: the server's certificate chain and key.

    With ``client_ca_file`` set, clients must present a certificate that chains to it.
    ``maximum_version`` limits the TLS versions served (a broker that has no TLS 1.3, say).
    """

    cert_file: str
    key_file: str
    key_password: str | None = field(default=None, repr=False)  # a secret: never shown
    client_ca_file: str | None = None
    maximum_version: ssl.TLSVersion | None = None


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
        trace_frames: Log every AMQP frame sent and received at DEBUG on the
            ``haclient.frames`` logger (proton's frame trace: the frames above SASL and TLS).
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
    trace_frames: bool = False

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
                readable = sorted(CLEAR_TEXT_MECHANISMS.intersection(auth.allowed))
                if readable:
                    raise ConfigurationError(
                        f"SASL {' and '.join(readable)} would send the password in clear text "
                        "over a plain socket: use amqps:// (TLS), allow only SCRAM "
                        "(mechanisms=('SCRAM-SHA-256',)), or allow it explicitly with "
                        "allow_insecure=True"
                    )
        elif isinstance(self.tls, TlsClientOptions):
            raise ConfigurationError("a server engine needs TlsServerOptions, not client ones")
