"""An AMQP 1.0 message codec of our own: message sections straight to bytes and back.

How this works, one module per job:

- ``formats``: the format codes and descriptors of the specification.
- ``encode``: Python values -> bytes, smallest encoding per value (``encode_value``).
- ``decode``: bytes -> Python values (``decode_value``), and ``skip_value`` to find where one ends.
- ``sections``: builders for each message section from encoded fields; ``split_sections``.
- ``message``: ``AmqpMessage`` <-> bytes; ``MessageView``, a received message decoded lazily.
- ``coordinator``: the transaction coordinator's declare and discharge bodies.

Values are proton's Python types (``symbol``, ``ulong``, ``Described`` ...), so proton's codec is
the oracle in the tests: both codecs read what the other writes, value for value. The engine
still frames transfers with proton; only the message payload is ours. Malformed input raises
``haclient.errors.MessageFormatError`` and nothing else.
"""

from __future__ import annotations

from haclient.amqp.codec.coordinator import (
    CoordinatorRequest,
    Declare,
    Discharge,
    decode_coordinator_request,
    encode_declare,
    encode_discharge,
)
from haclient.amqp.codec.decode import decode_value
from haclient.amqp.codec.encode import encode_value
from haclient.amqp.codec.message import (
    AmqpMessage,
    BodyKind,
    MessageView,
    SectionMemo,
    decode_message,
    encode_message,
)

__all__ = [
    "AmqpMessage",
    "BodyKind",
    "CoordinatorRequest",
    "Declare",
    "Discharge",
    "MessageView",
    "SectionMemo",
    "decode_coordinator_request",
    "decode_message",
    "decode_value",
    "encode_declare",
    "encode_discharge",
    "encode_message",
    "encode_value",
]
