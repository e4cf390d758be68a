"""The collection of proxies and the operations of the API on it, with the real server's
checks in the real server's order. Runs on the server's event loop only."""

from __future__ import annotations

from typing import Any

import anyio
from anyio.abc import TaskGroup

from chaos.toxiproxy.model import (
    PROXY_EXISTS,
    PROXY_NOT_FOUND,
    ApiError,
    bad_body,
    json_kind,
    loopback_address,
    proxy_fields,
    resolved_listen,
)
from chaos.toxiproxy.proxy import Proxy

__all__ = ["Registry"]

_NEW = {"name": "", "listen": "", "upstream": "", "enabled": True}


def _missing(fields: dict[str, Any], suffix: str = "") -> None:
    for key in ("name", "upstream"):
        if not fields[key]:
            raise ApiError(400, f"missing required field: {key}{suffix}")


def _differs(proxy: Proxy, fields: dict[str, Any]) -> bool:
    """Whether ``fields`` name another address than ``proxy``'s: its listen compared once
    resolved (``localhost:7070`` is ``127.0.0.1:7070``), as the real server compares.

    Raises:
        ApiError: 500 when the given listen is malformed.
    """
    return (resolved_listen(fields["listen"]), fields["upstream"]) != (proxy.listen, proxy.upstream)


class Registry:
    """Every proxy by name; proxies run in ``task_group``. Operations that wait (binding,
    closing) hold one lock, so that concurrent requests see each other's outcome whole."""

    def __init__(self, task_group: TaskGroup) -> None:
        self.proxies: dict[str, Proxy] = {}
        self._task_group = task_group
        self._lock = anyio.Lock()

    def get(self, name: str) -> Proxy:
        """The proxy called ``name``.

        Raises:
            ApiError: 404 ``proxy not found``.
        """
        try:
            return self.proxies[name]
        except KeyError:
            raise PROXY_NOT_FOUND from None

    async def create(self, body: Any) -> Proxy:
        """Create (and unless ``enabled`` is false, start) a proxy.

        Raises:
            ApiError: 400 (bad body, missing field), 409 (name taken, checked before binding),
                500 (cannot listen; the proxy is then not created).
        """
        async with self._lock:
            return await self._create(body)

    async def _create(self, body: Any) -> Proxy:
        fields = proxy_fields(body, _NEW)
        _missing(fields)
        if fields["name"] in self.proxies:
            raise PROXY_EXISTS
        return await self._add(fields)

    async def _add(self, fields: dict[str, Any], replacing: Proxy | None = None) -> Proxy:
        """Make, start unless disabled, and keep a proxy; ``replacing`` is stopped first, and
        stays (stopped) if the new one cannot listen, as in the real server.

        Raises:
            ApiError: 500 for a listen address this server refuses, or that cannot be bound,
                when the proxy is to be enabled. A disabled proxy is stored whatever its
                ``listen``, as the real server stores it: it binds nothing until enabled,
                and enabling it (a ``PATCH``, ``/reset``) refuses a non-loopback address.
        """
        if fields["enabled"]:
            loopback_address(fields["listen"])
        if replacing is not None:
            await replacing.stop()
            replacing.release_port()
        proxy = Proxy(fields["name"], fields["listen"], fields["upstream"], self._task_group)
        if fields["enabled"]:
            await proxy.start()
        self.proxies[proxy.name] = proxy
        return proxy

    async def update(self, name: str, body: Any) -> Proxy:
        """Partially update ``listen``, ``upstream`` and ``enabled``; a changed address restarts
        the listener and drops the connections.

        Raises:
            ApiError: 400 (bad body), 500 (a listen address refused or that cannot be bound).
        """
        async with self._lock:
            return await self._update(self.get(name), body)

    async def _update(self, proxy: Proxy, body: Any) -> Proxy:
        fields = proxy_fields(body, proxy.to_json())
        if _differs(proxy, fields):
            if fields["enabled"]:  # refused before anything stops; a disabled one binds nothing
                loopback_address(fields["listen"])
            await proxy.stop()
            if fields["listen"] != proxy.listen:
                proxy.release_port()
            proxy.listen, proxy.upstream = fields["listen"], fields["upstream"]
        if fields["enabled"] and not proxy.enabled:
            await proxy.start()
        elif not fields["enabled"]:
            await proxy.stop()
        return proxy

    async def delete(self, name: str) -> None:
        """Stop and forget a proxy."""
        async with self._lock:
            await self._delete(self.get(name))

    async def _delete(self, proxy: Proxy) -> None:
        await proxy.stop()
        proxy.release_port()
        del self.proxies[proxy.name]

    def release_ports(self) -> None:
        """Let the ports of every stopped proxy go (the server closes)."""
        for proxy in self.proxies.values():
            proxy.release_port()

    async def populate(self, body: Any) -> tuple[list[Proxy], ApiError | None]:
        """Create or replace the proxies of a list: the ones done, and the error that stopped
        the rest (if any). Entries whose listen (once resolved: ``localhost:7070`` is
        ``127.0.0.1:7070``) and upstream match an existing proxy keep it, with its toxics and
        connections; proxies not named are left alone.

        Raises:
            ApiError: 400 before anything changed, for a bad body or a missing field.
        """
        async with self._lock:
            return await self._populate(body)

    async def _populate(self, body: Any) -> tuple[list[Proxy], ApiError | None]:
        if not isinstance(body, list):
            kind = json_kind(body)
            raise bad_body(f"json: cannot unmarshal {kind} into Go value of type []proxy.Proxy")
        entries = [proxy_fields(entry, _NEW) for entry in body]
        for number, fields in enumerate(entries, 1):
            _missing(fields, f" at proxy {number}")
        done: list[Proxy] = []
        for fields in entries:
            existing = self.proxies.get(fields["name"])
            try:
                if existing is not None and not _differs(existing, fields):
                    done.append(existing)
                else:
                    done.append(await self._add(fields, replacing=existing))
            except ApiError as exc:
                return done, exc
        return done, None

    async def reset(self) -> None:
        """Enable every proxy and remove every toxic.

        Raises:
            ApiError: 500 if a proxy cannot listen again.
        """
        async with self._lock:
            for proxy in list(self.proxies.values()):
                await proxy.start()
                proxy.remove_all_toxics()
