"""Fixtures of the Toxiproxy tests: the server under test, cleaned between tests, an echo server
to proxy to, and API clients (raw HTTP and ours).

The server is an embedded one per module, or with ``TOXIPROXY_URL`` set, that Toxiproxy (a real
one, say): the same tests then hold the embedded server to it, and the tests of deliberate
differences (``toxikit.deliberate``) are skipped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from toxikit import EXTERNAL_URL, Endpoint, Http, echo

from chaos.net import TcpServer
from chaos.toxiproxy import ToxiproxyServer
from chaos.toxiproxy.client import ToxiproxyClient


@pytest.fixture(scope="module")
def server() -> Iterator[Endpoint]:
    """``TOXIPROXY_URL``'s server, else the embedded one on a free port (in a thread) for one
    test module."""
    if EXTERNAL_URL:
        yield Endpoint.of(EXTERNAL_URL)
        return
    with ToxiproxyServer.running(port=0) as running:
        yield Endpoint(running.host, running.port)


@pytest.fixture
def client(server: Endpoint) -> Iterator[ToxiproxyClient]:
    """Our client; every proxy is deleted after the test."""
    toxi = ToxiproxyClient(server.url)
    yield toxi
    for name in toxi.proxies():
        toxi.delete_proxy(name)


@pytest.fixture
def api(server: Endpoint, client: ToxiproxyClient) -> Iterator[Http]:
    """Raw HTTP to the server (cleaned after the test like ``client``)."""
    raw = Http(server.host, server.port)
    yield raw
    raw.close()


@pytest.fixture
def echo_server() -> Iterator[TcpServer]:
    """An echo server on a free loopback port."""
    with TcpServer(echo) as running:
        yield running
