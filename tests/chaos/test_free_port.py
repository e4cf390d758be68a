"""``chaos.net.free_port``: ports a server can be started on, and started again on after a kill,
while clients of this and other test workers keep connecting."""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import pytest

from chaos.net import _worker_slice, free_port


def _ephemeral_range() -> tuple[int, int]:
    first, last = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(first), int(last)


def test_a_free_port_is_outside_the_range_outgoing_connections_take_theirs_from() -> None:
    first, last = _ephemeral_range()
    ports = [free_port() for _ in range(200)]
    assert not [port for port in ports if first <= port <= last]


def test_a_free_port_is_never_handed_out_twice_in_a_process() -> None:
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)


def test_a_server_can_listen_on_a_free_port() -> None:
    port = free_port()
    with socket.create_server(("127.0.0.1", port)) as listener:
        assert listener.getsockname()[1] == port


def test_each_pytest_xdist_worker_draws_from_a_slice_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "4")
    slices = []
    for index in range(4):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{index}")
        slices.append(_worker_slice(10000, 32767))
    assert slices[0][0] == 10000 and slices[-1][1] <= 32767
    assert all(low <= high for low, high in slices)
    assert all(earlier[1] < later[0] for earlier, later in itertools.pairwise(slices))
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    assert _worker_slice(10000, 32767) == (10000, 32767)  # not a worker: the whole range
