"""What ``jms.forceAsyncAcks`` gains (A7): AUTO receive with and without it, interleaved.

On the reference broker (and the reference broker in ActiveMQ mode, where A6 confirms by an
exchange), fill a new queue (not timed), then time ``--count`` AUTO ``receive()`` calls, once
confirmed (the default) and once with ``force_async_acks=True``, alternating round by round so
that the machine's noise hits both alike; report msgs/s and this process's CPU per message,
medians over ``--rounds``. Checks: every message once, in order; a fresh consumer finds the
queue empty afterwards (the asynchronous acknowledgements reached the broker).

    .venv/bin/python -m bench.ack_async                # 2,000 messages, 5 rounds
    .venv/bin/python -m bench.ack_async --count 500 --rounds 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import anyio

from bench.broker import ActiveMQModeBroker, BrokerProcess
from bench.confirm import timed_auto_receive
from bench.throughput import BenchError
from haclient.modes import AckConfirmation


async def _phase(url: str, force_async: bool, count: int) -> tuple[float, float]:
    """One timed AUTO receive of ``count`` messages: (msgs/s, CPU us per message)."""
    name = "async" if force_async else "confirmed"
    rate, cpu, used = await timed_auto_receive(url, count, name, force_async_acks=force_async)
    if force_async and used is not AckConfirmation.NONE:
        raise BenchError(f"asynchronous acknowledgements confirmed by {used}")
    return rate, cpu


def main(argv: list[str] | None = None) -> int:
    """Run the measurements and print one line per broker and mode."""
    parser = argparse.ArgumentParser(prog="bench.ack_async", description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-ack-async-") as work:
        brokers = {
            "reference": BrokerProcess("reference", Path(work), store=False),
            "activemq": ActiveMQModeBroker("activemq", Path(work), store=False),
        }
        try:
            for broker in brokers.values():
                broker.start()
            print("broker     acknowledgements   msgs/s  CPU us/msg  (medians of rounds)")
            for name, broker in brokers.items():
                url = f"amqp://127.0.0.1:{broker.port}"
                runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
                for _ in range(args.rounds):
                    for force_async in (False, True):
                        runs[force_async].append(anyio.run(_phase, url, force_async, args.count))
                for force_async, results in runs.items():
                    mode = "async (forced)" if force_async else "confirmed"
                    rate = statistics.median(r for r, _ in results)
                    cpu = statistics.median(c for _, c in results)
                    print(f"{name:10} {mode:16} {rate:8,.0f}  {cpu:10,.0f}", flush=True)
        finally:
            for broker in brokers.values():
                broker.stop()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
