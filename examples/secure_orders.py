"""Orders through brokers that want TLS and a login: a password, a client certificate or an
OAuth 2 token that expires (blocking API).

Where the secrets come from is the point of this example: never from the command line (every
user of the machine can read a process's arguments):

- a password from an environment variable (``--password-env``): with a username, the client
  logs in with the strongest mechanism the broker offers (SCRAM-SHA-512 ... PLAIN), and
  ``amqp.saslMechanisms`` in the URL can restrict it;
- a client certificate from the URL's ``transport.keyStoreLocation`` (its key's password, if
  any, from ``--key-password-env``): without a username, SASL EXTERNAL logs in as the
  certificate;
- a token from a file (``--token-file``) that an identity provider's agent keeps fresh: the
  token provider reads it before every connect, so each failover logs in with the token of the
  moment (XOAUTH2).

    APP_PASSWORD=secret python examples/secure_orders.py \\
        'amqps://broker:5671?transport.trustStoreLocation=ca.pem' --username app \\
        --password-env APP_PASSWORD

A refused login or handshake is reported with the broker and the reason; the exit status is
then 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import haclient
from haclient import AckMode, Queue, TextMessage


def file_token_provider(path: Path) -> Any:
    """A token provider that reads the token in ``path`` (stripped) at every connect."""

    def token() -> str:
        return path.read_text().strip()

    return token


def secrets(args: argparse.Namespace) -> dict[str, Any]:
    """The ``connect()`` keywords for the secrets the arguments point to."""
    keywords: dict[str, Any] = {"username": args.username}
    if args.password_env:
        keywords["password"] = os.environ[args.password_env]
    if args.key_password_env:
        keywords["key_password"] = os.environ[args.key_password_env]
    if args.token_file:
        keywords["token_provider"] = file_token_provider(args.token_file)
    return keywords


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog="Secrets come from the environment and files, never from the command line.",
    )
    parser.add_argument("url", help="a broker URL or a failover:(...) URL, usually amqps")
    parser.add_argument("--username", help="the user to log in as (none: the certificate)")
    parser.add_argument("--password-env", metavar="VAR", help="the password's variable")
    parser.add_argument("--key-password-env", metavar="VAR", help="the client key's password")
    parser.add_argument("--token-file", type=Path, help="a file holding an OAuth 2 token")
    parser.add_argument("--queue", default="secure-orders")
    parser.add_argument("--count", type=int, default=10)
    args = parser.parse_args(argv)

    try:
        with haclient.connect(args.url, client_id="secure-orders", **secrets(args)) as connection:
            connection.start()
            with connection.create_session(AckMode.AUTO) as session:
                producer = session.create_producer(Queue(args.queue))
                for n in range(args.count):
                    producer.send(TextMessage(f"order {n}"))
                consumer = session.create_consumer(Queue(args.queue))
                received = 0
                while received < args.count and consumer.receive(timeout=10) is not None:
                    received += 1
    except haclient.AuthenticationError as exc:  # it names the broker and why, never a secret
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    print(f"sent {args.count} orders, received {received}", flush=True)
    return 0 if received == args.count else 1


if __name__ == "__main__":
    sys.exit(main())
