"""The client's SASL exchange, as a byte layer below proton's AMQP transport.

Why our own: proton's built-in SASL (its Python wheel has no Cyrus) can only do ANONYMOUS, PLAIN
and EXTERNAL; SCRAM and XOAUTH2 need the exchange in our hands. SCRAM's arithmetic is the
``scramp`` library's (its client side), the frames are ours.

How this works: ``SaslClientLayer`` sends the SASL protocol header at once, reads the broker's
sasl-mechanisms, chooses a mechanism (``choose_mechanism``: the strongest the broker offers among
those allowed and usable with the credentials given), sends sasl-init with the mechanism's
initial response, answers each sasl-challenge with a sasl-response, and reads sasl-outcome. From
then on bytes pass through both ways. The frames, and the output held until the login succeeded,
are ``haclient.amqp.sasl_frames``'s, which the reference broker's layer uses too.

Rules:
    Rule 1: nothing from the AMQP layer reaches the socket before a successful outcome (proton's
        AMQP header and Open are held and sent after it), and nothing from the socket reaches
        the AMQP layer before it.
    Rule 2: a failure of any kind (a refused login, no usable mechanism, a SCRAM server that
        cannot prove it knows the password, bytes that are not SASL) sets ``error`` at once and
        the layer takes no more input: the engine ends the connection; it never waits.
    Rule 3: no password, token or SASL response appears in an error, a repr or a log record.
"""

from __future__ import annotations

import enum
import logging
import re
from collections.abc import Sequence
from typing import Any, Final

from proton import Array, symbol

from haclient.amqp.config import CLEAR_TEXT_MECHANISMS, ClientAuth
from haclient.amqp.sasl_frames import (
    CHALLENGE,
    FRAMING_ERROR,
    INIT,
    MECHANISMS,
    OUTCOME,
    OUTCOME_NAMES,
    OUTCOME_OK,
    OUTCOME_SYS_TEMP,
    RESPONSE,
    SASL_HEADER,
    UNAUTHORIZED,
    SaslFrameError,
    SaslLayer,
    encode_frame,
    quoted,
)
from haclient.amqp.types import SASL_FAILED, ErrorCondition

__all__ = [
    "MAX_SCRAM_ITERATIONS",
    "NO_MECHANISM",
    "SASL_FAILED",
    "SaslClientLayer",
    "SaslFailure",
    "choose_mechanism",
]

log = logging.getLogger("haclient.amqp")

#: How the client's own verdict that no mechanism fits begins (its condition is the broker's
#: refusal's, ``amqp:unauthorized-access``, yet nothing was sent: no credential to check).
NO_MECHANISM: Final = "no SASL mechanism in common"

#: The most PBKDF2 iterations a broker may ask SCRAM for: they run on the event loop (100,000 of
#: SHA-512 take some 0.2 s); brokers use 4096 (Artemis, Qpid Broker-J) to some 15,000.
MAX_SCRAM_ITERATIONS: Final = 100_000
_ITERATIONS: Final = re.compile(rb"(?:^|,)i=([0-9]{1,30})(?:,|$)")
# Qpid JMS's test for a token XOAUTH2 may carry: printable ASCII, nothing else.
_TOKEN: Final = re.compile(r"[\x20-\x7f]+")


class SaslFailure(Exception):
    """The exchange failed; carries the condition the engine ends the connection with."""

    def __init__(self, name: str, description: str) -> None:
        super().__init__(description)
        self.condition = ErrorCondition(name, description, local=True)


# --- Mechanisms ----------------------------------------------------------------------------------


class Mechanism:
    """One mechanism's side of the exchange (the base is a one-step mechanism)."""

    name = ""

    def initial_response(self) -> bytes | None:
        """What sasl-init carries (None: no initial response)."""
        return b""

    def challenge(self, data: bytes) -> bytes:
        """The sasl-response to a sasl-challenge (a one-step mechanism answers empty, as Qpid
        JMS does; the outcome follows)."""
        return b""

    def complete(self, additional: bytes | None) -> None:
        """Check a successful outcome (its additional data, if any)."""


class _Anonymous(Mechanism):
    name = "ANONYMOUS"


class _External(Mechanism):
    name = "EXTERNAL"  # the TLS client certificate is the identity


class _Plain(Mechanism):
    name = "PLAIN"

    def __init__(self, username: str, password: str) -> None:
        self._response = b"\0" + username.encode() + b"\0" + password.encode()

    def initial_response(self) -> bytes:
        return self._response


class _XOAuth2(Mechanism):
    name = "XOAUTH2"

    def __init__(self, username: str, token: str) -> None:
        self._response = b"user=%s\x01auth=Bearer %s\x01\x01" % (username.encode(), token.encode())

    def initial_response(self) -> bytes:
        return self._response

    # A broker that refuses the token may say why in a challenge (a JSON error, as Google's
    # servers do) before its failed outcome: the base's empty answer asks for that outcome.


class _Scram(Mechanism):
    """SCRAM-SHA-* (RFC 5802, RFC 7677) on ``scramp``'s client."""

    def __init__(self, name: str, username: str, password: str, nonce: str | None) -> None:
        from scramp import ScramClient  # loaded only by those who log in with SCRAM

        self.name = name
        self._client = ScramClient([name], username, password, c_nonce=nonce)
        self._proved = False  # client-final (our proof) sent
        self._verified = False

    def initial_response(self) -> bytes:
        first: str = self._client.get_client_first()
        return first.encode()

    def challenge(self, data: bytes) -> bytes:
        if not self._proved:
            self._proved = True
            return self._client_final(data)
        self._verify(data)  # the server-final message sent as a challenge (Artemis, Broker-J)
        return b""

    def _client_final(self, data: bytes) -> bytes:
        iterations = _ITERATIONS.search(data)
        if iterations is not None and int(iterations.group(1)) > MAX_SCRAM_ITERATIONS:
            raise SaslFailure(
                SASL_FAILED,
                f"the broker asks {self.name} for {int(iterations.group(1))} iterations, more "
                f"than the {MAX_SCRAM_ITERATIONS} haclient computes (they block the event loop)",
            )
        try:
            self._client.set_server_first(data.decode("utf-8"))
            final: str = self._client.get_client_final()
            return final.encode()
        except Exception as exc:  # scramp's verdict on a malformed challenge, or a decode error
            raise SaslFailure(
                SASL_FAILED, f"the broker's {self.name} challenge is not valid: {exc}"
            ) from None

    def _verify(self, data: bytes) -> None:
        if data.startswith(b"e="):  # the broker's verdict on our proof (RFC 5802's server-error)
            reason = data[2:66].decode("ascii", "replace")
            raise SaslFailure(UNAUTHORIZED, f"the broker refused the {self.name} login: {reason}")
        try:
            self._client.set_server_final(data.decode("utf-8"))
        except Exception:  # scramp's ScramException, or a decode error
            raise SaslFailure(
                SASL_FAILED,
                f"the broker could not prove it knows the password: its {self.name} server "
                "signature does not match (a broker that is not the one configured, or "
                "credentials stored for another password)",
            ) from None
        self._verified = True

    def complete(self, additional: bytes | None) -> None:
        if additional:
            self._verify(additional)
        if not self._verified:
            raise SaslFailure(
                SASL_FAILED,
                f"the broker ended {self.name} without its server signature: it did not prove "
                "it knows the password",
            )


def _usable(name: str, auth: ClientAuth, secure: bool) -> str | None:
    """Why ``name`` cannot be used with ``auth`` (None: it can)."""
    has_credentials = bool(auth.username) and bool(auth.password)
    if name == "EXTERNAL":
        return None if auth.client_certificate and secure else "needs a TLS client certificate"
    if name == "ANONYMOUS":
        return None
    if not has_credentials:
        return "needs a username and password"
    if name in CLEAR_TEXT_MECHANISMS and not (secure or auth.allow_insecure):
        return "would send the password readable over a plain socket"
    if name == "XOAUTH2" and not _TOKEN.fullmatch(auth.password or ""):
        return "needs a token of printable ASCII"
    return None


def choose_mechanism(offered: Sequence[str], auth: ClientAuth, secure: bool) -> str:
    """The mechanism to log in with: the strongest ``offered`` that ``auth`` allows and has
    what it needs for (``SASL_MECHANISMS`` is the order).

    Raises:
        SaslFailure: None fits; the message lists what the broker offered, what we allow, and
            why each allowed one the broker offered cannot be used.
    """
    allowed = auth.allowed
    for name in allowed:
        if name in offered and _usable(name, auth, secure) is None:
            return name
    reasons = [f"{n} {_usable(n, auth, secure)}" for n in allowed if n in offered]
    why = f" ({'; '.join(reasons)})" if reasons else ""
    raise SaslFailure(
        UNAUTHORIZED,
        f"{NO_MECHANISM}: the broker offers {', '.join(offered) or 'none'}; "
        f"haclient allows {', '.join(allowed)}{why}",
    )


def _mechanism(name: str, auth: ClientAuth, nonce: str | None) -> Mechanism:
    username, password = auth.username or "", auth.password or ""
    if name.startswith("SCRAM-"):
        return _Scram(name, username, password, nonce)
    if name == "PLAIN":
        return _Plain(username, password)
    if name == "XOAUTH2":
        return _XOAuth2(username, password)
    return _External() if name == "EXTERNAL" else _Anonymous()


# --- The exchange ----------------------------------------------------------------------------


class _State(enum.Enum):
    HEADER = "header"  # awaiting the broker's SASL header
    MECHANISMS = "mechanisms"  # awaiting sasl-mechanisms
    STEPS = "steps"  # sasl-init sent: awaiting challenges and the outcome
    DONE = "done"  # logged in: bytes pass through
    FAILED = "failed"


class SaslClientLayer(SaslLayer):
    """The client side of the SASL exchange (a ``haclient.amqp.engine.ByteLayer``; ``receive``,
    ``send`` and ``has_output`` are ``SaslLayer``'s, which keeps rule 1).

    Args:
        auth: The credentials and the mechanisms allowed.
        secure: True when TLS runs below this layer (PLAIN and XOAUTH2 need it or
            ``auth.allow_insecure``; EXTERNAL needs it).
        hostname: The host name sasl-init names (the virtual host), if any.
        nonce: SCRAM's client nonce, for tests against published vectors (None: random).
    """

    def __init__(
        self,
        auth: ClientAuth,
        *,
        secure: bool = False,
        hostname: str | None = None,
        nonce: str | None = None,
    ) -> None:
        super().__init__(SASL_HEADER)  # the client speaks first
        self._auth = auth
        self._secure = secure
        self._hostname = hostname
        self._nonce = nonce
        self._state = _State.HEADER
        self._mechanism: Mechanism | None = None

    def __repr__(self) -> str:
        mechanism = self._mechanism.name if self._mechanism else None
        return f"SaslClientLayer(state={self._state.value}, mechanism={mechanism!r})"

    @property
    def mechanism(self) -> str | None:
        """The mechanism chosen, once the broker's list has arrived."""
        return self._mechanism.name if self._mechanism else None

    def _advance(self) -> None:
        try:
            self._exchange()
        except SaslFailure as failure:
            self._fail(failure.condition)
        except SaslFrameError as exc:
            self._fail(ErrorCondition(exc.condition, str(exc)))

    def _fail(self, condition: ErrorCondition) -> None:
        self._state = _State.FAILED
        self._buffer = b""
        self.error = condition  # the engine logs it and ends the connection

    def _exchange(self) -> None:
        if self._state is _State.HEADER:
            if len(self._buffer) < 8:
                if not SASL_HEADER.startswith(self._buffer):
                    self._wrong_header()
                return
            if self._buffer[:8] != SASL_HEADER:
                self._wrong_header()
            self._buffer = self._buffer[8:]
            self._state = _State.MECHANISMS
        while self._state in (_State.MECHANISMS, _State.STEPS):
            frame = self._next_frame()
            if frame is None:
                return
            self._on_frame(*frame)

    def _wrong_header(self) -> None:
        raise SaslFailure(
            FRAMING_ERROR,
            f"the peer answered the SASL protocol header with {quoted(self._buffer)}",
        )

    def _on_frame(self, descriptor: int, fields: list[Any]) -> None:
        if self._state is _State.MECHANISMS:
            if descriptor != MECHANISMS:
                raise SaslFailure(FRAMING_ERROR, f"expected sasl-mechanisms, got {descriptor:#x}")
            self._choose(_symbols(fields[0]))
        elif descriptor == CHALLENGE:
            assert self._mechanism is not None
            response = self._mechanism.challenge(_binary(fields[0], "sasl-challenge"))
            self.queue(encode_frame(RESPONSE, [response]))
        elif descriptor == OUTCOME:
            self._on_outcome(fields)
        else:
            raise SaslFailure(
                FRAMING_ERROR, f"expected sasl-challenge or outcome, got {descriptor:#x}"
            )

    def _choose(self, offered: tuple[str, ...]) -> None:
        name = choose_mechanism(offered, self._auth, self._secure)
        mechanism = self._mechanism = _mechanism(name, self._auth, self._nonce)
        log.debug("SASL: the broker offers %s; logging in with %s", ", ".join(offered), name)
        fields: list[Any] = [symbol(name), mechanism.initial_response()]
        if self._hostname:
            fields.append(self._hostname)
        self.queue(encode_frame(INIT, fields))
        self._state = _State.STEPS

    def _on_outcome(self, fields: list[Any]) -> None:
        assert self._mechanism is not None
        code, additional = fields[0], fields[1]
        if code != OUTCOME_OK:
            if not isinstance(code, int):
                raise SaslFailure(
                    FRAMING_ERROR, f"a sasl-outcome without a valid code: {code!r:.40}"
                )
            kind = OUTCOME_NAMES.get(int(code), str(code))
            temporary = ", a temporary failure of the broker" if code == OUTCOME_SYS_TEMP else ""
            raise SaslFailure(
                UNAUTHORIZED,
                f"the broker refused the SASL {self._mechanism.name} login "
                f"(outcome {kind}{temporary})",
            )
        if additional is not None and not isinstance(additional, bytes):
            raise SaslFailure(FRAMING_ERROR, "a sasl-outcome whose additional data is not binary")
        self._mechanism.complete(additional)
        self._state = _State.DONE
        log.debug("SASL: logged in with %s", self._mechanism.name)
        self.release()


def _symbols(value: Any) -> tuple[str, ...]:
    """sasl-server-mechanisms: one symbol or an array of them."""
    if isinstance(value, str):
        return (str(value),)
    if isinstance(value, Array | list):
        items = value.elements if isinstance(value, Array) else value
        if all(isinstance(item, str) for item in items):
            return tuple(str(item) for item in items)
    raise SaslFailure(FRAMING_ERROR, "sasl-mechanisms without a list of mechanism names")


def _binary(value: Any, what: str) -> bytes:
    if not isinstance(value, bytes):
        raise SaslFailure(FRAMING_ERROR, f"a {what} without binary data")
    return value
