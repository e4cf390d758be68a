"""Each toxic's effect measured on the wire: a client socket, the proxy, an echo server (or one
that greets and closes) on 127.0.0.1. Lower bounds are the toxic's promise; upper bounds are
generous and only catch hangs."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import pytest
from toxikit import (
    connect,
    deliberate,
    greet_and_close,
    port_of,
    recv_exactly,
    recv_until_closed,
    round_trip,
    send_timed,
)

from chaos.net import TcpServer
from chaos.toxiproxy.client import ToxiproxyClient

SLACK = 2.0  # seconds an effect may take beyond its promise on a loaded machine


def assert_held(sock: socket.socket, seconds: float) -> None:
    """Nothing arrives on ``sock`` for ``seconds``: no data, and no close either."""
    sock.settimeout(seconds)
    with pytest.raises(TimeoutError):
        sock.recv(100)
    sock.settimeout(SLACK)


@pytest.fixture
def port(client: ToxiproxyClient, echo_server: TcpServer) -> int:
    """The port of proxy ``p`` in front of the echo server."""
    return port_of(client.create_proxy("p", echo_server.address).listen)


@pytest.fixture
def greeter() -> Iterator[TcpServer]:
    with TcpServer(greet_and_close) as running:
        yield running


@pytest.mark.parametrize("stream", ["downstream", "upstream"])
def test_latency_delays_each_chunk(client: ToxiproxyClient, port: int, stream: str) -> None:
    assert round_trip(port) < 0.3
    client.add_toxic("p", "latency", stream=stream, latency=300)
    assert 0.3 <= round_trip(port) < 0.3 + SLACK


def test_latency_with_jitter_stays_within_its_range(client: ToxiproxyClient, port: int) -> None:
    client.add_toxic("p", "latency", latency=200, jitter=100)
    assert all(0.1 <= round_trip(port) < 0.3 + SLACK for _ in range(3))


def test_latency_is_pipelined(client: ToxiproxyClient, port: int) -> None:
    client.add_toxic("p", "latency", latency=300)
    with connect(port) as sock:
        start = time.monotonic()
        for _ in range(5):  # five writes 50 ms apart all arrive ~300 ms after they left
            sock.sendall(b"x")
            time.sleep(0.05)
        assert recv_exactly(sock, 5) == b"xxxxx"
        assert 0.3 + 0.2 <= time.monotonic() - start < 0.5 + SLACK


def test_an_update_applies_to_an_open_connection_at_once(
    client: ToxiproxyClient, port: int
) -> None:
    client.add_toxic("p", "latency", latency=5000)
    with send_timed(port, b"held") as (sock, elapsed):
        time.sleep(0.1)
        client.update_toxic("p", "latency_downstream", latency=0)  # the held chunk goes now
        assert recv_exactly(sock, 4) == b"held"
        assert elapsed() < SLACK


def test_reset_peer_resets_the_connection(client: ToxiproxyClient, port: int) -> None:
    client.add_toxic("p", "reset_peer", stream="upstream", timeout=200)
    # the data is discarded; 200 ms later both sockets are reset
    with send_timed(port, b"doomed") as (sock, elapsed):
        with pytest.raises(ConnectionResetError):
            sock.recv(100)
        assert 0.2 <= elapsed() < 0.2 + SLACK


def test_limit_data_passes_exactly_n_bytes_then_closes(client: ToxiproxyClient, port: int) -> None:
    client.add_toxic("p", "limit_data", bytes=1000)
    with connect(port) as sock:
        sock.sendall(b"a" * 600)
        assert recv_exactly(sock, 600) == b"a" * 600
        sock.sendall(b"b" * 2400)  # crosses the limit: truncated to 400, then closed
        assert recv_until_closed(sock) == b"b" * 400


def test_bandwidth_paces_data(client: ToxiproxyClient, port: int) -> None:
    client.add_toxic("p", "bandwidth", rate=100)  # 100 KB/s
    with send_timed(port, b"z" * 60_000) as (sock, elapsed):
        assert recv_exactly(sock, 60_000) == b"z" * 60_000
        assert 0.5 <= elapsed() < 0.6 + SLACK


@pytest.mark.parametrize(
    ("toxic", "attributes", "held", "released"),
    [
        # bandwidth 0: the data waits in the proxy and goes on once the toxic is removed
        ("bandwidth", {"rate": 0}, 0.5, b"stuck"),
        # timeout 0: the data is dropped, and removing the toxic closes the connection
        ("timeout", {"timeout": 0}, 0.8, None),
    ],
)
def test_a_zero_toxic_holds_until_removed(
    client: ToxiproxyClient,
    port: int,
    toxic: str,
    attributes: dict[str, int],
    held: float,
    released: bytes | None,
) -> None:
    client.add_toxic("p", toxic, **attributes)
    with connect(port) as sock:
        sock.sendall(b"stuck")
        assert_held(sock, held)
        client.remove_toxic("p", f"{toxic}_downstream")
        if released is None:
            assert recv_until_closed(sock) == b""
        else:
            assert recv_exactly(sock, len(released)) == released


def test_slicer_splits_writes(client: ToxiproxyClient, port: int) -> None:
    client.add_toxic("p", "slicer", average_size=10, size_variation=0, delay=40_000)  # 40 ms
    with send_timed(port, bytes(range(100))) as (sock, elapsed):
        pieces = []
        while sum(map(len, pieces)) < 100:
            pieces.append(sock.recv(100))
        assert b"".join(pieces) == bytes(range(100))
        assert len(pieces) >= 5 and min(map(len, pieces)) >= 1
        assert elapsed() >= 0.2  # at least ~8 gaps of 40 ms between pieces


def test_timeout_drops_data_and_closes_after_the_timeout(
    client: ToxiproxyClient, port: int
) -> None:
    client.add_toxic("p", "timeout", timeout=400)
    with send_timed(port, b"lost") as (sock, elapsed):
        assert recv_until_closed(sock) == b""
        assert 0.4 <= elapsed() < 0.4 + SLACK


def test_slow_close_delays_the_close(client: ToxiproxyClient, greeter: TcpServer) -> None:
    port = port_of(client.create_proxy("g", greeter.address).listen)
    client.add_toxic("g", "slow_close", delay=500)
    with connect(port) as sock:
        start = time.monotonic()
        assert recv_exactly(sock, 2) == b"hi"
        assert time.monotonic() - start < 0.5  # the data is not delayed
        assert recv_until_closed(sock) == b""
        assert 0.5 <= time.monotonic() - start < 0.5 + SLACK


def test_toxicity_zero_never_applies(client: ToxiproxyClient, port: int) -> None:
    client.add_toxic("p", "latency", latency=1000, toxicity=0.0)
    client.add_toxic("p", "reset_peer", stream="upstream", toxicity=0.0)
    assert all(round_trip(port) < 1.0 for _ in range(5))


def test_disable_closes_connections_and_refuses_new_ones(
    client: ToxiproxyClient, port: int
) -> None:
    with connect(port) as sock:
        sock.sendall(b"a")
        assert recv_exactly(sock, 1) == b"a"
        client.disable("p")
        assert recv_until_closed(sock) == b""
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5)
    client.enable("p")
    assert round_trip(port) < SLACK  # the same port again


def test_reset_removes_toxics_and_enables_all(client: ToxiproxyClient, port: int) -> None:
    client.add_toxic("p", "timeout", timeout=0)
    client.disable("p")
    client.reset()
    assert round_trip(port) < 0.5


def test_a_failed_dial_closes_the_client_at_once(client: ToxiproxyClient) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))  # bound, never listening: connecting is refused
        upstream = f"127.0.0.1:{unused.getsockname()[1]}"
        port = port_of(client.create_proxy("dead", upstream).listen)
        with connect(port) as sock:
            assert recv_until_closed(sock) == b""


def test_deleting_a_proxy_closes_its_connections(client: ToxiproxyClient, port: int) -> None:
    with connect(port) as sock:
        sock.sendall(b"a")
        assert recv_exactly(sock, 1) == b"a"
        client.delete_proxy("p")
        assert recv_until_closed(sock) == b""


def test_a_close_lets_data_in_flight_drain_first(client: ToxiproxyClient, port: int) -> None:
    client.add_toxic("p", "latency", latency=300)
    with send_timed(port, b"last words") as (sock, elapsed):
        time.sleep(0.1)  # the echo is back in the proxy, held by the latency toxic
        sock.shutdown(socket.SHUT_WR)  # the proxy closes the server side: no half-close
        assert recv_until_closed(sock) == b"last words"  # but what it holds still comes
        assert 0.3 <= elapsed() < 0.3 + SLACK


def test_reset_peer_added_to_an_open_connection_closes_it_normally(
    client: ToxiproxyClient, port: int
) -> None:
    with connect(port) as sock:
        sock.sendall(b"a")
        assert recv_exactly(sock, 1) == b"a"  # the connection is open on the proxy's side
        client.add_toxic("p", "reset_peer", stream="upstream")  # the real server: no RST then
        sock.sendall(b"doomed")
        assert recv_until_closed(sock) == b""


def test_a_toxicity_update_re_rolls_on_open_connections(client: ToxiproxyClient, port: int) -> None:
    client.add_toxic("p", "latency", latency=300, toxicity=0.0)
    with connect(port) as sock:
        for expected_delay in (False, True):
            start = time.monotonic()
            sock.sendall(b"x")
            assert recv_exactly(sock, 1) == b"x"
            assert (time.monotonic() - start >= 0.3) is expected_delay
            client.update_toxic("p", "latency_downstream", toxicity=1.0)


# Values above int64 are refused; the largest one accepted works.
@deliberate("the real server's delay overflows at this latency and sends at once")
def test_the_largest_latency_holds_data_without_an_error(
    client: ToxiproxyClient, port: int, caplog: pytest.LogCaptureFixture
) -> None:
    client.add_toxic("p", "latency", latency=2**63 - 1, jitter=2**63 - 1)
    with caplog.at_level(logging.ERROR, logger="chaos.toxiproxy"), connect(port) as sock:
        sock.sendall(b"late")
        assert_held(sock, 0.5)
        client.remove_toxic("p", "latency_downstream")
        assert recv_exactly(sock, 4) == b"late"
    assert not caplog.records
