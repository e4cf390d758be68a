"""The server's side of each SASL mechanism, as I/O-free exchanges.

How this works: ``exchange_for(mechanism, auth, peer_identity)`` gives one login's exchange.
Its ``start(initial_response)`` and then ``respond(response)`` return a ``Step``: a
``Challenge`` to send (the exchange goes on), ``Accept`` (the login succeeded, as ``user``, with
``additional_data`` for the outcome) or ``Refuse`` (the reason, for the log only: the peer learns
nothing but the outcome ``auth``). ``chaos.sasl_server`` carries the steps in SASL frames.

Rule 1: a step after ``Accept`` or ``Refuse`` is ``Refuse``; an exchange never accepts twice.
Rule 2: nothing a peer sends raises: malformed input is a ``Refuse``.

The checks themselves are ``ServerAuth``'s (``authenticate`` and ``scram_credentials``): the
broker's accounts (``chaos.broker.accounts``) decide who may log in, this module only how.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from scramp import ScramException, ScramMechanism  # type: ignore[import-untyped,unused-ignore]

from haclient.amqp.config import ServerAuth

__all__ = [
    "SCRAM_MECHANISMS",
    "Accept",
    "Challenge",
    "Exchange",
    "Refuse",
    "Step",
    "exchange_for",
]

SCRAM_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "SCRAM-SHA-1")
"""The SCRAM mechanisms served, strongest first."""


@dataclass(frozen=True, slots=True)
class Challenge:
    """Send this sasl-challenge; the exchange waits for a sasl-response."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Accept:
    """The login succeeded: outcome ``ok`` with ``additional_data``."""

    user: str | None
    additional_data: bytes | None = None


@dataclass(frozen=True, slots=True)
class Refuse:
    """The login failed: outcome ``auth``; ``reason`` is for the broker's log."""

    reason: str


Step = Challenge | Accept | Refuse


class Exchange(Protocol):
    """One login with one mechanism, from the server's side."""

    def start(self, initial: bytes | None) -> Step:
        """The sasl-init's initial response (None: it had none)."""
        ...

    def respond(self, response: bytes) -> Step:
        """A sasl-response to the last challenge."""
        ...


class _OneStep:
    """A mechanism whose login is one message (PLAIN, XOAUTH2, EXTERNAL, ANONYMOUS).

    Without an initial response the server asks for it with an empty challenge (RFC 4422).
    """

    def __init__(self, check: Callable[[bytes], Step], *, needs_message: bool = True) -> None:
        self._check = check
        self._needs_message = needs_message
        self._done = False

    def start(self, initial: bytes | None) -> Step:
        if initial is None and self._needs_message:
            return Challenge(b"")
        return self.respond(initial or b"")

    def respond(self, response: bytes) -> Step:
        if self._done:
            return Refuse("a response after the login ended")
        self._done = True
        return self._check(response)


def _text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _plain(auth: ServerAuth) -> Callable[[bytes], Step]:
    def check(message: bytes) -> Step:
        parts = [_text(part) for part in message.split(b"\x00")]
        if len(parts) != 3 or None in parts:
            return Refuse("malformed PLAIN message")
        authzid, user, password = parts
        assert user is not None
        if authzid and authzid != user:
            return Refuse(f"PLAIN user {user!r} may not act as {authzid!r}")
        if not auth.authenticate("PLAIN", user, password):
            return Refuse(f"PLAIN login of {user!r} refused")
        return Accept(user)

    return check


def _xoauth2(auth: ServerAuth) -> Callable[[bytes], Step]:
    """``user=<user>\\x01auth=Bearer <token>\\x01\\x01`` (Google's XOAUTH2)."""

    def check(message: bytes) -> Step:
        text = _text(message)
        if text is None or not text.endswith("\x01\x01"):
            return Refuse("malformed XOAUTH2 message")
        fields: dict[str, str] = {}
        for field in text[:-2].split("\x01"):
            name, _, value = field.partition("=")
            fields[name] = value
        user, bearer = fields.get("user", ""), fields.get("auth", "")
        scheme, _, token = bearer.partition(" ")
        if not user or scheme.lower() != "bearer" or not token:
            return Refuse("malformed XOAUTH2 message")
        if not auth.authenticate("XOAUTH2", user, token):
            return Refuse(f"XOAUTH2 token of {user!r} refused")
        return Accept(user)

    return check


def _external(auth: ServerAuth, peer_identity: Callable[[], str | None]) -> Callable[[bytes], Step]:
    """The identity is the verified client certificate's; the message may only repeat it."""

    def check(message: bytes) -> Step:
        identity = peer_identity()
        if identity is None:
            return Refuse("EXTERNAL without a verified client certificate")
        authzid = _text(message)
        if authzid is None or (authzid and authzid != identity):
            return Refuse(f"EXTERNAL identity {identity!r} may not act as {authzid!r}")
        if not auth.authenticate("EXTERNAL", identity, None):
            return Refuse(f"EXTERNAL login of {identity!r} refused")
        return Accept(identity)

    return check


def _anonymous(auth: ServerAuth) -> Callable[[bytes], Step]:
    def check(message: bytes) -> Step:  # the message is trace information, ignored
        if not auth.authenticate("ANONYMOUS", None, None):
            return Refuse("ANONYMOUS refused")
        return Accept(None)

    return check


class _Scram:
    """RFC 5802: client-first, server-first (challenge), client-final, server-final (outcome).

    scramp checks the proof; the stored credentials come from ``ServerAuth.scram_credentials``.
    An unknown user is refused at once (this broker does not hide which users exist).
    """

    def __init__(self, mechanism: str, auth: ServerAuth) -> None:
        assert auth.scram_credentials is not None  # ServerAuth checks it
        lookup = auth.scram_credentials
        self._mechanism = mechanism
        self.user: str | None = None

        def credentials(user: str) -> tuple[bytes, bytes, bytes, int] | None:
            self.user = user
            return lookup(mechanism, user)

        self._server = ScramMechanism(mechanism).make_server(credentials)
        self._stage = "client-first"

    def start(self, initial: bytes | None) -> Step:
        if initial is None:
            return Challenge(b"")  # the client-first comes as a response
        return self.respond(initial)

    def respond(self, response: bytes) -> Step:
        stage, self._stage = self._stage, "done"
        text = _text(response)
        if text is None:
            return Refuse(f"{self._mechanism}: a message that is not UTF-8")
        try:
            if stage == "client-first":
                self._server.set_client_first(text)
                if not self._authzid_allowed(text):
                    return Refuse(f"{self._mechanism}: {self.user!r} may not act as another")
                self._stage = "client-final"
                return Challenge(self._server.get_server_first().encode())
            if stage == "client-final":
                self._server.set_client_final(text)
                return Accept(self.user, self._server.get_server_final().encode())
        except ScramException as exc:
            return Refuse(f"{self._mechanism} login of {self.user!r} refused: {exc}")
        return Refuse(f"{self._mechanism}: a response after the login ended")

    def _authzid_allowed(self, client_first: str) -> bool:
        """The GS2 header's ``a=`` (authorization identity), if any, must be the user."""
        authzid = client_first.split(",", 2)[1]
        if not authzid:
            return True
        name = authzid.removeprefix("a=").replace("=2C", ",").replace("=3D", "=")
        return name == self.user


def exchange_for(
    mechanism: str, auth: ServerAuth, peer_identity: Callable[[], str | None]
) -> Exchange | None:
    """A new exchange for one login with ``mechanism``; None when it is not offered.

    Args:
        mechanism: The mechanism the client chose.
        auth: What is offered and how a login is checked.
        peer_identity: The verified TLS client certificate's identity, if any (EXTERNAL).
    """
    if mechanism not in auth.mechanisms:
        return None
    if mechanism in SCRAM_MECHANISMS:
        return _Scram(mechanism, auth)
    if mechanism == "PLAIN":
        return _OneStep(_plain(auth))
    if mechanism == "XOAUTH2":
        return _OneStep(_xoauth2(auth))
    if mechanism == "EXTERNAL":
        return _OneStep(_external(auth, peer_identity), needs_message=False)
    if mechanism == "ANONYMOUS":
        return _OneStep(_anonymous(auth), needs_message=False)
    return None
