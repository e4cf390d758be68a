"""Who may log in to the reference broker, and with which SASL mechanisms.

What is kept, in memory only (the broker has no persistent users; its SQLite store holds
messages, not logins):
    - Users: for each user and each SCRAM hash, the RFC 5802 credentials (salt, stored key,
      server key, iteration count) made by scramp; never the password. A PLAIN login is
      checked by deriving the stored key from the password given, with the stored salt.
    - OAuth tokens: the SHA-256 of each token and its user. ``add_token`` and
      ``revoke_token`` change the table while the broker runs; the next login sees it (the
      connections already open stay open).
    - Client certificates: whether TLS verifies them (``--tls-client-ca``); EXTERNAL then logs
      in as the certificate's common name.

What is offered, by what is configured (``enabled``):
    users               SCRAM-SHA-512, SCRAM-SHA-256, SCRAM-SHA-1, PLAIN
    client certificates EXTERNAL
    tokens (even none)  XOAUTH2
    no user             PLAIN with any name and password, and ANONYMOUS (the open broker)
``mechanisms`` (``--sasl-mechanisms``) offers only those it names, in its order; each must be
enabled.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping

from scramp import ScramMechanism  # type: ignore[import-untyped,unused-ignore]

from chaos.sasl_mechanisms import SCRAM_MECHANISMS
from haclient.amqp.config import ServerAuth

__all__ = ["MECHANISMS", "Accounts", "parse_mechanisms"]

MECHANISMS = (*SCRAM_MECHANISMS, "EXTERNAL", "XOAUTH2", "PLAIN", "ANONYMOUS")
"""Every mechanism the broker can offer, in the order it offers them."""

ScramKeys = tuple[bytes, bytes, bytes, int]
_PLAIN_HASH = "SCRAM-SHA-256"  # whose stored keys check a PLAIN password


def parse_mechanisms(text: str) -> tuple[str, ...]:
    """``SCRAM-SHA-256,PLAIN`` as a tuple of known mechanism names (case is ignored).

    Raises:
        ValueError: an unknown name, or none at all.
    """
    names = tuple(name.strip().upper() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in MECHANISMS]
    if unknown:
        known = ", ".join(MECHANISMS)
        raise ValueError(f"unknown SASL mechanism {unknown[0]!r}: known are {known}")
    if not names:
        raise ValueError("no SASL mechanism named")
    return names


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Accounts:
    """The broker's logins: users, OAuth tokens, client certificates; see the module docstring.

    Args:
        users: ``{name: password}``; only salted credentials are kept. None or empty: no user.
        tokens: ``{token: user}``: offer XOAUTH2 (an empty mapping too: tokens may be added).
        client_certificates: TLS verifies client certificates: offer EXTERNAL.
        mechanisms: Offer only these, in this order (None: every enabled one).
        iterations: The SCRAM iteration count (at least 4096).

    Raises:
        ValueError: ``mechanisms`` names one that is unknown or not enabled, or is empty.
    """

    def __init__(
        self,
        users: Mapping[str, str] | None = None,
        tokens: Mapping[str, str] | None = None,
        *,
        client_certificates: bool = False,
        mechanisms: Iterable[str] | None = None,
        iterations: int = 4096,
    ) -> None:
        self._scram: dict[tuple[str, str], ScramKeys] = {}
        for user, password in (users or {}).items():
            for mechanism in SCRAM_MECHANISMS:
                scram = ScramMechanism(mechanism)
                self._scram[mechanism, user] = scram.make_auth_info(password, iterations)
        self._open = not users
        self._tokens: dict[bytes, str] = {}
        for token, user in (tokens or {}).items():
            self.add_token(token, user)
        self.enabled = self._enabled(tokens is not None, client_certificates)
        self.offered = self.enabled if mechanisms is None else self._restrict(tuple(mechanisms))

    def _enabled(self, tokens: bool, client_certificates: bool) -> tuple[str, ...]:
        enabled = {"PLAIN"}
        if self._open:
            enabled.add("ANONYMOUS")
        else:
            enabled.update(SCRAM_MECHANISMS)
        if tokens:
            enabled.add("XOAUTH2")
        if client_certificates:
            enabled.add("EXTERNAL")
        return tuple(m for m in MECHANISMS if m in enabled)

    def _restrict(self, mechanisms: tuple[str, ...]) -> tuple[str, ...]:
        if not mechanisms:
            raise ValueError("no SASL mechanism named")
        for mechanism in mechanisms:
            if mechanism not in MECHANISMS:
                raise ValueError(f"unknown SASL mechanism {mechanism!r}")
            if mechanism not in self.enabled:
                raise ValueError(
                    f"SASL mechanism {mechanism} is not enabled ({_needs(mechanism)}); "
                    f"enabled: {', '.join(self.enabled)}"
                )
        return tuple(dict.fromkeys(mechanisms))

    # Tokens (the admin calls) ------------------------------------------------------------------

    def add_token(self, token: str, user: str) -> None:
        """Accept ``token`` as ``user``'s over XOAUTH2 from the next login on.

        Raises:
            ValueError: an empty token or user.
        """
        if not token or not user:
            raise ValueError("a token and its user must not be empty")
        self._tokens[_digest(token)] = user

    def revoke_token(self, token: str) -> bool:
        """Refuse ``token`` from the next login on; False if it was not accepted."""
        return self._tokens.pop(_digest(token), None) is not None

    # Checks (ServerAuth's callbacks) -----------------------------------------------------------

    def authenticate(self, mechanism: str, user: str | None, secret: str | None) -> bool:
        """``ServerAuth.authenticate``: a PLAIN password, an XOAUTH2 token, an EXTERNAL
        identity (already verified by TLS), ANONYMOUS."""
        if mechanism == "PLAIN":
            return self._open or self._plain(user or "", secret or "")
        if mechanism == "XOAUTH2":
            owner = self._tokens.get(_digest(secret or ""))
            return owner is not None and owner == user
        if mechanism == "EXTERNAL":
            return bool(user)
        return mechanism == "ANONYMOUS" and self._open

    def _plain(self, user: str, password: str) -> bool:
        keys = self._scram.get((_PLAIN_HASH, user))
        if keys is None:
            return False
        salt, stored_key, _, iterations = keys
        mechanism = ScramMechanism(_PLAIN_HASH)
        _, derived, _, _ = mechanism.make_auth_info(password, iteration_count=iterations, salt=salt)
        return hmac.compare_digest(derived, stored_key)

    def scram_credentials(self, mechanism: str, user: str) -> ScramKeys | None:
        """``ServerAuth.scram_credentials``: a user's stored keys for one SCRAM hash."""
        return self._scram.get((mechanism, user))

    def server_auth(self) -> ServerAuth:
        """What the engines are given: the offered mechanisms and these checks."""
        return ServerAuth(self.offered, self.authenticate, self.scram_credentials)


def _needs(mechanism: str) -> str:
    if mechanism in SCRAM_MECHANISMS:
        return "it needs a user"
    return {
        "EXTERNAL": "it needs client certificates: a TLS client CA",
        "XOAUTH2": "it needs an OAuth token",
        "ANONYMOUS": "only without users",
    }.get(mechanism, "")
