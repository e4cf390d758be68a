"""Running the broker: TLS listener, the blocking helper, the console script."""

from __future__ import annotations

import errno
import os
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import trustme
from brokerkit import TIMEOUT, body_of, connect, count_of, message, receive, receiver, sender

from chaos.broker import Broker, BrokerThread
from chaos.broker.cli import build_parser
from haclient.amqp.config import ClientAuth, TlsClientOptions, TlsServerOptions
from haclient.amqp.types import Accepted, Modified


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CA and a broker certificate for the name broker.test."""
    ca = trustme.CA()
    cert = ca.issue_cert("broker.test")
    root = tmp_path_factory.mktemp("broker-pki")
    paths = {"ca": root / "ca.pem", "cert": root / "server.pem", "key": root / "server.key"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    cert.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    cert.private_key_pem.write_to_path(str(paths["key"]))
    return {name: str(path) for name, path in paths.items()}


@pytest.mark.anyio
async def test_tls_listener_accepts_verified_client_with_plain_login(pki: dict[str, str]) -> None:
    tls = TlsServerOptions(cert_file=pki["cert"], key_file=pki["key"])
    async with Broker(tls=tls, users={"bob": "pw"}) as broker:
        assert broker.url.startswith("amqps://")
        with anyio.fail_after(TIMEOUT):
            client_tls = TlsClientOptions(ca_file=pki["ca"], peer_name="broker.test")
            async with connect(broker, tls=client_tls, auth=ClientAuth("bob", "pw")) as conn:
                assert await conn.send(await sender(conn, "q"), message()) == Accepted()


def test_broker_thread_runs_broker_for_blocking_code() -> None:
    async def produce(port: int) -> None:
        broker = Broker(port=port)  # only for connect(): it needs .port
        with anyio.fail_after(TIMEOUT):
            async with connect(broker) as conn:
                await conn.send(await sender(conn, "q"), message())

    with BrokerThread() as thread:
        anyio.run(produce, thread.port)
        assert thread.queue_depth("q") == 1
        assert [node.name for node in thread.nodes()] == ["q"]
        thread.restart()
        assert thread.nodes() == []
        thread.pause()
        thread.resume()
        thread.stop()
        thread.start()
        anyio.run(produce, thread.port)
        assert thread.purge("q") == 1


def test_console_script_serves_until_sigint() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "chaos.broker.cli", "--port", "0", "--user", "u:p"]
    command += ["--queue-policy", "work=1"]  # its first failed delivery dead-letters
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert "listening on amqp://127.0.0.1:" in line
            port = int(line.rsplit(":", 1)[1])

            async def login() -> None:
                broker = Broker(port=port)
                with anyio.fail_after(TIMEOUT):
                    auth = ClientAuth("u", "p", allow_insecure=True)
                    async with connect(broker, auth=auth) as conn:
                        assert conn.is_open
                        out = await sender(conn, "work")
                        assert await conn.send(out, message("poison")) == Accepted()
                        link = await receiver(conn, "work", credit=1)
                        conn.settle(await receive(conn, link), Modified(delivery_failed=True))
                        dead = await receive(conn, await receiver(conn, "DLQ"))
                        assert body_of(dead) == "poison" and count_of(dead) == 1

            anyio.run(login)
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=TIMEOUT) == 0
        finally:
            if process.poll() is None:
                process.kill()


def test_cli_broker_policy_options_are_checked_and_passed() -> None:
    parser = build_parser()
    policies = ["--queue-policy", "a=1", "--queue-policy", "b=5"]
    args = parser.parse_args(
        ["--expiry-address", "expired", "--max-delivery-count", "3", *policies]
    )
    assert (args.expiry_address, args.max_delivery_count) == ("expired", 3)
    assert args.queue_policy == [("a", 1), ("b", 5)]
    defaults = parser.parse_args([])
    assert (defaults.expiry_address, defaults.max_delivery_count) == (None, None)
    assert defaults.queue_policy == []


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--max-delivery-count", "0"], "must be at least 1"),
        (["--max-delivery-count", "many"], "expected an integer"),
        (["--queue-policy", "q"], "expected NAME=N"),
        (["--queue-policy", "=2"], "expected NAME=N"),
        (["--queue-policy", "q=0"], "must be at least 1"),
        (["--queue-policy", "q=x"], "expected an integer"),
    ],
)
def test_cli_bad_redelivery_limits_are_argparse_errors(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(argv)
    assert caught.value.code == 2
    assert error in capsys.readouterr().err


def _bind_without_reuse(port: int) -> None:
    """Bind ``port`` as a socket that does not allow reuse (the strictest claim on a port)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def _connect_and_reset(port: int) -> None:
    """Connect to ``port`` and end with a reset: no TIME_WAIT left on either side's port (one
    on the server's would refuse ``_bind_without_reuse`` as surely as a socket bound there)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_a_stopped_broker_keeps_its_port_refused_and_from_every_other_socket() -> None:
    """While it is down, a broker's port refuses connections as if nothing were bound, yet no
    other socket can take it: a client still retrying it (a failover) never meets another
    server given that port (another test worker's broker, one in the 60 tests of ``make
    test-quick`` met so). It listens there again on start, and lets it go when closed."""
    with BrokerThread() as thread:
        port = thread.port
        for stop in (thread.kill, lambda: thread.portal.call(thread.broker.stop)):
            stop()
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT).close()
            with pytest.raises(OSError) as taken:
                _bind_without_reuse(port)
            assert taken.value.errno == errno.EADDRINUSE
            thread.portal.call(thread.broker.start)
            assert thread.port == port
            _connect_and_reset(port)
    _bind_without_reuse(port)  # closed for good: the port is free again
