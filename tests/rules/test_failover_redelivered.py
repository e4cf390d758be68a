"""F8's mark on what comes again after a failover, on each broker of the bed: the connection
runs through the embedded Toxiproxy, whose proxy is disabled (every connection through it
closed, as a network fault does) and enabled again; the broker gives the unacknowledged
messages back to its queue and the failed-over session receives them again, marked
redelivered whatever the broker counted (RabbitMQ's requeue, a new master that kept no count).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import anyio
import pytest
from apikit import Api, Bed
from failoverkit import TIMEOUT, Recorder, connected, send_to, text_of

from chaos.toxiproxy import ToxiproxyServer
from chaos.toxiproxy.client import ToxiproxyClient
from haclient.destination import Queue
from haclient.errors import AcknowledgeFailedError
from haclient.modes import AckMode

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def toxiproxy() -> Iterator[ToxiproxyClient]:
    """The embedded Toxiproxy on a free loopback port, for this module."""
    with ToxiproxyServer.running(port=0) as server:
        yield ToxiproxyClient(server.url)


async def test_F8_what_a_lost_connection_held_comes_again_marked_redelivered_on_each_broker(
    api: Api, bed: Bed, toxiproxy: ToxiproxyClient
) -> None:
    queue = bed.unique("f8-mark")
    await send_to(bed.url, queue, "one", "two")
    broker = urlsplit(bed.url)
    name = f"f8-mark-{uuid.uuid4().hex[:8]}"
    proxy = toxiproxy.create_proxy(name, f"{broker.hostname}:{broker.port}")
    try:
        through = broker._replace(
            netloc=broker.netloc.replace(f"{broker.hostname}:{broker.port}", proxy.listen)
        )
        url = f"failover:({urlunsplit(through)})?failover.maxReconnectDelay=100"
        recorder = Recorder()
        async with await connected(api, url, recorder, **bed.options(prefetch=1)) as connection:
            session = await connection.create_session(AckMode.CLIENT)
            consumer = await session.create_consumer(Queue(queue))
            first = await consumer.receive(TIMEOUT)
            assert text_of(first) == "one" and not first.redelivered  # type: ignore[union-attr]
            await anyio.to_thread.run_sync(toxiproxy.disable, name)
            await recorder.wait_for("started")
            await anyio.to_thread.run_sync(toxiproxy.enable, name)
            await recorder.wait_for("completed")
            one = await consumer.receive(TIMEOUT)
            assert one is not None and one.message_id == first.message_id  # type: ignore[union-attr]
            assert one.redelivered and one.delivery_count >= 2
            with pytest.raises(AcknowledgeFailedError):  # F8: the session is recovered
                await api.acknowledge(one)
            bodies = []
            while (message := await consumer.receive(2.0)) is not None:
                bodies.append(text_of(message))
                if len(bodies) == 2:
                    await api.acknowledge(message)
                    break
            assert sorted(bodies) == ["one", "two"]
    finally:
        toxiproxy.delete_proxy(name)
