"""The haclient reference broker: a faithful AMQP 1.0 broker for tests, chaos runs and demos.

Start it with ``async with Broker() as broker`` on an event loop, or with ``BrokerThread`` from
blocking code; ``haclient-broker`` runs it from the command line (``chaos.broker.cli:main``).
See ``server.py`` for the lifecycle, ``connection.py`` and ``links.py`` for the protocol side,
``nodes.py`` for queue semantics and ``transactions.py`` for local transactions.

Modules: ``server`` (Broker, listener, pause gate), ``blocking`` (BrokerThread), ``cli``
(``haclient-broker``), ``accounts`` (who may log in, and with which SASL mechanisms),
``connection`` (one client connection), ``owner`` (what links and the
state know of a connection), ``links`` (consumer, producer and coordinator links), ``browsing``
(queue browsers), ``router`` (addresses to nodes), ``nodes`` (Queue, Topic), ``stored`` (a
message as the broker keeps it), ``transactions``, ``state`` (one run's state and the admin
view), ``persistence``
(the store interface), ``store`` and ``store_lock`` (the SQLite store and the lock that makes a
shared-store HA pair), ``subscriptions``, ``filters`` (selector, no-local), ``schedule`` (delays,
expiry sweeps), ``topology`` (the announced peer list), ``wire`` (header parsing without proton),
``readiness`` (how long after its port opens a start answers the protocol header).

Persistence and HA: ``Broker(store=path)`` (``haclient-broker --store FILE``) keeps durable
messages of lasting queues, and the queues and topics themselves, in one SQLite file (WAL; a
transaction's changes and each socket read's burst commit atomically, before any outcome is sent).
A broker serves only while it holds the store's file lock, so two brokers on one store are a
master/slave pair: the slave waits in ``start()`` and takes over within ``ha_poll_interval``
of the master's death, as ActiveMQ's shared file system master/slave does. Non-durable messages
live in memory only.

Where it follows the AMQP 1.0 specification rather than one broker:
    - ``released`` and ``modified`` without ``delivery-failed`` leave the delivery-count alone;
      ``modified`` with it, a rolled-back acknowledgement, and an unsettled delivery whose link,
      session or connection went away add one (ActiveMQ agrees).
    - A consumer that settles without an outcome is taken to have accepted the message (the
      spec leaves this to the source's default outcome, which this broker does not set).
    - Producer links are answered with receiver settle mode ``first``; consumers get ``second``
      when they ask for it (unlike ActiveMQ, which silently answers ``first``).
    - The anonymous relay creates the node a ``to`` names, a queue unless Qpid JMS's
      ``x-opt-jms-dest`` annotation says topic; only the name of a temporary node that no longer
      exists is ``amqp:not-found``.
    - A transactional disposition naming an unknown transaction does not count: the message goes
      back to its queue (released).
    - A message sent to a topic nobody subscribes to is dropped (JMS semantics).
    - Described types may be named by number or by symbol (``amqp:declare:list``, message
      sections such as ``amqp:properties:list``): both are read. A broker bug met while handling
      one connection's frames closes that connection with ``amqp:internal-error`` (logged once);
      the others are served on.

JMS features (part 2):
    - Subscriptions follow Qpid JMS's conventions (QPIDJMS-220; ``subscriptions.py``): the
      link name up to ``|`` names a shared subscription, the container id scopes it unless the
      source says ``global``, the source's durability makes it durable; a null-source attach
      looks it up and its close unsubscribes. Subscription queues are not addressable nodes
      (``broker.state.subscriptions()`` lists them).
    - noLocal (without a client id it has no effect: docs/semantics.md, S2) and JMS selectors
      (``filters.py``, with ``haclient.selector``): on a queue the selector decides what each
      consumer is offered (others wait, in order); on a subscription it decides what is added
      at publish time. An incompatible comparison is
      UNKNOWN (as ``haclient.selector`` evaluates it), where the JMS text says FALSE: they
      differ only under NOT.
    - Priority 0-9 (FIFO per level; above 9 counts as 9), expiry by ttl or absolute time (to
      ``expiry_address`` if set), delayed delivery by ``x-opt-delivery-time`` or
      ``x-opt-delivery-delay`` (``schedule.py``: one task sleeping until the next due time), a
      redelivery limit (``max_delivery_count``, ``queue_policies``; ``--max-delivery-count``,
      ``--queue-policy NAME=N``) after which a failing message goes to the dead-letter queue,
      and ``expiry_address`` (``--expiry-address``) for expired messages.
    - ``peers`` / ``--peer`` (``topology.py``): the Open frame carries ``failover-server-list``
      (maps of hostname, network-host, port, scheme, as Qpid JMS and Artemis read them), and
      topic ``amq.failover`` gets a membership message, with application property
      ``amq.failover`` holding the URLs comma-separated, on each change and for each new
      subscriber.
    - Queue browsing (``browsing.py``): a receiver whose source asks for ``distribution-mode copy``
      on a queue (a JMS ``QueueBrowser``) is answered with ``copy`` and sender settle mode
      ``unsettled``, and is sent copies of the waiting messages in the queue's dispatch order,
      each at most once, later arrivals included; messages held by consumers, scheduled or
      expired are not shown, the queue's own messages and delivery-counts never change, a
      client's disposition only settles the copy, and a drain is answered at once (the end of
      the enumeration). A selector applies as for consumers. Browsers are not consumers
      (``consumer_count`` leaves them out). On a topic ``copy`` changes nothing: such a link is
      an ordinary subscriber.

Not implemented: proton 0.40 exposes no link-level capabilities, so the broker cannot read the
``shared``/``global`` link capabilities Qpid JMS puts on an unsubscribe attach: the null-source
lookup tries the full link name, then the name up to ``|``, in the container's namespace, then the
global one.
"""

from __future__ import annotations

from chaos.broker.blocking import BrokerThread
from chaos.broker.nodes import Queue, StoredMessage, Topic
from chaos.broker.persistence import MemoryPersistence, Persistence, RecoveredMessage, StoredRef
from chaos.broker.router import TEMPORARY_PREFIX, NodeNotFoundError
from chaos.broker.server import OFFERED_CAPABILITIES, Broker
from chaos.broker.state import NodeInfo

__all__ = [
    "OFFERED_CAPABILITIES",
    "TEMPORARY_PREFIX",
    "Broker",
    "BrokerThread",
    "MemoryPersistence",
    "NodeInfo",
    "NodeNotFoundError",
    "Persistence",
    "Queue",
    "RecoveredMessage",
    "StoredMessage",
    "StoredRef",
    "Topic",
]
