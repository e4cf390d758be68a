"""Workloads: a producer and a consumer per acknowledge mode, a transacted pair, and a
request/reply pair over a temporary queue. Each writes what it did to a ``Ledger``.

Every workload runs on the async API (so its failover listener, called on the event loop in
order with the application's calls, timestamps losses exactly, see ``chaos.audit``), with one
connection per side, on a queue of its own (the stream). It produces until ``stop`` is set, then
its consumer drains: it goes on until it consumed everything the producer had accepted or
committed, or nothing came for ``drain`` seconds (what NO_ACK lost never comes).

Each side reacts to errors as an application following the rules would: a CLIENT or INDIVIDUAL
consumer whose acknowledge raised ``AcknowledgeFailedError`` calls ``recover()`` (F8: the broker
redelivers); a transacted side starts a new transaction after ``TransactionRolledBackError`` (F7);
a requester asks again when no reply came (F6: replies on the old temporary queue are gone).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio

import haclient.aio as aio
from chaos.applications import Applications
from chaos.audit import Ledger
from haclient import AckMode, Message, Queue, TextMessage
from haclient.errors import (
    AcknowledgeFailedError,
    ClosedError,
    ConnectionFailedError,
    TransactionRolledBackError,
)

__all__ = ["WORKLOADS", "Workload", "WorkloadContext"]

T = TypeVar("T")

CALL_DEADLINE = 30.0
"""The longest a call may block: faults are short and failover unlimited, so a call that takes
longer is stuck (F2, F3)."""
RECEIVE_TIMEOUT = 0.5
RECEIVE_SLACK = 5.0
BATCH = 5
REQUEST_RETRIES = 8
REPLY_TIMEOUT = 2.0


@dataclass
class WorkloadContext:
    """What a workload needs: where, which stream, where to write, when to stop."""

    url: str
    stream: str
    ledger: Ledger
    stop: threading.Event
    idle_timeout: float = 0.5
    pace: float = 0.005
    drain: float = 8.0
    expected: set[str] = field(default_factory=set)
    consumed: set[str] = field(default_factory=set)
    producer_done: bool = False
    on_connect: Callable[[aio.Connection], None] | None = None
    """Told of every connection the workload opens (the demo gives them to its metrics)."""
    queue: str = ""
    """The stream's queue on the broker (default: the stream's name). The runner names it per
    run, so that no run finds what another left behind."""
    tracer_provider: Any = None
    """An OpenTelemetry ``TracerProvider``: the connections trace (rules O1-O4) and the ledger
    notes each message's trace id (the report's table of the messages a fault hit)."""
    apps: Applications | None = None
    """Where a workload lists the application processes the ``app_kill`` fault may kill (the
    bed's); None: nowhere."""
    databases: Callable[[], str] | None = None
    """Makes a fresh PostgreSQL database (its ``postgresql://`` URL) for each application of
    the ``outbox_inbox`` workload; None: SQLite files."""
    gone: set[str] = field(default_factory=set)
    """The actors whose connection (or consumer) is closed for good: failover gave up, or the
    object was closed. They stop for the rest of the round instead of calling on in a loop."""

    def __post_init__(self) -> None:
        self.queue = self.queue or self.stream

    def record(self, kind: str, actor: str, mode: str, **fields: Any) -> None:
        """Write one event of this stream."""
        self.ledger.add(kind, stream=self.stream, actor=actor, mode=mode, **fields)

    async def connect(self, actor: str) -> aio.Connection:
        """A connection whose failover listener writes to the ledger as ``actor``."""
        connection = await aio.connect(
            self.url,
            idle_timeout=self.idle_timeout,
            attach_timeout=2.0,
            connect_timeout=2.0,
            close_timeout=1.0,
            tracer_provider=self.tracer_provider,
        )
        connection.add_listener(_Listener(self, actor))
        if self.on_connect is not None:
            self.on_connect(connection)
        await connection.start()
        return connection

    async def timed(
        self,
        actor: str,
        mode: str,
        call: str,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        deadline: float = CALL_DEADLINE,
    ) -> T:
        """Run ``fn(*args)``; a slow call is written as a ``call`` event, a failed one as
        ``error`` (then re-raised)."""
        start = time.time()
        try:
            result = await fn(*args)
        except Exception as exc:
            self.record(
                "error",
                actor,
                mode,
                call=call,
                duration=time.time() - start,
                deadline=deadline,
                error=type(exc).__name__,
                message=str(exc)[:200],
            )
            if isinstance(exc, (ConnectionFailedError, ClosedError)) and actor not in self.gone:
                self.gone.add(actor)
                self.record(
                    "stopped", actor, mode, call=call, message=f"closed for good: {exc}"[:200]
                )
            raise
        duration = time.time() - start
        if duration > 0.05:
            self.record("call", actor, mode, call=call, duration=duration, deadline=deadline)
        return result

    def running(self, actor: str) -> bool:
        """Whether ``actor`` (a producing side) goes on: not stopped, its connection alive."""
        return not self.stop.is_set() and actor not in self.gone

    def draining_done(self, last_progress: float, actor: str = "consumer") -> bool:
        """True when the consumer may stop: its connection is closed for good, or the producer
        is done and everything it promised was consumed, or nothing came for ``drain``
        seconds."""
        if actor in self.gone:
            return True
        if not (self.stop.is_set() and self.producer_done):
            return False
        return self.expected <= self.consumed or time.time() - last_progress > self.drain


class _Listener:
    def __init__(self, context: WorkloadContext, actor: str) -> None:
        self._context = context
        self._actor = actor

    def failover_started(self, cause: BaseException) -> None:
        self._context.record("failover_started", self._actor, "", message=str(cause)[:200])

    def failover_completed(self, broker: object, downtime: float) -> None:
        self._context.record(
            "failover_completed", self._actor, "", duration=downtime, message=str(broker)
        )

    def failover_failed(self, cause: BaseException) -> None:
        """Failover gave up: an error no rule allows here (the plan is unlimited)."""
        self._error("failover", cause, str(cause))

    def resource_not_restored(self, resource: object, error: BaseException) -> None:
        self._error("restore", error, f"{resource!r}: {error}")

    def _error(self, call: str, error: BaseException, message: str) -> None:
        """Write an ``error`` event for ``call`` (the message cut to 200 characters)."""
        self._context.record(
            "error", self._actor, "", call=call, error=type(error).__name__, message=message[:200]
        )


Workload = Callable[[WorkloadContext], Coroutine[Any, Any, None]]


def _traced(message: Message) -> dict[str, str]:
    """The ``trace`` of a message's ledger event: its trace id, when it carries one (O2)."""
    parent = message.properties.get("traceparent")
    parts = parent.split("-") if isinstance(parent, str) else []
    return {"trace": parts[1]} if len(parts) == 4 else {}


# --- producers ----------------------------------------------------------------------------------


async def produce(context: WorkloadContext) -> None:
    """PERSISTENT sends until stopped; each returns once the broker accepted it (F11)."""
    async with await context.connect("producer") as connection:
        session = await connection.create_session(AckMode.AUTO)
        producer = await session.create_producer(Queue(context.queue))
        while context.running("producer"):
            message = TextMessage("payload")
            start = time.time()
            try:
                await context.timed("producer", "AUTO", "send", producer.send, message)
                ids = [str(message.message_id)]
                context.record(
                    "accepted", "producer", "AUTO", ids=ids, duration=time.time() - start
                )
                context.expected.update(ids)
            except Exception:  # written as an error by timed(); the audit judges it
                pass
            context.record(
                "sent",
                "producer",
                "AUTO",
                ids=[str(message.message_id)],
                t=start,
                **_traced(message),
            )
            await anyio.sleep(context.pace)


async def produce_transacted(context: WorkloadContext) -> None:
    """Transactions of ``BATCH`` sends, each committed or reported rolled back (F7)."""
    async with await context.connect("producer") as connection:
        session = await connection.create_session(AckMode.TRANSACTED)
        producer = await session.create_producer(Queue(context.queue))
        while context.running("producer"):
            ids: list[str] = []
            try:
                for _ in range(BATCH):
                    message = TextMessage("payload")
                    await context.timed("producer", "TRANSACTED", "send", producer.send, message)
                    ids.append(str(message.message_id))
                    context.record(
                        "sent", "producer", "TRANSACTED", ids=ids[-1:], **_traced(message)
                    )
                    await anyio.sleep(context.pace)
            except Exception:
                pass
            await _commit(context, session, "producer", ids)


async def _commit(
    context: WorkloadContext, session: aio.Session, actor: str, ids: list[str]
) -> bool:
    start = time.time()
    try:
        await context.timed(actor, "TRANSACTED", "commit", session.commit)
    except TransactionRolledBackError as exc:
        context.record(
            "rolled_back",
            actor,
            "TRANSACTED",
            ids=ids,
            in_doubt=exc.in_doubt,
            duration=time.time() - start,
        )
        if exc.in_doubt:
            (context.consumed if actor == "consumer" else context.expected).update(ids)
        return False
    except Exception:
        return False
    context.record("committed", actor, "TRANSACTED", ids=ids, duration=time.time() - start)
    (context.consumed if actor == "consumer" else context.expected).update(ids)
    return True


# --- consumers ----------------------------------------------------------------------------------


async def consume(context: WorkloadContext, mode: AckMode) -> None:
    """Receive until drained; acknowledge as ``mode`` wants."""
    name = mode.name
    if mode is AckMode.NO_ACK:  # what it lost never comes (A5): no long wait for it
        context.drain = min(context.drain, 1.5)
    async with await context.connect("consumer") as connection:
        session = await connection.create_session(mode)
        consumer = await session.create_consumer(Queue(context.queue))
        pending: list[Message] = []
        last_progress = time.time()
        while not context.draining_done(last_progress):
            message = await _receive(context, consumer, "consumer", name)
            if message is not None:
                last_progress = time.time()
                message_id = str(message.message_id)
                context.record("received", "consumer", name, ids=[message_id], **_traced(message))
                pending.append(message)
                if mode in (AckMode.AUTO, AckMode.DUPS_OK, AckMode.NO_ACK):
                    context.consumed.add(message_id)
                    pending.clear()
            if (mode is AckMode.INDIVIDUAL and pending) or (
                mode is AckMode.CLIENT and (len(pending) >= BATCH or (message is None and pending))
            ):
                await _acknowledge(context, session, name, pending, pending[-1])
            elif mode is AckMode.TRANSACTED and (
                len(pending) >= BATCH or (message is None and pending)
            ):
                await _commit(context, session, "consumer", [str(m.message_id) for m in pending])
                pending.clear()


async def _receive(
    context: WorkloadContext, consumer: aio.MessageConsumer, actor: str, mode: str
) -> Message | None:
    try:
        return await context.timed(
            actor,
            mode,
            "receive",
            consumer.receive,
            RECEIVE_TIMEOUT,
            deadline=RECEIVE_TIMEOUT + RECEIVE_SLACK,
        )
    except Exception:
        await anyio.sleep(0.05)
        return None


async def _acknowledge(
    context: WorkloadContext, session: aio.Session, mode: str, pending: list[Message], last: Message
) -> None:
    """Acknowledge (CLIENT: every pending message; INDIVIDUAL: ``last``); on
    ``AcknowledgeFailedError`` recover, so the broker and the session redeliver (F8)."""
    ids = [str(m.message_id) for m in pending] if mode == "CLIENT" else [str(last.message_id)]
    start = time.time()
    try:
        await context.timed("consumer", mode, "acknowledge", last.acknowledge)
    except AcknowledgeFailedError as exc:
        context.record(
            "ack_failed",
            "consumer",
            mode,
            ids=ids,
            in_doubt=exc.in_doubt,
            duration=time.time() - start,
        )
        if exc.in_doubt:
            context.consumed.update(ids)
        # acknowledge() and recover() each raise once after a failover (F8); the recover that
        # goes through gives back what the new connection delivered too.
        for _ in range(2):
            try:
                await context.timed("consumer", mode, "recover", session.recover)
                break
            except AcknowledgeFailedError:
                continue
            except Exception:
                break
        pending.clear()
        return
    except Exception:
        pending.clear()
        return
    context.record("acknowledged", "consumer", mode, ids=ids, duration=time.time() - start)
    context.consumed.update(ids)
    if mode == "CLIENT":
        pending.clear()
    else:
        pending.remove(last)


# --- request/reply ------------------------------------------------------------------------------


async def serve(context: WorkloadContext) -> None:
    """Answer requests (AUTO) to each one's reply-to until drained."""
    async with await context.connect("server") as connection:
        session = await connection.create_session(AckMode.AUTO)
        requests = await session.create_consumer(Queue(context.queue))
        replies = await session.create_producer()
        last_progress = time.time()
        while not context.draining_done(last_progress, "server"):
            request = await _receive(context, requests, "server", "AUTO")
            if request is None:
                continue
            last_progress = time.time()
            context.record("received", "server", "AUTO", ids=[str(request.message_id)])
            context.consumed.add(str(request.message_id))
            if request.reply_to is None:
                continue
            reply = TextMessage("answer")
            reply.correlation_id = request.message_id
            reply_to = request.reply_to
            # A reply-to from before a failover may be gone (F6); timed() writes the error.
            with suppress(Exception):
                await context.timed("server", "AUTO", "reply", replies.send, reply_to, reply)


async def ask(context: WorkloadContext) -> None:
    """Ask questions over a temporary queue until stopped; each asked again until answered."""
    async with await context.connect("requester") as connection:
        session = await connection.create_session(AckMode.AUTO)
        inbox = await session.create_temporary_queue()
        answers = await session.create_consumer(inbox)
        producer = await session.create_producer(Queue(context.queue))
        question = 0
        while context.running("requester"):
            question += 1
            await _ask_one(context, producer, answers, inbox, question)
            await anyio.sleep(context.pace)


async def _ask_one(
    context: WorkloadContext,
    producer: aio.MessageProducer,
    answers: aio.MessageConsumer,
    inbox: Any,
    question: int,
) -> None:
    asked: list[str] = []
    for _ in range(REQUEST_RETRIES):
        if "requester" in context.gone:
            return
        request = TextMessage(f"question {question}")
        request.reply_to = inbox
        start = time.time()
        try:
            await context.timed("requester", "AUTO", "send", producer.send, request)
        except Exception:
            continue
        finally:
            context.record("sent", "requester", "AUTO", ids=[str(request.message_id)], t=start)
        asked.append(str(request.message_id))
        context.record(
            "accepted", "requester", "AUTO", ids=asked[-1:], duration=time.time() - start
        )
        context.expected.add(asked[-1])
        deadline = time.time() + REPLY_TIMEOUT
        while time.time() < deadline and "requester" not in context.gone:
            reply = await _receive(context, answers, "requester", "AUTO")
            if reply is None:
                continue
            context.record("reply", "requester", "AUTO", ids=[str(reply.correlation_id)])
            if str(reply.correlation_id) in asked:
                return
    context.record("unanswered", "requester", "AUTO", ids=asked, message=f"question {question}")


def _pair(producer: Workload, consumer: Workload) -> Workload:
    async def produce_then_done(context: WorkloadContext) -> None:
        try:
            await producer(context)
        finally:  # the consumer drains once the producer is done, whatever ended it
            context.producer_done = True

    async def run(context: WorkloadContext) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(consumer, context)
            tg.start_soon(produce_then_done, context)

    return run


def _consumer(mode: AckMode) -> Workload:
    async def run(context: WorkloadContext) -> None:
        await consume(context, mode)

    return run


WORKLOADS: dict[str, Workload] = {
    "auto": _pair(produce, _consumer(AckMode.AUTO)),
    "client": _pair(produce, _consumer(AckMode.CLIENT)),
    "dups_ok": _pair(produce, _consumer(AckMode.DUPS_OK)),
    "no_ack": _pair(produce, _consumer(AckMode.NO_ACK)),
    "individual": _pair(produce, _consumer(AckMode.INDIVIDUAL)),
    "transacted": _pair(produce_transacted, _consumer(AckMode.TRANSACTED)),
    "tx_to_client": _pair(produce_transacted, _consumer(AckMode.CLIENT)),
    "request_reply": _pair(ask, serve),
}
"""Every workload by the name the matrix and the report use."""
