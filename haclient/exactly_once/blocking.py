"""The blocking relay: the async relay's task, run on a blocking connection's event loop.

How this works: ``Relay(connection, database)`` makes an async ``relay.Relay`` over the blocking
connection's async core; ``start()`` starts its task as one of the connection's own tasks (it
ends with the connection at the latest), and every other method is one call into that loop.
"""

from __future__ import annotations

import os

from haclient.errors import ConfigurationError, IllegalStateError
from haclient.exactly_once.relay import Relay as AsyncRelay
from haclient.exactly_once.relay import RelayStatistics
from haclient.sync.connection import Connection

__all__ = ["Relay"]


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
        self._loop = connection._loop
        self._relay = self._loop.call(
            AsyncRelay,
            connection._connection,
            database,
            batch_size=batch_size,
            poll_interval=poll_interval,
            retry_delay=retry_delay,
        )
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
        self._loop.run(self._start)

    async def _start(self) -> None:
        self._loop.spawn(self._relay.serve_in_background)
        await self._relay.wait_ready()

    def wait_empty(self, timeout: float | None = None) -> None:
        """Block until every row committed before the call was relayed (or expired).

        Raises:
            TimeoutError: not so within ``timeout`` seconds.
            ClosedError: the relay is not running (``statistics().error`` says why).
        """
        self._loop.run(self._relay.wait_empty, timeout)

    @property
    def database(self) -> str:
        """The database file the relay reads."""
        return self._relay.database

    def statistics(self) -> RelayStatistics:
        """A snapshot of the relay's counters; never blocks."""
        return self._relay.statistics()

    def close(self) -> None:
        """Stop relaying (the batch in flight finishes first); idempotent, from any thread but
        the loop's."""
        self._loop.run_close(self._relay.close)

    def __enter__(self) -> Relay:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return repr(self._relay).replace("<Relay", "<blocking Relay", 1)
