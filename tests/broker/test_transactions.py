"""Transaction conformance: the coordinator, transactional sends and acknowledgements."""

from __future__ import annotations

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

from chaos.broker import Broker
from haclient.amqp.codec import encode_discharge
from haclient.amqp.types import Accepted, ErrorCondition, Rejected, TransactionalState

pytestmark = pytest.mark.anyio


async def test_coordinator_is_offered_and_declare_answers_declared(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            assert "amqp:local-transactions" in conn.engine.remote_offered_capabilities
            txn_id = await declare(conn, await coordinator(conn))
            assert broker.open_transactions() == [txn_id]


async def test_transactional_send_is_visible_only_after_commit(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            coord = await coordinator(conn)
            txn_id = await declare(conn, coord)
            out = await sender(conn, "q")
            outcome = await conn.send(out, message("x"), state=TransactionalState(txn_id))
            assert outcome == TransactionalState(txn_id, Accepted())
            assert broker.queue_depth("q") == 0
            assert await conn.send(coord, encode_discharge(txn_id, fail=False)) == Accepted()
            assert broker.queue_depth("q") == 1
            assert broker.open_transactions() == []


async def test_transactional_send_rolled_back_is_discarded(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            coord = await coordinator(conn)
            txn_id = await declare(conn, coord)
            out = await sender(conn, "q")
            await conn.send(out, message("x"), state=TransactionalState(txn_id))
            assert await conn.send(coord, encode_discharge(txn_id, fail=True)) == Accepted()
            assert broker.queue_depth("q") == 0


async def test_transactional_acknowledge_removes_message_only_at_commit(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await conn.send(await sender(conn, "q"), message("x"))
            coord = await coordinator(conn)
            txn_id = await declare(conn, coord)
            link = await receiver(conn, "q")
            conn.settle(await receive(conn, link), TransactionalState(txn_id, Accepted()))
            await sync(conn)
            assert broker.unacked_count("q") == 1  # still held by the transaction
            await conn.send(coord, encode_discharge(txn_id, fail=False))
            assert broker.unacked_count("q") == 0 and broker.queue_depth("q") == 0


async def test_transactional_acknowledge_rolled_back_returns_with_count_plus_one(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            await conn.send(await sender(conn, "q"), message("x"))
            coord = await coordinator(conn)
            txn_id = await declare(conn, coord)
            link = await receiver(conn, "q", credit=1)
            conn.settle(await receive(conn, link), TransactionalState(txn_id, Accepted()))
            await conn.send(coord, encode_discharge(txn_id, fail=True))
            conn.flow(link, 1)
            again = await receive(conn, link)
            assert body_of(again) == "x" and count_of(again) == 1


async def test_discharge_of_unknown_transaction_is_rejected_with_unknown_id(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            coord = await coordinator(conn)
            outcome = await conn.send(coord, encode_discharge(b"no-such-txn", fail=False))
            assert outcome == Rejected(
                ErrorCondition("amqp:transaction:unknown-id", "no transaction b'no-such-txn'")
            )


async def test_transactional_send_with_unknown_id_is_rejected(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            out = await sender(conn, "q")
            outcome = await conn.send(out, message("x"), state=TransactionalState(b"bogus"))
            assert isinstance(outcome, Rejected) and outcome.error is not None
            assert outcome.error.name == "amqp:transaction:unknown-id"
            assert broker.queue_depth("q") == 0


async def test_open_transaction_is_rolled_back_when_its_connection_is_lost(
    broker: Broker,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "survivor") as conn:
            await conn.send(await sender(conn, "q"), message("x"))
            async with connect(broker, "doomed") as doomed:
                txn_id = await declare(doomed, await coordinator(doomed))
                out = await sender(doomed, "q")
                await doomed.send(out, message("never"), state=TransactionalState(txn_id))
                link = await receiver(doomed, "q")
                doomed.settle(await receive(doomed, link), TransactionalState(txn_id, Accepted()))
                await sync(doomed)
                doomed.engine.abort(ErrorCondition("test:crash", "the client dies"))
                assert doomed.driver is not None
                doomed.driver.wakeup()
                await doomed.wait_closed()
            link = await receiver(conn, "q")
            again = await receive(conn, link)
            assert body_of(again) == "x" and count_of(again) == 1
            assert broker.open_transactions() == []
            assert conn.receive_nowait(link) is None  # the uncommitted send never appeared
