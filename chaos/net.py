"""Small network helpers shared by the test bed, the tests and the benchmarks."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Self

__all__ = ["TcpServer", "free_port"]

_JOIN_TIMEOUT = 10.0


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port on ``host`` that is free at the time of the call.

    The kernel picks an unused ephemeral port; the socket is closed again before returning, so
    another process could take the port in between. Callers that start a server on it should
    be ready to retry.

    Args:
        host: The address to bind to.

    Returns:
        The port number.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


class TcpServer:
    """A threaded TCP server on a free loopback port, for tests to connect to.

    ``serve(sock)`` runs per connection on a thread of its own; the connection is closed when
    it returns (or raises ``OSError``). Leaving ``with`` closes the listener and every
    connection.

    Args:
        serve: What to do with each accepted connection.
    """

    def __init__(self, serve: Callable[[socket.socket], None]) -> None:
        self._serve = serve
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def address(self) -> str:
        """``127.0.0.1:port``."""
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for sock in list(self._sockets):
            sock.close()
        self._thread.join(_JOIN_TIMEOUT)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(sock)
            threading.Thread(target=self._run, args=(sock,), daemon=True).start()

    def _run(self, sock: socket.socket) -> None:
        try:
            self._serve(sock)
        except OSError:
            pass
        finally:
            sock.close()
