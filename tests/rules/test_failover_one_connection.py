"""Rule F3, one connection per call: everything a call does on the network comes from the
connection the gate admitted it on (``at``), links included. A call admitted before a failover
gets no link of the connection after it (it is run again on the new one, F3), and a link
cached on the old connection is never used on the new one.
"""

from __future__ import annotations

import concurrent.futures
import inspect
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import pytest
from apikit import Api, Bed, Proxy
from failoverkit import TIMEOUT, brokers, failover_url

from haclient import aio
from haclient.aio.gate import Connected, ReplacedError
from haclient.destination import Queue
from haclient.errors import BrowserFailoverError, ConnectionLostError
from haclient.message import TextMessage

pytestmark = pytest.mark.anyio


async def test_F3_a_call_never_uses_a_link_of_a_connection_other_than_its_own() -> None:
    with brokers(2) as (first, second):
        url = failover_url(first, second)
        async with await aio.connect(url) as connection:
            await connection.start()
            session = await connection.create_session()
            producer = await session.create_producer(Queue("one-connection"))
            await producer.send(TextMessage("before"))
            context = connection._context
            before = context.gate.connected_nowait()
            assert before is not None and before.epoch == 0
            old_link = producer._links[Queue("one-connection")]
            assert old_link.engine is before.amqp.engine

            assert context.manager.report_lost(0, ConnectionLostError("cut for the test"))
            await producer.send(TextMessage("after"), timeout=TIMEOUT)  # run on the new one (F3)
            after = context.gate.connected_nowait()
            assert after is not None and after.epoch == 1
            assert after.physical is not before.physical

            # admitted on the old connection: no link of the new one, cached or new
            assert producer._attached_link(before, Queue("one-connection")) is None
            with pytest.raises(ConnectionLostError, match="epoch 0"):
                await producer._link_for(before, Queue("one-connection"))
            assert context.gate.lost(before, ConnectionLostError("replaced"))  # so: run again
            # admitted on the new one: its own link, attached on it
            link = await producer._link_for(after, Queue("one-connection"))
            assert link.engine is after.amqp.engine
            assert link is not old_link


def _core(connection: Proxy, proxy: Proxy) -> Any:
    """The async core object behind ``proxy``: itself (aio), or the object the blocking
    facade's connection keeps on its loop under the facade's handle."""
    target = proxy.target
    if isinstance(target, aio.Connection | aio.Session | aio.MessageConsumer | aio.QueueBrowser):
        return target
    from haclient.sync._served import CONNECTION, Serving

    boundary = connection.target._boundary
    served = Serving.of(boundary.loop_thread, boundary)
    assert served is not None
    handle = CONNECTION if proxy is connection else target._handle
    return served.objects[handle]


async def _on_core(api: Api, connection: Proxy, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on the core's event loop: the test's own (aio), or, for the test only, the
    blocking API's loop thread (the library itself never hands a function to that thread)."""
    if api.name == "aio":
        result = fn(*args)
        return await result if inspect.isawaitable(result) else result
    loop_thread = connection.target._boundary.loop_thread
    loop = loop_thread.loop
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()

    async def run() -> None:
        try:
            result = fn(*args)
            done.set_result(await result if inspect.isawaitable(result) else result)
        except BaseException as exc:
            done.set_exception(exc)

    context = loop_thread._context.copy()  # the loop's own: anyio knows its backend there
    loop.call_soon_threadsafe(lambda: loop.create_task(run(), context=context))
    return await anyio.to_thread.run_sync(done.result, TIMEOUT)


async def test_F3_a_consumer_or_browser_call_never_uses_a_link_of_another_connection(
    api: Api,
) -> None:
    """Admitted on connection N, a consumer's or a browser's call uses no link of N+1 (nor
    attaches one there: ``ReplacedError``, and the gate runs it again) and no link of N-1 (a
    consumer not restored on N has no link there: nothing to receive). Through the blocking
    API too, whose calls are the core's."""
    with brokers(2) as (first, second):
        queue, browsed = Queue(Bed.unique("one-link")), Queue(Bed.unique("one-browse"))
        connection = await api.connect(failover_url(first, second))
        async with connection:
            await connection.start()
            session = await connection.create_session()
            consumer = await session.create_consumer(queue)
            unrestored = await session.create_consumer(Queue(Bed.unique("one-stale")))
            browser = await session.create_browser(browsed)
            producer = await session.create_producer(None)
            context = _core(connection, connection)._context
            core_consumer = _core(connection, consumer)
            core_unrestored = _core(connection, unrestored)
            core_browser = _core(connection, browser)
            before = await _on_core(api, connection, context.gate.connected_nowait)
            assert before is not None and before.epoch == 0
            old_link = core_consumer._receiver
            assert old_link.engine is before.amqp.engine
            assert core_browser._at == before
            # this one keeps its link of epoch 0 (N-1 of the connection after the failover)
            await _on_core(api, connection, context.manager.unregister, core_unrestored)

            cut = ConnectionLostError("cut for the test")
            assert await _on_core(api, connection, context.manager.report_lost, 0, cut)
            await producer.send(queue, TextMessage("after"), timeout=TIMEOUT)  # F3: on the new one
            received = await consumer.receive(TIMEOUT)
            assert received is not None and received.text == "after"
            after = await _on_core(api, connection, context.gate.connected_nowait)
            assert after is not None and after.epoch == 1 and after.physical is not before.physical
            new_link = core_consumer._receiver
            assert new_link is not old_link and new_link.engine is after.amqp.engine

            # admitted on N (epoch 0): no link of N+1, cached or attached, for either
            async def take(at: Connected) -> object:
                return await core_consumer._take_on(at, anyio.current_time() + TIMEOUT)

            async def begin_attach(at: Connected) -> None:
                core_consumer._begin_attach(at)

            with pytest.raises(ReplacedError, match="epoch 0"):
                await _on_core(api, connection, core_consumer._link_on, before)
            with pytest.raises(ReplacedError, match="epoch 0") as replaced:
                await _on_core(api, connection, take, before)
            assert await _on_core(api, connection, context.gate.lost, before, replaced.value)
            with pytest.raises(ReplacedError, match="epoch 0"):
                await _on_core(api, connection, begin_attach, before)
            with pytest.raises(ReplacedError, match="epoch 0"):
                await _on_core(api, connection, core_browser._attach, before)
            with pytest.raises(ReplacedError, match="epoch 0"):
                await _on_core(api, connection, core_consumer._context.session_on, before)
            with pytest.raises(BrowserFailoverError):  # its enumeration was on N (F10)
                await anext(aiter(browser))

            # admitted on N+1 (epoch 1): its own links, never one of N
            assert await _on_core(api, connection, core_consumer._link_on, after) is new_link
            assert await _on_core(api, connection, core_unrestored._link_on, after) is None
            assert await unrestored.receive(0.2) is None
            await producer.send(browsed, TextMessage("browsed"), timeout=TIMEOUT)
            again = await session.create_browser(browsed)
            assert _core(connection, again)._at == after
            assert [m.text async for m in again] == ["browsed"]
