"""Drive a Toxiproxy, ours or the real one, with results as ``toxiproxy-python``'s objects.

That package maps only 400, 404 and 409 to exceptions, and lets any other error status through
to surface later as a ``KeyError``; its address is a class-level global; it has no PATCH, the
method the real server wants for updates (it logs every update by POST as deprecated).
``ToxiproxyClient`` therefore sends its requests itself (``requests``, to its own address),
updates with PATCH, checks each status against the one the API promises, and raises
``ToxiproxyError`` subclasses that carry the status and the server's message. Results are the
package's ``Proxy`` and ``Toxic`` objects.

``open_toxiproxy()`` gives a client for ``$TOXIPROXY_URL`` (a real Toxiproxy, say) when it is
set, and otherwise starts the embedded server for the ``with`` block.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any
from urllib.parse import urlsplit

import requests
from toxiproxy.proxy import Proxy
from toxiproxy.toxic import Toxic

from chaos.toxiproxy.server import ToxiproxyServer

__all__ = [
    "TOXIPROXY_URL",
    "ToxiproxyBadRequest",
    "ToxiproxyClient",
    "ToxiproxyConflict",
    "ToxiproxyError",
    "ToxiproxyNotFound",
    "ToxiproxyUnreachable",
    "open_toxiproxy",
]

TOXIPROXY_URL = "TOXIPROXY_URL"
"""The environment variable naming an external Toxiproxy (``http://host:8474``)."""

REQUEST_TIMEOUT = 10.0


class ToxiproxyError(RuntimeError):
    """The Toxiproxy API answered an error: ``status`` and the server's ``message``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"toxiproxy: {status} {message}")
        self.status = status
        self.message = message


class ToxiproxyBadRequest(ToxiproxyError, ValueError):
    """400: a malformed body, a missing field, an unknown stream or toxic type."""


class ToxiproxyNotFound(ToxiproxyError, LookupError):
    """404: no such proxy or toxic."""


class ToxiproxyConflict(ToxiproxyError):
    """409: a proxy or toxic of that name exists."""


class ToxiproxyUnreachable(ToxiproxyError):
    """No answer at all from the server (status 0)."""


_CLASSES: dict[int, type[ToxiproxyError]] = {
    400: ToxiproxyBadRequest,
    404: ToxiproxyNotFound,
    409: ToxiproxyConflict,
}


def _error(status: int, content: bytes) -> ToxiproxyError:
    try:
        message = str(json.loads(content)["error"])
    except (ValueError, KeyError, TypeError):
        message = content.decode("utf-8", "replace").strip() or "(no body)"
    return _CLASSES.get(status, ToxiproxyError)(status, message)


class ToxiproxyClient:
    """A Toxiproxy API at ``url`` (``http://host:port``). Safe to share between threads."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.hostname is None:
            raise ValueError(f"not a Toxiproxy URL: {url!r}")
        self.url = url
        self.host: str = parts.hostname
        self.port: int = parts.port or 8474

    @classmethod
    def from_env(cls) -> ToxiproxyClient | None:
        """A client for ``$TOXIPROXY_URL``, or None when it is not set."""
        url = os.environ.get(TOXIPROXY_URL, "").strip()
        return cls(url) if url else None

    def _call(self, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        """Send one request; the decoded JSON answer (None if empty).

        Raises:
            ToxiproxyError: any status but ``expect`` (a subclass for 400, 404, 409), or
                ``ToxiproxyUnreachable`` when the server does not answer.
        """
        host = f"[{self.host}]" if ":" in self.host else self.host
        url = f"http://{host}:{self.port}{path}"
        try:
            response = requests.request(method, url, json=body, timeout=REQUEST_TIMEOUT)
        except requests.RequestException as exc:
            raise ToxiproxyUnreachable(0, f"no answer from {self.url}: {exc}") from exc
        if response.status_code != expect:
            raise _error(response.status_code, response.content)
        return response.json() if response.content else None

    # --- proxies ------------------------------------------------------------------------------

    def version(self) -> str:
        """The server's version string."""
        return str(self._call("GET", "/version")["version"])

    def proxies(self) -> dict[str, Proxy]:
        """Every proxy by name."""
        return {name: Proxy(**fields) for name, fields in self._call("GET", "/proxies").items()}

    def proxy(self, name: str) -> Proxy:
        """One proxy. Raises ``ToxiproxyNotFound``."""
        return Proxy(**self._call("GET", f"/proxies/{name}"))

    def create_proxy(
        self, name: str, upstream: str, listen: str = "127.0.0.1:0", *, enabled: bool = True
    ) -> Proxy:
        """Create a proxy; its ``listen`` is the bound address (port 0 becomes the real one).

        Raises:
            ToxiproxyConflict: the name is taken.
            ToxiproxyError: 500 when the address cannot be bound.
        """
        body = {"name": name, "upstream": upstream, "listen": listen, "enabled": enabled}
        return Proxy(**self._call("POST", "/proxies", body, expect=201))

    def update_proxy(self, name: str, **fields: Any) -> Proxy:
        """Change ``listen``, ``upstream`` or ``enabled``; a new address drops connections."""
        return Proxy(**self._call("PATCH", f"/proxies/{name}", fields))

    def enable(self, name: str) -> Proxy:
        """Listen again (on the same address)."""
        return self.update_proxy(name, enabled=True)

    def disable(self, name: str) -> Proxy:
        """Close the listener (new connections are refused) and every open connection."""
        return self.update_proxy(name, enabled=False)

    @contextmanager
    def down(self, name: str) -> Iterator[None]:
        """The proxy disabled for the ``with`` block."""
        self.disable(name)
        try:
            yield
        finally:
            self.enable(name)

    def delete_proxy(self, name: str) -> None:
        """Delete a proxy, closing its connections."""
        self._call("DELETE", f"/proxies/{name}", expect=204)

    def populate(self, proxies: list[dict[str, Any]]) -> list[Proxy]:
        """Create or replace the given proxies (same listen and upstream: kept with toxics)."""
        answer = self._call("POST", "/populate", proxies, expect=201)
        return [Proxy(**fields) for fields in answer["proxies"] or []]  # null when empty

    def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        self._call("POST", "/reset", expect=204)

    # --- toxics -------------------------------------------------------------------------------

    def toxics(self, proxy: str) -> list[Toxic]:
        """The toxics of a proxy, upstream ones first."""
        return [Toxic(**fields) for fields in self._call("GET", f"/proxies/{proxy}/toxics")]

    def add_toxic(
        self,
        proxy: str,
        type: str,
        *,
        stream: str = "downstream",
        name: str | None = None,
        toxicity: float = 1.0,
        **attributes: int,
    ) -> Toxic:
        """Add a toxic (``attributes`` as the API names them: ``latency=300``); it applies to
        open connections at once. Name default: ``<type>_<stream>``."""
        body = {
            "name": name or f"{type}_{stream}",
            "type": type,
            "stream": stream,
            "toxicity": toxicity,
            "attributes": attributes,
        }
        return Toxic(**self._call("POST", f"/proxies/{proxy}/toxics", body))

    def update_toxic(
        self, proxy: str, name: str, *, toxicity: float | None = None, **attributes: int
    ) -> Toxic:
        """Change some attributes or the toxicity of a toxic."""
        body: dict[str, Any] = {"attributes": attributes}
        if toxicity is not None:
            body["toxicity"] = toxicity
        return Toxic(**self._call("PATCH", f"/proxies/{proxy}/toxics/{name}", body))

    def remove_toxic(self, proxy: str, name: str) -> None:
        """Remove a toxic."""
        self._call("DELETE", f"/proxies/{proxy}/toxics/{name}", expect=204)

    @contextmanager
    def toxic(self, proxy: str, type: str, **options: Any) -> Iterator[Toxic]:
        """A toxic for the ``with`` block (``add_toxic``'s arguments); removed on exit unless
        already gone (a ``reset()`` inside the block, say)."""
        added = self.add_toxic(proxy, type, **options)
        try:
            yield added
        finally:
            with suppress(ToxiproxyNotFound):
                self.remove_toxic(proxy, added.name)


@contextmanager
def open_toxiproxy(url: str | None = None) -> Iterator[ToxiproxyClient]:
    """A client for ``url``, else for ``$TOXIPROXY_URL``, else for an embedded server started
    (on a free loopback port, in a thread) for the ``with`` block and stopped after it."""
    client = ToxiproxyClient(url) if url else ToxiproxyClient.from_env()
    if client is not None:
        yield client
        return
    with ToxiproxyServer.running() as server:
        yield ToxiproxyClient(server.url)
