"""``async with aio.connect(...)``: the connection's background tasks belong to the caller's
``async with`` block (structured), on asyncio and on trio; ``await aio.connect(...)`` keeps
working as before (hosted), and so does ``async with await aio.connect(...)``."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import pytest

import haclient.aio as aio
from chaos.broker import BrokerThread
from haclient.destination import Queue
from haclient.errors import ClosedError, ConnectionFailedError
from haclient.message import TextMessage

pytestmark = pytest.mark.anyio

HANG = 10.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    with BrokerThread() as thread:
        yield thread


def descendants_of(task_id: int) -> list[anyio.TaskInfo]:
    """The running tasks below ``task_id`` (children, their children ...)."""
    tasks = anyio.get_running_tasks()
    found: list[anyio.TaskInfo] = []
    parents = {task_id}
    while True:
        more = [t for t in tasks if t.parent_id in parents and t not in found]
        if not more:
            return found
        found.extend(more)
        parents |= {t.id for t in more}


async def test_the_connection_tasks_belong_to_the_async_with_block(broker: BrokerThread) -> None:
    me = anyio.get_current_task().id
    assert descendants_of(me) == []
    with anyio.fail_after(HANG):
        async with aio.connect(broker.url) as connection:
            assert isinstance(connection, aio.Connection)
            assert descendants_of(me)  # the pumps and the failover manager run below us
            session = await connection.create_session()
            producer = await session.create_producer(Queue("structured"))
            await producer.send(TextMessage("owned"))
        assert connection.is_closed
        assert descendants_of(me) == []  # none outlives the block
    assert broker.queue_depth("structured") >= 1


async def test_an_error_in_the_block_passes_through_unchanged(broker: BrokerThread) -> None:
    with anyio.fail_after(HANG), pytest.raises(KeyError, match="mine"):
        async with aio.connect(broker.url) as connection:
            raise KeyError("mine")  # not wrapped in an ExceptionGroup
    assert connection.is_closed


async def test_close_inside_the_block_ends_the_tasks_and_the_block_goes_on(
    broker: BrokerThread,
) -> None:
    me = anyio.get_current_task().id
    with anyio.fail_after(HANG):
        async with aio.connect(broker.url) as connection:
            await connection.close()
            assert descendants_of(me) == []
            with pytest.raises(ClosedError):
                await connection.create_session()
            await anyio.sleep(0)  # the block is not cancelled by the close


async def test_a_failed_open_raises_its_own_error_and_leaves_no_task() -> None:
    me = anyio.get_current_task().id
    url = "amqp://127.0.0.1:1?failover.method=nofailover"
    with anyio.fail_after(HANG), pytest.raises(ConnectionFailedError):
        async with aio.connect(url):
            pytest.fail("opened a connection to a closed port")
    assert descendants_of(me) == []


async def test_await_connect_is_hosted_and_async_with_await_still_works(
    broker: BrokerThread,
) -> None:
    me = anyio.get_current_task().id
    with anyio.fail_after(HANG):
        connection = await aio.connect(broker.url)
        assert descendants_of(me) == []  # hosted by a task of its own, as documented
        async with connection:
            await connection.create_session()
        assert connection.is_closed
        async with await aio.connect(broker.url) as again:
            await again.create_session()
        assert again.is_closed


async def test_a_factory_connection_can_be_entered_too(broker: BrokerThread) -> None:
    factory = aio.ConnectionFactory(broker.url)
    with anyio.fail_after(HANG):
        async with factory.create_connection(client_id="structured-factory") as connection:
            assert connection.client_id == "structured-factory"
        assert connection.is_closed
