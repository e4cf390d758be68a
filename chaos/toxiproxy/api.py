"""The Toxiproxy 2.x HTTP API: routes, status codes, headers and JSON shapes of the real server
over a ``Registry``.

As in the real server, what a matched route answers carries an ``X-Toxiproxy-Request-Id`` and
is refused to browsers (403, plain text); an unknown path (404) or a wrong method (405) is
answered before either."""

from __future__ import annotations

import base64
import itertools
import json
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote, urlsplit

from chaos.toxiproxy.http import Request, Response
from chaos.toxiproxy.model import ApiError, decode_body
from chaos.toxiproxy.registry import Registry

__all__ = ["VERSION", "Api"]

VERSION = "2.12.0"
"""The Toxiproxy version this server imitates."""

log = logging.getLogger("chaos.toxiproxy")

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"
NOSNIFF = {"X-Content-Type-Options": "nosniff"}  # Go's http.Error sends it with plain text
REQUEST_ID = "X-Toxiproxy-Request-Id"

Action = Callable[..., Awaitable[Response]]


def ok(value: Any, status: int = 200) -> Response:
    """A JSON answer, compact as Go's encoder writes it (never NaN or Infinity: not JSON)."""
    body = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return Response(status, body.encode(), JSON)


def error(exc: ApiError) -> Response:
    """An error answer: ``{"error": ..., "status": ...}`` and a newline, as plain text."""
    body = json.dumps({"error": exc.message, "status": exc.status}, separators=(",", ":"))
    return Response(exc.status, (body + "\n").encode(), TEXT, dict(NOSNIFF))


def plain(status: int, text: str) -> Response:
    """A plain-text answer as Go's ``http.Error`` writes it (the text and a newline)."""
    return Response(status, f"{text}\n".encode(), TEXT, dict(NOSNIFF))


_ids = itertools.count(int.from_bytes(os.urandom(3), "big"))
_MACHINE = os.urandom(3)


def request_id() -> str:
    """A new request id in the real server's format (an xid: 20 characters of base32hex from
    the time, a machine id, the process id and a counter)."""
    raw = (
        int(time.time()).to_bytes(4, "big")
        + _MACHINE
        + (os.getpid() & 0xFFFF).to_bytes(2, "big")
        + (next(_ids) & 0xFFFFFF).to_bytes(3, "big")
    )
    return base64.b32hexencode(raw).decode().rstrip("=").lower()


def _deprecated_post(request: Request, route: str) -> None:
    """Log an update by POST as the real server does (PATCH is the method it wants)."""
    if request.method == "POST":
        log.warning("%s: HTTP method POST is deprecated. Use HTTP PATCH instead.", route)


class Api:
    """Answers API requests; every call runs on the server's event loop."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        name = "([^/]+)"
        table: list[tuple[str, dict[str, Action]]] = [
            ("/version", {"GET": self.version}),
            ("/reset", {"POST": self.reset}),
            ("/populate", {"POST": self.populate}),
            ("/proxies", {"GET": self.proxies, "POST": self.create}),
            (f"/proxies/{name}", self._each("show", "update", "delete")),
            (f"/proxies/{name}/toxics", {"GET": self.toxics, "POST": self.add_toxic}),
            (f"/proxies/{name}/toxics/{name}", self._each("toxic", "update_toxic", "remove")),
        ]
        self._routes = [(re.compile(path + "$"), methods) for path, methods in table]

    def _each(self, show: str, update: str, delete: str) -> dict[str, Action]:
        return {
            "GET": getattr(self, show),
            "POST": getattr(self, update),
            "PATCH": getattr(self, update),
            "DELETE": getattr(self, delete),
        }

    async def handle(self, request: Request) -> Response:
        """The answer to one request."""
        path = urlsplit(request.target).path
        for pattern, methods in self._routes:
            match = pattern.match(path)
            if match is None:
                continue
            action = methods.get(request.method)
            if action is None:
                return Response(405)
            response = await self._matched(request, action, match.groups())
            response.headers[REQUEST_ID] = request_id()
            return response
        return plain(404, "404 page not found")

    async def _matched(self, request: Request, action: Action, parts: tuple[str, ...]) -> Response:
        if request.headers.get("user-agent", "").startswith("Mozilla/"):
            return plain(403, "User agent not allowed")
        try:
            return await action(request, *(unquote(part) for part in parts))
        except ApiError as exc:
            return error(exc)
        except Exception as exc:  # a bug of ours must not take the whole server down
            log.exception("%s %s failed", request.method, urlsplit(request.target).path)
            return error(ApiError(500, f"internal error: {exc!r}"))

    async def version(self, request: Request) -> Response:
        body = f'{{"version": "{VERSION}"}}\n'.encode()
        return Response(200, body, "application/json;charset=utf-8")

    async def reset(self, request: Request) -> Response:
        await self.registry.reset()
        return Response(204)

    async def populate(self, request: Request) -> Response:
        """201 ``{"proxies": [...]}``, or the error with the proxies done before it, always as
        JSON (errors included); no proxies is ``null``, as the real server writes it."""
        try:
            done, failure = await self.registry.populate(decode_body(request.body))
        except ApiError as exc:
            done, failure = [], exc
        proxies = [proxy.to_json() for proxy in done] or None
        if failure is None:
            return ok({"proxies": proxies}, 201)
        body = {"error": failure.message, "status": failure.status, "proxies": proxies}
        return ok(body, failure.status)

    async def proxies(self, request: Request) -> Response:
        return ok({name: proxy.to_json() for name, proxy in self.registry.proxies.items()})

    async def create(self, request: Request) -> Response:
        proxy = await self.registry.create(decode_body(request.body))
        return ok(proxy.to_json(), 201)

    async def show(self, request: Request, name: str) -> Response:
        return ok(self.registry.get(name).to_json())

    async def update(self, request: Request, name: str) -> Response:
        _deprecated_post(request, "ProxyUpdate")
        self.registry.get(name)  # 404 before 400, as the real server
        return ok((await self.registry.update(name, decode_body(request.body))).to_json())

    async def delete(self, request: Request, name: str) -> Response:
        await self.registry.delete(name)
        return Response(204)

    async def toxics(self, request: Request, name: str) -> Response:
        return ok([toxic.to_json() for toxic in self.registry.get(name).all_toxics()])

    async def add_toxic(self, request: Request, name: str) -> Response:
        proxy = self.registry.get(name)
        return ok(proxy.add_toxic(decode_body(request.body)).to_json())

    async def toxic(self, request: Request, name: str, toxic: str) -> Response:
        return ok(self.registry.get(name).toxic(toxic).to_json())

    async def update_toxic(self, request: Request, name: str, toxic: str) -> Response:
        _deprecated_post(request, "ToxicUpdate")
        proxy = self.registry.get(name)
        proxy.toxic(toxic)  # 404 before 400
        return ok(proxy.update_toxic(toxic, decode_body(request.body)).to_json())

    async def remove(self, request: Request, name: str, toxic: str) -> Response:
        self.registry.get(name).remove_toxic(toxic)
        return Response(204)
