"""The persistence interface: what the broker core tells a store, and what it reloads."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager

import anyio
import pytest
from brokerkit import (
    TIMEOUT,
    body_of,
    connect,
    coordinator,
    count_of,
    declare,
    message,
    receive,
    receiver,
    sender,
    sync,
)

from chaos.broker import Broker, Persistence, RecoveredMessage, StoredRef
from haclient.amqp.codec import encode_discharge
from haclient.amqp.types import Accepted, Modified, TransactionalState

pytestmark = pytest.mark.anyio


class RecordingPersistence:
    """Keeps durable messages in a dict and logs every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.kept: dict[tuple[str, int], StoredRef] = {}
        self.nodes: dict[str, str] = {}
        self.batches = 0

    def enqueued(self, ref: StoredRef) -> None:
        self.calls.append(("enqueued", ref.queue, ref.delivery_count))
        self.kept[ref.queue, ref.message_id] = ref

    def removed(self, ref: StoredRef) -> None:
        self.calls.append(("removed", ref.queue, ref.delivery_count))
        self.kept.pop((ref.queue, ref.message_id), None)

    def delivery_count_changed(self, ref: StoredRef) -> None:
        self.calls.append(("count", ref.queue, ref.delivery_count))
        self.kept[ref.queue, ref.message_id] = ref

    def committed(self, enqueued: Sequence[StoredRef], removed: Sequence[StoredRef]) -> None:
        self.calls.append(("committed", f"{len(enqueued)}+/{len(removed)}-", 0))
        for ref in enqueued:
            self.kept[ref.queue, ref.message_id] = ref
        for ref in removed:
            self.kept.pop((ref.queue, ref.message_id), None)

    def queue_deleted(self, queue: str) -> None:
        self.calls.append(("deleted", queue, 0))

    def node_created(self, name: str, kind: str) -> None:
        self.nodes[name] = kind

    def node_deleted(self, name: str) -> None:
        self.nodes.pop(name, None)

    def recovered_nodes(self) -> Iterable[tuple[str, str]]:
        return list(self.nodes.items())

    def recover(self) -> Iterable[RecoveredMessage]:
        refs = sorted(self.kept.values(), key=lambda ref: ref.message_id)
        self.kept.clear()
        return [RecoveredMessage(ref.queue, ref.payload, ref.delivery_count) for ref in refs]

    def batch(self) -> AbstractContextManager[None]:
        self.batches += 1
        return contextlib.nullcontext()

    def close(self) -> None:
        self.calls.append(("close", "", 0))


def test_recording_persistence_satisfies_the_protocol() -> None:
    assert isinstance(RecordingPersistence(), Persistence)


async def test_only_durable_messages_are_recorded_and_survive_kill() -> None:
    store = RecordingPersistence()
    async with Broker(persistence=store) as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                out = await sender(conn, "q")
                await conn.send(out, message("transient"))
                await conn.send(out, message("durable", durable=True))
                link = await receiver(conn, "q", credit=1)
                conn.settle(await receive(conn, link), Accepted())  # the transient one
                conn.flow(link, 1)
                conn.settle(await receive(conn, link), Modified(delivery_failed=True))
                await sync(conn)
            assert store.calls == [("enqueued", "q", 0), ("count", "q", 1)]
            assert store.batches > 0
            await broker.kill()
            await broker.start()
            assert broker.queue_depth("q") == 1
            async with connect(broker) as conn:
                again = await receive(conn, await receiver(conn, "q"))
                assert body_of(again) == "durable" and count_of(again) == 1


async def test_committed_transaction_is_recorded_in_one_call() -> None:
    store = RecordingPersistence()
    async with Broker(persistence=store) as broker:
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                out = await sender(conn, "q")
                await conn.send(out, message("old", durable=True))
                coord = await coordinator(conn)
                txn_id = await declare(conn, coord)
                state = TransactionalState(txn_id)
                await conn.send(out, message("new", durable=True), state=state)
                link = await receiver(conn, "q", credit=1)
                conn.settle(await receive(conn, link), TransactionalState(txn_id, Accepted()))
                await conn.send(coord, encode_discharge(txn_id, fail=False))
            assert store.calls == [("enqueued", "q", 0), ("committed", "1+/1-", 0)]
            assert [ref.payload for ref in store.kept.values()] == [message("new", durable=True)]


async def test_persistence_is_closed_at_every_stop_and_a_factory_called_at_every_start() -> None:
    stores: list[RecordingPersistence] = []

    def factory() -> RecordingPersistence:
        stores.append(RecordingPersistence())
        return stores[-1]

    async with Broker(persistence=factory) as broker:
        await broker.restart(graceful=True)
    assert len(stores) == 2
    assert all(store.calls == [("close", "", 0)] for store in stores)
