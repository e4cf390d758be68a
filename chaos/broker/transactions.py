"""Local transactions: the coordinator's declare and discharge, and the work they enclose.

How this works: a transaction collects transactional sends (message and destination node) and
transactional outcomes of deliveries (queue, message, outcome, consumer). Nothing of it is visible
until commit: sent messages are not in any queue, and acknowledged ones stay unacked. Commit
records the durable changes in one ``Persistence.committed`` call, then routes the sends and
applies the outcomes; rollback drops the sends and returns the acknowledged messages to the front
of their queues with delivery-count + 1. A transaction whose connection dies is rolled back.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from chaos.broker.nodes import Node, Queue, StoredMessage
from chaos.broker.persistence import StoredRef
from chaos.broker.router import Router
from haclient.amqp.types import Accepted, Modified, Rejected, Released

__all__ = ["Transaction", "TransactionManager", "TxnOutcome"]

TxnOutcome = Accepted | Released | Modified | Rejected


@dataclass(eq=False)
class Transaction:
    """One declared, not yet discharged transaction."""

    txn_id: bytes
    owner: int
    sends: list[tuple[Node, StoredMessage]] = field(default_factory=list)
    outcomes: list[tuple[Queue, StoredMessage, TxnOutcome, int]] = field(default_factory=list)


class TransactionManager:
    """The broker's open transactions, by id."""

    def __init__(self, router: Router) -> None:
        self._router = router
        self._open: dict[bytes, Transaction] = {}
        self._ids = itertools.count(1)

    def declare(self, owner: int) -> Transaction:
        """Begin a transaction for connection ``owner``."""
        txn = Transaction(f"txn:{next(self._ids)}".encode(), owner)
        self._open[txn.txn_id] = txn
        return txn

    def get(self, txn_id: bytes) -> Transaction | None:
        """The open transaction ``txn_id``, or None."""
        return self._open.get(txn_id)

    @property
    def open_ids(self) -> list[bytes]:
        """Ids of the transactions not yet discharged."""
        return list(self._open)

    def discharge(self, txn_id: bytes, *, fail: bool) -> bool:
        """Commit (or roll back, when ``fail``) transaction ``txn_id``; False if it is unknown."""
        txn = self._open.pop(txn_id, None)
        if txn is None:
            return False
        if fail:
            self._rollback(txn)
        else:
            self._commit(txn)
        return True

    def rollback_owned(self, owner: int) -> int:
        """Roll back every transaction of connection ``owner``; return how many."""
        owned = [txn for txn in self._open.values() if txn.owner == owner]
        for txn in owned:
            del self._open[txn.txn_id]
            self._rollback(txn)
        return len(owned)

    def _commit(self, txn: Transaction) -> None:
        enqueued: list[StoredRef] = []
        removed: list[StoredRef] = []
        for node, message in txn.sends:
            if isinstance(node, Queue) and node.persistent and message.durable:
                enqueued.append(node.ref(message))
        for queue, message, outcome, _consumer in txn.outcomes:
            if isinstance(outcome, Accepted) and queue.persistent and message.durable:
                removed.append(queue.ref(message))
        if enqueued or removed:
            self._router.persistence.committed(enqueued, removed)
        for node, message in txn.sends:
            if isinstance(node, Queue):
                node.enqueue(message, record=False)
            else:
                node.publish(message)
        for queue, message, outcome, consumer in txn.outcomes:
            if isinstance(outcome, Accepted):
                queue.acknowledge(message, record=False)
            elif isinstance(outcome, Released):
                queue.return_messages((message,), failed=False)
            elif isinstance(outcome, Modified):
                queue.modify(
                    message,
                    consumer,
                    failed=outcome.delivery_failed,
                    here=outcome.undeliverable_here,
                )
            else:
                queue.reject(message)

    def _rollback(self, txn: Transaction) -> None:
        by_queue: dict[Queue, list[StoredMessage]] = {}
        for queue, message, _outcome, _consumer in txn.outcomes:
            by_queue.setdefault(queue, []).append(message)
        for queue, messages in by_queue.items():
            queue.return_messages(messages, failed=True)
