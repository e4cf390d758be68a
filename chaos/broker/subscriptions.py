"""Topic subscriptions: durable and shared ones as the Qpid JMS / Artemis mapping defines them.

How this works: every consumer attached to a topic consumes a ``SubscriptionQueue`` bound to the
topic, and the ``SubscriptionRegistry`` decides which one, following the shared-subscriptions
seed (QPIDJMS-220) to the letter:

    subscription name: the link name, or the link name up to ``|`` when the source has the
        ``shared`` capability; exclusivity ``shared`` then, else ``link``.
    namespace: the connection's container id, or the global one with the ``global`` capability.
    durability: a source with ``durable`` other than ``none`` (or expiry policy ``never``) makes
        a durable subscription; it lives until unsubscribed and its durable messages are stored.
    key: ``(namespace, name, durable)``; a non-shared volatile subscription (table rows 1 and 3)
        has no key: it gets a queue of its own that dies with its link.

Attach with a source on an existing subscription: a different exclusivity policy, or a
``link``-exclusive one already in use by another link, is ``amqp:resource-locked``; different
filters or a different topic rebind it (its messages are dropped, as JMS's "unsubscribe and
create anew") only when it has no consumer, else ``amqp:resource-locked``. Re-attach of a
detached link goes through the same path.

Attach with a null source (a JMS unsubscribe) looks the durable subscription up; the engine does
not expose the link's own capabilities (proton 0.40 has no link desired-capabilities), so the
lookup tries the link name and the name up to ``|``, in the container's namespace and then in the
global one, and takes the first durable subscription found (only a ``shared`` one for the name up
to ``|``). Found and idle: attached with the subscription's source; in use:
``amqp:resource-locked``; missing: ``amqp:not-found``. That link's detach with ``closed=true``
removes the subscription when no other consumer is attached (a detach with ``closed=false``, or
any detach of a link that had a source, keeps a durable subscription).

Lifetimes: a ``link``-exclusive volatile subscription dies with its link, a shared volatile one
with its last consumer, a durable one only by unsubscribe (or when its topic is deleted).

Filters: a subscription applies its selector and no-local filter when a message is published
(``Topic.publish`` asks ``SubscriptionQueue.accepts``), so a filtered-out message never enters
it. No-local compares the publishing connection's container id (``StoredMessage.origin``) with
the subscription's client id, the container id that created it; a subscription in the global
namespace has no client id, so no-local has no effect there (JMS 2.0, JMS_SPEC-65).

Persistence: a durable subscription is a store node of kind ``subscription`` (properties:
``namespace``, ``name``, ``topic``, ``address``, ``selector``, ``no_local``, ``client_id``,
``shared``, ``global``, ``durability``); its durable messages are stored under its queue name
like a queue's. Any ``Persistence`` may implement the optional ``subscription_saved(name,
properties)`` and ``recovered_subscriptions()`` methods; ``SqlitePersistence`` is served through
its ``store`` (``Store.save_node``); the others keep nothing.

Thread-safety: none; everything runs on the broker's event loop.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from chaos.broker.filters import Filters, Matcher, SectionCache, compile_matcher, parse_filters
from chaos.broker.nodes import Queue, StoredMessage, Topic
from chaos.broker.persistence import Persistence
from chaos.broker.schedule import NodePolicy
from haclient.amqp.types import Durability, ErrorCondition, ExpiryPolicy, Terminus

__all__ = [
    "GLOBAL",
    "SUBSCRIPTION_PREFIX",
    "SubscriptionError",
    "SubscriptionInfo",
    "SubscriptionQueue",
    "SubscriptionRegistry",
    "SubscriptionTopic",
]

log = logging.getLogger("chaos.broker")

GLOBAL = None
"""The global namespace (a key's namespace is a container id otherwise)."""

SUBSCRIPTION_PREFIX = "$sub."
"""Names of subscription queues start with it; no address may name one."""

SubscriptionKey = tuple[str | None, str, bool]


class SubscriptionError(Exception):
    """An attach the subscription rules refuse; ``condition`` is the detach error."""

    def __init__(self, name: str, description: str) -> None:
        super().__init__(description)
        self.condition = ErrorCondition(name, description)


def _locked(description: str) -> SubscriptionError:
    return SubscriptionError("amqp:resource-locked", description)


class SubscriptionQueue(Queue):
    """The queue of one topic subscription, with the filters it applies at publish time."""

    def __init__(
        self,
        name: str,
        topic: Topic,
        *,
        key: SubscriptionKey | None,
        address: str,
        shared: bool,
        is_global: bool,
        durability: Durability,
        expiry_policy: ExpiryPolicy,
        client_id: str | None,
        filters: Filters,
        matcher: Matcher | None,
        **queue_options: Any,
    ) -> None:
        super().__init__(name, **queue_options)
        self.topic = topic
        self.key = key
        self.address = address
        self.shared = shared
        self.is_global = is_global
        self.durability = durability
        self.expiry_policy = expiry_policy
        self.client_id = client_id
        self.filters = filters
        self.matcher = matcher

    @property
    def durable(self) -> bool:
        """True for a durable subscription."""
        return self.key is not None and self.key[2]

    @property
    def subscription_name(self) -> str | None:
        """The subscription's name (None for a link's own volatile subscription)."""
        return None if self.key is None else self.key[1]

    def accepts(self, message: StoredMessage) -> bool:
        """True when ``message``, being published to the topic, belongs in this subscription."""
        if self.filters.no_local and self.client_id and message.origin == self.client_id:
            return False
        return self.matcher is None or self.matcher(message)

    def capabilities(self) -> tuple[str, ...]:
        """The source capabilities the broker answers with (the seed's table)."""
        caps = ["topic"]
        if self.shared:
            caps.append("shared")
        if self.is_global and self.key is not None:
            caps.append("global")
        return tuple(caps)

    def answer(self, source: Terminus | None) -> Terminus:
        """The source of the attach reply: the peer's, corrected to what the subscription is."""
        base = source if source is not None else Terminus(address=self.address)
        return dataclasses.replace(
            base,
            durable=self.durability,
            expiry_policy=self.expiry_policy,
            capabilities=self.capabilities(),
            filter=self.filters.echo,
        )

    def properties(self) -> dict[str, Any]:
        """The store record of a durable subscription."""
        assert self.key is not None
        return {
            "namespace": self.key[0],
            "name": self.key[1],
            "topic": self.topic.name,
            "address": self.address,
            "selector": self.filters.selector,
            "no_local": self.filters.no_local,
            "client_id": self.client_id,
            "shared": self.shared,
            "global": self.is_global,
            "durability": int(self.durability),
        }


class SubscriptionTopic(Topic):
    """A topic whose subscriptions filter what is published to them (``Topic.publish`` skips a
    ``SubscriptionQueue`` whose ``accepts`` refuses the message)."""


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    """A snapshot of one subscription for inspection."""

    queue: str
    topic: str
    name: str | None
    namespace: str | None
    durable: bool
    shared: bool
    selector: str | None
    no_local: bool
    depth: int
    unacked: int
    consumers: int


class _Records:
    """Where durable subscriptions are recorded (see the module docstring)."""

    def __init__(self, persistence: Persistence) -> None:
        self._persistence = persistence

    def _store(self) -> Any:
        from chaos.broker.store import SqlitePersistence

        if isinstance(self._persistence, SqlitePersistence):
            return self._persistence.store
        return None

    def save(self, name: str, properties: dict[str, Any]) -> None:
        hook = getattr(self._persistence, "subscription_saved", None)
        if callable(hook):
            hook(name, properties)
            return
        store = self._store()
        if store is not None:
            store.save_node(name, "subscription", properties)

    def recovered(self) -> Iterable[tuple[str, Mapping[str, Any]]]:
        hook = getattr(self._persistence, "recovered_subscriptions", None)
        if callable(hook):
            return list(hook())
        store = self._store()
        if store is None:
            return ()
        return [(n.name, n.properties) for n in store.nodes() if n.kind == "subscription"]


def _queue_name(key: SubscriptionKey) -> str:
    namespace, name, durable = key
    space = "%global" if namespace is GLOBAL else quote(namespace or "", safe="")
    kind = "durable" if durable else "volatile"
    return f"{SUBSCRIPTION_PREFIX}{kind}/{space}/{quote(name, safe='')}"


class SubscriptionRegistry:
    """Every subscription of one broker run, by key.

    Args:
        persistence: Where durable subscriptions and their messages are recorded.
        dead_letter: Where rejected messages go.
        topic_for: The topic a recovered subscription's topic name names (created if missing).
        policy: Timers, expiry and redelivery limits of every subscription queue (default: a
            ``NodePolicy()``).
    """

    def __init__(
        self,
        persistence: Persistence,
        dead_letter: Callable[[StoredMessage], None],
        topic_for: Callable[[str], Topic],
        policy: NodePolicy | None = None,
    ) -> None:
        self._persistence = persistence
        self.policy = policy if policy is not None else NodePolicy()
        self._records = _Records(persistence)
        self._dead_letter = dead_letter
        self._topic_for = topic_for
        self.cache = SectionCache()
        self.by_key: dict[SubscriptionKey, SubscriptionQueue] = {}
        self._volatile_ids = itertools.count(1)

    # Creation ----------------------------------------------------------------------------------

    def _new(
        self,
        name: str,
        topic: Topic,
        key: SubscriptionKey | None,
        *,
        address: str,
        shared: bool,
        is_global: bool,
        durability: Durability,
        expiry_policy: ExpiryPolicy,
        client_id: str | None,
        filters: Filters,
    ) -> SubscriptionQueue:
        matcher = self._matcher(filters)
        durable = key is not None and key[2]
        queue = SubscriptionQueue(
            name,
            topic,
            key=key,
            address=address,
            shared=shared,
            is_global=is_global,
            durability=durability,
            expiry_policy=expiry_policy,
            client_id=None if is_global else client_id,
            filters=filters,
            matcher=matcher,
            persistence=self._persistence if durable else None,
            dead_letter=self._dead_letter,
            persistent=durable,
            policy=self.policy,
        )
        topic.subscriptions.append(queue)
        if key is not None:
            self.by_key[key] = queue
        return queue

    def volatile(self, topic: Topic, source: Terminus | None = None) -> SubscriptionQueue:
        """A new link-exclusive volatile subscription (no filters unless ``source`` has some)."""
        filters = parse_filters(source.filter) if source is not None else Filters()
        return self._new(
            f"{topic.name}::sub-{next(self._volatile_ids)}",
            topic,
            None,
            address=topic.name if source is None else (source.address or topic.name),
            shared=False,
            is_global=source is not None and "global" in source.capabilities,
            durability=Durability.NONE,
            expiry_policy=ExpiryPolicy.LINK_DETACH,
            client_id=None,
            filters=filters,
        )

    # Attach ------------------------------------------------------------------------------------

    def attach(
        self, link_name: str, source: Terminus, topic: Topic, container_id: str | None
    ) -> tuple[SubscriptionQueue, Terminus]:
        """The subscription a link with ``source`` on ``topic`` consumes, and the reply source.

        Raises:
            SubscriptionError: the rules refuse the attach (``amqp:resource-locked``).
            InvalidSelectorError: the source's selector does not parse.
        """
        caps = set(source.capabilities)
        shared = "shared" in caps
        is_global = "global" in caps
        name = link_name.split("|", 1)[0] if shared else link_name
        durable = (
            source.durable is not Durability.NONE or source.expiry_policy is ExpiryPolicy.NEVER
        )
        filters = parse_filters(source.filter)
        if not shared and not durable:  # rows 1 and 3: a queue of the link's own
            queue = self.volatile(topic, source)
            queue.client_id = None if is_global else container_id
            return queue, queue.answer(source)
        key: SubscriptionKey = (GLOBAL if is_global else (container_id or ""), name, durable)
        existing = self.by_key.get(key)
        if existing is not None and existing.deleted:
            del self.by_key[key]
            existing = None
        if existing is None:
            queue = self._new(
                _queue_name(key),
                topic,
                key,
                address=source.address or topic.name,
                shared=shared,
                is_global=is_global,
                durability=source.durable if durable else Durability.NONE,
                expiry_policy=ExpiryPolicy.NEVER if durable else source.expiry_policy,
                client_id=container_id,
                filters=filters,
            )
            if durable:
                self._records.save(queue.name, queue.properties())
            log.debug("subscription %s created on %s", queue.name, topic.name)
            return queue, queue.answer(source)
        if existing.shared != shared:
            policy = "shared" if existing.shared else "link"
            raise _locked(f"subscription {name!r} exists with exclusivity policy {policy!r}")
        if not shared and existing.consumers:
            raise _locked(f"subscription {name!r} is in use by another link")
        if existing.topic is not topic or existing.filters != filters:
            if existing.consumers:
                raise _locked(
                    f"subscription {name!r} has consumers: its topic or filters cannot change"
                )
            self._rebind(existing, topic, filters, source.address or topic.name)
        return existing, existing.answer(source)

    def _matcher(self, filters: Filters) -> Matcher | None:
        """The compiled selector (raises ``InvalidSelectorError``)."""
        if filters.selector is None:
            return None
        return compile_matcher(filters.selector, self.cache)

    def _rebind(
        self, queue: SubscriptionQueue, topic: Topic, filters: Filters, address: str
    ) -> None:
        matcher = self._matcher(filters)
        queue.purge()
        if queue in queue.topic.subscriptions:
            queue.topic.subscriptions.remove(queue)
        topic.subscriptions.append(queue)
        queue.topic = topic
        queue.address = address
        queue.filters = filters
        queue.matcher = matcher
        if queue.durable:
            self._records.save(queue.name, queue.properties())
        log.debug("subscription %s rebound to %s", queue.name, topic.name)

    def lookup(self, link_name: str, container_id: str | None) -> SubscriptionQueue:
        """The durable subscription a null-source attach names (see the module docstring).

        Raises:
            SubscriptionError: none found (``amqp:not-found``) or in use (``resource-locked``).
        """
        prefix = link_name.split("|", 1)[0]
        for namespace in (container_id or "", GLOBAL):
            for name, needs_shared in ((link_name, False), (prefix, True)):
                queue = self.by_key.get((namespace, name, True))
                if queue is None or queue.deleted or (needs_shared and not queue.shared):
                    continue
                if queue.consumers:
                    raise _locked(f"subscription {name!r} has consumers")
                return queue
        raise SubscriptionError("amqp:not-found", f"no durable subscription for {link_name!r}")

    # Detach ------------------------------------------------------------------------------------

    def released(self, queue: SubscriptionQueue, *, unsubscribe: bool) -> None:
        """A consumer of ``queue`` went away (``unsubscribe``: a null-source link closed)."""
        if queue.consumers or queue.deleted:
            return
        if queue.durable and not unsubscribe:
            return
        self.remove(queue)

    def remove(self, queue: SubscriptionQueue) -> None:
        """Delete a subscription with its messages (and its store record)."""
        if queue.key is not None and self.by_key.get(queue.key) is queue:
            del self.by_key[queue.key]
        queue.topic.unsubscribe(queue)
        log.debug("subscription %s removed", queue.name)

    # Recovery and inspection -------------------------------------------------------------------

    def recover(self) -> dict[str, SubscriptionQueue]:
        """Re-create the recorded durable subscriptions; their queues by name."""
        queues: dict[str, SubscriptionQueue] = {}
        for name, props in self._records.recovered():
            try:
                key: SubscriptionKey = (props.get("namespace"), str(props["name"]), True)
                filters = Filters(props.get("selector"), bool(props.get("no_local")), _echo(props))
                queue = self._new(
                    name,
                    self._topic_for(str(props["topic"])),
                    key,
                    address=str(props.get("address") or props["topic"]),
                    shared=bool(props.get("shared")),
                    is_global=bool(props.get("global")),
                    durability=Durability(int(props.get("durability", 2))),
                    expiry_policy=ExpiryPolicy.NEVER,
                    client_id=props.get("client_id"),
                    filters=filters,
                )
            except Exception:  # one bad record must not stop the broker
                log.exception("cannot recover subscription %s", name)
                continue
            queues[name] = queue
        return queues

    def infos(self) -> list[SubscriptionInfo]:
        """Snapshots of the keyed (durable and shared) subscriptions."""
        return [
            SubscriptionInfo(
                queue=q.name,
                topic=q.topic.name,
                name=key[1],
                namespace=key[0],
                durable=key[2],
                shared=q.shared,
                selector=q.filters.selector,
                no_local=q.filters.no_local,
                depth=q.depth,
                unacked=q.unacked,
                consumers=len(q.consumers),
            )
            for key, q in sorted(self.by_key.items(), key=lambda item: item[1].name)
            if not q.deleted
        ]


def _echo(props: Mapping[str, Any]) -> dict[str, Any] | None:
    """The filter map to echo for a recovered subscription."""
    from chaos.broker.filters import NO_LOCAL_FILTER, SELECTOR_FILTER
    from haclient.amqp.types import AmqpDescribed, Symbol

    echo: dict[str, Any] = {}
    if props.get("selector") is not None:
        echo[SELECTOR_FILTER] = AmqpDescribed(Symbol(SELECTOR_FILTER), str(props["selector"]))
    if props.get("no_local"):
        echo[NO_LOCAL_FILTER] = AmqpDescribed(Symbol(NO_LOCAL_FILTER), [])
    return echo or None
