"""Defects the chaos matrix found in haclient, reduced to deterministic reproductions, and kept
as regression tests now that they are fixed:

- F7: a transacted send cut off by a kill during its declare was dropped and the next commit
  succeeded without it (the transaction was marked dirty only after the declare returned).
- A1/F9: an AUTO acknowledgement the broker applied, whose answer a blackhole cut off, made the
  message reach the application neither before nor after the failover (now it is handed out
  once, flagged ``ack_in_doubt``, and the duplicate window keeps its copy away).

Two more, whose reproductions need only one broker, live with their rules:

- F6: a consumer of a temporary queue, asked for while failover ran, attached to the node the
  old broker had (``tests/rules/test_failover_rules.py``, ``test_F6_a_reader_asked_for_...``).
- C1: a connection left by a cancelled task went on failing over by itself
  (``tests/rules/test_closing.py``, ``test_C1_a_connection_left_by_a_cancelled_task_...``).
"""

from __future__ import annotations

import threading

import anyio
import pytest

import haclient.aio as aio
from chaos.bed import Bed
from haclient import AckMode, Queue, TextMessage
from haclient.errors import TransactionRolledBackError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def test_F7_a_send_cut_off_by_a_kill_right_after_a_commit_is_not_silently_lost() -> None:
    with Bed(ha=True) as bed:
        async with await aio.connect(bed.url(), idle_timeout=0.5) as connection:
            session = await connection.create_session(AckMode.TRANSACTED)
            producer = await session.create_producer(Queue("f7-cut"))
            await producer.send(TextMessage("before"))
            await session.commit()
            killer = threading.Thread(target=bed.kill)
            killer.start()  # the next send's declare goes out as the master dies
            sent = []
            for n in range(3):
                message = TextMessage(f"after {n}")
                await producer.send(message)
                sent.append(message.text)
            try:
                await session.commit()
                committed = sent
            except TransactionRolledBackError:  # F7: said so, nothing of it applied
                committed = []
            await anyio.to_thread.run_sync(killer.join)
            await connection.start()
            consumer = await (await connection.create_session()).create_consumer(Queue("f7-cut"))
            received = []
            while (message := await consumer.receive(timeout=2)) is not None:
                received.append(message.text)
    assert sorted(received) == sorted(["before", *committed])


async def test_A1_F9_an_auto_message_whose_ack_answer_is_blackholed_is_not_lost() -> None:
    with Bed(ha=True) as bed:
        async with await aio.connect(bed.url()) as producer_connection:
            session = await producer_connection.create_session()
            await (await session.create_producer(Queue("a1-cut"))).send(TextMessage("m"))
        async with await aio.connect(bed.url(), idle_timeout=0.5) as connection:
            await connection.start()
            session = await connection.create_session(AckMode.AUTO)
            consumer = await session.create_consumer(Queue("a1-cut"))
            await anyio.sleep(0.5)  # the message is prefetched
            proxy = bed.master().proxy
            # The broker still hears the acknowledgement; its answer is held.
            await anyio.to_thread.run_sync(
                lambda: bed.proxies.add_toxic(proxy, "timeout", timeout=0)
            )
            received = []
            async with anyio.create_task_group() as tg:

                async def heal() -> None:
                    await anyio.sleep(2.0)  # the client's idle timeout found the silence
                    await anyio.to_thread.run_sync(bed.proxies.reset)

                tg.start_soon(heal)
                while (message := await consumer.receive(timeout=6)) is not None:
                    received.append(message.text)
    assert received == ["m"]
