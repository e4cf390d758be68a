"""The redelivery policy (E6): which messages a consumer never hands out, and how it settles them.

How this works: Qpid JMS's ``JmsDefaultRedeliveryPolicy``. A message's redelivery count is its
``delivery_count`` - 1 (JMSXDeliveryCount - 1, from the AMQP header's delivery-count, E4); once
it is above ``max_redeliveries`` (-1: never), the consumer settles the delivery with the
configured outcome instead of handing it out, in every acknowledge mode and for listeners too,
outside any transaction. The decisions are pure functions; ``MessageConsumer`` acts on them.
"""

from __future__ import annotations

from typing import Final

from haclient.amqp.types import Accepted, Modified, Outcome, Rejected, Released

__all__ = ["dead_letter_outcome", "exceeds"]

_OUTCOMES: Final[dict[str, Outcome]] = {
    "ACCEPTED": Accepted(),
    "REJECTED": Rejected(),
    "RELEASED": Released(),
    "MODIFIED_FAILED": Modified(delivery_failed=True),
    "MODIFIED_FAILED_UNDELIVERABLE": Modified(delivery_failed=True, undeliverable_here=True),
}
"""The dispositions Qpid JMS sends for each ``jms.redeliveryPolicy.outcome`` (its
``AmqpSupport``): ``rejected`` without an error, ``modified`` with ``delivery-failed`` and, for
the default, ``undeliverable-here``."""


def exceeds(delivery_count: int, max_redeliveries: int) -> bool:
    """Whether a message delivered ``delivery_count`` times is past the limit (never, with a
    negative ``max_redeliveries``)."""
    return 0 <= max_redeliveries < delivery_count - 1


def dead_letter_outcome(name: str, product: str | None) -> Outcome:
    """The disposition for outcome ``name`` (``haclient.options.REDELIVERY_OUTCOMES``) on a
    broker of ``product``.

    RabbitMQ 3.10 ends the session on a ``modified`` disposition (see
    ``SessionContext.give_back_outcomes``): there the two ``MODIFIED_*`` outcomes are sent as
    ``rejected``, which RabbitMQ dead-letters (to the queue's dead-letter exchange, if any).
    """
    outcome = _OUTCOMES[name]
    if isinstance(outcome, Modified) and product == "RabbitMQ":
        return Rejected()
    return outcome
