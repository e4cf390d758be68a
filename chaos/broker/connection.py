"""One client connection as the broker sees it: engine events in, node operations out.

How this works: the driver hands each batch of engine events to ``BrokerConnection.handle``. The
connection accepts the Open (or refuses a duplicate container id), accepts every session, and
turns each attach into a link handler (``chaos.broker.links``): a consumer of a queue or topic
subscription, a producer to a node or anonymous relay, or the transaction coordinator. When the
connection ends, however it ends, ``cleanup`` gives everything back: unsettled deliveries return
to their queues with delivery-count + 1, open transactions roll back, and the temporary nodes it
created are deleted.

Consumers of a topic consume a subscription (``chaos.broker.subscriptions``: durable, shared and
volatile ones, a null source for a JMS unsubscribe); consumers of a queue may carry a JMS selector
(``chaos.broker.filters``); one whose source asks for ``distribution-mode copy`` is a browser
(``chaos.broker.browsing``): it is sent copies of the waiting messages (sender settle mode
``unsettled`` whatever the client asked; any disposition settles a copy) and takes none. On a topic
``copy`` means nothing more than a subscription already does: such a link is an ordinary subscriber.
An invalid selector refuses the attach with ``amqp:invalid-field``; subscription conflicts with
``amqp:resource-locked`` or ``amqp:not-found``. A consumer attached to ``amq.failover`` first gets
the current membership message (``chaos.broker.topology``).

Producer links are always answered with receiver settle mode ``first`` (the broker settles each
transfer with its outcome at once), as ActiveMQ and Artemis do; ``second`` is granted to
consumers, where it confirms acknowledgements, except in ``BrokerMode.ACTIVEMQ``, which grants
``first`` to every link (as ActiveMQ 5.x does, silently) and refuses a duplicate container id
the way ActiveMQ does.

Thread-safety: none; everything runs on the broker's event loop.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from chaos.broker.filters import NO_LOCAL_FILTER, Matcher, compile_matcher, parse_filters
from chaos.broker.links import (
    BrowserLink,
    ConsumerLink,
    CoordinatorLink,
    LinkHandler,
    ProducerLink,
)
from chaos.broker.nodes import Node, Queue, Topic
from chaos.broker.router import NodeNotFoundError, Router
from chaos.broker.state import BrokerMode
from chaos.broker.subscriptions import SubscriptionError, SubscriptionQueue
from chaos.broker.topology import FAILOVER_TOPIC
from chaos.broker.transactions import TransactionManager
from haclient.amqp.driver import Driver
from haclient.amqp.endpoints import Link, Receiver, Sender, Session
from haclient.amqp.engine import Engine
from haclient.amqp.events import (
    ConnectionRemoteOpen,
    DeliveryUpdated,
    EngineEvent,
    LinkFlow,
    LinkRemoteClose,
    LinkRemoteOpen,
    MessageReceived,
    SessionRemoteClose,
    SessionRemoteOpen,
    TransportClosed,
)
from haclient.amqp.types import (
    Distribution,
    ErrorCondition,
    ReceiverSettleMode,
    SenderSettleMode,
    Terminus,
    TerminusKind,
)
from haclient.errors import InvalidSelectorError

if TYPE_CHECKING:
    from chaos.broker.state import BrokerState

REDIRECT = "amqp:connection:redirect"

__all__ = ["BrokerConnection"]

log = logging.getLogger("chaos.broker")


def _temporary_kind(terminus: Terminus) -> tuple[str, tuple[str, ...]]:
    """The kind of a dynamic node a terminus asks for and the capabilities to answer with."""
    if {"temporary-topic", "topic"} & set(terminus.capabilities):
        return "topic", ("temporary-topic",)
    return "queue", ("temporary-queue",)


class BrokerConnection:
    """The broker's state for one accepted socket.

    Args:
        state: The broker's shared state (nodes, transactions, other connections).
        engine: This connection's server-role engine.
        connection_id: Unique per broker run; owns temporary nodes and transactions.
    """

    def __init__(self, state: BrokerState, engine: Engine, connection_id: int) -> None:
        self.state = state
        self.engine = engine
        self.id = connection_id
        self.driver: Driver | None = None
        #: Holds the connection's writes back that many seconds (the stream's; a cold start).
        self.hold: Callable[[float], None] | None = None
        self.container_id: str | None = None
        self.links: dict[Link, LinkHandler] = {}
        self.opened = False
        self._cleaned = False
        self._failed = False  # an internal error closed it (see handle)

    def __repr__(self) -> str:
        return f"<BrokerConnection {self.id} container={self.container_id!r}>"

    @property
    def router(self) -> Router:
        """The broker's nodes."""
        return self.state.router

    @property
    def transactions(self) -> TransactionManager:
        """The broker's open transactions."""
        return self.state.transactions

    def wake(self) -> None:
        """Let the driver write what the engine has queued."""
        if self.driver is not None:
            self.driver.wakeup()

    def cold_start(self, what: str) -> None:
        """The first ``what`` of the run (``"open"``, ``"attach"``, ``"send"``): hold this
        connection's answers back for the run's cold-start delay of it, if any."""
        delay = self.state.cold.take(what)
        if delay > 0 and self.hold is not None:
            log.debug(
                "connection %d: cold start, the first %s answered %.0f ms later",
                self.id,
                what,
                delay * 1e3,
            )
            self.hold(delay)

    def close(self, error: ErrorCondition | None = None) -> None:
        """Close the connection with a Close frame (the driver ends once the peer answers)."""
        self.engine.close(error)
        self.wake()

    async def wait_ended(self) -> None:
        """Wait until the driver has ended (at once when it never started)."""
        if self.driver is not None:
            await self.driver.wait_ended()

    # Events ------------------------------------------------------------------------------------

    def handle(self, events: list[EngineEvent]) -> None:
        """The driver's event handler (one batch: one persistence commit).

        A broker bug met while handling them closes this connection only, with
        ``amqp:internal-error`` (logged once); the broker and its other connections serve on.
        """
        try:
            with self.router.persistence.batch():
                self._handle(events)
        except Exception as exc:
            self._fail(exc)
        self.wake()

    def _fail(self, exc: Exception) -> None:
        if self._failed:
            return
        self._failed = True
        log.error("connection %d: internal error, closing it", self.id, exc_info=exc)
        self.close(ErrorCondition("amqp:internal-error", f"broker error: {type(exc).__name__}"))

    def _handle(self, events: list[EngineEvent]) -> None:
        for event in events:
            if self._failed and not isinstance(event, TransportClosed):
                continue  # closing after an internal error: only the end still matters
            if isinstance(event, MessageReceived):
                handler = self.links.get(event.delivery.link)
                if isinstance(handler, ProducerLink | CoordinatorLink):
                    handler.on_message(event.delivery, event.payload)
                else:
                    event.delivery.settle()
            elif isinstance(event, DeliveryUpdated):
                handler = self.links.get(event.delivery.link)
                if isinstance(handler, ConsumerLink):
                    handler.on_update(event.delivery, event.outcome, event.settled)
                elif handler is not None:
                    handler.on_update(event.delivery, event.settled)
            elif isinstance(event, LinkFlow):
                handler = self.links.get(event.link)
                if isinstance(handler, ConsumerLink | BrowserLink):
                    handler.on_flow()
            elif isinstance(event, LinkRemoteOpen):
                if not event.link.locally_opened:
                    self.cold_start("attach")
                    self._on_attach(event.link)
            elif isinstance(event, LinkRemoteClose):
                self._on_detach(event.link, closed=event.closed)
            elif isinstance(event, SessionRemoteOpen):
                event.session.open()
            elif isinstance(event, SessionRemoteClose):
                self._on_session_end(event.session)
            elif isinstance(event, ConnectionRemoteOpen):
                self.cold_start("open")
                self._on_open(event)
            elif isinstance(event, TransportClosed):
                self._on_transport_closed(event.error)

    @property
    def activemq(self) -> bool:
        """Whether the broker behaves like ActiveMQ (``BrokerMode.ACTIVEMQ``)."""
        return self.state.mode is BrokerMode.ACTIVEMQ

    def _on_open(self, event: ConnectionRemoteOpen) -> None:
        redirect = self.state.redirect
        if redirect is not None:  # sent elsewhere: Open, then a Close that says where
            self.engine.open()
            log.info("redirecting connection %d to %s", self.id, redirect)
            self.engine.close(ErrorCondition(REDIRECT, "connect to another broker", redirect))
            return
        container = event.container_id
        refused = self.state.refuses_container(container)
        if refused and self.activemq:  # ActiveMQ says so in its Open, then explains in the Close
            properties = dict(self.engine.config.properties or {})
            self.engine.open({**properties, "amqp:connection-establishment-failed": True})
        else:
            self.engine.open()
        if refused:
            log.info("refusing a second connection with container id %r", container)
            self.engine.close(
                ErrorCondition(
                    "amqp:invalid-field",
                    f"container id {container!r} is already connected",
                    {"invalid-field": "container-id"},
                )
            )
            return
        self.container_id = container
        self.opened = True
        log.debug("connection %d open: container %r, user %r", self.id, container, event.user)

    def _on_transport_closed(self, error: ErrorCondition | None) -> None:
        if error is not None:
            log.info("connection %d (%r) ended: %s", self.id, self.container_id, error)
        self.cleanup()

    def _on_session_end(self, session: Session) -> None:
        for link in [link for link in self.links if link.session is session]:
            self._on_detach(link)

    def _on_detach(self, link: Link, *, closed: bool = False) -> None:
        handler = self.links.pop(link, None)
        if handler is not None:
            handler.close(closed)

    # Attach ------------------------------------------------------------------------------------

    def _refuse(self, link: Link, error: ErrorCondition) -> None:
        log.info("refusing link %r: %s", link.name, error)
        if link.is_sender:
            link.open(source=Terminus.null())
        else:
            link.open(target=Terminus.null())
        link.close(error)

    def _resolve(self, terminus: Terminus) -> tuple[Node, Terminus]:
        """The node a terminus names (created if dynamic) and the terminus to answer with."""
        if terminus.dynamic:
            kind, capabilities = _temporary_kind(terminus)
            node = self.router.create_temporary(kind, self.id)
            answer = dataclasses.replace(terminus, address=node.name, capabilities=capabilities)
            log.debug("connection %d created temporary %s %s", self.id, kind, node.name)
            return node, answer
        assert terminus.address is not None
        return self.router.lookup(terminus.address, terminus.capabilities), terminus

    def _on_attach(self, link: Link) -> None:
        try:
            if isinstance(link, Receiver):
                self._attach_producer(link)
            elif isinstance(link, Sender):
                self._attach_consumer(link)
        except NodeNotFoundError as exc:
            self._refuse(link, ErrorCondition("amqp:not-found", str(exc)))
        except SubscriptionError as exc:
            self._refuse(link, exc.condition)
        except InvalidSelectorError as exc:
            self._refuse(
                link,
                ErrorCondition(
                    "amqp:invalid-field", f"invalid selector: {exc}", {"invalid-field": "filter"}
                ),
            )

    def _attach_producer(self, link: Receiver) -> None:
        if link.is_coordinator:
            link.open()
            self.links[link] = CoordinatorLink(self, link)
            return
        target = link.remote_target
        if target.kind is TerminusKind.NULL or (target.address is None and not target.dynamic):
            link.open(rcv_settle_mode=ReceiverSettleMode.FIRST)  # anonymous relay: 'to' decides
            self.links[link] = ProducerLink(self, link, None)
            return
        node, answer = self._resolve(target)
        if node.deleted:
            raise NodeNotFoundError(f"{node.name} was deleted")
        link.open(target=answer, rcv_settle_mode=ReceiverSettleMode.FIRST)
        self.links[link] = ProducerLink(self, link, node)

    def _attach_consumer(self, link: Sender) -> None:
        source = link.remote_source
        subscriptions = self.router.subscriptions
        if source.kind is TerminusKind.NULL:  # a JMS unsubscribe: find the durable subscription
            sub = subscriptions.lookup(link.name, self.container_id)
            self._start_consumer(link, sub, sub.answer(None), unsubscribes=True)
            return
        if source.address is None and not source.dynamic:
            raise NodeNotFoundError("a receiver needs a source address (or dynamic=true)")
        node, answer = self._resolve(source)
        if isinstance(node, Topic):
            sub, answer = subscriptions.attach(link.name, answer, node, self.container_id)
            self._start_consumer(link, sub, answer)
            return
        assert isinstance(node, Queue)
        filters = parse_filters(source.filter)
        selector = None
        if filters.selector is not None:
            selector = compile_matcher(filters.selector, subscriptions.cache)
            echo = {k: v for k, v in (filters.echo or {}).items() if k != NO_LOCAL_FILTER}
            answer = dataclasses.replace(answer, filter=echo or None)
        elif answer.filter is not None:
            answer = dataclasses.replace(answer, filter=None)
        if source.distribution is Distribution.COPY:
            self._start_browser(link, node, answer, selector)
            return
        self._start_consumer(link, node, answer, selector=selector)

    def _start_browser(
        self, link: Sender, queue: Queue, answer: Terminus, selector: Matcher | None
    ) -> None:
        """A queue browser: copies go unsettled (see ``chaos.broker.browsing`` for why); the answer
        echoes ``distribution-mode copy``."""
        link.open(
            source=answer,
            snd_settle_mode=SenderSettleMode.UNSETTLED,
            rcv_settle_mode=ReceiverSettleMode.FIRST if self.activemq else None,
        )
        browser = BrowserLink(self, link, queue, selector=selector)
        self.links[link] = browser
        queue.add_browser(browser)

    def _start_consumer(
        self,
        link: Sender,
        queue: Queue,
        answer: Terminus,
        *,
        selector: Matcher | None = None,
        unsubscribes: bool = False,
    ) -> None:
        # ActiveMQ grants 'first' whatever was asked: acknowledgements are then unconfirmed.
        link.open(
            source=answer, rcv_settle_mode=ReceiverSettleMode.FIRST if self.activemq else None
        )
        consumer = ConsumerLink(self, link, queue, selector=selector, unsubscribes=unsubscribes)
        self.links[link] = consumer
        if isinstance(queue, SubscriptionQueue) and queue.topic.name == FAILOVER_TOPIC:
            topology = self.state.topology
            if topology is not None:  # a new subscriber learns the current membership at once
                queue.enqueue(self.router.new_message(topology.membership_message()))
        queue.add_consumer(consumer)

    # Teardown ----------------------------------------------------------------------------------

    def cleanup(self) -> None:
        """Give back everything the connection held (idempotent; skipped after a kill)."""
        if self._cleaned:
            return
        self._cleaned = True
        self.state.forget(self)
        if not self.state.alive:
            return  # a killed broker keeps nothing: no redelivery bookkeeping after a crash
        # Links first: a rolled-back acknowledgement must not be redelivered to a dead link.
        for handler in list(self.links.values()):
            handler.close()
        self.links.clear()
        rolled_back = self.transactions.rollback_owned(self.id)
        deleted = self.router.delete_owned(self.id)
        if rolled_back or deleted:
            log.debug(
                "connection %d: rolled back %d transaction(s), deleted %s",
                self.id,
                rolled_back,
                deleted,
            )
