"""``PendingAck``: a delivered message that waits for its acknowledgement.

The acknowledgement strategies (haclient.aio.acks) and the transactions (haclient.aio.transaction)
both hold these; it sits below both so that neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from haclient.amqp.connection import ReceivedMessage
from haclient.modes import AckConfirmation

__all__ = ["PendingAck"]


@dataclass(slots=True)
class PendingAck:
    """A delivered, not yet acknowledged message and how its link confirms acknowledgements."""

    raw: ReceivedMessage
    confirmation: AckConfirmation
    probe_address: str | None
    window_key: str | None = None
    """The message's key in the session's duplicate window (None: no id, never suppressed)."""
    sent: bool = False
    """True once the acknowledgement went to the connection (the broker may have applied it)."""
