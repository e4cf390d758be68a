"""The HTTP API through raw http.client: every path, status code, header, JSON shape and error
body of the real Toxiproxy 2.x (its API tests' facts, checked against a real 2.12 server)."""

from __future__ import annotations

import json
import re
import socket

import pytest
from toxikit import Endpoint, Http, connect, deliberate, port_of, round_trip

from chaos.net import TcpServer

UP = "127.0.0.1:9"  # never dialled in these tests: no client connects to the proxies


def make(api: Http, name: str = "p", **fields: object) -> dict[str, object]:
    body = {"name": name, "upstream": UP, "listen": "127.0.0.1:0", **fields}
    created: dict[str, object] = api.json("POST", "/proxies", body, expect=201)
    return created


def test_version_answers_json_and_a_newline(api: Http) -> None:
    response = api.call("GET", "/version")
    assert response.status == 200
    assert response.getheader("Content-Type") == "application/json;charset=utf-8"
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


@deliberate("the real server binds any address; this one binds loopback only")
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


@deliberate("the real server crashes on these")
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


def populate_error(api: Http, body: object, status: int, message: str) -> None:
    """Assert a ``/populate`` error: JSON with ``proxies`` null, no newline (unlike others)."""
    response = api.call("POST", "/populate", body)
    assert response.status == status
    assert response.getheader("Content-Type") == "application/json"
    expected = {"error": message, "status": status, "proxies": None}
    assert response.data == json.dumps(expected, separators=(",", ":")).encode()  # type: ignore[attr-defined]


def test_item10_populate_errors_are_json_and_change_nothing(api: Http) -> None:
    good = {"name": "a", "listen": "127.0.0.1:0", "upstream": UP}
    populate_error(api, [good, {"listen": "127.0.0.1:0", "upstream": UP}], 400,
                   "missing required field: name at proxy 2")  # fmt: skip
    populate_error(api, [good, {"name": "b"}], 400, "missing required field: upstream at proxy 2")
    populate_error(api, b"", 400, "bad request body: EOF")
    response = api.call("POST", "/populate", good)
    assert response.status == 400 and b"bad request body" in response.data  # type: ignore[attr-defined]
    assert response.getheader("Content-Type") == "application/json"
    assert api.json("GET", "/proxies") == {}
    assert api.json("POST", "/populate", [], expect=201) == {"proxies": None}  # Go's empty list


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


def test_keep_alive_and_connection_close(api: Http) -> None:
    for _ in range(3):  # one connection, several requests
        assert api.call("GET", "/version").status == 200
    response = api.call("GET", "/version", headers={"Connection": "close"})
    assert response.status == 200 and response.getheader("Connection") == "close"


def test_chunked_bodies_expect_continue_and_malformed_requests(server: Endpoint, api: Http) -> None:
    port = server.port
    body = b'{"name": "c", "upstream": "127.0.0.1:9", "listen": "127.0.0.1:0"}'
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    with socket.create_connection((server.host, port), timeout=5) as sock:
        head = b"POST /proxies HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        sock.sendall(head + b"Expect: 100-continue\r\n\r\n")
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(chunked)
        assert sock.recv(1000).startswith(b"HTTP/1.1 201 Created\r\n")
        sock.sendall(b"NONSENSE\r\n\r\n")
        assert sock.recv(1000).startswith(b"HTTP/1.1 400 Bad Request\r\n")
        assert sock.recv(1000) == b""  # and closed
    assert api.json("GET", "/proxies/c")["name"] == "c"


def test_concurrent_creates_of_one_name_make_one_proxy(api: Http, server: Endpoint) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def create(_: int) -> int:
        raw = Http(server.host, server.port)
        try:
            body = {"name": "one", "upstream": UP, "listen": "127.0.0.1:0"}
            return raw.call("POST", "/proxies", body).status
        finally:
            raw.close()

    with ThreadPoolExecutor(8) as pool:
        statuses = sorted(pool.map(create, range(8)))
    assert statuses == [201] + [409] * 7


# --- What independent trials found against the real server -------------------------------------


@pytest.mark.parametrize("body", [{}, {"listen": ""}], ids=["missing", "empty"])
def test_item8_a_missing_or_empty_listen_binds_a_free_port(
    api: Http, echo_server: TcpServer, body: dict[str, str]
) -> None:
    proxy = api.json(
        "POST", "/proxies", {"name": "p", "upstream": echo_server.address, **body}, 201
    )
    assert port_of(str(proxy["listen"])) > 0 and proxy["enabled"] is True
    assert round_trip(port_of(str(proxy["listen"]))) < 5
    populated = api.json("POST", "/populate", [{"name": "q", "upstream": UP, **body}], 201)
    assert port_of(populated["proxies"][0]["listen"]) > 0


@deliberate("the real server binds every interface for an empty listen")
def test_item8_a_missing_listen_binds_loopback_only(api: Http) -> None:
    proxy = api.json("POST", "/proxies", {"name": "p", "upstream": UP}, expect=201)
    assert str(proxy["listen"]).startswith("127.0.0.1:")


def test_item9_populate_and_update_resolve_listen_before_comparing(
    api: Http, echo_server: TcpServer
) -> None:
    proxy = make(api, upstream=echo_server.address)
    port = port_of(str(proxy["listen"]))
    api.json("POST", "/proxies/p/toxics", {"type": "noop"})
    with connect(port) as sock:
        sock.sendall(b"one")
        assert sock.recv(3) == b"one"
        same = [{"name": "p", "listen": f"localhost:{port}", "upstream": echo_server.address}]
        answer = api.json("POST", "/populate", same, expect=201)
        assert answer["proxies"][0]["listen"] == f"127.0.0.1:{port}"
        assert [t["name"] for t in answer["proxies"][0]["toxics"]] == ["noop_downstream"]
        updated = api.json("PATCH", "/proxies/p", {"listen": f"localhost:{port}"})
        assert updated["listen"] == f"127.0.0.1:{port}" and updated["toxics"]
        sock.sendall(b"two")  # the connection was kept through both
        assert sock.recv(3) == b"two"


REQUEST_ID = re.compile(r"[0-9a-v]{20}")


def test_item10_routed_answers_carry_a_request_id(api: Http) -> None:
    ids = set()
    for method, path in (("GET", "/version"), ("GET", "/proxies"), ("GET", "/proxies/nope")):
        response = api.call(method, path)
        request_id = response.getheader("X-Toxiproxy-Request-Id") or ""
        assert REQUEST_ID.fullmatch(request_id), (path, request_id)
        ids.add(request_id)
    assert len(ids) == 3
    assert api.call("GET", "/nope").getheader("X-Toxiproxy-Request-Id") is None  # no route


def test_item10_a_port_conflict_names_the_resolved_address(api: Http) -> None:
    port = port_of(str(make(api, listen="localhost:0")["listen"]))
    body = {"name": "q", "upstream": UP, "listen": f"localhost:{port}"}
    api.error("POST", "/proxies", body, 500,
              f"listen tcp 127.0.0.1:{port}: bind: address already in use")  # fmt: skip


def test_item10_browsers_get_plain_text_403_on_known_routes_only(api: Http) -> None:
    browser = {"User-Agent": "Mozilla/5.0 (X11; Linux x86_64)"}
    response = api.call("GET", "/proxies", headers=browser)
    assert response.status == 403
    assert response.getheader("Content-Type") == "text/plain; charset=utf-8"
    assert response.data == b"User agent not allowed\n"  # type: ignore[attr-defined]
    assert api.call("GET", "/nope", headers=browser).status == 404
    assert api.call("PUT", "/proxies", headers=browser).status == 405


def test_item12_a_disabled_proxy_is_stored_whatever_its_listen_as_the_real_server_does(
    api: Http,
) -> None:
    """Toxiproxy 2.12 answers 201 and stores a disabled proxy on ``0.0.0.0:0``: a disabled
    proxy does not listen, so nothing is bound."""
    body = {"name": "p", "upstream": UP, "listen": "0.0.0.0:0", "enabled": False}
    created = api.json("POST", "/proxies", body, expect=201)
    assert (created["listen"], created["enabled"]) == ("0.0.0.0:0", False)
    assert api.json("GET", "/proxies/p")["listen"] == "0.0.0.0:0"
    make(api, "q", enabled=False)
    assert api.json("PATCH", "/proxies/q", {"listen": "0.0.0.0:0"})["listen"] == "0.0.0.0:0"
    populated = api.json("POST", "/populate", [{**body, "name": "r"}], expect=201)
    assert [p["name"] for p in populated["proxies"]] == ["r"]
    assert sorted(api.json("GET", "/proxies")) == ["p", "q", "r"]


@deliberate("the real server binds any address; this one binds loopback only")
def test_item12_a_stored_non_loopback_proxy_is_never_bound(api: Http) -> None:
    body = {"name": "p", "upstream": UP, "listen": "0.0.0.0:0", "enabled": False}
    api.json("POST", "/proxies", body, expect=201)
    response = api.call("PATCH", "/proxies/p", {"enabled": True})
    assert response.status == 500 and b"loopback addresses only" in response.data  # type: ignore[attr-defined]
    assert api.json("GET", "/proxies/p")["enabled"] is False
    make(api, "q")  # enabled, on loopback
    response = api.call("PATCH", "/proxies/q", {"listen": "0.0.0.0:0"})
    assert response.status == 500 and b"loopback addresses only" in response.data  # type: ignore[attr-defined]
    assert api.json("GET", "/proxies/q")["enabled"] is True  # left as it was
    response = api.call("POST", "/reset")  # would enable p: refused, as a bind error is
    assert response.status == 500 and b"loopback addresses only" in response.data  # type: ignore[attr-defined]
    assert api.json("GET", "/proxies/p")["enabled"] is False


def strict_json(data: bytes) -> object:
    """Decode as a strict JSON parser does: NaN and Infinity are not JSON."""

    def refuse(constant: str) -> object:
        raise ValueError(f"not JSON: {constant}")

    return json.loads(data, parse_constant=refuse)


@pytest.mark.parametrize("toxicity", [b"NaN", b"Infinity", b"-Infinity", b"1e999", b"1e39"])
def test_item12_toxicity_must_be_a_finite_float32(api: Http, toxicity: bytes) -> None:
    make(api)
    body = b'{"type": "noop", "toxicity": %s}' % toxicity
    response = api.call("POST", "/proxies/p/toxics", body)
    assert response.status == 400 and b"bad request body" in response.data  # type: ignore[attr-defined]
    api.json("POST", "/proxies/p/toxics", {"type": "noop"})
    response = api.call(
        "PATCH", "/proxies/p/toxics/noop_downstream", b'{"toxicity": %s}' % toxicity
    )
    assert response.status == 400
    proxies = strict_json(api.call("GET", "/proxies").data)  # type: ignore[attr-defined]
    assert proxies["p"]["toxics"][0]["toxicity"] == 1.0  # type: ignore[index]


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**400])
def test_item12_integer_attributes_must_fit_int64(api: Http, value: int) -> None:
    make(api)
    body = {"type": "latency", "attributes": {"latency": value}}
    response = api.call("POST", "/proxies/p/toxics", body)
    assert response.status == 400 and b"bad request body" in response.data  # type: ignore[attr-defined]
    api.json("POST", "/proxies/p/toxics", {"type": "latency", "attributes": {"latency": 2**63 - 1}})
    path = "/proxies/p/toxics/latency_downstream"
    assert api.call("PATCH", path, {"attributes": {"latency": value}}).status == 400
    assert api.json("GET", path)["attributes"]["latency"] == 2**63 - 1


def test_item12_deeply_nested_json_is_400(api: Http) -> None:
    for body in (b"[" * 100_000, b'{"a":' * 100_000):
        response = api.call("POST", "/proxies", body)
        assert response.status == 400 and b"bad request body" in response.data  # type: ignore[attr-defined]
    assert api.call("GET", "/version").status == 200


def raw_answer(server: Endpoint, request: bytes) -> bytes:
    """What the server answers to raw ``request`` bytes, read until it closes."""
    with socket.create_connection((server.host, server.port), timeout=5) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        return answer


def test_item12_conflicting_content_lengths_are_400(server: Endpoint, api: Http) -> None:
    body = b'{"name": "c", "upstream": "127.0.0.1:9"}'
    head = b"POST /proxies HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nContent-Length: %d\r\n\r\n"
    answer = raw_answer(server, head % (len(body), len(body) + 100) + body)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    api.error("GET", "/proxies/c", None, 404, "proxy not found")


@deliberate("this server limits request bodies to 16 MiB; the real one has no limit")
def test_item12_a_chunk_beyond_the_body_limit_is_400_at_once(server: Endpoint) -> None:
    head = b"POST /proxies HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    answer = raw_answer(server, head + b"%x\r\n" % (16 * 1024 * 1024 + 1))  # and no data
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
