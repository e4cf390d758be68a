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
    "json_kind",
    "loopback_address",
    "new_toxic",
    "proxy_fields",
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


def decode_body(raw: bytes) -> Any:
    """The first JSON value of a request body (the rest is ignored, as Go's decoder does).

    Raises:
        ApiError: 400 on an empty or malformed body.
    """
    text = raw.decode("utf-8", "replace").lstrip()
    if not text:
        raise bad_body("EOF")
    try:
        value, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as exc:
        raise bad_body(f"invalid JSON: {exc.msg}") from exc
    return value


def typed(body: Any, struct: str, key: str, kind: type, default: Any) -> Any:
    """``body[key]`` if it has the Go field's type, ``default`` if absent or null.

    Raises:
        ApiError: 400 when the value has another JSON type (ints pass for floats, not bools).
    """
    if not isinstance(body, dict):
        raise bad_body(f"json: cannot unmarshal {json_kind(body)} into Go value of type {struct}")
    value = body.get(key)
    if value is None:
        return default
    fits = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if kind is float:
        fits = isinstance(value, int | float) and not isinstance(value, bool)
    if not fits:
        raise bad_body(
            f"json: cannot unmarshal {json_kind(value)} into Go struct field "
            f"{struct}.{key} of type {_GO_TYPES[kind]}"
        )
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


def loopback_address(listen: str) -> tuple[str, int]:
    """Host and port to bind for a ``listen`` string; ``localhost`` means ``127.0.0.1``.

    Raises:
        ApiError: 500 (the real server's status for address errors) when the address is
            malformed or not a loopback address: this server never binds anything else.
    """
    host, sep, port_text = listen.rpartition(":")
    if listen and (not sep or not port_text.isdigit() or int(port_text) > 65535):
        raise ApiError(500, f"listen tcp: address {listen}: missing or invalid port")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    host = "127.0.0.1" if host == "localhost" else host
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:  # an empty listen: the real server binds every interface
        raise ApiError(
            500,
            f"listen tcp {listen}: refused: this Toxiproxy binds loopback addresses only "
            "(127.0.0.0/8, ::1 or localhost)",
        )
    return host, int(port_text)
