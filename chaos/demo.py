"""The interim demo behind ``make demo``: one message through the engine, against a real broker.

It starts a private RabbitMQ node (Debian's ``rabbitmq-server`` with the AMQP 1.0 plugin) on free
loopback ports, opens one AMQP connection with haclient's engine and driver, sends a durable
message, receives it back, accepts it, and prints what happened with timings. The full demo
(reference brokers, injected faults, a resilient producer and consumer, an audit) replaces this
when the failover and chaos issues land.

Run: ``python -m chaos.demo`` (``make demo`` does the set-up first).
"""

from __future__ import annotations

import sys
import time
import uuid

import anyio

from chaos.rabbitmq import RabbitMQNode
from haclient.amqp import Accepted, ClientAuth, EngineConfig
from haclient.amqp.codec import AmqpMessage, decode_message, encode_message
from haclient.amqp.connection import open_connection
from haclient.errors import HAClientError


def _say(step: str, detail: str = "") -> None:
    print(f"  {step:<28} {detail}", flush=True)


async def round_trip(port: int) -> bool:
    """Send one message to a fresh queue and take it back; True when everything checked out."""
    address = f"/queue/demo-{uuid.uuid4().hex[:8]}"
    text = f"hello from haclient at {time.strftime('%H:%M:%S')}"
    config = EngineConfig(
        container_id=f"haclient-demo-{uuid.uuid4().hex[:6]}",
        auth=ClientAuth("guest", "guest", allow_insecure=True),  # loopback only
        idle_timeout=10.0,
    )
    started = time.perf_counter()
    async with open_connection("127.0.0.1", port, config) as conn:
        assert conn.remote_open is not None
        product = conn.remote_open.properties.get("product", "?")
        version = conn.remote_open.properties.get("version", "?")
        _say(
            "connected",
            f"{product} {version}, broker idle timeout {conn.engine.remote_idle_timeout:g} s",
        )
        session = await conn.open_session()
        sender = await conn.open_sender(address, session=session)
        await conn.wait_for_credit(sender)
        sent_at = time.perf_counter()
        outcome = await conn.send(sender, encode_message(AmqpMessage(body=text, durable=True)))
        _say(
            "sent (durable)",
            f"{address}: outcome {type(outcome).__name__} "
            f"after {1000 * (time.perf_counter() - sent_at):.1f} ms",
        )
        receiver = await conn.open_receiver(address, session=session, credit=1)
        message = await conn.receive(receiver, timeout=10.0)
        if message is None:
            _say("received", "NOTHING within 10 s")
            return False
        body = decode_message(message.payload).body
        conn.settle(message, Accepted())
        _say("received and accepted", repr(body))
        leftover = await conn.receive(receiver, timeout=0.5)
    _say("closed", f"round trip took {1000 * (time.perf_counter() - started):.0f} ms in all")
    return outcome == Accepted() and body == text and leftover is None


def main() -> int:
    """Run the demo; exit status 0 when the message made the round trip intact."""
    print("haclient demo: one message through the AMQP engine and a real broker")
    if not RabbitMQNode.available():
        print("rabbitmq-server is not installed: run `make demo` (it installs it as root)")
        return 2
    with RabbitMQNode() as node:
        _say("started RabbitMQ", f"127.0.0.1:{node.port} in {node.start_seconds:.1f} s")
        try:
            ok = anyio.run(round_trip, node.port)
        except HAClientError as exc:
            _say("FAILED", f"{type(exc).__name__}: {exc}")
            ok = False
    _say("stopped RabbitMQ")
    print("result:", "OK, the message made the round trip intact" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
