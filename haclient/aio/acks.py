"""Acknowledgements and their confirmation by the broker (SEMANTICS A1-A3, A5, A6).

How this works: a consumer hands every delivered message's AMQP delivery to the session's
``Acknowledger``, which settles it as the session's mode says:

- AUTO: ``accept()`` settles the one message and waits for the broker's confirmation before the
  consumer hands the message out (A1).
- CLIENT: deliveries pile up in ``pending``; ``accept_pending()`` settles all and waits for the
  confirmation (A2). INDIVIDUAL settles one.
- DUPS_OK: ``pending`` is flushed when it reaches ``dups_ok_batch`` or ``dups_ok_interval`` after
  the first unflushed delivery, by the session's flusher task; nobody waits (A3).
- NO_ACK: deliveries arrive settled; nothing to do (A5).

Confirmation (A6) is one of two mechanisms, chosen per link from the broker's attach answer:

- ``SETTLE_SECOND``: the link runs in receiver settle mode ``second``; the outcome goes out
  unsettled and the broker settles it once applied. We wait for those settlements.
- ``ROUND_TRIP``: the broker settles in mode ``first`` only (RabbitMQ, ActiveMQ). The outcomes go
  out settled, the socket is flushed (proton would otherwise write a later frame first), then a
  short-lived sender link is attached on the same session and its answer awaited: a broker
  processes a session's frames in order, so the answer proves the dispositions were processed.
  (A drain would be cheaper, but RabbitMQ 3.10 ends the session on a drain of a classic queue.)

A delivery is settled only on the connection it came from: one from a connection that failover
replaced raises ``StaleDeliveryError`` (the broker that sent it is gone; the next one delivers
the message again), never waits for an answer that cannot come.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from haclient.amqp.connection import AmqpConnection, ReceivedMessage
from haclient.amqp.endpoints import Receiver, Session
from haclient.amqp.types import ACCEPTED, Outcome, Terminus
from haclient.errors import ConnectionLostError
from haclient.modes import AckConfirmation

__all__ = ["Acknowledger", "PendingAck", "StaleDeliveryError"]


class StaleDeliveryError(ConnectionLostError):
    """A delivery to settle came on a connection that is gone (failover replaced it)."""


_probe_names = itertools.count(1)


@dataclass(slots=True)
class PendingAck:
    """A delivered, not yet acknowledged message and how its link confirms acknowledgements."""

    raw: ReceivedMessage
    confirmation: AckConfirmation
    probe_address: str | None


class Acknowledger:
    """Settles deliveries for one session and waits for the broker's confirmation."""

    def __init__(self) -> None:
        self.pending: list[PendingAck] = []

    def track(self, ack: PendingAck) -> None:
        """Remember a delivered message until it is acknowledged (CLIENT, DUPS_OK, INDIVIDUAL)."""
        self.pending.append(ack)

    def take_pending(self) -> list[PendingAck]:
        """Every tracked delivery, forgotten here (the caller settles or releases them)."""
        taken, self.pending = self.pending, []
        return taken

    def take_one(self, raw: ReceivedMessage) -> PendingAck | None:
        """The tracked entry for ``raw``, forgotten here (INDIVIDUAL)."""
        for i, ack in enumerate(self.pending):
            if ack.raw is raw:
                return self.pending.pop(i)
        return None

    def forget_link(self, receiver: Receiver) -> list[PendingAck]:
        """Drop (and return) the deliveries of one link (its connection is gone)."""
        mine = [a for a in self.pending if a.raw.delivery.link is receiver]
        self.pending = [a for a in self.pending if a.raw.delivery.link is not receiver]
        return mine

    @staticmethod
    async def settle(
        amqp: AmqpConnection,
        session: Session,
        acks: Iterable[PendingAck],
        outcome: Outcome = ACCEPTED,
        *,
        confirm: bool = True,
        timeout: float = 30.0,
    ) -> None:
        """Send ``outcome`` for ``acks``; with ``confirm``, return once the broker confirmed.

        Raises:
            StaleDeliveryError: one of ``acks`` came on another (older) connection than
                ``amqp``; nothing was settled.
            ConnectionLostError (and the like): the connection or the link ended first; the
                broker will redeliver what it did not confirm.
        """
        acks = list(acks)
        if any(ack.raw.delivery.link.session.engine is not amqp.engine for ack in acks):
            raise StaleDeliveryError(
                "the message came on a connection that failover replaced: it cannot be "
                "acknowledged, and the broker will deliver it again"
            )
        second: list[ReceivedMessage] = []
        probe: str | None = None
        round_trip = False
        for ack in acks:
            if confirm and ack.confirmation is AckConfirmation.SETTLE_SECOND:
                amqp.settle(ack.raw, outcome, settle=False)
                second.append(ack.raw)
            else:
                amqp.settle(ack.raw, outcome)
                if confirm and ack.confirmation is AckConfirmation.ROUND_TRIP:
                    round_trip = True
                    probe = probe or ack.probe_address
        for raw in second:
            await amqp.wait_settled(raw.delivery)
            raw.delivery.settle()
        if round_trip:
            await round_trip_on(amqp, session, probe, timeout=timeout)


async def round_trip_on(
    amqp: AmqpConnection, session: Session, address: str | None, *, timeout: float
) -> None:
    """Prove that the broker processed every frame written so far on ``session``."""
    await amqp.flush()
    probe = await amqp.open_sender(
        Terminus(address=address),
        session=session,
        name=f"{amqp.engine.config.container_id}:ack-probe:{next(_probe_names)}",
        timeout=timeout,
    )
    amqp.detach(probe)
