"""``haclient-toxiproxy``: run the Toxiproxy-compatible server until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence

import anyio

from chaos.args import port
from chaos.toxiproxy.server import ToxiproxyServer

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(
        prog="haclient-toxiproxy",
        description="Run a server that speaks Toxiproxy 2.x's HTTP API (loopback only).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="loopback address (127.0.0.1)")
    parser.add_argument("--port", type=port, default=8474, help="API port (8474; 0: any)")
    return parser


async def _run(server: ToxiproxyServer) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with server:
            print(f"haclient-toxiproxy: API on {server.url}", flush=True)
            async for _ in signals:
                return


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``haclient-toxiproxy``; returns the exit status (1: cannot listen)."""
    args = build_parser().parse_args(argv)
    try:
        server = ToxiproxyServer(args.host, args.port)
    except ValueError as exc:
        print(f"haclient-toxiproxy: {exc}", file=sys.stderr)
        return 2
    try:
        anyio.run(_run, server)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        print(
            f"haclient-toxiproxy: cannot listen on {args.host}:{args.port}: {reason}",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:  # a Ctrl-C before the signal receiver was in place
        pass
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
