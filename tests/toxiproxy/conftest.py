"""Fixtures of the Toxiproxy tests: one embedded server per module, cleaned between tests, an
echo server to proxy to, and API clients (raw HTTP and ours over toxiproxy-python)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from toxikit import Http, echo

from chaos.net import TcpServer
from chaos.toxiproxy import ToxiproxyServer
from chaos.toxiproxy.client import ToxiproxyClient


@pytest.fixture(scope="module")
def server() -> Iterator[ToxiproxyServer]:
    """The embedded server on a free port, in a thread, for one test module."""
    with ToxiproxyServer.running(port=0) as running:
        yield running


@pytest.fixture
def client(server: ToxiproxyServer) -> Iterator[ToxiproxyClient]:
    """Our client; every proxy is deleted after the test."""
    toxi = ToxiproxyClient(server.url)
    yield toxi
    for name in toxi.proxies():
        toxi.delete_proxy(name)


@pytest.fixture
def api(server: ToxiproxyServer, client: ToxiproxyClient) -> Iterator[Http]:
    """Raw HTTP to the server (cleaned after the test like ``client``)."""
    raw = Http(server.host, server.port)
    yield raw
    raw.close()


@pytest.fixture
def echo_server() -> Iterator[TcpServer]:
    """An echo server on a free loopback port."""
    with TcpServer(echo) as running:
        yield running
