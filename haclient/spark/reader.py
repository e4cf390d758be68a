"""Readers: a queue as a streaming DataFrame (at least once), and a bounded batch read.

The stream reader runs on the driver: it takes messages into a ``MessageBuffer`` (see there for
the offsets and when messages are acknowledged) and ships them to the executors inside the
input partitions, so ``read()`` never talks to a broker. A batch read takes up to
``maxMessages`` messages when the read is planned: browsing them by default, or consuming them
(``consume=true``, acknowledged at once: a failed job does not get them back).
"""

from __future__ import annotations

import itertools
import logging
import math
import pickle
import zlib
from collections.abc import Iterator, Sequence
from typing import Any, Final

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from haclient.destination import Queue
from haclient.errors import ConfigurationError
from haclient.message import Message
from haclient.modes import AckMode
from haclient.spark.buffer import MessageBuffer
from haclient.spark.options import SparkOptions
from haclient.spark.schema import row_from_message
from haclient.sync import MessageConsumer

__all__ = ["HAClientBatchReader", "HAClientStreamReader", "RowsPartition"]

log = logging.getLogger("haclient.spark")


# Spark warns of a "task of very large size" past 1000 KiB per serialised task: rows ship
# compressed, in as many partitions as keep each well below that.
_PARTITION_BYTES: Final = 512 * 1024
_COMPRESSION: Final = 1  # zlib's fastest level: rows of one queue compress well at any level


class RowsPartition(InputPartition):
    """A share of a batch's rows, carried to the executor that reads it (pickled and
    compressed: the task that carries it stays small)."""

    def __init__(self, index: int, rows: list[tuple[Any, ...]]) -> None:
        super().__init__(index)
        self.packed = _pack(rows)

    @property
    def rows(self) -> list[tuple[Any, ...]]:
        """The rows, unpacked."""
        return pickle.loads(zlib.decompress(self.packed))  # type: ignore[no-any-return]


def _pack(rows: list[tuple[Any, ...]]) -> bytes:
    return zlib.compress(pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL), _COMPRESSION)


def split(rows: list[tuple[Any, ...]], parts: int) -> list[RowsPartition]:
    """``rows`` in contiguous partitions (none when there are no rows): ``parts`` of them, or
    more when that many would each carry more than ``_PARTITION_BYTES`` packed."""
    if not rows:
        return []
    parts = max(parts, math.ceil(len(_pack(rows)) / _PARTITION_BYTES))
    size = -(-len(rows) // parts)
    return [
        RowsPartition(i, rows[at : at + size]) for i, at in enumerate(range(0, len(rows), size))
    ]


class HAClientStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("haclient")``: every message at least once; replays with an id
    seen within ``dedupWindow`` messages are dropped. Offsets are ``{"seq": n}``."""

    def __init__(self, options: SparkOptions) -> None:
        self._options = options
        self._buffer = MessageBuffer(options)

    def initialOffset(self) -> dict[str, int]:
        return {"seq": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self._options.max_rows_per_batch)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        """Acknowledge what is below ``start`` (that batch is in Spark's commit log), then take
        up to the limit (never more than ``maxRowsPerBatch``) new messages."""
        rows = self._options.max_rows_per_batch
        if isinstance(limit, ReadMaxRows):
            rows = min(rows, limit.max_rows)
        self._buffer.acknowledge_below(start["seq"])
        return {"seq": self._buffer.fill(start["seq"], rows)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        rows = self._buffer.rows(start["seq"], end["seq"])
        return split(rows, self._options.num_partitions)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, RowsPartition)
        return iter(partition.rows)

    def commit(self, end: dict[str, int]) -> None:
        """Spark finished every batch below ``end``: acknowledge their messages."""
        self._buffer.acknowledge_below(end["seq"])

    def prepareForTriggerAvailableNow(self) -> None:
        """``trigger(availableNow=True)``: the query ends at the first batch that finds the
        queue empty for ``receiveTimeout`` seconds; nothing else changes."""
        log.info("draining %s", self._options.destination)

    def stop(self) -> None:
        """Close the connection (unacknowledged messages go back to the queue)."""
        self._buffer.close()


class HAClientBatchReader(DataSourceReader):
    """``spark.read.format("haclient")``: up to ``maxMessages`` messages, taken once when the
    read is planned (each action on the DataFrame plans it again)."""

    def __init__(self, options: SparkOptions) -> None:
        self._options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self._options
        destination = options.destination
        if not isinstance(destination, Queue):
            raise ConfigurationError("a batch read needs a queue address", option="address")
        mode = AckMode.CLIENT if options.consume else AckMode.AUTO
        with options.connect() as connection, connection.create_session(mode) as session:
            connection.start()
            if options.consume:
                consumer = session.create_consumer(destination, selector=options.selector)
                taken = _receive(consumer, options)
                if taken:
                    session.acknowledge()
            else:
                browser = session.create_browser(destination, selector=options.selector)
                taken = list(itertools.islice(browser, options.max_messages))
                browser.close()
        rows = [row_from_message(m, options.body_format, options.trace_context) for m in taken]
        return split(rows, options.num_partitions)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, RowsPartition)
        return iter(partition.rows)


def _receive(consumer: MessageConsumer, options: SparkOptions) -> list[Message]:
    """Up to ``maxMessages`` messages, waiting ``receiveTimeout`` seconds for the next one."""
    taken: list[Message] = []
    while len(taken) < options.max_messages:
        message = consumer.receive(timeout=options.receive_timeout)
        if message is None:
            break
        taken.append(message)
    return taken
