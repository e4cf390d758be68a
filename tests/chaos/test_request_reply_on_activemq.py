"""Found on a real ActiveMQ: a reply to a temporary queue that the
requester's failover took away is rejected by ActiveMQ with its catch-all condition ``failed``.
The reference broker's ActiveMQ mode rejects it the same way; the request/reply workload's
server meets it as ``InvalidDestinationError``, which the audit counts as the requester's
failover (F6), not as a broken promise."""

from __future__ import annotations

import threading

import anyio
import pytest

import haclient.aio as aio
from chaos.audit import Ledger, audit
from chaos.broker import BrokerThread
from chaos.scenarios.workloads import WorkloadContext, serve
from haclient import Queue, TextMessage

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_item19_a_reply_to_a_vanished_temporary_queue_breaks_no_promise() -> None:
    stream = "request_reply-item19"
    with BrokerThread(mode="activemq") as broker:
        context = WorkloadContext(broker.url, stream, Ledger(), threading.Event(), drain=1.0)
        async with await aio.connect(broker.url) as requester:
            session = await requester.create_session()
            request = TextMessage("question 1")
            request.reply_to = await session.create_temporary_queue()
            await (await session.create_producer(Queue(stream))).send(request)
        # The requester's connection, and its temporary queue with it, is gone (as when its
        # failover replaced them) before the server answers.
        asked = [str(request.message_id)]
        context.record("sent", "requester", "AUTO", ids=asked)
        context.record("accepted", "requester", "AUTO", ids=asked, duration=0.01)
        context.expected.update(asked)
        context.stop.set()
        context.producer_done = True
        with anyio.fail_after(30):
            await serve(context)
    events = context.ledger.snapshot()
    errors = [(e.call, e.error) for e in events if e.kind == "error"]
    assert errors == [("reply", "InvalidDestinationError")]
    result = audit(events)
    assert result.ok, result.by_promise()
