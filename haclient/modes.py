"""Session acknowledgement modes and how acknowledgements are confirmed (SEMANTICS A1-A6).

Shared by the async core (``haclient.aio``) and the blocking facade (``haclient``).
"""

from __future__ import annotations

import enum

from failover.options import nearest
from haclient.errors import ConfigurationError

__all__ = ["AckConfirmation", "AckMode", "ack_mode_of"]


class AckMode(enum.IntEnum):
    """How a session acknowledges the messages its consumers hand out.

    The values are the JMS constants (``Session.AUTO_ACKNOWLEDGE`` ...); NO_ACK and INDIVIDUAL
    use the numbers Qpid JMS gives its extensions.
    """

    TRANSACTED = 0
    """A4: sends and acknowledgements belong to the session's transaction (``commit()``)."""
    AUTO = 1
    """A1: each message is acknowledged, and confirmed by the broker, before it is handed out."""
    CLIENT = 2
    """A2: ``Message.acknowledge()`` acknowledges everything delivered so far on the session."""
    DUPS_OK = 3
    """A3: acknowledgements are batched and flushed lazily; a failure may redeliver some."""
    NO_ACK = 100
    """A5: messages arrive pre-settled; nothing to acknowledge, nothing redelivered."""
    INDIVIDUAL = 101
    """Like CLIENT, but ``Message.acknowledge()`` acknowledges that message only."""

    @property
    def acknowledged_by_application(self) -> bool:
        """True when the application acknowledges (``Message.acknowledge()``: CLIENT and
        INDIVIDUAL); in every other mode the session does, and ``acknowledge()`` does nothing."""
        return self in (AckMode.CLIENT, AckMode.INDIVIDUAL)


class AckConfirmation(enum.Enum):
    """How the session learns that the broker processed its acknowledgements (A6)."""

    SETTLE_SECOND = "settle-second"
    """Receiver settle mode ``second``: the broker settles each acknowledgement it applied."""
    LINK_FLOW = "link-flow"
    """The broker lacks mode ``second`` but answers every flow on a link it sends on (RabbitMQ):
    after the dispositions, one more credit on an idle probe receiver of the session; the
    broker's flow in answer proves it processed the frames before ours. One frame each way."""
    DRAIN = "drain"
    """The broker lacks mode ``second`` (ActiveMQ): after the dispositions, a drain on an idle
    probe receiver (a temporary queue) of the session, which the broker must answer with a
    flow. One frame each way."""
    ROUND_TRIP = "round-trip"
    """The last resort: after the dispositions, a probe sender link is attached (and detached)
    on the same session; the broker's attach proves it processed the frames before it. A link
    set-up on the broker per confirmation."""
    NONE = "none"
    """Nothing to confirm: DUPS_OK (lazy), NO_ACK (pre-settled), or TRANSACTED (the commit's
    answer is the confirmation)."""


def ack_mode_of(value: object) -> AckMode:
    """``value`` as an ``AckMode``: an ``AckMode``, or its JMS number (``2`` is CLIENT).

    A name is not taken (``create_session("client")``): the error says which ``AckMode`` it
    names, also as JMS spells it (``CLIENT_ACKNOWLEDGE``, ``Session.AUTO_ACKNOWLEDGE``,
    ``SESSION_TRANSACTED``).

    Raises:
        ConfigurationError: ``option`` is ``ack_mode``; for a str, the message suggests the mode.
    """
    if isinstance(value, AckMode):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return AckMode(value)
        except ValueError:
            pass
    hint = ""
    if isinstance(value, str):
        name = value.strip().upper().removeprefix("SESSION.").removeprefix("ACKMODE.")
        name = name.removeprefix("SESSION_").removesuffix("_ACKNOWLEDGE").replace("-", "_")
        close = nearest(name, AckMode.__members__)
        if close is not None:
            hint = f" (did you mean AckMode.{close}?)"
    known = ", ".join(f"AckMode.{m.name}" for m in AckMode)
    raise ConfigurationError(
        f"unknown acknowledge mode {value!r}{hint}; the modes are {known}", option="ack_mode"
    )
