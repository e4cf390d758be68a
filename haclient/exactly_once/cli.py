"""``haclient-relay``: an outbox relay in a process of its own.

    haclient-relay --url 'failover:(amqp://b1:5672,amqp://b2:5672)' --database app.db

It connects (the URL's failover applies), relays until SIGTERM or SIGINT, and exits 0 after a
clean stop; 1 when failover gave up or the database cannot be used (the rows not sent stay for
the next relay: X2). Killed at any point, a new relay on the same database sends every row not
known accepted, with its id. ``--pid-file`` writes the process id once the relay is ready.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

import anyio

import haclient.aio as aio
from haclient.errors import HAClientError
from haclient.exactly_once.relay import Relay

__all__ = ["main"]

log = logging.getLogger("haclient.exactly_once")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="haclient-relay", description="Relay an outbox to AMQP brokers (rule X2)."
    )
    parser.add_argument("--url", required=True, help="the failover URL of the brokers")
    parser.add_argument(
        "--database", required=True, help="the outbox's SQLite file, or a postgresql:// URL"
    )
    parser.add_argument("--batch-size", type=int, default=500, help="rows per batch (500)")
    parser.add_argument(
        "--poll-interval", type=float, default=0.05, help="seconds between looks (0.05)"
    )
    parser.add_argument("--username", help="SASL user name (or jms.username in the URL)")
    parser.add_argument(
        "--password-env",
        metavar="VAR",
        help="the environment variable holding the password (never on the command line)",
    )
    parser.add_argument("--pid-file", help="write the process id here once ready")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG")
    return parser


async def _relay(args: argparse.Namespace) -> None:
    password = os.environ.get(args.password_env) if args.password_env else None
    async with await aio.connect(args.url, username=args.username, password=password) as conn:
        relay = Relay(
            conn, args.database, batch_size=args.batch_size, poll_interval=args.poll_interval
        )
        async with relay, anyio.create_task_group() as group:
            group.start_soon(_until_stopped, relay)
            if args.pid_file:
                with open(args.pid_file, "w", encoding="utf-8") as out:
                    out.write(f"{os.getpid()}\n")
            log.info("relaying %s through %s", _shown(args.database), conn.url)
            await relay.wait_stopped()
            group.cancel_scope.cancel()
        stats = relay.statistics()
        if stats.error is not None:
            raise stats.error
        log.info("stopped after relaying %d messages", stats.relayed)


def _shown(database: str) -> str:
    """``database`` for a log line: a URL without its password."""
    parts = urlsplit(database)
    if parts.password is None:
        return database
    where = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=where))


async def _until_stopped(relay: Relay) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _signal in signals:
            await relay.close()
            return


def main(argv: Sequence[str] | None = None) -> int:
    """Run the relay until SIGTERM or SIGINT; the exit status (0: clean stop)."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        anyio.run(_relay, args)
    except (HAClientError, OSError) as exc:
        log.error("haclient-relay: %s", exc)
        return 1
    except Exception as exc:  # sqlite3.Error and the like: say what, not a traceback
        log.error("haclient-relay: %s: %s", type(exc).__name__, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
