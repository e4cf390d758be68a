"""What the API reads and answers: request bodies checked like the real server's Go decoder,
toxic records, listen addresses, and the API's error type with the real server's messages."""

from __future__ import annotations

import ipaddress
import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from chaos.toxiproxy.toxics import ATTRIBUTES, invalid_attributes

__all__ = [
    "PROXY_FIELDS",
    "ApiError",
    "Toxic",
    "decode_body",
    "format_address",
    "json_kind",
    "listen_address",
    "loopback_address",
    "new_toxic",
    "proxy_fields",
    "resolved_listen",
    "update_toxic",
]


class ApiError(Exception):
    """An error answer: ``status`` and the ``error`` text of the JSON body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


PROXY_NOT_FOUND = ApiError(404, "proxy not found")
TOXIC_NOT_FOUND = ApiError(404, "toxic not found")
PROXY_EXISTS = ApiError(409, "proxy already exists")
TOXIC_EXISTS = ApiError(409, "toxic already exists")
INVALID_STREAM = ApiError(400, "stream was invalid, can be either upstream or downstream")
INVALID_TYPE = ApiError(400, "invalid toxic type")

_GO_TYPES = {str: "string", bool: "bool", float: "float32", int: "int64", dict: "struct"}


def json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else "null"


def bad_body(detail: str) -> ApiError:
    """The 400 the real server gives when its JSON decoder fails."""
    return ApiError(400, f"bad request body: {detail}")


class _Literal(float):
    """A JSON number as a float that remembers how it was written (for error texts)."""

    text: str

    def __new__(cls, text: str) -> _Literal:
        number = super().__new__(cls, text)
        number.text = text
        return number


def _no_constant(name: str) -> Any:
    raise ValueError(f"invalid character {name[0]!r} looking for beginning of value")


_DECODER = json.JSONDecoder(parse_float=_Literal, parse_constant=_no_constant)


def decode_body(raw: bytes) -> Any:
    """The first JSON value of a request body (the rest is ignored, as Go's decoder does).

    ``NaN`` and ``Infinity`` are not JSON and are refused, as Go refuses them.

    Raises:
        ApiError: 400 on an empty, malformed or too deeply nested body.
    """
    text = raw.decode("utf-8", "replace").lstrip()
    if not text:
        raise bad_body("EOF")
    try:
        value, _ = _DECODER.raw_decode(text)
    except json.JSONDecodeError as exc:
        raise bad_body(f"invalid JSON: {exc.msg}") from exc
    except ValueError as exc:  # NaN, Infinity
        raise bad_body(f"invalid JSON: {exc}") from exc
    except RecursionError:
        raise bad_body("invalid JSON: nested too deeply") from None
    return value


FLOAT32_MAX = 3.4028234663852886e38
INT64 = range(-(2**63), 2**63)


def _fits_number(value: int | float, kind: type) -> bool:
    """Whether a JSON number fits the Go type: int64 for ints, a finite float32 for floats."""
    if kind is int:
        return value in INT64
    return abs(value) <= FLOAT32_MAX  # false for inf (1e999) and NaN too


def typed(body: Any, struct: str, key: str, kind: type, default: Any) -> Any:
    """``body[key]`` if it has the Go field's type, ``default`` if absent or null.

    Raises:
        ApiError: 400 when the value has another JSON type (ints pass for floats, not bools),
            or is a number the Go type cannot hold (above int64, beyond float32).
    """
    if not isinstance(body, dict):
        raise bad_body(f"json: cannot unmarshal {json_kind(body)} into Go value of type {struct}")
    value = body.get(key)
    if value is None:
        return default
    fits = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float:
        fits = isinstance(value, int | float) and not isinstance(value, bool)
    where = f"into Go struct field {struct}.{key} of type {_GO_TYPES[kind]}"
    if not fits:
        raise bad_body(f"json: cannot unmarshal {json_kind(value)} {where}")
    if kind in (int, float) and not _fits_number(value, kind):
        raise bad_body(f"json: cannot unmarshal number {getattr(value, 'text', value)} {where}")
    return float(value) if kind is float else value


PROXY_FIELDS = ("name", "listen", "upstream", "enabled")
"""What a proxy body sets and the API shows of a proxy (besides its toxics)."""


def proxy_fields(body: Any, current: dict[str, Any]) -> dict[str, Any]:
    """``name``, ``listen``, ``upstream`` and ``enabled`` from a proxy body over ``current``."""
    return {
        key: typed(body, "proxy.Proxy", key, bool if key == "enabled" else str, current[key])
        for key in PROXY_FIELDS
    }


_uids = itertools.count(1)


@dataclass(eq=False)
class Toxic:
    """One toxic of one proxy. Links read it live; ``version`` counts updates (each one re-rolls
    toxicity and restarts the toxic on open links); ``removed`` turns it into a pass-through for
    data already inside it."""

    name: str
    type: str
    stream: str  # as the client sent it
    toxicity: float
    attributes: dict[str, int]
    uid: int = field(default_factory=lambda: next(_uids))
    version: int = 0
    removed: bool = False

    @property
    def direction(self) -> str:
        """``upstream`` (client to server) or ``downstream``."""
        return self.stream.lower()

    def to_json(self) -> dict[str, Any]:
        """The API's view of the toxic."""
        return {
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": dict(self.attributes),
        }


def _attributes(kind: str, body: Any, current: dict[str, int]) -> dict[str, int]:
    raw = typed(body, "toxics.ToxicWrapper", "attributes", dict, {})
    struct = f"{kind.title().replace('_', '')}Toxic.attributes"
    merged = {
        name: typed(raw, struct, name, int, current.get(name, 0)) for name in ATTRIBUTES[kind]
    }
    problem = invalid_attributes(kind, merged)
    if problem is not None:
        raise ApiError(400, problem)
    return merged


def new_toxic(body: Any, taken: set[str]) -> Toxic:
    """A toxic from a creation body, checked in the real server's order.

    Raises:
        ApiError: 400 (bad body, stream, type or attributes) or 409 (name in ``taken``).
    """
    struct = "toxics.ToxicWrapper"
    stream = typed(body, struct, "stream", str, "downstream")
    kind = typed(body, struct, "type", str, "")
    toxicity = typed(body, struct, "toxicity", float, 1.0)
    name = typed(body, struct, "name", str, "") or f"{kind}_{stream}"
    if stream.lower() not in ("upstream", "downstream"):
        raise INVALID_STREAM
    if kind not in ATTRIBUTES:
        raise INVALID_TYPE
    if name in taken:
        raise TOXIC_EXISTS
    return Toxic(name, kind, stream, toxicity, _attributes(kind, body, {}))


def update_toxic(toxic: Toxic, body: Any) -> None:
    """Apply a partial update (attributes, toxicity) in place and bump the version.

    Raises:
        ApiError: 400 on a bad body; the toxic is then unchanged.
    """
    toxicity = typed(body, "toxics.ToxicWrapper", "toxicity", float, toxic.toxicity)
    toxic.attributes = _attributes(toxic.type, body, toxic.attributes)
    toxic.toxicity = toxicity
    toxic.version += 1


ANY_PORT = ("127.0.0.1", 0)
"""Where an empty ``listen`` binds: any free port (the real server also binds every interface)."""


def listen_address(listen: str) -> tuple[str, int]:
    """Host and port of a ``listen`` string, resolved as the real server resolves it before
    binding: ``localhost`` is ``127.0.0.1``, IP addresses are written the standard way, and an
    empty ``listen`` is ``127.0.0.1:0``. Host names other than ``localhost`` are kept as given.

    Raises:
        ApiError: 500 (the real server's status for address errors) when malformed.
    """
    if not listen:
        return ANY_PORT
    host, sep, port_text = listen.rpartition(":")
    if not sep or not port_text.isdigit() or int(port_text) > 65535:
        raise ApiError(500, f"listen tcp: address {listen}: missing or invalid port")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if host.lower() == "localhost":
        return "127.0.0.1", int(port_text)
    try:
        return str(ipaddress.ip_address(host)), int(port_text)
    except ValueError:
        return host, int(port_text)


def format_address(host: str, port: int) -> str:
    """``host:port``, IPv6 hosts in brackets (as the API shows a bound ``listen``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def resolved_listen(listen: str) -> str:
    """``listen`` written as the real server compares it with a proxy's bound address."""
    return format_address(*listen_address(listen))


def loopback_address(listen: str) -> tuple[str, int]:
    """Host and port to bind for a ``listen`` string (see ``listen_address``).

    Raises:
        ApiError: 500 when the address is malformed or not a loopback address: this server
            never binds anything else, whether the proxy is enabled or not.
    """
    host, port = listen_address(listen)
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:  # ":PORT" too: the real server binds every interface for it
        raise ApiError(
            500,
            f"listen tcp {listen}: refused: this Toxiproxy binds loopback addresses only "
            "(127.0.0.0/8, ::1 or localhost)",
        )
    return host, port
