"""SASL frames for both ends of the exchange: the client's layer (``haclient.amqp.sasl``) and
the reference broker's (``chaos.sasl_server``).

How this works: a SASL frame (AMQP 1.0, part 5.3) is an 8-byte header (size, data offset, type
1, two unused bytes) and a body holding one described list: sasl-mechanisms, sasl-init,
sasl-challenge, sasl-response or sasl-outcome. ``encode_frame`` writes one; ``read_frame``
takes the first whole frame of a buffer and says how many bytes it used, so each layer keeps
its own buffer. Values are proton's Python types (``symbol``, ``ubyte``, ``Array`` ...),
encoded by ``haclient.amqp.codec``. ``SaslLayer`` is what both layers share around their
exchange: input buffered and read frame by frame, their own frames sent at once, and the AMQP
layer's bytes, both ways, held until a successful outcome.

Rules:
    Rule 1: ``read_frame`` either returns a whole frame, returns None (more bytes needed), or
        raises ``SaslFrameError``; bytes that are not a SASL frame never read as one, and no
        frame header makes it wait for more than ``MAX_FRAME_SIZE`` bytes.
    Rule 2: a ``SaslLayer`` passes nothing between the socket and the AMQP layer before
        ``release`` (the login succeeded), and everything, in the order it came, after it.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from proton import Described, ubyte, ulong

from haclient.amqp.codec import decode_value, encode_value
from haclient.amqp.types import ErrorCondition
from haclient.jms_errors import MessageFormatError

__all__ = [
    "AMQP_HEADER",
    "CHALLENGE",
    "DECODE_ERROR",
    "FRAMING_ERROR",
    "INIT",
    "MAX_FRAME_SIZE",
    "MECHANISMS",
    "OUTCOME",
    "OUTCOME_AUTH",
    "OUTCOME_NAMES",
    "OUTCOME_OK",
    "OUTCOME_SYS_TEMP",
    "RESPONSE",
    "SASL_HEADER",
    "SYMBOLIC_DESCRIPTORS",
    "UNAUTHORIZED",
    "SaslFrameError",
    "SaslLayer",
    "encode_frame",
    "encode_outcome",
    "quoted",
    "read_frame",
]

#: The protocol header that opens a SASL exchange, and the plain AMQP one (no SASL).
SASL_HEADER: Final = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER: Final = b"AMQP\x00\x01\x00\x00"

# The frame bodies' descriptors, by number and by symbol (a peer may send either).
MECHANISMS: Final = 0x40
INIT: Final = 0x41
CHALLENGE: Final = 0x42
RESPONSE: Final = 0x43
OUTCOME: Final = 0x44
SYMBOLIC_DESCRIPTORS: Final[Mapping[str, int]] = MappingProxyType(
    {
        "amqp:sasl-mechanisms:list": MECHANISMS,
        "amqp:sasl-init:list": INIT,
        "amqp:sasl-challenge:list": CHALLENGE,
        "amqp:sasl-response:list": RESPONSE,
        "amqp:sasl-outcome:list": OUTCOME,
    }
)
# How many fields each body has: missing trailing ones read as None.
_FIELDS: Final = {MECHANISMS: 1, INIT: 3, CHALLENGE: 1, RESPONSE: 1, OUTCOME: 2}

# sasl-outcome's codes (send them as ``ubyte``), and their names in the specification.
OUTCOME_OK: Final = 0
OUTCOME_AUTH: Final = 1
OUTCOME_SYS_TEMP: Final = 4
OUTCOME_NAMES: Final[Mapping[int, str]] = MappingProxyType(
    {OUTCOME_OK: "ok", OUTCOME_AUTH: "auth", 2: "sys", 3: "sys-perm", OUTCOME_SYS_TEMP: "sys-temp"}
)

# The error conditions a SASL exchange ends with.
FRAMING_ERROR: Final = "amqp:connection:framing-error"
DECODE_ERROR: Final = "amqp:decode-error"
UNAUTHORIZED: Final = "amqp:unauthorized-access"

_SASL_FRAME_TYPE: Final = 1
#: Generous: a SASL frame carries a few hundred bytes (an OAuth token some kilobytes).
MAX_FRAME_SIZE: Final = 65536
_HEADER: Final = struct.Struct(">IBBH")


class SaslFrameError(ValueError):
    """Bytes that are not a SASL frame; ``condition`` names the error to end the stream with
    (``FRAMING_ERROR`` for a bad frame header, ``DECODE_ERROR`` for a bad body)."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition


def quoted(data: bytes) -> str:
    """Bytes as error text quotes them (``['...']``, escaped; the error tree cuts it short)."""
    return f"['{repr(bytes(data))[2:-1]}']"


def encode_frame(descriptor: int, fields: list[Any]) -> bytes:
    """One SASL frame: the frame header, then the list ``fields`` described by ``descriptor``.

    Raises:
        MessageFormatError: a field has no AMQP encoding.
    """
    body = encode_value(Described(ulong(descriptor), fields))
    return _HEADER.pack(8 + len(body), 2, _SASL_FRAME_TYPE, 0) + body


def encode_outcome(code: int, additional: bytes | None = None) -> bytes:
    """A sasl-outcome frame: ``code`` (``OUTCOME_OK``, ``OUTCOME_AUTH`` ...) and the
    mechanism's additional data, if any (SCRAM's server-final message)."""
    return encode_frame(OUTCOME, [ubyte(code), additional])


def read_frame(buffer: bytes) -> tuple[int, list[Any], int] | None:
    """The first frame of ``buffer``: ``(descriptor, fields, bytes used)``; None while it is
    not all there. Empty frames before it (heartbeats) are skipped and counted as used.

    The descriptor is numeric whichever form the peer sent; missing trailing fields of the
    five SASL bodies read as None; binary fields are ``bytes``.

    Raises:
        SaslFrameError: the bytes are not a SASL frame (rule 1).
    """
    start = 0
    while len(buffer) - start >= 8:
        size, doff, frame_type, _ = _HEADER.unpack_from(buffer, start)
        if frame_type != _SASL_FRAME_TYPE or not 8 <= size <= MAX_FRAME_SIZE or doff < 2:
            header = buffer[start : start + 8]
            raise SaslFrameError(FRAMING_ERROR, f"malformed SASL frame header {quoted(header)}")
        if doff * 4 > size:
            raise SaslFrameError(FRAMING_ERROR, "malformed SASL frame: its data offset is past it")
        if len(buffer) - start < size:
            return None
        body = buffer[start + doff * 4 : start + size]
        start += size
        if body:
            descriptor, fields = _decode(body)
            return descriptor, fields, start
    return None


def _decode(body: bytes) -> tuple[int, list[Any]]:
    try:
        value, end = decode_value(body)
    except MessageFormatError as exc:
        raise SaslFrameError(DECODE_ERROR, f"undecodable SASL frame: {exc}") from None
    code = _code(value.descriptor) if isinstance(value, Described) else None
    if code is None or not isinstance(value.value, list) or end != len(body):
        raise SaslFrameError(DECODE_ERROR, "a SASL frame that is not one described list")
    fields = list(value.value)
    missing = _FIELDS.get(code, 0) - len(fields)
    return code, fields + [None] * missing


def _code(descriptor: Any) -> int | None:
    """A descriptor's number (None: neither a number nor a SASL body's symbol)."""
    if isinstance(descriptor, str):
        return SYMBOLIC_DESCRIPTORS.get(descriptor)
    if isinstance(descriptor, int) and not isinstance(descriptor, bool):
        return int(descriptor)
    return None


class SaslLayer(ABC):
    """What both ends' SASL layers share (each a ``haclient.amqp.engine.ByteLayer``): the bytes
    around the exchange. Input is buffered for the exchange until it ends; the layer's own
    output goes at once, the AMQP layer's waits until the login succeeded (rule 2).

    A layer subclasses it and implements ``_advance``, which takes what the buffered input
    completes of the exchange (``_next_frame``), answers with ``queue``, and ends it with
    ``release`` (logged in) or by setting ``error``. The engine calls ``receive``, ``send`` and
    ``has_output``.

    Args:
        first: Bytes to send before anything else (the client's protocol header).
    """

    def __init__(self, first: bytes = b"") -> None:
        self._buffer = b""  # input the exchange has not taken yet
        self._frames = first
        self._held = b""
        self._released = False
        self.error: ErrorCondition | None = None
        """Why the exchange failed; the stream must end."""
        self.eof = False  # EOF passes through; the engine (or TLS below) sees it
        self.user: str | None = None
        """The identity a server's exchange authenticated."""

    # Bytes from the socket --------------------------------------------------------------------

    def receive(self, data: bytes) -> bytes:
        """Consume bytes from the peer; return those meant for the AMQP layer: all of them once
        the login succeeded, none before it (rule 2) nor after a failure."""
        if self._released:
            return data
        if self.error is not None:
            return b""
        self._buffer += data
        self._advance()
        if not self._released:
            return b""
        rest, self._buffer = self._buffer, b""
        return rest  # the AMQP bytes that came with the last SASL frame

    @abstractmethod
    def _advance(self) -> None:
        """Take what the buffered input completes of the exchange (a subclass's work)."""

    def _next_frame(self) -> tuple[int, list[Any]] | None:
        """The input's next whole frame (descriptor, fields), taken off it; None while it is
        not all there.

        Raises:
            SaslFrameError: the input is not a SASL frame.
        """
        frame = read_frame(self._buffer)
        if frame is None:
            return None
        descriptor, fields, used = frame
        self._buffer = self._buffer[used:]
        return descriptor, fields

    # Bytes from the AMQP layer ----------------------------------------------------------------

    def queue(self, frames: bytes) -> None:
        """Send ``frames`` (SASL frames, a protocol header) at the next ``send``."""
        self._frames += frames

    def release(self) -> None:
        """The login succeeded: bytes pass between the socket and the AMQP layer from now on,
        the AMQP layer's held ones first."""
        self._released = True

    @property
    def has_output(self) -> bool:
        """True when ``send(b"")`` would return bytes."""
        return bool(self._frames) or (self._released and bool(self._held))

    @property
    def passes_through(self) -> bool:
        """True once the login succeeded and what it held went out: from then on bytes pass
        unchanged both ways (nothing is queued after the exchange)."""
        return self._released and not self._held and not self._frames and self.error is None

    def send(self, data: bytes) -> bytes:
        """The queued frames, then the AMQP layer's bytes ``data`` once released (rule 2)."""
        if not self._released:
            self._held += data
            data = b""
        elif self._held:
            data, self._held = self._held + data, b""
        if self._frames:
            data, self._frames = self._frames + data, b""
        return data
