"""A session's local transactions over the broker's coordinator (SEMANTICS A4, F7).

How this works: the coordinator link is attached when the transacted session is created. A
transaction is declared lazily, by the first send or receive that needs its id, so a commit of a
session that did nothing costs nothing. ``commit()`` discharges it with ``fail=False``;
``rollback()`` with ``fail=True``. The broker's answer to the discharge is the confirmation of
every acknowledgement and send in the transaction.

If the connection ends while the discharge of a commit is on its way, nobody knows whether the
broker committed: ``TransactionRolledBackError(in_doubt=True)`` says so (F7).
"""

from __future__ import annotations

from haclient.amqp.codec import encode_declare, encode_discharge
from haclient.amqp.connection import AmqpConnection
from haclient.amqp.endpoints import Sender, Session
from haclient.amqp.types import Accepted, Declared, Rejected, Terminus, TransactionalState
from haclient.errors import (
    AMQPError,
    ConnectionLostError,
    HAClientError,
    TransactionRolledBackError,
)

__all__ = ["Transactions"]


class Transactions:
    """The coordinator link of one session and the transaction currently open on it."""

    def __init__(self, amqp: AmqpConnection, coordinator: Sender) -> None:
        self.amqp = amqp
        self.coordinator = coordinator
        self.txn_id: bytes | None = None
        self.dirty = False

    @classmethod
    async def attach(
        cls, amqp: AmqpConnection, session: Session, name: str, *, timeout: float
    ) -> Transactions:
        """Attach the coordinator link.

        Raises:
            NotImplementedByBrokerError: the broker has no transaction coordinator.
        """
        coordinator = await amqp.open_sender(
            Terminus.coordinator(),
            session=session,
            name=name,
            source=Terminus(outcomes=("amqp:accepted:list", "amqp:rejected:list")),
            timeout=timeout,
        )
        return cls(amqp, coordinator)

    async def state(self) -> TransactionalState:
        """The delivery state that puts a transfer or an acknowledgement in the transaction."""
        if self.txn_id is None:
            outcome = await self.amqp.send(self.coordinator, encode_declare())
            if not isinstance(outcome, Declared):
                raise AMQPError(f"the broker did not declare a transaction: {outcome!r}")
            self.txn_id = outcome.txn_id
        self.dirty = True
        return TransactionalState(self.txn_id)

    async def discharge(self, *, fail: bool) -> None:
        """End the open transaction (commit unless ``fail``); nothing to do if none is open.

        Raises:
            TransactionRolledBackError: the broker refused the commit (rolled back), or the
                connection ended before it answered (``in_doubt=True``).
        """
        txn_id, self.txn_id, self.dirty = self.txn_id, None, False
        if txn_id is None:
            return
        try:
            outcome = await self.amqp.send(self.coordinator, encode_discharge(txn_id, fail=fail))
        except (ConnectionLostError, HAClientError) as exc:
            if fail:
                raise
            raise TransactionRolledBackError(
                "the connection ended while the commit was in flight: the broker may or may not "
                f"have committed the transaction ({exc})",
                in_doubt=True,
            ) from exc
        if isinstance(outcome, Rejected) and not fail:
            reason = outcome.error.description if outcome.error else None
            raise TransactionRolledBackError(
                f"the broker rolled the transaction back: {reason or 'no reason given'}"
            )
        if not isinstance(outcome, Accepted) and not fail:
            raise TransactionRolledBackError(f"the broker answered the commit with {outcome!r}")
