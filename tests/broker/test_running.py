"""Running the broker: TLS listener, the blocking helper, the console script."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
import trustme
from brokerkit import TIMEOUT, connect, message, sender

from chaos.broker import Broker, BrokerThread
from haclient.amqp.config import ClientAuth, TlsClientOptions, TlsServerOptions
from haclient.amqp.types import Accepted


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

            anyio.run(login)
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=TIMEOUT) == 0
        finally:
            if process.poll() is None:
                process.kill()
