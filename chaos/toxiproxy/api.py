"""The Toxiproxy 2.x HTTP API: routes, status codes and JSON shapes of the real server
(``/work/shared/TOXIPROXY-API.md``) over a ``Registry``."""

from __future__ import annotations

import json
import logging
import re
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

Action = Callable[..., Awaitable[Response]]


def ok(value: Any, status: int = 200) -> Response:
    """A JSON answer, compact as Go's encoder writes it."""
    return Response(status, json.dumps(value, separators=(",", ":")).encode(), JSON)


def error(exc: ApiError) -> Response:
    """An error answer: ``{"error": ..., "status": ...}`` and a newline."""
    body = json.dumps({"error": exc.message, "status": exc.status}, separators=(",", ":"))
    return Response(exc.status, (body + "\n").encode(), TEXT)


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
        if request.headers.get("user-agent", "").startswith("Mozilla/"):
            return error(ApiError(403, "User agent not allowed"))
        path = urlsplit(request.target).path
        for pattern, methods in self._routes:
            match = pattern.match(path)
            if match is None:
                continue
            action = methods.get(request.method)
            if action is None:
                return Response(405)
            try:
                return await action(request, *(unquote(part) for part in match.groups()))
            except ApiError as exc:
                return error(exc)
            except Exception as exc:  # a bug of ours must not take the whole server down
                log.exception("%s %s failed", request.method, path)
                return error(ApiError(500, f"internal error: {exc!r}"))
        return Response(404, b"404 page not found\n", TEXT)

    async def version(self, request: Request) -> Response:
        return Response(200, f'{{"version": "{VERSION}"}}\n'.encode(), JSON)

    async def reset(self, request: Request) -> Response:
        await self.registry.reset()
        return Response(204)

    async def populate(self, request: Request) -> Response:
        done, failure = await self.registry.populate(decode_body(request.body))
        proxies = [proxy.to_json() for proxy in done]
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
        proxy = self.registry.get(name)
        proxy.toxic(toxic)  # 404 before 400
        return ok(proxy.update_toxic(toxic, decode_body(request.body)).to_json())

    async def remove(self, request: Request, name: str, toxic: str) -> Response:
        self.registry.get(name).remove_toxic(toxic)
        return Response(204)
