"""What the loop gives back to the blocking objects: values (``haclient.sync._served``).

A blocking object learns the facts of its async object once, when it is made (a frozen record:
a consumer's destination, a producer's encoding terms ...), and is told of its connection's
failover events by name and arguments; nothing here is read from the async core afterwards.
These are made on the loop and read in the application's threads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from haclient.aio.consumer import MessageConsumer as AsyncMessageConsumer
from haclient.aio.producer import MessageProducer as AsyncMessageProducer
from haclient.destination import NO_PREFIXES, Destination, Queue, TemporaryQueue
from haclient.message import DeliveryMode
from haclient.modes import AckMode
from haclient.outgoing import EncodingTerms
from haclient.sync._dispatch import Dispatcher

__all__ = [
    "BrowserFacts",
    "ConnectionFacts",
    "ConsumerFacts",
    "FailoverRelay",
    "ProducerTerms",
    "SessionFacts",
    "consumer_facts",
    "producer_terms",
]


@dataclass(frozen=True, slots=True)
class ConnectionFacts:
    """What a blocking connection learns of its async connection once, when opened."""

    connection_id: str
    client_id: str | None
    url: Any
    tracing: Any


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """What a blocking session learns of its async session once (fixed for its life)."""

    ack_mode: AckMode
    transacted: bool
    transactions_emulated: bool


@dataclass(frozen=True, slots=True)
class ProducerTerms:
    """What a blocking producer learns of its async producer once, when made: nothing of
    it is read from another thread afterwards."""

    destination: Destination | None
    encoding: EncodingTerms
    pipelined: frozenset[DeliveryMode]
    ids: Callable[[], str]
    validate_names: bool
    send_timeout: float | None
    close_timeout: float


@dataclass(frozen=True, slots=True)
class ConsumerFacts:
    """What a blocking consumer learns of its async consumer once (fixed for its life)."""

    destination: Destination
    message_selector: str | None
    no_local: bool
    subscription_name: str | None


@dataclass(frozen=True, slots=True)
class BrowserFacts:
    """What a blocking browser learns of its async browser once."""

    queue: Queue | TemporaryQueue
    message_selector: str | None


def producer_terms(producer: AsyncMessageProducer) -> ProducerTerms:
    """``producer``'s terms for the blocking producer that wraps it."""
    encoding = producer.encoding_terms() or EncodingTerms(-1, NO_PREFIXES, None)
    return ProducerTerms(
        producer.destination,
        encoding,
        producer.pipelined_modes(),
        producer.message_ids(),
        producer.validate_names,
        producer.send_timeout(),
        producer.close_timeout(),
    )


def consumer_facts(consumer: AsyncMessageConsumer) -> ConsumerFacts:
    return ConsumerFacts(
        consumer.destination,
        consumer.message_selector,
        consumer.no_local,
        consumer.subscription_name,
    )


class FailoverRelay:
    """The loop's listener of a blocking connection's failover events: each event goes to the
    connection's notifier thread as its name and arguments (``Dispatcher.announce``), where
    the application's listeners are called. It has every name of ``failover.listeners.CALLS``."""

    def __init__(self, notifier: Dispatcher) -> None:
        self._notifier = notifier

    def _tell(self, name: str, *args: Any) -> None:
        self._notifier.announce(name, args)

    def failover_started(self, cause: BaseException) -> None:
        self._tell("failover_started", cause)

    def failover_completed(self, broker: Any, downtime: float) -> None:
        self._tell("failover_completed", broker, downtime)

    def failover_failed(self, cause: BaseException) -> None:
        self._tell("failover_failed", cause)

    def resource_not_restored(self, resource: Any, error: BaseException) -> None:
        self._tell("resource_not_restored", resource, error)

    def on_connection_established(self, broker: Any) -> None:
        self._tell("on_connection_established", broker)

    def on_connection_interrupted(self, broker: Any) -> None:
        self._tell("on_connection_interrupted", broker)

    def on_connection_restored(self, broker: Any) -> None:
        self._tell("on_connection_restored", broker)

    def on_connection_failure(self, error: BaseException) -> None:
        self._tell("on_connection_failure", error)

    def message_dead_lettered(
        self, destination: Any, message_id: str | None, delivery_count: int, outcome: str
    ) -> None:
        self._tell("message_dead_lettered", destination, message_id, delivery_count, outcome)

    def send_failed(self, destination: Any, message_id: str | None, error: BaseException) -> None:
        self._tell("send_failed", destination, message_id, error)
