"""Broker-announced topology: the peer list a client's ``exchange`` failover method learns.

How this works: a ``Topology`` holds the broker's peer URLs (``Broker(peers=...)``,
``Broker.set_peers``, ``haclient-broker --peer URL``). They reach clients two ways:

    Open frame: the connection property ``failover-server-list``, a list of maps with the keys
        ``hostname``, ``network-host`` (both the URL's host), ``port`` (an int) and ``scheme``
        (``amqp`` or ``amqps``), as Qpid JMS and Artemis use it (map keys are symbols). Only a
        connection opened after a change carries the new list.
    Membership messages on the topic ``amq.failover``: whenever the list changes, and to every
        new subscriber of the topic when it attaches. The message has an empty body (an
        ``amqp-value`` null) and one application property, ``amq.failover``: the peer URLs
        joined with commas (``"amqp://a:5672,amqps://b:5671"``; an empty string for no peers).
        A comma-separated string because JMS allows only scalar property values; URLs never
        contain a bare comma here (``set_peers`` refuses one). The newest message wins.

Thread-safety: none; everything runs on the broker's event loop.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from haclient.amqp.codec import AmqpMessage, encode_message
from haclient.amqp.types import Symbol

__all__ = [
    "FAILOVER_PROPERTY",
    "FAILOVER_SERVER_LIST",
    "FAILOVER_TOPIC",
    "Topology",
    "parse_peer",
]

FAILOVER_TOPIC = "amq.failover"
"""The topic membership messages are published on."""
FAILOVER_PROPERTY = "amq.failover"
"""The application property holding the comma-separated peer URLs."""
FAILOVER_SERVER_LIST = "failover-server-list"
"""The Open frame connection property holding the peer list."""

_DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671}


def parse_peer(url: str) -> dict[str, Any]:
    """One ``failover-server-list`` entry for a peer URL.

    Raises:
        ValueError: not an ``amqp://`` or ``amqps://`` URL with a host, or it holds a comma.
    """
    if "," in url:
        raise ValueError(f"a peer URL cannot contain a comma: {url!r}")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"expected amqp://HOST[:PORT] or amqps://HOST[:PORT], got {url!r}")
    port = parts.port if parts.port is not None else _DEFAULT_PORTS[scheme]
    return {
        Symbol("hostname"): parts.hostname,
        Symbol("network-host"): parts.hostname,
        Symbol("port"): port,
        Symbol("scheme"): scheme,
    }


class Topology:
    """The broker's peer list."""

    def __init__(self, peers: Iterable[str] = ()) -> None:
        self.peers: tuple[str, ...] = ()
        self.set(peers)

    def set(self, peers: Iterable[str]) -> bool:
        """Replace the list; True when it changed.

        Raises:
            ValueError: a URL is malformed (nothing changes then).
        """
        new = tuple(str(url) for url in peers)
        for url in new:
            parse_peer(url)
        changed = new != self.peers
        self.peers = new
        return changed

    def failover_server_list(self) -> list[dict[str, Any]]:
        """The Open frame property's value."""
        return [parse_peer(url) for url in self.peers]

    def open_properties(self, base: dict[str, Any]) -> dict[str, Any]:
        """``base`` connection properties plus the failover list (when there are peers)."""
        properties = dict(base)
        properties.pop(FAILOVER_SERVER_LIST, None)
        if self.peers:
            properties[FAILOVER_SERVER_LIST] = self.failover_server_list()
        return properties

    def membership_message(self) -> bytes:
        """The encoded membership message for ``amq.failover``."""
        return encode_message(
            AmqpMessage(body=None, application_properties={FAILOVER_PROPERTY: ",".join(self.peers)})
        )
