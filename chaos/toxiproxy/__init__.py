"""A server that speaks Toxiproxy 2.x's HTTP API, so chaos runs need no Go binary.

Start it with ``haclient-toxiproxy --host 127.0.0.1 --port 8474`` (``chaos.toxiproxy.cli``), with
``async with ToxiproxyServer(port=0) as server`` on a loop (or ``ToxiproxyServer.serving()``),
or with ``with ToxiproxyServer.running(port=0) as server`` from blocking code (its own loop in a
thread); ``server.url`` is the API. Drive it like the real one, through ``toxiproxy-python``;
``chaos.toxiproxy.client.ToxiproxyClient`` returns that package's objects, updates with PATCH
and checks every status, and ``open_toxiproxy()`` uses ``$TOXIPROXY_URL`` (a real Toxiproxy)
when set, else this server. ``tests/toxiproxy`` runs against ``$TOXIPROXY_URL`` too, skipping
the tests of the differences below.

How it works:
    - ``http``: a compact HTTP/1.1 server side (keep-alive, Content-Length or chunked bodies).
    - ``api``: the routes, status codes and JSON shapes of the real server, over ``registry``
      (the proxies by name; create, update, populate, reset, in the real server's order of
      checks) and ``model`` (bodies read as Go's decoder reads them, the real error texts).
    - ``proxy``: one listener and its connections in a task of the server's task group, under a
      cancel scope that disabling or deleting cancels (and waits for).
    - ``link``: per connection, an upstream and a downstream link; each reads chunks of up to
      32 KiB into a buffer and takes them one at a time through the toxics of its direction,
      looked up afresh for every chunk, so changes reach open connections at once.
    - ``toxics``: what each toxic type does to a chunk or to the close; ``server`` and ``cli``.

What differs from the real server (everything a client can observe is otherwise the same):
    - Loopback only: a ``listen`` (or ``--host``) that is not 127.0.0.0/8, ``::1`` or
      ``localhost`` (``:PORT`` included) is never bound: enabling such a proxy (creating it
      enabled, a ``PATCH``, ``/reset``) is refused with a 500 naming the rule. A disabled
      one is stored as the real server stores it (201), since it binds nothing. An empty or
      missing ``listen``, which the real server binds on every interface, binds
      ``127.0.0.1:0``.
    - Input that crashes the real server gets 400: a negative bandwidth ``rate``, a slicer
      ``average_size`` of 0 or less. Request bodies are limited to 16 MiB (400 beyond).
    - Go-specific texts differ in detail: JSON syntax errors say ``bad request body: invalid
      JSON: ...``, bind errors ``listen tcp ADDR: bind: <OS error>``.
    - No ``/metrics``, ``/events`` or ``Logger`` key; ``/version`` says ``2.12.0``.
    - When one side closes, what the other link's toxics hold is still delivered before its
      socket closes (the real server drains the same way; a reply still on its way from the
      server may be lost by either).
"""

from __future__ import annotations

from chaos.toxiproxy.server import ToxiproxyServer

__all__ = ["ToxiproxyServer"]
