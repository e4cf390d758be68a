"""The demo behind ``make demo``: a producer and a consumer survive broker kills, with an audit.

It starts a shared-store HA pair of reference brokers (``chaos.broker``: one serves, the other
waits on the store's lock and takes over when the first dies) on free loopback ports, connects
one haclient connection with ``failover.method=roundrobin`` over both, and runs a PERSISTENT
producer and an AUTO_ACKNOWLEDGE consumer side by side while the serving broker is killed
(hard, no goodbye) a few times; each killed broker comes back as the new standby. Then it prints
the audit: every message the broker accepted was received, duplicates (allowed by AUTO only
across a failover) carry a repeated message id, and what each failover cost.

Run: ``python -m chaos.demo`` (``make demo`` does the set-up first). Exit status 0 when the
audit holds.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import anyio
from anyio.abc import TaskGroup

import haclient.aio as aio
from chaos.broker import Broker
from chaos.net import free_port
from haclient import Queue, TextMessage

MESSAGES = 3000
KILLS = 3


def _say(step: str, detail: str = "") -> None:
    print(f"  {step:<26} {detail}", flush=True)


class _Downtimes:
    """A failover listener that records what each failover cost (F14)."""

    def __init__(self) -> None:
        self.completed: list[tuple[str, float]] = []

    def failover_started(self, cause: BaseException) -> None:
        _say("failover started", str(cause).split(" (")[0])

    def failover_completed(self, broker: object, downtime: float) -> None:
        self.completed.append((str(broker), downtime))
        _say("failover completed", f"now on {broker}, {1000 * downtime:.1f} ms")


async def _serve(broker: Broker, task_status: anyio.abc.TaskStatus[None]) -> None:
    """Run ``broker`` until cancelled (as standby it waits for the store's lock first)."""
    task_status.started()
    async with broker:
        await anyio.sleep_forever()


async def run(store: Path) -> bool:
    ports = (free_port(), free_port())
    brokers = [Broker(port=port, store=store, ha_poll_interval=0.05) for port in ports]
    url = (
        f"failover:(amqp://127.0.0.1:{ports[0]},amqp://127.0.0.1:{ports[1]})"
        "?failover.method=roundrobin&failover.connectdelay=50&failover.backoff=1"
        "&failover.cyclecount=100"
    )
    accepted: list[str] = []
    received: list[str] = []
    async with anyio.create_task_group() as brokers_tg:
        await brokers_tg.start(_serve, brokers[0])
        while not brokers[0].running:
            await anyio.sleep(0.01)
        await brokers_tg.start(_serve, brokers[1])
        _say("HA pair started", f"master :{ports[0]}, standby :{ports[1]}, shared store")
        downtimes = _Downtimes()
        started = time.perf_counter()
        async with await aio.connect(url, client_id="demo") as conn:
            conn.add_listener(downtimes)
            await conn.start()
            session = await conn.create_session()
            producer = await session.create_producer(Queue("orders"))
            consumer = await session.create_consumer(Queue("orders"))

            async def consume() -> None:
                while len(set(received)) < MESSAGES:
                    message = await consumer.receive(timeout=30)
                    if message is None:
                        return
                    received.append(str(message.message_id))

            async with anyio.create_task_group() as work:
                work.start_soon(consume)
                for n in range(MESSAGES):
                    if n and n % (MESSAGES // (KILLS + 1)) == 0:
                        await _kill_master(brokers, brokers_tg)
                    message = TextMessage(f"order {n}")
                    await producer.send(message)  # PERSISTENT: returns once accepted (F11)
                    accepted.append(str(message.message_id))
            stats = conn.statistics()
        brokers_tg.cancel_scope.cancel()
    elapsed = time.perf_counter() - started
    return _audit(accepted, received, downtimes, stats.failovers, elapsed)


async def _kill_master(brokers: list[Broker], brokers_tg: TaskGroup) -> None:
    master = next(b for b in brokers if b.running)
    _say("killing the master", f":{master.port} (hard kill)")
    await master.kill()
    standby = next(b for b in brokers if b is not master)
    with anyio.fail_after(10):
        while not standby.running:
            await anyio.sleep(0.01)
    brokers_tg.start_soon(master.start)  # back as the new standby (waits for the lock)


def _audit(
    accepted: list[str],
    received: list[str],
    downtimes: _Downtimes,
    failovers: int,
    elapsed: float,
) -> bool:
    counts = Counter(received)
    lost = [m for m in accepted if m not in counts]
    duplicates = {m: c for m, c in counts.items() if c > 1}
    print("\naudit")
    _say("messages accepted", str(len(accepted)))
    _say("messages received", f"{len(received)} ({len(counts)} distinct)")
    _say("accepted but lost", str(len(lost)))
    _say("duplicates", f"{len(duplicates)} (same message id, redelivered across a failover)")
    _say("failovers", str(failovers))
    if downtimes.completed:
        times = sorted(d for _, d in downtimes.completed)
        _say(
            "downtime",
            f"median {1000 * times[len(times) // 2]:.1f} ms, max {1000 * times[-1]:.1f} ms",
        )
    _say("elapsed", f"{elapsed:.1f} s")
    ok = not lost and failovers == KILLS
    print("\nverdict:", "every accepted message was received" if ok else "AUDIT FAILED")
    return ok


def main() -> int:
    """Run the demo; exit status 0 when the audit holds."""
    print(f"haclient demo: {MESSAGES} orders through {KILLS} broker kills (shared-store HA pair)")
    with tempfile.TemporaryDirectory(prefix="haclient-demo-") as tmp:
        ok = anyio.run(run, Path(tmp) / "store.db")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
