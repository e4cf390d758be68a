"""Failover between two real RabbitMQ nodes (independent, started here on loopback ports), a
broker nobody here wrote: roundrobin, a PERSISTENT producer and an AUTO consumer on one
connection, through both APIs. The node in use dies by SIGKILL of its Erlang VM; the consumer
resumes on the second node, and the sends blocked by the failover complete there (F2, F3, F5).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import anyio
import pytest
from apikit import Api, Bed, Signal
from failoverkit import TIMEOUT, Recorder, port_of

from chaos.rabbitmq import RabbitMQNode, start_all
from haclient.destination import Queue
from haclient.message import TextMessage
from haclient.modes import AckMode

pytestmark = [pytest.mark.anyio, pytest.mark.rabbitmq]


@pytest.fixture
def two_rabbits(rabbitmq_installed: None) -> Iterator[tuple[RabbitMQNode, RabbitMQNode]]:
    """Two independent nodes for one test (the test kills one), started side by side (each
    takes ~7 s); both stopped, by pid, whatever happened to them."""
    nodes = (RabbitMQNode(), RabbitMQNode())
    try:
        start_all(nodes)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def _kill(node: RabbitMQNode) -> None:
    """SIGKILL the node's VM: sockets reset, nothing said; ``stop()`` cleans up the rest."""
    assert node.vm_pid is not None
    os.kill(node.vm_pid, signal.SIGKILL)


async def test_F5_roundrobin_between_two_rabbitmq_nodes(
    api: Api, two_rabbits: tuple[RabbitMQNode, RabbitMQNode]
) -> None:
    first, second = two_rabbits
    queue = Queue(Bed.unique("rabbit-failover"))
    recorder = Recorder()
    url = (
        f"failover:({first.url},{second.url})"
        "?failover.method=roundrobin&failover.connectdelay=0&failover.cyclecount=100"
    )
    async with await api.connect(url, attach_timeout=10) as connection:
        await connection.add_listener(recorder)
        await connection.start()
        producing = await connection.create_session()
        producer = await producing.create_producer(queue)
        consuming = await connection.create_session(AckMode.AUTO)
        consumer = await consuming.create_consumer(queue)
        for n in range(5):
            await producer.send(TextMessage(f"before {n}"))
        before = [(await consumer.receive(TIMEOUT)).text for _ in range(5)]
        assert before == [f"before {n}" for n in range(5)]

        received: list[str] = []
        blocked_receive_done = Signal()

        async def receive_across_the_kill() -> None:
            while len(received) < 10:
                message = await consumer.receive(TIMEOUT * 3)
                assert message is not None, f"stopped after {received}"
                received.append(message.text)
            blocked_receive_done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(receive_across_the_kill)  # blocked: the queue is empty
            await anyio.sleep(0.2)
            _kill(first)
            for n in range(10):  # the first ones block until the second node is in use
                await producer.send(TextMessage(f"after {n}"))
            with anyio.fail_after(TIMEOUT * 3):
                await blocked_receive_done.wait(TIMEOUT * 3)
        completed = await recorder.wait_for("completed")
    assert [port_of(b) for b in completed] == [second.port]
    assert received == [f"after {n}" for n in range(10)]
