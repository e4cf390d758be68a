"""Helpers of the Toxiproxy tests: the server under test (the embedded one, or a real Toxiproxy
given by ``TOXIPROXY_URL``), what the loopback servers they proxy to do (each a
``chaos.net.TcpServer``), raw HTTP calls, and timing on the client's side of a proxy."""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pytest

TIMEOUT = 10.0

EXTERNAL_URL = os.environ.get("TOXIPROXY_URL", "").strip()
"""A Toxiproxy to test instead of the embedded server (a real one, to hold ours to it)."""


@dataclass(frozen=True)
class Endpoint:
    """Where the API under test answers."""

    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @classmethod
    def of(cls, url: str) -> Endpoint:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        assert parts.hostname is not None, f"not a Toxiproxy URL: {url!r}"
        return cls(parts.hostname, parts.port or 8474)


def deliberate(why: str) -> pytest.MarkDecorator:
    """Mark a test of a deliberate difference from the real Toxiproxy (``why``): it is skipped
    when the tests run against an external server."""
    return pytest.mark.skipif(
        bool(EXTERNAL_URL), reason=f"deliberate difference from the real Toxiproxy: {why}"
    )


def embedded(why: str) -> pytest.MarkDecorator:
    """Mark a test that looks inside the embedded server (``why``): skipped against another."""
    return pytest.mark.skipif(bool(EXTERNAL_URL), reason=f"embedded server only: {why}")


def echo(sock: socket.socket) -> None:
    """Send back everything received, until the peer closes."""
    while data := sock.recv(65536):
        sock.sendall(data)


def greet_and_close(sock: socket.socket) -> None:
    """Say ``hi`` and close at once."""
    sock.sendall(b"hi")


def connect(port: int) -> socket.socket:
    """A client socket to 127.0.0.1:``port`` with the tests' timeout."""
    return socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)


def recv_exactly(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes, or fewer if the peer closes first."""
    data = b""
    while len(data) < size and (chunk := sock.recv(size - len(data))):
        data += chunk
    return data


def recv_until_closed(sock: socket.socket) -> bytes:
    """Everything until the peer closes."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@contextmanager
def send_timed(port: int, payload: bytes) -> Iterator[tuple[socket.socket, Callable[[], float]]]:
    """Connect to 127.0.0.1:``port`` and send ``payload``; yields the socket and a clock that
    reads the seconds since the send began."""
    with connect(port) as sock:
        start = time.monotonic()
        sock.sendall(payload)
        yield sock, lambda: time.monotonic() - start


def round_trip(port: int, payload: bytes = b"ping") -> float:
    """Seconds for ``payload`` to go through a proxy to an echo server and back."""
    with send_timed(port, payload) as (sock, elapsed):
        assert recv_exactly(sock, len(payload)) == payload
        return elapsed()


def port_of(listen: str) -> int:
    """The port of a ``host:port`` listen address."""
    return int(listen.rsplit(":", 1)[1])


class Http:
    """Raw HTTP calls to an API (one keep-alive connection), for exact statuses and bodies."""

    def __init__(self, host: str, port: int) -> None:
        self.connection = http.client.HTTPConnection(host, port, timeout=TIMEOUT)

    def close(self) -> None:
        self.connection.close()

    def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> http.client.HTTPResponse:
        """Send one request (a non-bytes ``body`` is sent as JSON); the response, body read
        into ``response.data``."""
        raw = body if isinstance(body, bytes | str) or body is None else json.dumps(body)
        self.connection.request(method, path, body=raw, headers=headers or {})
        response = self.connection.getresponse()
        response.data = response.read()  # type: ignore[attr-defined]
        return response

    def json(self, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        """The decoded JSON answer, asserting its status."""
        response = self.call(method, path, body)
        assert response.status == expect, (response.status, response.data)  # type: ignore[attr-defined]
        return json.loads(response.data)  # type: ignore[attr-defined]

    def error(self, method: str, path: str, body: Any, status: int, message: str) -> None:
        """Assert the exact error answer of the real server."""
        response = self.call(method, path, body)
        assert response.status == status
        assert response.getheader("Content-Type") == "text/plain; charset=utf-8"
        expected = json.dumps({"error": message, "status": status}, separators=(",", ":"))
        assert response.data == (expected + "\n").encode()  # type: ignore[attr-defined]
