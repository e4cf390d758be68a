"""The server through the toxiproxy-python package as users call it, and through our wrapper,
which checks the statuses that package does not map and honours ``TOXIPROXY_URL``."""

from __future__ import annotations

import logging
import os
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import toxiproxy
from toxikit import Endpoint, deliberate, embedded, port_of, round_trip
from toxiproxy.api import APIConsumer, validate_response
from toxiproxy.exceptions import InvalidToxic, NotFound, ProxyExists

from chaos.net import TcpServer
from chaos.toxiproxy.client import (
    TOXIPROXY_URL,
    ToxiproxyBadRequest,
    ToxiproxyClient,
    ToxiproxyConflict,
    ToxiproxyError,
    ToxiproxyNotFound,
    ToxiproxyUnreachable,
    open_toxiproxy,
)


@pytest.fixture
def package(server: Endpoint, client: ToxiproxyClient) -> Iterator[toxiproxy.Toxiproxy]:
    """toxiproxy-python's own entry point, pointed at the server (class-level globals)."""
    saved = APIConsumer.host, APIConsumer.port
    toxi = toxiproxy.Toxiproxy()
    toxi.update_api_consumer(server.host, server.port)
    yield toxi
    APIConsumer.host, APIConsumer.port = saved


def test_the_package_drives_a_proxy_end_to_end(
    package: toxiproxy.Toxiproxy, echo_server: TcpServer
) -> None:
    assert package.running()
    assert b"2.12.0" in package.version()
    proxy = package.create(upstream=echo_server.address, name="echo")
    assert set(package.proxies()) == {"echo"}
    assert package.get_proxy("echo").upstream == echo_server.address
    port = port_of(proxy.listen)
    proxy.add_toxic(type="latency", attributes={"latency": 200})
    assert [t.name for t in proxy.toxics().values()] == ["latency_downstream"]
    assert round_trip(port) >= 0.2
    proxy.destroy_toxic("latency_downstream")
    assert proxy.get_toxic("latency_downstream") is None
    with proxy.down(), pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)
    assert round_trip(port) < 0.2
    proxy.add_toxic(type="noop")
    package.reset()
    assert proxy.toxics() == {}
    populated = package.populate(
        [{"name": "echo", "upstream": echo_server.address, "listen": "127.0.0.1:0"}]
    )
    assert [p.name for p in populated] == ["echo"]  # listen differs: replaced
    package.destroy_all()
    assert package.proxies() == {}


def test_the_package_maps_400_404_409(package: toxiproxy.Toxiproxy) -> None:
    proxy = package.create(upstream="127.0.0.1:9", name="p")
    with pytest.raises(ProxyExists):
        package.create(upstream="127.0.0.1:9", name="p")
    with pytest.raises(InvalidToxic):
        proxy.add_toxic(type="poison")
    proxy.destroy()
    with pytest.raises(NotFound):
        proxy.destroy()


def test_our_client_raises_on_every_error_status(
    client: ToxiproxyClient, echo_server: TcpServer
) -> None:
    proxy = client.create_proxy("p", echo_server.address)
    with pytest.raises(ToxiproxyConflict) as conflict:
        client.create_proxy("p", echo_server.address)
    assert (conflict.value.status, conflict.value.message) == (409, "proxy already exists")
    with pytest.raises(ToxiproxyBadRequest, match="invalid toxic type"):
        client.add_toxic("p", "poison")
    with pytest.raises(ToxiproxyNotFound, match="toxic not found"):
        client.remove_toxic("p", "nope")
    with pytest.raises(ToxiproxyNotFound, match="proxy not found"):
        client.proxy("nope")
    # The case toxiproxy-python lets through: a 500 from a bind failure.
    with pytest.raises(ToxiproxyError) as failed:
        client.create_proxy("q", echo_server.address, listen=proxy.listen)
    assert failed.value.status == 500 and "address already in use" in failed.value.message
    assert set(client.proxies()) == {"p"}


def test_our_client_toxics_and_proxies(client: ToxiproxyClient, echo_server: TcpServer) -> None:
    port = port_of(client.create_proxy("p", echo_server.address).listen)
    with client.toxic("p", "latency", latency=250, jitter=0) as toxic:
        assert toxic.name == "latency_downstream" and toxic.attributes["latency"] == 250
        assert round_trip(port) >= 0.25
        client.update_toxic("p", toxic.name, latency=0)
        assert client.toxics("p")[0].attributes == {"latency": 0, "jitter": 0}
        assert round_trip(port) < 0.25
    assert client.toxics("p") == []
    with client.down("p"), pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)
    assert client.proxy("p").enabled is True
    entry = {"name": "r", "upstream": "127.0.0.1:9", "listen": "127.0.0.1:0", "enabled": False}
    populated = client.populate([entry])
    assert [p.name for p in populated] == ["r"] and populated[0].enabled is False
    assert client.populate([]) == []  # the server answers "proxies": null
    client.reset()
    assert client.proxy("r").enabled is True
    client.delete_proxy("p")
    assert client.version() == "2.12.0"


@deliberate("the real server binds every interface for these")
def test_our_client_reports_a_refused_listen(client: ToxiproxyClient) -> None:
    for listen in (":0", "0.0.0.0:0"):
        with pytest.raises(ToxiproxyError, match="loopback addresses only") as failed:
            client.populate([{"name": "s", "upstream": "127.0.0.1:9", "listen": listen}])
        assert failed.value.status == 500
    assert client.proxies() == {}


def test_item8_the_packages_own_test_proxy_exists(
    server: Endpoint, client: ToxiproxyClient
) -> None:
    """toxiproxy-python's ``test_proxy_exists``: a create without ``listen``, then a duplicate."""
    url = f"{server.url}/proxies"
    body = {"upstream": "localhost:3306", "name": "test_mysql_service"}
    validate_response(requests.post(url, json=body, timeout=10))
    with pytest.raises(ProxyExists):
        validate_response(requests.post(url, json=body, timeout=10))
    assert port_of(client.proxy("test_mysql_service").listen) > 0


@embedded("reads the server's log, where the real one warns of updates by POST")
def test_item10_our_client_updates_with_patch(
    client: ToxiproxyClient, caplog: pytest.LogCaptureFixture
) -> None:
    client.create_proxy("p", "127.0.0.1:9")
    client.add_toxic("p", "latency", latency=10)
    with caplog.at_level(logging.WARNING, logger="chaos.toxiproxy"):
        client.disable("p")
        client.enable("p")
        client.update_toxic("p", "latency_downstream", latency=20)
        with client.down("p"):
            pass
        assert not caplog.records
        # toxiproxy-python updates by POST, which the server (like the real one) warns of
        requests.post(f"{client.url}/proxies/p", json={"enabled": True}, timeout=10)
    assert [r.getMessage() for r in caplog.records] == [
        "ProxyUpdate: HTTP method POST is deprecated. Use HTTP PATCH instead."
    ]
    assert client.toxics("p")[0].attributes["latency"] == 20


def test_our_client_reports_an_absent_server() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        client = ToxiproxyClient(f"http://127.0.0.1:{unused.getsockname()[1]}")
        with pytest.raises(ToxiproxyUnreachable):
            client.version()


def test_TOXIPROXY_URL_selects_an_external_server(
    server: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOXIPROXY_URL, server.url)
    with open_toxiproxy() as client:
        assert client.url == server.url
        client.create_proxy("via-env", "127.0.0.1:9")
        assert "via-env" in ToxiproxyClient(server.url).proxies()
        client.delete_proxy("via-env")


def test_without_TOXIPROXY_URL_an_embedded_server_runs_for_the_block(
    server: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOXIPROXY_URL, raising=False)
    with open_toxiproxy() as client:
        assert client.url != server.url
        assert client.version() == "2.12.0"
    with pytest.raises(ToxiproxyUnreachable):
        client.version()


ROOT = Path(__file__).resolve().parents[2]


def test_item10_these_tests_run_against_the_server_TOXIPROXY_URL_names() -> None:
    """A server in another process stands for a real Toxiproxy: a test of a deliberate
    difference is skipped, the others run against it."""
    module = Path(__file__).with_name("test_api_http.py")
    tests = [
        f"{module}::test_item8_a_missing_listen_binds_loopback_only",
        f"{module}::test_item9_populate_and_update_resolve_listen_before_comparing",
    ]
    command = [sys.executable, "-m", "chaos.toxiproxy.cli", "--port", "0"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT) as server:
        try:
            assert server.stdout is not None
            url = server.stdout.readline().split(" on ", 1)[1].strip()
            env = {**os.environ, TOXIPROXY_URL: url}
            run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
            done = subprocess.run(
                run, capture_output=True, text=True, env=env, cwd=ROOT, timeout=60
            )
            assert "1 passed, 1 skipped" in done.stdout, done.stdout
            assert ToxiproxyClient(url).proxies() == {}  # the tests cleaned up there
        finally:
            server.terminate()
            server.wait(timeout=20)


def _bind_without_reuse(port: int) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


@embedded("the embedded server holds a disabled proxy's port; the real one lets it go")
def test_a_disabled_proxy_keeps_its_port_refused_and_from_every_other_socket(
    client: ToxiproxyClient,
) -> None:
    """A client retrying a disabled proxy (a failover through it) meets a refusal, never
    another server given the port meanwhile; deleting the proxy lets the port go. (The
    connection through it ends with a reset and the upstream holds it open meanwhile: no
    TIME_WAIT is left on the proxy's port, which would refuse the last bind as a hold does.)"""
    with TcpServer(lambda sock: sock.recv(1)) as upstream:
        port = port_of(client.create_proxy("held", upstream.address).listen)
        client.disable("held")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=10).close()
        with pytest.raises(OSError, match="in use"):
            _bind_without_reuse(port)
        client.enable("held")
        through = socket.create_connection(("127.0.0.1", port), timeout=10)
        through.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        through.close()
        client.disable("held")
        client.delete_proxy("held")
        _bind_without_reuse(port)
