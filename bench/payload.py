"""What a message costs RabbitMQ, by its size and sections (why pipelined send there is bound
by the broker).

On one private RabbitMQ node, send ``--count`` pre-encoded messages pipelined (unsettled, every
outcome awaited) through haclient's engine for each payload: bare text bodies of growing length,
and the JMS message ``MessageProducer.send`` writes for bench.jms's 32-character body (message
annotations, message id, ``to``, creation time). Report msgs/s, this process's CPU per message
and RabbitMQ's, medians over ``--rounds``. The client's work is the same for every payload (one
``send_nowait`` of ready bytes), so the differences are the broker's. Checks: every message
accepted, and the queue holds exactly ``--count`` messages afterwards.

    .venv/bin/python -m bench.payload                # 20,000 messages, 3 rounds
    .venv/bin/python -m bench.payload --count 5000 --rounds 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Sequence

import anyio

from bench.jms import Clock
from chaos.rabbitmq import RabbitMQNode
from haclient.amqp import Accepted, ClientAuth, EngineConfig
from haclient.amqp.codec import AmqpMessage, encode_message
from haclient.amqp.connection import open_connection
from haclient.destination import NO_PREFIXES, Queue
from haclient.message import DeliveryMode, MessageIdGenerator, TextMessage
from haclient.outgoing import OutgoingEncoder

BARE_LENGTHS = (32, 50, 55, 60, 70, 100)
JMS_BODY = "m-00000001-" + "x" * 21  # bench.jms's 32-character bodies


def payloads() -> dict[str, bytes]:
    """The payloads measured: bare amqp-value text bodies, then a JMS text message."""
    out = {f"bare, {n}-char body": encode_message(AmqpMessage(body="x" * n)) for n in BARE_LENGTHS}
    message = TextMessage(JMS_BODY, delivery_mode=DeliveryMode.NON_PERSISTENT)
    message.destination = Queue("bench-payload")
    message.message_id = MessageIdGenerator()()
    message.timestamp = message.delivery_time = time.time()
    out["JMS, 32-char body"] = OutgoingEncoder().encode(message, NO_PREFIXES)
    return out


async def send_all(port: int, pid: int | None, payload: bytes, count: int) -> Clock:
    """Send ``payload`` ``count`` times to a new queue, all unsettled; time until every one
    was accepted."""
    auth = ClientAuth("guest", "guest", allow_insecure=True)
    config = EngineConfig(container_id=f"bench-{uuid.uuid4()}", auth=auth)
    address = f"/queue/payload-{uuid.uuid4().hex[:8]}"
    async with open_connection("127.0.0.1", port, config) as conn:
        session = await conn.open_session()
        sender = await conn.open_sender(address, session=session)
        clock = Clock(pid)
        clock.start()
        deliveries = []
        for _ in range(count):
            await conn.wait_for_credit(sender)
            deliveries.append(conn.send_nowait(sender, payload))
        outcomes = [await conn.wait_settled(d) for d in deliveries]
        clock.stop()
        refused = sum(1 for o in outcomes if o != Accepted())
        if refused:
            raise SystemExit(f"bench.payload: {refused} of {count} messages not accepted")
        receiver = await conn.open_receiver(address, session=session, credit=count + 1)
        held = 0
        while await conn.receive(receiver, timeout=2.0) is not None:
            held += 1
        if held != count:
            raise SystemExit(f"bench.payload: the queue held {held} messages, not {count}")
    return clock


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.payload", description=__doc__)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if args.count < 1 or args.rounds < 1:
        parser.error("--count and --rounds must be at least 1")
    clocks: dict[str, list[Clock]] = {name: [] for name in payloads()}
    with RabbitMQNode() as node:
        for round_number in range(1, args.rounds + 1):
            for name, payload in payloads().items():
                clock = anyio.run(send_all, node.port, node.vm_pid, payload, args.count)
                clocks[name].append(clock)
                print(
                    f"round {round_number} {name}: {args.count / clock.wall:,.0f} msgs/s",
                    file=sys.stderr,
                    flush=True,
                )
    print(f"{args.count} messages pipelined per payload, {args.rounds} round(s), medians")
    print(f"{'payload':<22} {'bytes':>5} {'msgs/s':>8} {'client CPU':>11} {'broker CPU':>11}")
    sizes = {name: len(payload) for name, payload in payloads().items()}
    for name, runs in clocks.items():
        rate = statistics.median(args.count / c.wall for c in runs)
        client = statistics.median(c.cpu / args.count * 1e6 for c in runs)
        broker = statistics.median(c.broker_cpu / args.count * 1e6 for c in runs)
        print(f"{name:<22} {sizes[name]:>5} {rate:>8,.0f} {client:>8.1f} us {broker:>8.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
