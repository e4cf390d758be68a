"""Qpid JMS's pull: a receive that found nothing prefetched asks the broker (M9).

How this works: a ``receive(timeout)`` or ``receive_nowait()`` whose deadline passed with no
message drains the consumer's link (granting one credit when it has none): the broker must use
its credit now or give it back, so what it still holds for the consumer arrives before the
answer. ``pulls`` decides whether a receive does that (Qpid JMS's rules and its
``jms.receiveLocalOnly`` / ``jms.receiveNoWaitLocalOnly`` options), ``drainable`` whether the
broker takes a drain, and ``drain`` makes one, bounded by ``amqp.drainTimeout``; the consumer
(``MessageConsumer._pull``) takes what came.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import anyio

from haclient.errors import ClosedError, HAClientError

if TYPE_CHECKING:
    from haclient.aio.gate import Connected
    from haclient.aio.options import ConnectionOptions
    from haclient.amqp.endpoints import Receiver

__all__ = ["drain", "drain_timed_out", "drainable", "pulls"]


def pulls(timeout: float | None, prefetch: int, options: ConnectionOptions) -> bool:
    """Whether a receive with ``timeout`` that found nothing asks the broker, as Qpid JMS
    decides: never without a timeout (it waits on); always with prefetch 0; else unless
    ``receive_local_only`` (``receive_no_wait_local_only`` for a timeout of 0)."""
    if timeout is None:
        return False
    if prefetch == 0:
        return True
    local = options.receive_no_wait_local_only if timeout <= 0 else options.receive_local_only
    return not local


def drainable(at: Connected) -> bool:
    """Whether a consumer may drain its link on this broker: not on RabbitMQ, whose AMQP 1.0
    plugin (3.x) ends the session on a drain of a classic queue (there a receive stays local)."""
    return at.physical.product != "RabbitMQ"


async def drain(at: Connected, receiver: Receiver) -> bool | None:
    """One drain of ``receiver`` (one credit granted if it has none): True once answered, False
    when the connection was lost meanwhile (failover takes over), None when
    ``amqp.drainTimeout`` passed first.

    Raises:
        AMQPError: the link's error when the broker closed it (its reason).
    """
    limit = at.physical.drain_timeout
    with anyio.move_on_after(math.inf if limit is None else limit):
        try:
            await at.amqp.drain(receiver, 0 if receiver.credit > 0 else 1)
        except HAClientError:
            if at.physical.is_open and not receiver.is_closed:
                raise
            return False
        return True
    return None


def drain_timed_out(limit: float | None) -> ClosedError:
    """The error of a receive whose drain the broker left unanswered (its consumer closed)."""
    waited = "" if limit is None else f" within {limit:g} s"
    return ClosedError(
        f"the consumer was closed: the broker did not answer a drain{waited} (amqp.drainTimeout)"
    )
