"""The transaction of a TRANSACTED session, native or emulated, behind one protocol (A4, E3, F7).

How this works: a TRANSACTED session owns one ``SessionTransaction``:

- ``NativeTransaction`` uses the broker's coordinator. The coordinator link is attached when
  the session begins (again after failover). A transaction is declared lazily, by the first send
  or receive that needs its id, so a commit of a session that did nothing costs nothing; the
  broker's answer to the discharge confirms every send and acknowledgement in it.
- ``EmulatedTransaction`` (``jms.transactions=emulate``, for brokers without a coordinator,
  haclient.aio.emulated_transaction) keeps sends in the client until commit.

Rule F7 is kept here and only here: ``connection_lost`` marks a dirty transaction as rolled back
by the failover, and the next ``commit()`` rolls back whatever the session did since (on the new
connection) and raises ``TransactionRolledBackError``. A commit whose discharge was in flight
when the connection ended raises it with ``in_doubt=True``: the broker may have committed.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from haclient.aio.pending import PendingAck
from haclient.aio.stats import Counters
from haclient.amqp.codec import encode_declare, encode_discharge
from haclient.amqp.connection import AmqpConnection
from haclient.amqp.endpoints import Sender, Session
from haclient.amqp.types import (
    ACCEPTED,
    Accepted,
    Declared,
    Rejected,
    Terminus,
    TransactionalState,
)
from haclient.errors import (
    AMQPError,
    ConnectionLostError,
    HAClientError,
    NotImplementedByBrokerError,
    TransactionRolledBackError,
)

__all__ = ["BufferedSend", "GiveBack", "NativeTransaction", "SessionTransaction"]

GiveBack = Callable[[list[PendingAck]], Awaitable[None]]
"""Returns received messages to the broker for redelivery (and the prefetched ones behind)."""

Consumed = Callable[[list[PendingAck]], None]
"""Counts received messages as consumed (their duplicates are suppressed from then on)."""


@dataclass(slots=True)
class BufferedSend:
    """One send held until commit: ``transmit`` sends it and waits for the broker's accept;
    ``completed`` (an async send's callback) hears how it ended."""

    transmit: Callable[[], Awaitable[None]]
    completed: Callable[[BaseException | None], None] | None = None


class SessionTransaction(ABC):
    """What a TRANSACTED session does with its transaction, native or emulated."""

    emulated: bool = False
    """True when the client emulates the transaction (E3): a commit is not atomic."""
    holds_sends: bool = False
    """True when sends wait in the client until commit (give them to ``buffer``); False when
    each goes to the broker at once, in the transaction (``enlist_send``)."""

    def __init__(self, give_back: GiveBack, consumed: Consumed, *, counters: Counters) -> None:
        self._give_back = give_back
        self._consumed = consumed
        self._receipts: list[PendingAck] = []  # received in the open transaction
        self._rolled_back_by_failover = False  # F7: the open transaction died with a connection
        self.counters = counters  # the connection's: how transactions ended

    @property
    @abstractmethod
    def dirty(self) -> bool:
        """True when anything was sent or received in the open transaction."""

    @abstractmethod
    async def begin(self, amqp: AmqpConnection, session: Session, *, timeout: float) -> None:
        """Get ready on a (new) connection's session."""

    @abstractmethod
    async def enlist_send(self) -> TransactionalState | None:
        """The state that puts a transfer in the transaction (None: not sent now, emulated)."""

    def buffer(self, send: BufferedSend) -> None:
        """Hold ``send`` until commit; only for a transaction that ``holds_sends``."""
        raise NotImplementedError("this transaction's sends go to the broker at once")

    async def enlist_receipt(self, pending: PendingAck) -> None:
        """Make a received message's acknowledgement part of the transaction."""
        await self._enlist_receipt(pending)
        self._receipts.append(pending)

    @abstractmethod
    async def _enlist_receipt(self, pending: PendingAck) -> None: ...

    def cut_off(self) -> None:
        """Something the session did in the open transaction was cut off by the loss of its
        connection (and is not done again): the next ``commit()`` must roll back (F7), however
        the loss and the restore were ordered against this call."""
        self._rolled_back_by_failover = True

    def connection_lost(self, cause: BaseException) -> None:
        """The connection ended: a dirty transaction is gone with it (F7)."""
        if self.dirty:
            self._rolled_back_by_failover = True
        self._receipts.clear()
        self._forget(cause)

    @abstractmethod
    def _forget(self, cause: BaseException) -> None:
        """Drop what the dead connection held of the open transaction."""

    async def commit(self) -> None:
        """Commit; raise ``TransactionRolledBackError`` if a failover rolled it back (F7). No
        return to a preferred broker starts while it runs (F16): it would put it in doubt.

        Raises:
            TransactionRolledBackError: rolled back by a failover, or by the broker;
                ``in_doubt=True`` when the connection ended with the commit in flight.
        """
        self.counters.commits_in_flight += 1
        try:
            await self._commit_or_roll_back()
        finally:
            self.counters.commits_in_flight -= 1

    async def _commit_or_roll_back(self) -> None:
        if self._rolled_back_by_failover:
            self._rolled_back_by_failover = False
            self._receipts.clear()
            await self._roll_back()  # what the session did since the failover goes too
            self.counters.rolled_back_by_failover += 1
            raise TransactionRolledBackError(
                "the connection failed over during the transaction, which was rolled back: "
                "replay it"
            )
        receipts, self._receipts = self._receipts, []
        try:
            await self._commit()
        except TransactionRolledBackError as exc:
            if exc.in_doubt:  # it may have committed: its messages count as consumed
                self._consumed(receipts)
            raise
        self._consumed(receipts)
        self.counters.committed += 1

    async def rollback(self) -> None:
        """Roll back: sends are dropped, received messages come back (redelivered)."""
        self._rolled_back_by_failover = False
        self._receipts.clear()
        await self._roll_back()
        self.counters.rolled_back += 1

    @abstractmethod
    async def _commit(self) -> None: ...

    @abstractmethod
    async def _roll_back(self) -> None: ...

    @abstractmethod
    async def close(self) -> None:
        """The session closes: roll the open transaction back."""


class NativeTransaction(SessionTransaction):
    """Transactions over the broker's coordinator link."""

    def __init__(
        self, give_back: GiveBack, consumed: Consumed, link_name: str, *, counters: Counters
    ) -> None:
        super().__init__(give_back, consumed, counters=counters)
        self._link_name = link_name
        self._amqp: AmqpConnection | None = None
        self._coordinator: Sender | None = None
        self._txn_id: bytes | None = None
        self._dirty = False

    @property
    def dirty(self) -> bool:
        return self._dirty or self._txn_id is not None

    async def begin(self, amqp: AmqpConnection, session: Session, *, timeout: float) -> None:
        """Attach the coordinator link.

        Raises:
            NotImplementedByBrokerError: the broker has no transaction coordinator (the
                message names ``jms.transactions=emulate``).
        """
        try:
            self._coordinator = await amqp.open_sender(
                Terminus.coordinator(),
                session=session,
                name=self._link_name,
                source=Terminus(outcomes=("amqp:accepted:list", "amqp:rejected:list")),
                timeout=timeout,
            )
        except NotImplementedByBrokerError as exc:
            raise _no_transactions(exc) from exc
        self._amqp = amqp
        self._txn_id, self._dirty = None, False

    def _forget(self, cause: BaseException) -> None:
        self._txn_id, self._dirty = None, False

    async def enlist_send(self) -> TransactionalState:
        """Declare the transaction if none is open yet."""
        amqp, coordinator = self._link()
        self._dirty = True  # before the declare: a loss during it must still fail the commit
        if self._txn_id is None:
            outcome = await amqp.send(coordinator, encode_declare())
            if not isinstance(outcome, Declared):
                raise AMQPError(f"the broker did not declare a transaction: {outcome!r}")
            self._txn_id = outcome.txn_id
        return TransactionalState(self._txn_id)

    async def _enlist_receipt(self, pending: PendingAck) -> None:
        state = await self.enlist_send()
        amqp, _ = self._link()
        amqp.settle(pending.raw, TransactionalState(state.txn_id, ACCEPTED))

    async def _commit(self) -> None:
        await self._discharge(fail=False)

    async def _roll_back(self) -> None:
        await self._discharge(fail=True)
        await self._give_back([])  # the prefetched messages, so they come back in order

    async def close(self) -> None:
        await self._discharge(fail=True)

    def _link(self) -> tuple[AmqpConnection, Sender]:
        assert self._amqp is not None and self._coordinator is not None, "begin() first"
        return self._amqp, self._coordinator

    async def _discharge(self, *, fail: bool) -> None:
        """End the open transaction (commit unless ``fail``); nothing to do if none is open.

        Raises:
            TransactionRolledBackError: the broker refused the commit (rolled back), or the
                connection ended before it answered (``in_doubt=True``).
        """
        txn_id, self._txn_id, self._dirty = self._txn_id, None, False
        if txn_id is None:
            return
        amqp, coordinator = self._link()
        try:
            outcome = await amqp.send(coordinator, encode_discharge(txn_id, fail=fail))
        except (ConnectionLostError, HAClientError) as exc:
            if fail:
                raise
            self.counters.in_doubt += 1
            raise TransactionRolledBackError(
                "the connection ended while the commit was in flight: the broker may or may not "
                "have committed the transaction",
                in_doubt=True,
            ) from exc
        if fail:
            return
        if isinstance(outcome, Rejected):
            reason = outcome.error.description if outcome.error else None
            self.counters.rolled_back += 1
            raise TransactionRolledBackError(
                f"the broker rolled the transaction back: {reason or 'no reason given'}"
            )
        if not isinstance(outcome, Accepted):
            self.counters.rolled_back += 1
            raise TransactionRolledBackError(f"the broker answered the commit with {outcome!r}")


def _no_transactions(exc: NotImplementedByBrokerError) -> NotImplementedByBrokerError:
    """The broker's refusal of a coordinator, with the way out (E3)."""
    return NotImplementedByBrokerError(
        f"the broker does not implement transactions ({exc}): connect with "
        "jms.transactions=emulate (transactions='emulate') to have haclient emulate them",
        feature="transactions",
        condition=exc.condition,
        description=exc.description,
        info=exc.info,
    )
