"""The HTTP API through raw http.client: every path, status code, JSON shape and error body of
the real Toxiproxy 2.x (../shared/TOXIPROXY-API.md)."""

from __future__ import annotations

import socket

import pytest
from toxikit import Http, port_of

from chaos.net import TcpServer

UP = "127.0.0.1:9"  # never dialled in these tests: no client connects to the proxies


def make(api: Http, name: str = "p", **fields: object) -> dict[str, object]:
    body = {"name": name, "upstream": UP, "listen": "127.0.0.1:0", **fields}
    created: dict[str, object] = api.json("POST", "/proxies", body, expect=201)
    return created


def test_version_answers_json_and_a_newline(api: Http) -> None:
    response = api.call("GET", "/version")
    assert response.status == 200
    assert response.getheader("Content-Type") == "application/json"
    assert response.data == b'{"version": "2.12.0"}\n'  # type: ignore[attr-defined]


def test_create_binds_and_rewrites_listen(api: Http) -> None:
    assert api.json("GET", "/proxies") == {}
    proxy = make(api, listen="localhost:0")
    assert proxy["name"] == "p" and proxy["upstream"] == UP and proxy["enabled"] is True
    assert proxy["toxics"] == []
    host, port = str(proxy["listen"]).rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    socket.create_connection(("127.0.0.1", int(port)), timeout=5).close()  # it listens
    assert api.json("GET", "/proxies") == {"p": proxy}
    assert api.json("GET", "/proxies/p") == proxy


def test_create_errors(api: Http) -> None:
    make(api)
    api.error("POST", "/proxies", {"name": "p", "upstream": UP}, 409, "proxy already exists")
    api.error("POST", "/proxies", {"upstream": UP}, 400, "missing required field: name")
    api.error("POST", "/proxies", {"name": "q"}, 400, "missing required field: upstream")
    api.error("POST", "/proxies", b"", 400, "bad request body: EOF")
    bad = api.call("POST", "/proxies", b"{nope")
    assert bad.status == 400 and b"bad request body: " in bad.data  # type: ignore[attr-defined]
    typed = api.call("POST", "/proxies", {"name": "q", "upstream": UP, "enabled": "yes"})
    assert typed.status == 400 and b"cannot unmarshal string" in typed.data  # type: ignore[attr-defined]


def test_only_the_first_json_value_is_read_and_unknown_keys_are_ignored(api: Http) -> None:
    body = b'{"name": "p", "upstream": "127.0.0.1:9", "listen": "127.0.0.1:0", "x": 1} trailing'
    assert api.json("POST", "/proxies", body, expect=201)["name"] == "p"


def test_a_bind_failure_is_500_and_creates_nothing(api: Http) -> None:
    with TcpServer(lambda sock: None) as taken:
        response = api.call(
            "POST", "/proxies", {"name": "p", "upstream": UP, "listen": taken.address}
        )
        assert response.status == 500
        assert b"address already in use" in response.data  # type: ignore[attr-defined]
    api.error("GET", "/proxies/p", None, 404, "proxy not found")


@pytest.mark.parametrize("listen", ["0.0.0.0:0", ":0", "10.1.2.3:0", "example.com:0"])
def test_only_loopback_addresses_are_bound(api: Http, listen: str) -> None:
    response = api.call("POST", "/proxies", {"name": "p", "upstream": UP, "listen": listen})
    assert response.status == 500
    assert b"loopback addresses only" in response.data  # type: ignore[attr-defined]


def test_a_disabled_proxy_is_created_without_listening(api: Http) -> None:
    proxy = make(api, enabled=False)
    assert proxy["enabled"] is False and proxy["listen"] == "127.0.0.1:0"


def test_update_is_partial_by_post_or_patch_and_delete(api: Http) -> None:
    listen = make(api)["listen"]
    assert api.json("POST", "/proxies/p", {"enabled": False})["listen"] == listen
    enabled = api.json("PATCH", "/proxies/p", {"enabled": True})
    assert enabled["enabled"] is True and enabled["listen"] == listen  # the same address again
    moved = api.json("POST", "/proxies/p", {"upstream": "127.0.0.1:10"})
    assert moved["upstream"] == "127.0.0.1:10" and moved["enabled"] is True
    api.error("POST", "/proxies/p", b"", 400, "bad request body: EOF")
    api.error("POST", "/proxies/nope", {"enabled": False}, 404, "proxy not found")
    assert api.call("DELETE", "/proxies/p").status == 204
    api.error("DELETE", "/proxies/p", None, 404, "proxy not found")
    api.error("GET", "/proxies/p/toxics", None, 404, "proxy not found")


def test_toxic_defaults_and_listing_order(api: Http) -> None:
    make(api)
    latency = api.json("POST", "/proxies/p/toxics", {"type": "latency"})  # 200, not 201
    assert latency == {
        "name": "latency_downstream",
        "type": "latency",
        "stream": "downstream",
        "toxicity": 1.0,
        "attributes": {"latency": 0, "jitter": 0},
    }
    slicer = {"type": "slicer", "stream": "UpStream", "attributes": {"average_size": 9}}
    slicer = api.json("POST", "/proxies/p/toxics", slicer)
    assert slicer["name"] == "slicer_UpStream" and slicer["stream"] == "UpStream"
    assert slicer["attributes"] == {"average_size": 9, "size_variation": 0, "delay": 0}
    noop = api.json("POST", "/proxies/p/toxics", {"type": "noop", "name": "n", "toxicity": 0.5})
    assert noop["attributes"] == {} and noop["toxicity"] == 0.5
    names = [t["name"] for t in api.json("GET", "/proxies/p/toxics")]
    assert names == ["slicer_UpStream", "latency_downstream", "n"]  # upstream chain first
    assert api.json("GET", "/proxies/p")["toxics"] == api.json("GET", "/proxies/p/toxics")


def test_toxic_errors(api: Http) -> None:
    make(api)
    path = "/proxies/p/toxics"
    api.json("POST", path, {"type": "latency", "name": "t", "stream": "upstream"})
    api.error("POST", path, {"type": "noop", "name": "t"}, 409, "toxic already exists")
    api.error("POST", path, {"type": "noop", "stream": "sideways"}, 400,
              "stream was invalid, can be either upstream or downstream")  # fmt: skip
    api.error("POST", path, {"type": "poison"}, 400, "invalid toxic type")
    api.error("POST", path, {}, 400, "invalid toxic type")
    api.error("POST", path, b"", 400, "bad request body: EOF")
    api.error("POST", "/proxies/nope/toxics", {"type": "noop"}, 404, "proxy not found")
    api.error("GET", f"{path}/nope", None, 404, "toxic not found")
    api.error("POST", f"{path}/nope", {"toxicity": 1}, 404, "toxic not found")
    api.error("DELETE", f"{path}/nope", None, 404, "toxic not found")
    wrong = api.call("POST", path, {"type": "latency", "attributes": {"latency": "300"}})
    assert wrong.status == 400 and b"bad request body" in wrong.data  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("kind", "attributes"),
    [("bandwidth", {"rate": -1}), ("slicer", {"average_size": 0}), ("slicer", {})],
)
def test_input_that_crashes_the_real_server_is_400(
    api: Http, kind: str, attributes: dict[str, int]
) -> None:
    make(api)
    response = api.call("POST", "/proxies/p/toxics", {"type": kind, "attributes": attributes})
    assert response.status == 400
    assert api.json("GET", "/proxies/p/toxics") == []


def test_toxic_update_is_partial_and_delete(api: Http) -> None:
    make(api)
    path = "/proxies/p/toxics"
    api.json("POST", path, {"type": "latency", "attributes": {"latency": 100, "jitter": 5}})
    updated = api.json("PATCH", f"{path}/latency_downstream", {"attributes": {"latency": 7}})
    assert updated["attributes"] == {"latency": 7, "jitter": 5} and updated["toxicity"] == 1.0
    updated = api.json("POST", f"{path}/latency_downstream", {"toxicity": 0.25})
    assert updated["attributes"] == {"latency": 7, "jitter": 5} and updated["toxicity"] == 0.25
    assert api.json("GET", f"{path}/latency_downstream") == updated
    assert api.call("DELETE", f"{path}/latency_downstream").status == 204
    assert api.json("GET", path) == []


def test_populate_keeps_replaces_and_leaves_alone(api: Http) -> None:
    kept = make(api, "kept")
    api.json("POST", "/proxies/kept/toxics", {"type": "noop"})
    other = make(api, "other")
    replaced = make(api, "replaced")
    body = [
        {"name": "kept", "listen": kept["listen"], "upstream": UP},
        {"name": "replaced", "listen": "127.0.0.1:0", "upstream": "127.0.0.1:10"},
        {"name": "new", "listen": "127.0.0.1:0", "upstream": UP, "enabled": False},
    ]
    answer = api.json("POST", "/populate", body, expect=201)
    assert [p["name"] for p in answer["proxies"]] == ["kept", "replaced", "new"]
    proxies = api.json("GET", "/proxies")
    assert proxies["kept"]["toxics"] and proxies["kept"]["listen"] == kept["listen"]
    assert proxies["replaced"]["upstream"] == "127.0.0.1:10"
    assert proxies["replaced"]["listen"] != replaced["listen"]
    assert proxies["new"]["enabled"] is False
    assert proxies["other"] == other


def test_populate_errors_change_nothing(api: Http) -> None:
    good = {"name": "a", "listen": "127.0.0.1:0", "upstream": UP}
    api.error("POST", "/populate", [good, {"listen": "127.0.0.1:0", "upstream": UP}], 400,
              "missing required field: name at proxy 2")  # fmt: skip
    api.error("POST", "/populate", [good, {"name": "b"}], 400,
              "missing required field: upstream at proxy 2")  # fmt: skip
    api.error("POST", "/populate", b"", 400, "bad request body: EOF")
    response = api.call("POST", "/populate", good)
    assert response.status == 400 and b"bad request body" in response.data  # type: ignore[attr-defined]
    assert api.json("GET", "/proxies") == {}


def test_reset_enables_every_proxy_and_removes_every_toxic(api: Http) -> None:
    make(api, "a", enabled=False)
    b = make(api, "b")
    api.json("POST", "/proxies/b/toxics", {"type": "timeout"})
    api.json("POST", "/proxies/b", {"enabled": False})
    response = api.call("POST", "/reset")
    assert response.status == 204 and response.data == b""  # type: ignore[attr-defined]
    proxies = api.json("GET", "/proxies")
    assert proxies["a"]["enabled"] and proxies["b"]["enabled"]
    assert proxies["b"]["toxics"] == [] and proxies["b"]["listen"] == b["listen"]
    socket.create_connection(("127.0.0.1", port_of(str(b["listen"]))), timeout=5).close()


def test_unknown_paths_wrong_methods_and_browsers(api: Http) -> None:
    for path in ("/nope", "/proxies/p/toxics/t/x", "/proxies/"):
        response = api.call("GET", path)
        assert response.status == 404
        assert response.data == b"404 page not found\n"  # type: ignore[attr-defined]
    for method, path in (("GET", "/reset"), ("PUT", "/proxies"), ("DELETE", "/version")):
        response = api.call(method, path)
        assert response.status == 405 and response.data == b""  # type: ignore[attr-defined]
    browser = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64)"}
    response = api.call("GET", "/proxies", headers=browser)
    assert response.status == 403
    assert response.data == b'{"error":"User agent not allowed","status":403}\n'  # type: ignore[attr-defined]


def test_keep_alive_and_connection_close(api: Http) -> None:
    for _ in range(3):  # one connection, several requests
        assert api.call("GET", "/version").status == 200
    response = api.call("GET", "/version", headers={"Connection": "close"})
    assert response.status == 200 and response.getheader("Connection") == "close"


def test_chunked_bodies_expect_continue_and_malformed_requests(server: object, api: Http) -> None:
    port: int = server.port  # type: ignore[attr-defined]
    body = b'{"name": "c", "upstream": "127.0.0.1:9", "listen": "127.0.0.1:0"}'
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        head = b"POST /proxies HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        sock.sendall(head + b"Expect: 100-continue\r\n\r\n")
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(chunked)
        assert sock.recv(1000).startswith(b"HTTP/1.1 201 Created\r\n")
        sock.sendall(b"NONSENSE\r\n\r\n")
        assert sock.recv(1000).startswith(b"HTTP/1.1 400 Bad Request\r\n")
        assert sock.recv(1000) == b""  # and closed
    assert api.json("GET", "/proxies/c")["name"] == "c"


def test_concurrent_creates_of_one_name_make_one_proxy(api: Http, server: object) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def create(_: int) -> int:
        raw = Http("127.0.0.1", server.port)  # type: ignore[attr-defined]
        try:
            body = {"name": "one", "upstream": UP, "listen": "127.0.0.1:0"}
            return raw.call("POST", "/proxies", body).status
        finally:
            raw.close()

    with ThreadPoolExecutor(8) as pool:
        statuses = sorted(pool.map(create, range(8)))
    assert statuses == [201] + [409] * 7
