"""Link names and termini for producers, consumers, subscriptions and browsers (pure).

The conventions are Qpid JMS's (QPIDJMS-220), so a Java client can share a
subscription with us and a broker built for Qpid JMS understands our attaches:

- A producer's target carries the destination's type capability (``queue``, ``topic``,
  ``temporary-queue``, ``temporary-topic``); an anonymous producer has a target without address.
- A consumer's source carries the type capability and the filters: a JMS selector as
  ``apache.org:selector-filter:string``, no-local as ``apache.org:no-local-filter:list``.
- A durable subscription is a receiver whose *link name* is the subscription name, with a
  durable source (``unsettled-state``, expiry ``never``).
- A shared subscription adds the ``shared`` capability; its link names are the subscription name
  with a ``|`` suffix when the connection has several consumers on it (``sub``, ``sub|2`` ... for
  durable ones, ``sub|volatile1`` ... for non-durable ones). Without a client id the subscription
  lives in the global namespace: capability ``global``.
- ``unsubscribe(name)`` attaches a receiver named ``name`` with no source; the broker finds the
  subscription by the link name and removes it when the link is closed.
- A browser's source has distribution mode ``copy``.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Final

from haclient.amqp.types import (
    AmqpDescribed,
    Distribution,
    Durability,
    ExpiryPolicy,
    Symbol,
    Terminus,
)
from haclient.destination import Destination, DestinationPrefixes, address_of, capability_of

__all__ = [
    "NO_LOCAL_FILTER",
    "SELECTOR_FILTER",
    "SubscriptionKind",
    "SubscriptionNames",
    "browser_source",
    "consumer_source",
    "producer_target",
    "subscription_source",
]

SELECTOR_FILTER: Final = "apache.org:selector-filter:string"
NO_LOCAL_FILTER: Final = "apache.org:no-local-filter:list"
CONSUMER_OUTCOMES: Final = (
    "amqp:accepted:list",
    "amqp:rejected:list",
    "amqp:released:list",
    "amqp:modified:list",
)


class SubscriptionKind:
    """The four kinds of topic consumer JMS 2.0 knows (plain, durable, shared, shared durable)."""

    DURABLE: Final = "durable"
    SHARED: Final = "shared"
    SHARED_DURABLE: Final = "shared-durable"


def _filters(selector: str | None, no_local: bool) -> dict[str, AmqpDescribed] | None:
    filters: dict[str, AmqpDescribed] = {}
    if selector:
        filters[SELECTOR_FILTER] = AmqpDescribed(Symbol(SELECTOR_FILTER), selector)
    if no_local:
        filters[NO_LOCAL_FILTER] = AmqpDescribed(Symbol(NO_LOCAL_FILTER), [])
    return filters or None


def producer_target(destination: Destination | None, prefixes: DestinationPrefixes) -> Terminus:
    """The target of a producer link (no address: an anonymous producer)."""
    if destination is None:
        return Terminus()
    return Terminus(
        address=address_of(destination, prefixes), capabilities=(capability_of(destination),)
    )


def consumer_source(
    destination: Destination,
    prefixes: DestinationPrefixes,
    *,
    selector: str | None = None,
    no_local: bool = False,
) -> Terminus:
    """The source of a plain (non-durable, unshared) consumer link."""
    return Terminus(
        address=address_of(destination, prefixes),
        capabilities=(capability_of(destination),),
        expiry_policy=ExpiryPolicy.LINK_DETACH,
        filter=_filters(selector, no_local),
        outcomes=CONSUMER_OUTCOMES,
    )


def browser_source(
    destination: Destination, prefixes: DestinationPrefixes, *, selector: str | None = None
) -> Terminus:
    """The source of a queue browser's link: distribution mode ``copy``."""
    return dataclasses.replace(
        consumer_source(destination, prefixes, selector=selector),
        distribution=Distribution.COPY,
    )


def subscription_source(
    topic: Destination,
    prefixes: DestinationPrefixes,
    *,
    kind: str,
    is_global: bool,
    selector: str | None = None,
    no_local: bool = False,
) -> Terminus:
    """The source of a durable, shared or shared durable subscription's link."""
    durable = kind in (SubscriptionKind.DURABLE, SubscriptionKind.SHARED_DURABLE)
    capabilities = [capability_of(topic)]
    if kind != SubscriptionKind.DURABLE:
        capabilities.append("shared")
    if is_global:
        capabilities.append("global")
    return Terminus(
        address=address_of(topic, prefixes),
        capabilities=tuple(capabilities),
        durable=Durability.UNSETTLED_STATE if durable else Durability.NONE,
        expiry_policy=ExpiryPolicy.NEVER if durable else ExpiryPolicy.LINK_DETACH,
        filter=_filters(selector, no_local),
        outcomes=CONSUMER_OUTCOMES,
    )


class SubscriptionNames:
    """Hands out the link names of one connection's subscription consumers (``sub|2`` ...).

    A number freed by a closed consumer is handed out again, lowest first, as Qpid JMS does.
    """

    def __init__(self) -> None:
        self._taken: defaultdict[tuple[str, bool], set[int]] = defaultdict(set)

    def acquire(self, name: str, *, durable: bool) -> str:
        """The link name for the next consumer on shared subscription ``name``."""
        taken = self._taken[(name, durable)]
        number = 1
        while number in taken:
            number += 1
        taken.add(number)
        return self.link_name(name, number, durable=durable)

    def release(self, link_name: str, *, durable: bool) -> None:
        """Free the number of ``link_name`` (its consumer closed)."""
        name, _, suffix = link_name.partition("|")
        digits = suffix.removeprefix("volatile")
        number = int(digits) if digits else 1
        self._taken[(name, durable)].discard(number)

    def active(self, name: str) -> bool:
        """True while this connection has a shared consumer on ``name``."""
        return bool(self._taken.get((name, True)) or self._taken.get((name, False)))

    @staticmethod
    def link_name(name: str, number: int, *, durable: bool) -> str:
        """``name``, ``name|2`` ... (durable) or ``name|volatile1`` ... (non-durable)."""
        if durable:
            return name if number == 1 else f"{name}|{number}"
        return f"{name}|volatile{number}"
