"""Writers: each Spark task publishes its partition, in transactions, with deterministic ids.

How a partition is published: one connection per task attempt (it fails over inside the task,
as the URL says), one producer with ``preserve_message_id``, and every row sent as a PERSISTENT
message whose id is ``ID:<query>:<batch>:<partition>:<row>``. In ``transacted`` mode every
``batch_size`` messages are committed; a commit that failover rolled back (F7) is redone by
sending the same messages again, same ids. In ``auto`` mode each send returns once the broker
accepted it (F11 re-sends it, same id, when the connection is lost first).

Nothing spans ``write()`` and ``commit()``: Spark calls those in different processes. So a task
is done when its last transaction committed; a task attempt that fails is retried by Spark and
publishes the same ids again; a restarted streaming query repeats a batch with the same ids.
Consumers (and the stream reader's duplicate window) recognise the replays by id, which makes
``commit``/``abort`` here bookkeeping only, and idempotent per batch.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import (
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)

from haclient.errors import TransactionRolledBackError
from haclient.message import Message
from haclient.modes import AckMode
from haclient.spark.options import SparkOptions
from haclient.spark.schema import message_from_row
from haclient.sync import MessageProducer, Session

__all__ = ["HAClientStreamWriter", "HAClientWriter", "PartitionCommit", "publish_partition"]

log = logging.getLogger("haclient.spark")

# A transaction rolled back this many times in a row fails the task (Spark then retries it).
_MAX_REDOS = 20
_BATCH_ID_PROPERTY = "streaming.sql.batchId"  # set by Spark on every task of a micro-batch


@dataclass(frozen=True)
class PartitionCommit(WriterCommitMessage):
    """What one task published: its partition, the number of rows and the attempt."""

    partition: int
    rows: int
    attempt: int


def publish_partition(options: SparkOptions, rows: Iterator[Row], query: str) -> PartitionCommit:
    """Publish ``rows`` as this task's partition and return once every one is on the broker.

    Raises:
        ConnectionFailedError: failover gave up (Spark retries the task; ids repeat).
        TransactionRolledBackError: a transaction rolled back ``_MAX_REDOS`` times in a row.
        MessageFormatError: a row cannot become a message.
    """
    context = TaskContext.get()
    partition = context.partitionId() if context else 0
    attempt = context.attemptNumber() if context else 0
    batch = (context.getLocalProperty(_BATCH_ID_PROPERTY) if context else None) or "0"
    prefix = f"ID:{query}:{batch}:{partition}:"
    mode = AckMode.TRANSACTED if options.transacted else AckMode.AUTO
    count = 0
    with options.connect() as connection, connection.create_session(mode) as session:
        producer = session.create_producer(options.destination)
        producer.preserve_message_id = True
        pending: list[Message] = []
        for count, row in enumerate(rows, 1):
            message = message_from_row(
                row.asDict(recursive=True), options.body_format, options.trace_context
            )
            message.message_id = f"{prefix}{count - 1}"
            _send(producer, message, options.trace_context)
            if options.transacted:
                pending.append(message)
                if len(pending) >= options.batch_size:
                    _commit(session, producer, pending, options.trace_context)
        if pending:
            _commit(session, producer, pending, options.trace_context)
    log.debug("partition %d (attempt %d) published %d rows", partition, attempt, count)
    return PartitionCommit(partition, count, attempt)


def _send(producer: MessageProducer, message: Message, trace_context: bool) -> None:
    """Send ``message``; with ``traceContext``, in the trace context its row's columns gave it,
    so that a connection that traces (``jms.tracing`` in the URL) makes its ``send`` span a
    child of that context and the row's trace goes on, rather than starting a new one (O2)."""
    if not (trace_context and "traceparent" in message.properties):
        producer.send(message)
        return
    with _in_trace_of(message):
        producer.send(message)


def _in_trace_of(message: Message) -> contextlib.AbstractContextManager[None]:
    try:
        from haclient.aio.tracing import continuing
    except ImportError:  # no OpenTelemetry: nothing traces, the properties go as they are
        return contextlib.nullcontext()
    return continuing(message)


def _commit(
    session: Session, producer: MessageProducer, pending: list[Message], trace_context: bool
) -> None:
    """Commit ``pending``; when failover rolled the transaction back, send them again (same
    ids) and commit again. An in-doubt commit is redone too: duplicates carry the same id."""
    for _ in range(_MAX_REDOS):
        try:
            session.commit()
            pending.clear()
            return
        except TransactionRolledBackError as exc:
            log.info("%d messages rolled back (%s): sending them again", len(pending), exc)
            for message in pending:
                _send(producer, message, trace_context)
    session.commit()  # the last try: its error fails the task
    pending.clear()


def _published(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.rows for m in messages if isinstance(m, PartitionCommit))


class HAClientWriter(DataSourceWriter):
    """The batch writer (``df.write.format("haclient")``): one id prefix per job, so a retried
    task repeats its ids. Set the ``query`` option to keep ids across runs of the same job."""

    def __init__(self, options: SparkOptions) -> None:
        self._options = options
        self._query = options.query or f"job-{uuid.uuid4().hex[:12]}"

    def write(self, iterator: Iterator[Row]) -> PartitionCommit:
        return publish_partition(self._options, iterator, self._query)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("job %s published %d rows", self._query, _published(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Committed transactions cannot be taken back: what they published stays, and a rerun
        # with the same ``query`` option publishes the same ids again.
        log.warning(
            "job %s failed; %d rows of finished partitions stay published",
            self._query,
            _published(messages),
        )


class HAClientStreamWriter(DataSourceStreamWriter):
    """The streaming writer (``writeStream.format("haclient")``): ids ``<query>:<batchId>:...``
    so a micro-batch that Spark runs again (after a restart) repeats its ids."""

    def __init__(self, options: SparkOptions) -> None:
        self._options = options
        address = options.destination.address
        self._query = options.query or f"stream-{address}"

    def write(self, iterator: Iterator[Row]) -> PartitionCommit:
        return publish_partition(self._options, iterator, self._query)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("batch %d of %s: %d rows", batchId, self._query, _published(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning(
            "batch %d of %s aborted; %d rows stay published and are repeated with the same "
            "ids when the batch runs again",
            batchId,
            self._query,
            _published(messages),
        )
