"""The ``outbox_inbox`` workload: an application pair with an outbox and an inbox, in processes
that the ``app_kill`` fault kills; audited by the effects in their own databases.

How this works: the stream's producer process (``chaos.scenarios.apps producer``: business
changes, each with its outbox message in one transaction, and a relay) and consumer process
(``apps consumer``: an inbox applying each message's effect) run on the stream's queue, each
with a SQLite database in a directory of their own (or, when the run makes them, a fresh
PostgreSQL database each: ``WorkloadContext.databases``). They are listed in the bed's
``Applications`` (``WorkloadContext.apps``) while the round runs, so that ``app_kill`` SIGKILLs
one of them at a random point and starts it again; broker and network faults hit their
connections meanwhile. At the stop the producer is told to make no more changes (a stop file),
both are given ``FINISH`` seconds to relay and apply everything, then stopped by their pids.
The ledger gets, from the two databases: ``changed`` (each committed change's message id),
``effect`` (one event per applied effect: a second one is a duplicated effect), ``sent`` (the
same ids, so that a copy the drain finds on the queue is no phantom) and ``outbox`` (rows left
unsent). ``chaos.audit`` judges them (``lost_effect``, ``duplicated_effect``).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import anyio
import anyio.to_thread

from chaos.applications import AppProcess
from chaos.scenarios.workloads import WorkloadContext

__all__ = ["FINISH", "outbox_inbox"]

FINISH = 45.0
"""Seconds the applications get, after the stop, to relay and apply what is left (less than the
runner's hang bound)."""


async def outbox_inbox(context: WorkloadContext) -> None:
    """Run the application pair on ``context``'s stream until its stop, then audit it."""
    # here, not at the top: ``python -m chaos.scenarios.apps`` imports this package first
    from chaos.scenarios.app_kills import finish

    where = Path(tempfile.mkdtemp(prefix=f"chaos-{context.stream}-"))
    producer_db, consumer_db = str(where / "producer.db"), str(where / "consumer.db")
    if context.databases is not None:
        producer_db, consumer_db = context.databases(), context.databases()
    url = f"{context.url}&amqp.idleTimeout={int(context.idle_timeout * 1000)}"
    common = ["--url", url, "--queue", context.queue]
    stop_file = where / "stop"
    making = ["--count", str(10**9), "--pace", "0.01", "--stop-file", str(stop_file)]
    producer = AppProcess(
        "producer", [*common, "--database", producer_db, *making], where / "producer.log"
    )
    consumer = AppProcess("consumer", [*common, "--database", consumer_db], where / "consumer.log")
    apps = (producer, consumer)
    finished = False
    try:
        for app in apps:
            app.start()
        if context.apps is not None:
            context.apps.add(*apps)
        while not context.stop.is_set():
            await anyio.sleep(0.1)
        if context.apps is not None:
            context.apps.remove(*apps)
        stop_file.touch()
        finished = await anyio.to_thread.run_sync(
            finish, producer, consumer, producer_db, consumer_db, FINISH
        )
    finally:
        if context.apps is not None:
            context.apps.remove(*apps)
        for app in apps:
            app.kill()
    _record(context, producer_db, consumer_db, producer, consumer, finished)
    if finished:
        shutil.rmtree(where, ignore_errors=True)
    else:
        context.record("error", "workload", "", call="finish", message=f"see {where}")


def _record(
    context: WorkloadContext,
    producer_db: str,
    consumer_db: str,
    producer: AppProcess,
    consumer: AppProcess,
    finished: bool,
) -> None:
    from chaos.scenarios.app_kills import AppKillRun, effects_check
    from chaos.scenarios.apps import business_of, effects_of

    run = AppKillRun()
    effects_check(producer_db, consumer_db, run)
    changed = sorted(business_of(producer_db).values())
    context.record("sent", "producer", "OUTBOX", ids=changed)
    context.record("changed", "producer", "OUTBOX", ids=changed)
    for _n, message_id in effects_of(consumer_db):
        context.record("effect", "consumer", "INBOX", ids=[message_id])
    context.record(
        "outbox",
        "producer",
        "OUTBOX",
        message=f"{run.outbox_left} rows left; kills: producer {producer.kills}, "
        f"consumer {consumer.kills}; finished: {finished}",
        duration=float(run.outbox_left),
    )
