"""A Toxiproxy-compatible server (placeholder docstring, see below)."""

from __future__ import annotations

from chaos.toxiproxy.server import ToxiproxyServer

__all__ = ["ToxiproxyServer"]
