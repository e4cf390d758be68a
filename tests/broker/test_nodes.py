"""Nodes: temporary (dynamic) destinations and the admin/inspection API."""

from __future__ import annotations

import anyio
import pytest
from brokerkit import TIMEOUT, body_of, connect, message, receive, receiver, sender, sync

from chaos.broker import TEMPORARY_PREFIX, Broker
from haclient.amqp.types import Accepted, Rejected, Terminus
from haclient.errors import InvalidDestinationError

pytestmark = pytest.mark.anyio


async def test_dynamic_queue_lives_until_its_creating_connection_closes(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "other") as other:
            async with connect(broker, "owner") as owner:
                dynamic = Terminus(dynamic=True, capabilities=("temporary-queue",))
                link = await receiver(owner, dynamic)
                address = link.remote_source.address
                assert address is not None and address.startswith(TEMPORARY_PREFIX)
                assert link.remote_source.capabilities == ("temporary-queue",)
                assert broker.node_info(address).temporary
                out = await sender(other, address)
                assert await other.send(out, message("reply")) == Accepted()
                assert body_of(await receive(owner, link)) == "reply"
            await sync(other)  # the owner's close has been handled
            assert broker.nodes() == []
            outcome = await other.send(out, message("too late"))
            assert isinstance(outcome, Rejected) and outcome.error is not None
            assert outcome.error.name == "amqp:not-found"
            with pytest.raises(InvalidDestinationError):
                await sender(other, address)


async def test_dynamic_target_creates_temporary_topic(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker) as conn:
            out = await sender(conn, Terminus(dynamic=True, capabilities=("temporary-topic",)))
            address = out.remote_target.address
            assert address is not None and out.remote_target.capabilities == ("temporary-topic",)
            sub = await receiver(conn, address)
            await conn.send(out, message("event"))
            assert body_of(await receive(conn, sub)) == "event"
            assert broker.node_info(address).kind == "topic"


async def test_admin_reports_and_changes_broker_state(broker: Broker) -> None:
    with anyio.fail_after(TIMEOUT):
        async with connect(broker, "admin-client") as conn:
            out = await sender(conn, "queue://work")
            for index in range(3):
                await conn.send(out, message(index))
            link = await receiver(conn, "work", credit=1)
            await receive(conn, link)
            info = broker.node_info("work")
            assert (info.depth, info.unacked, info.consumers) == (2, 1, 1)
            assert broker.connections() == ["admin-client"]
            assert broker.purge("work") == 2
            assert broker.queue_depth("work") == 0
            assert broker.delete_node("work")
            with pytest.raises(KeyError):
                broker.queue_depth("work")
            with pytest.raises(InvalidDestinationError, match="resource-deleted"):
                await conn.receive(link, timeout=TIMEOUT)  # the delete closed the consumer
            assert link.remote_error is not None
            assert link.remote_error.name == "amqp:resource-deleted"
