"""The blocking relay: the async relay's task, run on a blocking connection's event loop.

How this works: ``Relay(connection, database)`` asks the blocking connection's loop to make an
async ``relay.Relay`` over its async core (an ``OPEN_RELAY`` request through the connection's
boundary, ``haclient.sync._boundary``: the database path and the options as values); ``start()``
starts its task as one of the connection's own tasks (it ends with the connection at the
latest), and every other method is one request through that boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

from haclient.errors import ClosedError, ConfigurationError, IllegalStateError
from haclient.exactly_once.relay import Relay as AsyncRelay
from haclient.exactly_once.relay import RelayStatistics
from haclient.sync._boundary import Op, Request
from haclient.sync._served import Served, add_operations
from haclient.sync.connection import Connection

__all__ = ["Relay"]


async def _open_relay(served: Served, request: Request, target: Any) -> tuple[int, str]:
    database, options = request.args
    assert served.connection is not None
    relay = AsyncRelay(served.connection, database, **options)
    return served.keep(relay), relay.database


async def _start_relay(served: Served, request: Request, relay: Any) -> None:
    handle = request.handle

    async def serve() -> None:
        await relay.serve_in_background()

    task = asyncio.get_running_loop().create_task(serve())
    served.tasks[-handle] = task  # cancelled with the connection's tasks
    task.add_done_callback(lambda _: served.tasks.pop(-handle, None))
    await relay.wait_ready()


async def _relay_wait_empty(served: Served, request: Request, relay: Any) -> None:
    await relay.wait_empty(*request.args)


async def _close_relay(served: Served, request: Request, relay: Any) -> None:
    try:
        await relay.close()
    finally:
        served.drop(request.handle, "relay")


async def _relay_statistics(served: Served, request: Request, relay: Any) -> RelayStatistics:
    return relay.statistics()  # type: ignore[no-any-return]


# The loop's half of the relay's requests (``haclient.sync._served``): on the loop only.
add_operations(
    {
        Op.OPEN_RELAY: _open_relay,
        Op.START_RELAY: _start_relay,
        Op.RELAY_WAIT_EMPTY: _relay_wait_empty,
        Op.RELAY_STATISTICS: _relay_statistics,
        Op.CLOSE_RELAY: _close_relay,
    }
)


class Relay:
    """Relays the outbox of the SQLite database at ``database`` through the blocking
    ``connection`` (X2); arguments as ``haclient.exactly_once.aio.Relay``. Use it as a
    context manager, or call ``start()`` and ``close()``.

    Raises:
        ConfigurationError: a bad argument.
    """

    def __init__(
        self,
        connection: Connection,
        database: str | os.PathLike[str],
        *,
        batch_size: int = 500,
        poll_interval: float = 0.05,
        retry_delay: float = 1.0,
    ) -> None:
        if not isinstance(connection, Connection):
            raise ConfigurationError(
                f"a Relay needs a haclient.Connection, not {type(connection).__name__}"
            )
        self._boundary = connection._boundary
        self._handle, self._database = self._boundary.call(
            Op.OPEN_RELAY,
            0,
            os.fspath(database),
            {"batch_size": batch_size, "poll_interval": poll_interval, "retry_delay": retry_delay},
        )
        self._last: RelayStatistics = self._boundary.call(Op.RELAY_STATISTICS, self._handle)
        self._started = False

    def start(self) -> None:
        """Start relaying in the background; returns once the relay is ready to send.

        Raises:
            IllegalStateError: started before; the database has no outbox tables.
            ClosedError: the connection is closed.
            sqlite3.Error: the database cannot be opened.
        """
        if self._started:
            raise IllegalStateError("this relay was started already")
        self._started = True
        self._boundary.call(Op.START_RELAY, self._handle)

    def wait_empty(self, timeout: float | None = None) -> None:
        """Block until every row committed before the call was relayed (or expired).

        Raises:
            TimeoutError: not so within ``timeout`` seconds.
            ClosedError: the relay is not running (``statistics().error`` says why).
        """
        self._boundary.call(Op.RELAY_WAIT_EMPTY, self._handle, timeout)

    @property
    def database(self) -> str:
        """The database file the relay reads."""
        return self._database  # type: ignore[no-any-return]

    def statistics(self) -> RelayStatistics:
        """A snapshot of the relay's counters (one request to the connection's loop; the
        last one taken once the relay or its connection is closed)."""
        if not self._boundary.closed:
            with contextlib.suppress(ClosedError):
                self._last = self._boundary.call(Op.RELAY_STATISTICS, self._handle)
        return self._last

    def close(self) -> None:
        """Stop relaying (the batch in flight finishes first); idempotent, from any thread but
        the loop's."""
        if not self._boundary.closed:
            with contextlib.suppress(ClosedError):
                self._last = self._boundary.call(Op.RELAY_STATISTICS, self._handle)
        with contextlib.suppress(ClosedError):
            self._boundary.call(Op.CLOSE_RELAY, self._handle, close=True)

    def __enter__(self) -> Relay:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<blocking Relay of {self._database!r}>"
