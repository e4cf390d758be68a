"""TLS and SASL EXTERNAL for the private RabbitMQ node of :mod:`chaos.rabbitmq`.

How this works:

- :class:`RabbitMQTls` names PEM files: the CA that signs both sides, the node's certificate
  and key, and the client identity the node's readiness probe presents. ``from_ca`` issues
  them from a test CA (such as ``trustme.CA``) into a directory of the caller's.
- The node copies the files into its own base directory (it may run as another user, who cannot
  read the caller's), and :func:`config_lines` adds an ``amqps`` listener that verifies clients
  against the CA, the ``rabbitmq_auth_mechanism_ssl`` plugin and the EXTERNAL mechanism, which
  takes the user name from the certificate's common name. EXTERNAL is offered only on TLS
  connections that presented a certificate, so the plain listener offers what it did before.
- EXTERNAL logs in a user that must exist: :func:`definitions` lists them (with ``guest``, whose
  password stays ``guest``) for the node to import at boot, before its listeners open. Users
  that log in by certificate get no password, so they cannot log in with PLAIN.
"""

from __future__ import annotations

import base64
import builtins
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

__all__ = ["CertificateAuthority", "RabbitMQTls", "config_lines", "definitions"]

PLUGIN: Final = "rabbitmq_auth_mechanism_ssl"
"""The plugin that gives RabbitMQ the SASL EXTERNAL mechanism."""

_GUEST: Final = "guest"


class _Pem(Protocol):
    def bytes(self) -> builtins.bytes: ...


class _Issued(Protocol):
    @property
    def private_key_pem(self) -> _Pem: ...
    @property
    def cert_chain_pems(self) -> Sequence[_Pem]: ...


class CertificateAuthority(Protocol):
    """What :meth:`RabbitMQTls.from_ca` needs of a CA; ``trustme.CA`` has it."""

    @property
    def cert_pem(self) -> _Pem: ...
    def issue_cert(self, *identities: str, common_name: str | None = None) -> _Issued: ...


@dataclass(frozen=True)
class RabbitMQTls:
    """The PEM files of a node's TLS listener, and who logs in by certificate.

    Attributes:
        ca_file: The CA the node trusts for client certificates (and clients for the node's).
        cert_file: The node's certificate chain, for 127.0.0.1 (its host).
        key_file: The node's private key, not encrypted.
        require_client_cert: Refuse a TLS client that presents no certificate.
        users: Users that log in with SASL EXTERNAL, by their certificate's common name; each
            is created with every permission on the vhost ``/``.
        client_cert_file: A client certificate signed by the CA, whose common name is in
            ``users``; the readiness probe presents it. Required when ``require_client_cert``.
        client_key_file: Its private key, not encrypted.

    Raises:
        ValueError: A client certificate without its key (or the reverse), or none although
            client certificates are required.
    """

    ca_file: Path
    cert_file: Path
    key_file: Path
    require_client_cert: bool = True
    users: tuple[str, ...] = ()
    client_cert_file: Path | None = None
    client_key_file: Path | None = None

    def __post_init__(self) -> None:
        if (self.client_cert_file is None) != (self.client_key_file is None):
            raise ValueError("client_cert_file and client_key_file go together")
        if self.require_client_cert and self.client_cert_file is None:
            raise ValueError(
                "require_client_cert needs client_cert_file and client_key_file: "
                "the readiness probe presents them"
            )
        if _GUEST in self.users:
            raise ValueError(f"{_GUEST!r} logs in with its password, not by certificate")

    @property
    def user(self) -> str | None:
        """The first user that logs in by certificate, the common name of ``client_cert_file``
        when :meth:`from_ca` wrote it; None when there is none."""
        return self.users[0] if self.users else None

    @classmethod
    def from_ca(
        cls, ca: CertificateAuthority, directory: Path, *, user: str = "haclient-tls"
    ) -> RabbitMQTls:
        """Issue a node certificate (127.0.0.1, localhost) and a client certificate whose
        common name is ``user``, and write them with the CA into ``directory``.

        Several nodes may share what this returns: each copies the files at start.

        Args:
            ca: The CA that signs both certificates, e.g. ``trustme.CA()``.
            directory: An existing directory; ``ca.pem``, ``server.pem``, ``server.key``,
                ``client.pem`` and ``client.key`` are written there.
            user: The client certificate's common name, the user EXTERNAL logs in.
        """
        server = ca.issue_cert("127.0.0.1", "localhost")
        # A name beside the common name: given none, trustme writes an empty subjectAltName,
        # which Erlang's TLS refuses ("Unsupported Certificate"). RabbitMQ reads the CN only.
        client = ca.issue_cert(f"{user}.client.invalid", common_name=user)
        files = {
            "ca.pem": ca.cert_pem.bytes(),
            "server.pem": b"".join(pem.bytes() for pem in server.cert_chain_pems),
            "server.key": server.private_key_pem.bytes(),
            "client.pem": b"".join(pem.bytes() for pem in client.cert_chain_pems),
            "client.key": client.private_key_pem.bytes(),
        }
        for name, content in files.items():
            (directory / name).write_bytes(content)
        return cls(
            ca_file=directory / "ca.pem",
            cert_file=directory / "server.pem",
            key_file=directory / "server.key",
            users=(user,),
            client_cert_file=directory / "client.pem",
            client_key_file=directory / "client.key",
        )


def config_lines(
    tls: RabbitMQTls, host: str, port: int, files: Path, definitions_file: Path
) -> str:
    """The ``rabbitmq.conf`` lines for an ``amqps`` listener on ``host:port`` with EXTERNAL.

    Args:
        tls: What the listener uses.
        host: The address to bind.
        port: The port to bind.
        files: Where the node's copies of ``ca.pem``, ``server.pem`` and ``server.key`` are.
        definitions_file: The file of :func:`definitions` the node imports at boot.
    """
    fail = "true" if tls.require_client_cert else "false"
    return (
        f"listeners.ssl.default = {host}:{port}\n"
        f"ssl_options.cacertfile = {files / 'ca.pem'}\n"
        f"ssl_options.certfile = {files / 'server.pem'}\n"
        f"ssl_options.keyfile = {files / 'server.key'}\n"
        "ssl_options.verify = verify_peer\n"
        f"ssl_options.fail_if_no_peer_cert = {fail}\n"
        # RabbitMQ's defaults, then EXTERNAL; ANONYMOUS is the AMQP 1.0 plugin's own.
        "auth_mechanisms.1 = PLAIN\n"
        "auth_mechanisms.2 = AMQPLAIN\n"
        "auth_mechanisms.3 = EXTERNAL\n"
        "ssl_cert_login_from = common_name\n"
        "definitions.import_backend = local_filesystem\n"
        f"definitions.local.path = {definitions_file}\n"
    )


def definitions(users: Sequence[str]) -> dict[str, Any]:
    """RabbitMQ definitions: the vhost ``/``, ``guest`` (password ``guest``, administrator)
    and ``users`` without a password, each with every permission on ``/``."""
    accounts = [
        {
            "name": _GUEST,
            "password_hash": _password_hash(_GUEST),
            "hashing_algorithm": "rabbit_password_hashing_sha256",
            "tags": "administrator",
        },
        *(
            {
                "name": name,
                "password_hash": "",  # no password: it logs in by certificate only
                "hashing_algorithm": "rabbit_password_hashing_sha256",
                "tags": "",
            }
            for name in users
        ),
    ]
    return {
        "vhosts": [{"name": "/"}],
        "users": accounts,
        "permissions": [
            {"user": account["name"], "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}
            for account in accounts
        ],
    }


def _password_hash(password: str) -> str:
    """The hash RabbitMQ stores: base64 of a 4-byte salt and SHA-256(salt + password)."""
    salt = os.urandom(4)
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()
