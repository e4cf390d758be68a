"""``haclient.metrics.serve``: a port it cannot use is an error naming the port."""

from __future__ import annotations

import socket

import pytest

from haclient.errors import ConfigurationError
from haclient.metrics import serve


@pytest.mark.parametrize("port", [99999, -1, 65536, 1.5, True])
def test_item13_serve_refuses_a_port_out_of_range_naming_it(port: object) -> None:
    with pytest.raises(ConfigurationError, match="port must be a whole number") as caught:
        serve(port)  # type: ignore[arg-type]
    assert caught.value.option == "port" and repr(port) in str(caught.value)


def test_item13_serve_on_a_busy_port_says_which_address_is_taken() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot serve metrics on 127.0.0.1:{port}: .*in use"):
            serve(port)


def test_serve_on_a_free_port_serves_and_stops() -> None:
    with serve(0) as server:
        assert server.port > 0 and server.url.endswith(f":{server.port}/metrics")
