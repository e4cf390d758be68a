"""The server side of the SASL exchange as a byte layer below proton's AMQP transport.

How this works: after the SASL protocol header the layer offers ``ServerAuth.mechanisms`` in a
sasl-mechanisms frame, reads the client's sasl-init, and hands it to the chosen mechanism's
exchange (``chaos.sasl_mechanisms``); each ``Challenge`` goes out as a sasl-challenge and the
next sasl-response goes back to the exchange, until it accepts or refuses: a sasl-outcome
(``ok`` with the exchange's additional data, such as SCRAM's server-final message, or
``auth``). Only then do bytes pass between the socket and the AMQP layer. The frames, and the
output held until the login succeeded, are ``haclient.amqp.sasl_frames``'s, as the client's.

Rule 1: nothing reaches the AMQP layer, and no AMQP byte leaves, before an ``ok`` outcome.
Rule 2: every failure after the protocol header (a refused login, a frame that is not the one
expected, bytes that are no frame) sends the outcome ``auth`` and ends the stream; the reason
stays in ``error`` for the broker's log. Each frame is answered as soon as it is complete.
A peer that skips SASL (plain AMQP header) is let through only when ANONYMOUS is offered.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

from proton import UNDESCRIBED, Array, Data, symbol

from chaos.sasl_mechanisms import Accept, Challenge, Exchange, Refuse, Step, exchange_for
from haclient.amqp import sasl_frames as frames
from haclient.amqp.config import ServerAuth
from haclient.amqp.sasl_frames import SaslFrameError, SaslLayer
from haclient.amqp.types import ErrorCondition

__all__ = ["SaslServerLayer"]


class _State(enum.Enum):
    HEADER = "header"  # waiting for the protocol header
    INIT = "init"  # mechanisms sent: waiting for sasl-init
    RESPONSE = "response"  # a challenge sent: waiting for sasl-response
    DONE = "done"  # authenticated: bytes pass through
    FAILED = "failed"


_EXPECTED = {
    _State.INIT: (frames.INIT, "sasl-init"),
    _State.RESPONSE: (frames.RESPONSE, "sasl-response"),
}


class SaslServerLayer(SaslLayer):
    """The server side of the SASL exchange, for ``ServerAuth.mechanisms`` (``receive``,
    ``send`` and ``has_output`` are ``SaslLayer``'s, which keeps rule 1).

    Args:
        auth: What is offered and how logins are checked; None offers ANONYMOUS only.
        peer_identity: The verified TLS client certificate's identity, if any (for EXTERNAL).
    """

    def __init__(
        self, auth: ServerAuth | None, peer_identity: Callable[[], str | None] | None = None
    ) -> None:
        super().__init__()
        self._auth = auth if auth is not None else ServerAuth(("ANONYMOUS",))
        self._peer_identity = peer_identity or (lambda: None)
        self._state = _State.HEADER
        self._exchange: Exchange | None = None
        self._mechanism = ""

    @property
    def failed(self) -> bool:
        """True once the exchange ended without a login; the stream must end."""
        return self._state is _State.FAILED

    def _advance(self) -> None:
        if self._state is _State.HEADER:
            self._read_header()
        while self._state in _EXPECTED:
            try:
                frame = self._next_frame()
            except SaslFrameError as exc:
                self._refuse(exc.condition, str(exc))
                return
            if frame is None:
                return
            self._apply(self._step(*frame))

    def _read_header(self) -> None:
        """Take the protocol header: offer the mechanisms, or let plain AMQP through."""
        if len(self._buffer) < 8:
            return
        header = self._buffer[:8]
        if header == frames.AMQP_HEADER and "ANONYMOUS" in self._auth.mechanisms:
            self._state = _State.DONE  # the AMQP layer reads the header itself
            self.release()
            return
        self._buffer = self._buffer[8:]
        if header != frames.SASL_HEADER:
            self._fail(frames.FRAMING_ERROR, f"unexpected header {header!r}")
            self.queue(frames.SASL_HEADER)
            return
        offered = Array(UNDESCRIBED, Data.SYMBOL, *(symbol(m) for m in self._auth.mechanisms))
        self.queue(frames.SASL_HEADER + frames.encode_frame(frames.MECHANISMS, [offered]))
        self._state = _State.INIT

    def _step(self, descriptor: int, fields: list[Any]) -> Step:
        """What the exchange makes of the frame the state expects (any other: a refusal)."""
        expected, name = _EXPECTED[self._state]
        if descriptor != expected:
            return Refuse(f"expected {name}, got a frame with descriptor {descriptor:#x}")
        if self._exchange is None:
            mechanism, initial = fields[0], fields[1]
            if not isinstance(mechanism, str) or not isinstance(initial, bytes | None):
                return Refuse("a sasl-init whose mechanism or initial response is mistyped")
            self._mechanism = mechanism
            self._exchange = exchange_for(mechanism, self._auth, self._peer_identity)
            if self._exchange is None:
                return Refuse(f"mechanism {mechanism!r} is not offered")
            return self._exchange.start(initial)
        response = fields[0]
        if not isinstance(response, bytes | None):
            return Refuse("a sasl-response that is not binary")
        return self._exchange.respond(response or b"")

    def _apply(self, step: Step) -> None:
        if isinstance(step, Challenge):
            self.queue(frames.encode_frame(frames.CHALLENGE, [step.data]))
            self._state = _State.RESPONSE
        elif isinstance(step, Accept):
            self.queue(frames.encode_outcome(frames.OUTCOME_OK, step.additional_data))
            self._state = _State.DONE
            self.release()
            self.user = step.user
        else:
            mechanism = self._mechanism or "-"
            self._refuse(frames.UNAUTHORIZED, f"SASL {mechanism} login refused: {step.reason}")

    def _refuse(self, name: str, description: str) -> None:
        self.queue(frames.encode_outcome(frames.OUTCOME_AUTH))
        self._fail(name, description)

    def _fail(self, name: str, description: str) -> None:
        self._state = _State.FAILED
        self.error = ErrorCondition(name, description)
