"""``haclient-broker``: run the reference broker from the command line until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import ssl
import sys
from collections.abc import Callable, Sequence

import anyio

from chaos.amqp_server import TlsServerLayer
from chaos.args import LOG_LEVELS, log_level, non_negative_seconds, port, store
from chaos.broker.accounts import MECHANISMS, parse_mechanisms
from chaos.broker.readiness import ColdStart, NotReady, ReadinessDelay
from chaos.broker.server import Broker
from chaos.broker.state import BrokerMode
from chaos.broker.topology import parse_peer
from haclient.amqp.config import TlsServerOptions

__all__ = ["build_parser", "main"]

log = logging.getLogger("chaos.broker")


def _user(text: str) -> tuple[str, str]:
    name, sep, password = text.partition(":")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME:PASSWORD, got {text!r}")
    return name, password


def _token(text: str) -> tuple[str, str]:
    token, sep, user = text.rpartition("=")
    if not sep or not token or not user:
        raise argparse.ArgumentTypeError("expected TOKEN=USER")  # the token is never echoed
    return token, user


def _mechanisms(text: str) -> tuple[str, ...]:
    try:
        return parse_mechanisms(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _limit(text: str) -> int:
    """A redelivery limit: an integer of at least 1."""
    try:
        limit = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if limit < 1:
        raise argparse.ArgumentTypeError(f"a redelivery limit must be at least 1, not {limit}")
    return limit


def _frame_size(text: str) -> int:
    """A maximum frame size: an integer of at least 512 bytes (AMQP 1.0's minimum)."""
    try:
        size = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of bytes, got {text!r}") from None
    if size < 512:
        raise argparse.ArgumentTypeError(f"at least 512 bytes (AMQP 1.0's minimum), not {size}")
    return size


def _cold_start(text: str) -> ColdStart:
    try:
        return ColdStart.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _readiness_delay(text: str) -> ReadinessDelay:
    try:
        return ReadinessDelay.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _queue_policy(text: str) -> tuple[str, int]:
    name, sep, limit = text.rpartition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=N, got {text!r}")
    return name, _limit(limit)


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser."""
    parser = argparse.ArgumentParser(
        prog="haclient-broker", description="Run the haclient reference AMQP 1.0 broker."
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (127.0.0.1)")
    parser.add_argument("--port", type=port, default=5672, help="TCP port (0: any free port)")
    parser.add_argument(
        "--user",
        action="append",
        type=_user,
        default=[],
        metavar="NAME:PASS",
        help="accept this user's SASL logins: SCRAM-SHA-512, SCRAM-SHA-256, SCRAM-SHA-1 and "
        "PLAIN (repeatable; only salted credentials are kept); without any, ANONYMOUS and any "
        "PLAIN login are allowed",
    )
    parser.add_argument(
        "--oauth-token",
        action="append",
        type=_token,
        default=[],
        metavar="TOKEN=USER",
        help="accept this OAuth 2 bearer token as USER's over SASL XOAUTH2 (repeatable)",
    )
    parser.add_argument(
        "--sasl-mechanisms",
        type=_mechanisms,
        default=None,
        metavar="LIST",
        help="offer only these SASL mechanisms, comma-separated, in this order; each must be "
        f"enabled by the other options (known: {', '.join(MECHANISMS)})",
    )
    parser.add_argument(
        "--idle-timeout",
        type=non_negative_seconds,
        default=None,
        metavar="SECONDS",
        help="advertised to clients; a connection silent for twice this is dropped (default: "
        "none; with --activemq, 15 as ActiveMQ; 0: none)",
    )
    parser.add_argument("--max-frame-size", type=_frame_size, default=None, metavar="BYTES")
    parser.add_argument("--tls-cert", default=None, help="certificate chain file (PEM)")
    parser.add_argument("--tls-key", default=None, help="private key file (PEM)")
    parser.add_argument(
        "--tls-client-ca",
        default=None,
        metavar="FILE",
        help="require client certificates signed by this CA (PEM) and offer SASL EXTERNAL: "
        "the certificate's common name is the user (needs --tls-cert)",
    )
    parser.add_argument(
        "--refuse-duplicate-container-id",
        action="store_true",
        help="refuse a second connection with a connected container id (as ActiveMQ)",
    )
    parser.add_argument(
        "--activemq",
        action="store_true",
        help="behave like ActiveMQ 5.x's AMQP transport where a client can tell: receiver "
        "settle mode 'second' granted as 'first', queue:// and topic:// prefixes announced in "
        "the Open frame, a duplicate container id refused, protocol headers answered only "
        "94-134 ms after the port opens (see --readiness-delay)",
    )
    parser.add_argument(
        "--readiness-delay",
        type=_readiness_delay,
        default=None,
        metavar="SECONDS",
        help="answer the AMQP protocol header only this long after the port opens, at every "
        "start: SECONDS, LOW-HIGH to draw it from a range, or LOW-MEDIAN-HIGH (default: "
        "0.094-0.101-0.134 with --activemq, as ActiveMQ 5.17 measured; 0 otherwise)",
    )
    parser.add_argument(
        "--not-ready",
        choices=[choice.value for choice in NotReady],
        default=None,
        help="what a connection accepted before then meets: wait (its header is answered "
        "once ready), drop (closed without a byte) or either, evenly at random (default: "
        "either with --activemq, as ActiveMQ 5.17 was seen to do; wait otherwise)",
    )
    parser.add_argument(
        "--cold-start",
        type=_cold_start,
        nargs="?",
        const="activemq",
        default=None,
        metavar="OPEN,ATTACH,SEND",
        help="answer the first Open, the first attach and the first durable message of each "
        "start that many seconds later, as a JVM just started does (alone: 0.044,0.015,0.018, "
        "as ActiveMQ 5.17 measured; default: none)",
    )
    parser.add_argument(
        "--dead-letter-queue",
        metavar="QUEUE",
        help="where rejected and poisoned messages go (default: DLQ; ActiveMQ.DLQ with --activemq)",
    )
    parser.add_argument(
        "--expiry-address",
        default=None,
        metavar="ADDRESS",
        help="where expired messages go (default: they are dropped)",
    )
    parser.add_argument(
        "--max-delivery-count",
        type=_limit,
        default=None,
        metavar="N",
        help="dead-letter a message once its delivery failed N times (default: unlimited)",
    )
    parser.add_argument(
        "--queue-policy",
        action="append",
        type=_queue_policy,
        default=[],
        metavar="NAME=N",
        help="the redelivery limit of queue NAME, overriding --max-delivery-count (repeatable)",
    )
    parser.add_argument(
        "--store",
        type=store,
        default=None,
        help="SQLite store file for durable messages; two brokers on one store form an HA pair",
    )
    parser.add_argument(
        "--peer",
        action="append",
        default=[],
        metavar="URL",
        help="a peer broker's amqp[s]://host:port, announced to clients (repeatable)",
    )
    parser.add_argument(
        "--redirect",
        default=None,
        metavar="URL",
        help="answer every connection's Open with amqp:connection:redirect to this "
        "amqp[s]://host:port (the client is sent there)",
    )
    parser.add_argument(
        "--log-level",
        type=log_level,
        default="INFO",
        metavar="LEVEL",
        help=f"one of {', '.join(LOG_LEVELS)}",
    )
    return parser


async def _run(broker: Broker) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with broker:
            role = f" (master of store {broker.store_path})" if broker.store_path else ""
            mode = " (ActiveMQ mode)" if broker.mode is BrokerMode.ACTIVEMQ else ""
            ready = broker.ready_after or 0.0
            ready_text = f" (ready {ready * 1000:.1f} ms after the port opened)" if ready else ""
            print(f"haclient-broker listening on {broker.url}{role}{mode}{ready_text}", flush=True)
            async for signum in signals:
                log.info("signal %d: stopping", signum)
                return


def _standby(store: str) -> Callable[[], None]:
    def announce() -> None:
        print(
            f"haclient-broker: store {store} is held by another broker: waiting as its slave",
            flush=True,
        )

    return announce


def _bind_error(exc: BaseException) -> OSError | None:
    """The OSError (a busy port, an unknown address) behind a failed start, if that is it."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, OSError) else None


def _broker(args: argparse.Namespace, tls: TlsServerOptions | None) -> Broker:
    return Broker(
        host=args.host,
        port=args.port,
        users=dict(args.user) if args.user else None,
        tls=tls,
        idle_timeout=args.idle_timeout,
        max_frame_size=args.max_frame_size,
        refuse_duplicate_container_id=args.refuse_duplicate_container_id,
        dead_letter_queue=args.dead_letter_queue,
        store=args.store,
        peers=args.peer,
        expiry_address=args.expiry_address,
        max_delivery_count=args.max_delivery_count,
        queue_policies=dict(args.queue_policy),
        on_standby=_standby(args.store) if args.store else None,
        mode="activemq" if args.activemq else "reference",
        oauth_tokens=dict(args.oauth_token) if args.oauth_token else None,
        sasl_mechanisms=args.sasl_mechanisms,
        readiness_delay=args.readiness_delay,
        not_ready=args.not_ready,
        cold_start=args.cold_start,
        redirect=args.redirect,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``haclient-broker``; returns the exit status."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if (args.tls_cert is None) != (args.tls_key is None):
        print("--tls-cert and --tls-key go together", file=sys.stderr)
        return 2
    if args.tls_client_ca is not None and args.tls_cert is None:
        print("--tls-client-ca needs --tls-cert and --tls-key", file=sys.stderr)
        return 2
    tls = (
        TlsServerOptions(args.tls_cert, args.tls_key, client_ca_file=args.tls_client_ca)
        if args.tls_cert
        else None
    )
    try:
        if tls is not None:
            TlsServerLayer(tls)  # the files are read now, not at the first connection
    except (OSError, ssl.SSLError) as exc:
        print(f"haclient-broker: cannot load the TLS files: {exc}", file=sys.stderr)
        return 2
    try:
        for url in args.peer:
            parse_peer(url)
    except ValueError as exc:
        print(f"--peer: {exc}", file=sys.stderr)
        return 2
    try:
        if args.redirect is not None:
            parse_peer(args.redirect)
    except ValueError as exc:
        print(f"--redirect: {exc}", file=sys.stderr)
        return 2
    try:
        broker = _broker(args, tls)
    except ValueError as exc:  # the SASL mechanisms do not fit the other options
        print(f"--sasl-mechanisms: {exc}", file=sys.stderr)
        return 2
    try:
        anyio.run(_run, broker)
    except (OSError, BaseExceptionGroup) as exc:
        error = _bind_error(exc)
        if error is None:
            raise
        reason = error.strerror or str(error)
        where = (
            f"cannot open {error.filename}"  # the store or its lock, not the port
            if error.filename
            else f"cannot listen on {args.host}:{args.port}"
        )
        print(f"haclient-broker: {where}: {reason}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
