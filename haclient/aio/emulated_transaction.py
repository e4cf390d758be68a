"""Transactions emulated by the client for brokers without a coordinator (rule E3).

With ``jms.transactions=emulate`` a TRANSACTED session keeps what it does in the client until
``commit()``: sends are buffered (nothing reaches the broker before the commit) and received
messages are remembered unacknowledged. ``commit()`` then sends the buffered messages one by one,
each confirmed by the broker, and acknowledges the received ones (confirmed); ``rollback()``
drops the buffer and gives the received messages back for redelivery.

This is NOT atomic, and the session says so (``Session.transactions_emulated``, a warning when
it is created): a commit cut off half way has sent some messages and not others, or sent all and
acknowledged nothing (the broker then redelivers what was received). Such a commit raises
``TransactionRolledBackError(in_doubt=True)`` naming how far it got. A failover before the commit
drops the buffer and the broker redelivers the received messages: the next ``commit()`` raises
``TransactionRolledBackError`` (F7), as with a broker's transaction.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from haclient.aio.pending import PendingAck
from haclient.aio.stats import Counters
from haclient.aio.transaction import BufferedSend, Consumed, GiveBack, SessionTransaction
from haclient.amqp.connection import AmqpConnection
from haclient.amqp.endpoints import Session
from haclient.errors import ClosedError, HAClientError, TransactionRolledBackError

__all__ = ["BufferedSend", "EmulatedTransaction"]


class EmulatedTransaction(SessionTransaction):
    """The open emulated transaction of one session: buffered sends, unacknowledged receipts."""

    emulated = True
    holds_sends = True

    def __init__(
        self,
        give_back: GiveBack,
        consumed: Consumed,
        acknowledge: Callable[[list[PendingAck]], Awaitable[None]],
        *,
        counters: Counters,
    ) -> None:
        super().__init__(give_back, consumed, counters=counters)
        self._acknowledge = acknowledge
        self.sends: list[BufferedSend] = []
        self.received: list[PendingAck] = []

    @property
    def dirty(self) -> bool:
        """True when anything was sent or received since the last commit or rollback."""
        return bool(self.sends or self.received)

    async def begin(self, amqp: AmqpConnection, session: Session, *, timeout: float) -> None:
        """Nothing to attach: the client is the coordinator."""

    async def enlist_send(self) -> None:
        """None: the send is buffered (``buffer``) and made by ``commit()``."""
        return None

    def buffer(self, send: BufferedSend) -> None:
        """Hold ``send`` until commit."""
        self.sends.append(send)

    async def _enlist_receipt(self, pending: PendingAck) -> None:
        """Remember the message: ``commit()`` acknowledges it."""
        self.received.append(pending)

    def _forget(self, cause: BaseException) -> None:
        self._rolled_back(cause)  # the broker redelivers what was received

    async def _commit(self) -> None:
        """Send every buffered message, then acknowledge the received ones.

        Raises:
            TransactionRolledBackError: ``in_doubt=True``, the commit failed part way (the
                message says how far it got).
        """
        sends, received = self._take()
        done = 0
        try:
            for send in sends:
                await send.transmit()
                done += 1
                if send.completed is not None:
                    send.completed(None)
            await self._acknowledge(received)
        except HAClientError as exc:
            for send in sends[done:]:
                if send.completed is not None:
                    send.completed(exc)
            self.counters.in_doubt += 1
            raise TransactionRolledBackError(
                f"the emulated commit failed after {done} of {len(sends)} sends "
                f"({'before' if done < len(sends) else 'while'} acknowledging {len(received)} "
                f"received messages): emulated transactions are not atomic",
                in_doubt=True,
            ) from exc

    async def _roll_back(self) -> None:
        cause = TransactionRolledBackError("the transaction was rolled back")
        await self._give_back(self._rolled_back(cause))

    async def close(self) -> None:
        cause = ClosedError("the session closed with its transaction open")
        await self._give_back(self._rolled_back(cause))

    def _take(self) -> tuple[list[BufferedSend], list[PendingAck]]:
        """Everything the transaction holds, forgotten here."""
        sends, received = self.sends, self.received
        self.sends, self.received = [], []
        return sends, received

    def _rolled_back(self, cause: BaseException) -> list[PendingAck]:
        """Drop the buffered sends (their callbacks hear ``cause``); return the received
        messages, to be given back."""
        sends, received = self._take()
        for send in sends:
            if send.completed is not None:
                send.completed(cause)
        return received
