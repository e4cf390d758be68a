"""The transaction coordinator's control messages (AMQP 1.0 part 4): declare and discharge."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proton import Described, ulong

from haclient.amqp import _convert
from haclient.amqp.codec import formats as f
from haclient.amqp.codec.message import AmqpMessage, MessageView, encode_message
from haclient.jms_errors import MessageFormatError

__all__ = [
    "CoordinatorRequest",
    "Declare",
    "Discharge",
    "decode_coordinator_request",
    "encode_declare",
    "encode_discharge",
]


@dataclass(frozen=True, slots=True)
class Declare:
    """A request to begin a transaction."""


@dataclass(frozen=True, slots=True)
class Discharge:
    """A request to end transaction ``txn_id``: commit, or roll back when ``fail``."""

    txn_id: bytes
    fail: bool


CoordinatorRequest = Declare | Discharge


def _encode_control(descriptor: int, fields: list[Any]) -> bytes:
    return encode_message(AmqpMessage(body=Described(ulong(descriptor), fields)))


def encode_declare() -> bytes:
    """The message a client sends to the coordinator to declare a transaction."""
    return _encode_control(f.DECLARE, [None])


def encode_discharge(txn_id: bytes, *, fail: bool) -> bytes:
    """The message that commits (``fail=False``) or rolls back (``fail=True``) ``txn_id``."""
    return _encode_control(f.DISCHARGE, [txn_id, fail])


def decode_coordinator_request(payload: bytes) -> CoordinatorRequest:
    """What a client asked the coordinator (server role); symbolic descriptors accepted.

    Raises:
        MessageFormatError: the message is neither a declare nor a discharge.
    """
    body: Any = MessageView(payload).body
    if isinstance(body, Described):
        code = _convert.descriptor_code(body.descriptor)
        fields = list(body.value or []) if isinstance(body.value, list) else []
        if code == f.DECLARE:
            return Declare()
        if code == f.DISCHARGE and fields and isinstance(fields[0], bytes):
            return Discharge(fields[0], bool(fields[1]) if len(fields) > 1 else False)
    raise MessageFormatError(f"not a coordinator request: {body!r:.80}")
