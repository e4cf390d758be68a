"""What the brokers say about their peers, for the ``exchange`` failover method (rule F12).

Two sources, newest wins (``ConnectionManager.learn_brokers`` keeps the seed URLs as a fallback
and refuses an ``amqp`` entry advertised over ``amqps``):

- the ``failover-server-list`` connection property of the broker's Open frame: a list of maps
  with the keys ``hostname`` (or ``network-host``), ``port`` and ``scheme``, as Qpid JMS and
  Artemis use it (``advertised_brokers``);
- membership messages on a topic (``failover.exchange.address``, default ``amq.failover``): the
  application property of that same name holds the URLs, comma-separated. ``follow_membership``
  consumes them on an internal session of each physical connection for as long as it lives.

Anything malformed is logged and ignored: a broker's bad gossip never takes a connection down.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from failover.url import BrokerURL, mask_secrets, parse_url
from haclient.aio.physical import PhysicalConnection
from haclient.amqp.codec import MessageView
from haclient.amqp.types import Accepted, Terminus
from haclient.destination import Topic, address_of
from haclient.errors import ConfigurationError, HAClientError, MessageFormatError
from haclient.options import CLIENT_OPTIONS

__all__ = ["advertised_brokers", "follow_membership", "membership_brokers"]

log = logging.getLogger("haclient.failover")

Learn = Callable[[Iterable[BrokerURL]], object]


def _text(value: Any) -> str | None:
    return str(value) if isinstance(value, str | bytes) and value else None


def advertised_brokers(server_list: Any) -> list[BrokerURL]:
    """The brokers of an Open frame's ``failover-server-list`` (entries that make no URL are
    logged and skipped)."""
    if server_list is None:
        return []
    if not isinstance(server_list, list | tuple):
        log.warning("ignoring a failover-server-list that is not a list: %r", server_list)
        return []
    brokers: list[BrokerURL] = []
    for entry in server_list:
        try:
            fields = {str(key): value for key, value in dict(entry).items()}
            host = _text(fields.get("hostname")) or _text(fields.get("network-host"))
            scheme = _text(fields.get("scheme")) or "amqp"
            port = fields.get("port")
            if host is None:
                raise ValueError("no hostname")
            location = f"[{host}]" if ":" in host else host
            text = f"{scheme}://{location}" + (f":{int(port)}" if port is not None else "")
            brokers.extend(parse_url(text, options=CLIENT_OPTIONS).brokers)
        except (TypeError, ValueError, ConfigurationError) as exc:
            log.warning("ignoring a failover-server-list entry %r: %s", entry, exc)
    return brokers


def membership_brokers(urls: Any) -> list[BrokerURL]:
    """The brokers of a membership message's property: URLs separated by commas.

    Raises:
        ConfigurationError: not a string, or an entry is not a broker URL.
    """
    if not isinstance(urls, str):
        raise ConfigurationError(
            f"a membership list must be a string of URLs, not {type(urls).__name__}",
            option="amq.failover",
        )
    return [broker for url in urls.split(",") if url.strip() for broker in _one(url.strip())]


def _one(url: str) -> tuple[BrokerURL, ...]:
    if url.lower().startswith("failover:"):
        raise ConfigurationError(
            f"a membership entry must be one broker: {mask_secrets(url, options=CLIENT_OPTIONS)!r}"
        )
    return parse_url(url, options=CLIENT_OPTIONS).brokers


async def follow_membership(
    physical: PhysicalConnection,
    address: str,
    learn: Learn,
    *,
    link_name: str,
    timeout: float,
) -> None:
    """Consume membership messages on ``address`` and ``learn`` each list, until the physical
    connection ends (then return quietly: the next connection follows again)."""
    amqp = physical.amqp
    try:
        session = await amqp.open_session(timeout=timeout)
        receiver = await amqp.open_receiver(
            Terminus(address=address_of(Topic(address), physical.prefixes)),
            session=session,
            name=link_name,
            credit=10,
            timeout=timeout,
        )
        while (raw := await amqp.receive(receiver)) is not None:
            amqp.settle(raw, Accepted())
            amqp.flow(receiver, 1)
            try:
                message = MessageView(raw.payload)
                learn(membership_brokers(message.application_properties.get(address)))
            except (MessageFormatError, ConfigurationError) as exc:
                log.warning("ignoring a membership message on %s: %s", address, exc)
    except HAClientError as exc:
        if physical.is_open:
            log.warning("cannot follow broker membership on %s: %s", address, exc)
