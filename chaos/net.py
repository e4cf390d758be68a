"""Small network helpers shared by the test bed."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


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
