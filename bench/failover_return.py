"""The planned return to a preferred broker (F16): how long calls wait, and that nothing is lost.

Part of ``python -m bench.failover`` (``--no-return`` skips it, ``--returns`` sets the rounds).
Each round has two fresh independent reference brokers A and B, each in its own process (the
hosts of ``bench.failover``), and one connection to
``failover:(A,B)?failover.priorityBackup=true&failover.priorityBackupInterval=100&...``: A is
the preferred broker. One AUTO session's producer sends PERSISTENT messages in a loop (each
``send`` returns once the broker accepted it), noting when each send began and ended and the
connection epoch it ended in. A is killed (``Broker.kill()``), the connection fails over to B,
the sender runs on B for a while, then A is started again: the probe finds it within one
interval and the connection returns there, as a planned failover. Measured, for the return:

- gate: ``failover_started(PreferredBrokerAvailable)`` -> ``failover_completed`` (listener),
  how long calls wait at the gate;
- client: the downtime ``failover_completed`` reports (loss noticed -> restored);
- longest send: the longest ``send`` that overlapped the return (from its call to its return);
- lost: after the round the connection is closed and both brokers are drained; every message
  whose send returned after the failover to B (epoch 1 or later) must be found on A or B. The
  messages A held when it was killed are gone with its memory, and are not counted.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import anyio.to_thread

import haclient.aio as aio
from bench.failover_client import FAILOVER_TIMEOUT, Recorder
from bench.throughput import BenchError
from haclient.destination import Queue
from haclient.message import DeliveryMode, TextMessage
from haclient.modes import AckMode

__all__ = ["ReturnResult", "measure_return", "return_report"]

PROBE_INTERVAL_MS = 100
"""``failover.priorityBackupInterval`` of the bench's URL."""
ON_B_SECONDS = 0.3
"""How long the sender runs on B before A is started again, and on A after the return."""
DRAIN_QUIET = 0.5
"""A drain ends when no message came for this long."""


class Host(Protocol):
    """What the bench needs of a broker host (``bench.failover.BrokerHost``)."""

    @property
    def url(self) -> str: ...

    def spawn(self) -> None: ...

    def kill(self) -> float: ...

    def revive(self) -> None: ...


@dataclass
class Round:
    number: int
    gate: float | None = None
    """failover_started -> failover_completed of the return."""
    client: float | None = None
    """The downtime failover_completed reported for the return."""
    longest_send: float | None = None
    """The longest send that overlapped the return."""
    probe: float | None = None
    """A started again -> failover_started of the return (the probe's interval, mostly)."""
    accepted: int = 0
    """Sends returned after the failover to B."""
    lost: int = 0
    """Of those, messages found on neither broker."""
    error: str | None = None


@dataclass
class ReturnResult:
    rounds: list[Round] = field(default_factory=list)


@dataclass
class _Send:
    began: float
    ended: float
    epoch: int
    body: str


class _Sender:
    """Sends PERSISTENT messages in a loop and notes each send."""

    def __init__(self, conn: aio.Connection, producer: aio.MessageProducer) -> None:
        self.conn = conn
        self.producer = producer
        self.sends: list[_Send] = []
        self.error: BaseException | None = None

    async def run(self) -> None:
        try:
            while True:
                body = f"m-{len(self.sends):08d}"
                began = time.monotonic()
                await self.producer.send(TextMessage(body))
                ended = time.monotonic()
                self.sends.append(_Send(began, ended, self.conn.statistics().epoch, body))
        except Exception as exc:
            self.error = exc


def _url(a: Host, b: Host) -> str:
    options = [
        "failover.connectdelay=0",
        "failover.cyclecount=100",
        "failover.priorityBackup=true",
        f"failover.priorityBackupInterval={PROBE_INTERVAL_MS}",
    ]
    return f"failover:({a.url},{b.url})?{'&'.join(options)}"


async def _wait_for(condition: Callable[[], bool], what: str) -> None:
    with anyio.fail_after(FAILOVER_TIMEOUT):
        while not condition():
            await anyio.sleep(0.005)
    if not condition():
        raise BenchError(what)


async def _drain(url: str, queue: str) -> set[str]:
    """Every body left on ``queue`` of the broker at ``url``."""
    bodies: set[str] = set()
    async with await aio.connect(url) as conn:
        session = await conn.create_session(AckMode.AUTO)
        consumer = await session.create_consumer(Queue(queue))
        await conn.start()
        while (message := await consumer.receive(DRAIN_QUIET)) is not None:
            if isinstance(message, TextMessage) and message.text is not None:
                bodies.add(message.text)
    return bodies


async def _one_round(number: int, a: Host, b: Host, run_id: str, log: Any) -> Round:
    result = Round(number)
    queue = f"return-{run_id}-{number}"
    recorder = Recorder()
    conn = await aio.connect(_url(a, b))
    try:
        conn.add_listener(recorder)
        session = await conn.create_session(AckMode.AUTO)
        producer = await session.create_producer(Queue(queue))
        producer.delivery_mode = DeliveryMode.PERSISTENT
        sender = _Sender(conn, producer)
        async with anyio.create_task_group() as tg:
            tg.start_soon(sender.run)
            await anyio.sleep(ON_B_SECONDS)
            await anyio.to_thread.run_sync(a.kill)
            await _wait_for(lambda: len(recorder.completed) >= 1, "no failover to B")
            await anyio.sleep(ON_B_SECONDS)
            revived = time.monotonic()
            await anyio.to_thread.run_sync(a.revive)
            await _wait_for(lambda: len(recorder.completed) >= 2, "no return to A")
            await anyio.sleep(ON_B_SECONDS)
            tg.cancel_scope.cancel()
        if sender.error is not None:
            raise BenchError(f"a send failed: {sender.error!r}")
        if conn.statistics().failovers_returned != 1:
            raise BenchError("the second failover was not a return")
        began = recorder.started[1]
        ended, _, downtime = recorder.completed[1]
        result.gate, result.client, result.probe = ended - began, downtime, began - revived
        during = [s for s in sender.sends if s.began < ended and s.ended > began]
        result.longest_send = max((s.ended - s.began for s in during), default=0.0)
        kept = {s.body for s in sender.sends if s.epoch >= 1}
        result.accepted = len(kept)
    except BenchError as exc:
        result.error = str(exc)
        return result
    finally:
        with anyio.move_on_after(10, shield=True):
            await conn.close()
    found = await _drain(a.url, queue) | await _drain(b.url, queue)
    result.lost = len(kept - found)
    print(
        f"return {number}: gate {_ms(result.gate)} ms, client {_ms(result.client)} ms, longest "
        f"send {_ms(result.longest_send)} ms, probe {_ms(result.probe)} ms; "
        f"{result.accepted} accepted after the failover, {result.lost} lost",
        file=log,
    )
    return result


async def measure_return(
    rounds: int, make_pair: Callable[[ExitStack], tuple[Host, Host]], run_id: str, log: Any
) -> ReturnResult:
    """``rounds`` rounds, each on a fresh pair of brokers from ``make_pair`` (registered on
    the stack it is given, which stops them)."""
    result = ReturnResult()
    for number in range(1, rounds + 1):
        with ExitStack() as stack:
            a, b = make_pair(stack)
            for host in (a, b):
                await anyio.to_thread.run_sync(host.spawn)
            result.rounds.append(await _one_round(number, a, b, run_id, log))
    return result


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


def _stats(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    got = [v for v in values if v is not None]
    return (statistics.median(got), max(got)) if got else (None, None)


def return_report(result: ReturnResult) -> tuple[list[str], dict[str, Any]]:
    """The part's lines of the report, and its summary."""
    ok = [r for r in result.rounds if r.error is None]
    errors = [r.error for r in result.rounds if r.error]
    summary: dict[str, Any] = {"rounds": len(ok), "errors": errors}
    lines = [
        "return to the preferred broker (F16, ms): independent brokers, the preferred one killed, "
        "failed over, started again, returned to; median and max over the rounds",
        "  gate: failover_started(PreferredBrokerAvailable) -> failover_completed; client: the "
        "downtime failover_completed reports; longest send: the longest PERSISTENT send that "
        "overlapped the return; probe: restart -> failover_started (interval "
        f"{PROBE_INTERVAL_MS} ms)",
        f"{'':<14}{'rounds':>7}{'median':>9}{'max':>9}",
    ]
    for name in ("gate", "client", "longest_send", "probe"):
        median, worst = _stats([getattr(r, name) for r in ok])
        summary[f"{name}_median_s"], summary[f"{name}_max_s"] = median, worst
        label = name.replace("_", " ")
        lines.append(f"{label:<14}{len(ok):>7}{_ms(median):>9}{_ms(worst):>9}")
    accepted, lost = sum(r.accepted for r in ok), sum(r.lost for r in ok)
    summary["accepted"], summary["lost"] = accepted, lost
    lines.append(
        f"lost: {lost} of {accepted} messages accepted after the failover to B"
        + (" -> PASS" if ok and lost == 0 else " -> FAILED")
    )
    lines += [f"  round {r.number}: {r.error}" for r in result.rounds if r.error]
    return lines, summary
