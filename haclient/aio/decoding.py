"""A consumer's decoding of received messages, the next one decoded while it waits for the broker.

How this works: an AUTO receive (and a listener's acknowledgement) writes the acknowledgement
and then waits for the broker to confirm it: client and broker take turns, and the client's
share of that turn (decoding the message, some 15 us) adds to every message's round trip.
``Decoder.decode_ahead`` is called just before such a wait. It hands the connection work for
its next wait (``AmqpConnection.while_waiting``): once the acknowledgement is written, and
before the task waits, the next prefetched message is decoded, while the broker works on the
acknowledgement; ``decode`` hands that result out when the consumer takes that message.
Decoding is a function of the payload alone, so nothing else changes: the duplicate window, the
selector and the counters are applied when the message is taken, as before; a message that does
not decode is left for ``decode`` to reject.

Thread-safety: none; everything runs on the connection's event loop.
"""

from __future__ import annotations

import logging

from haclient.amqp.codec import MessageView, SectionMemo
from haclient.amqp.connection import AmqpConnection, ReceivedMessage
from haclient.amqp.endpoints import Receiver
from haclient.destination import Destination, DestinationPrefixes
from haclient.mapping import from_amqp
from haclient.message import Message

__all__ = ["Decoder"]

log = logging.getLogger("haclient.consumer")


class Decoder:
    """Decodes the messages of one consumer (destination ``destination``), one ahead at most."""

    __slots__ = ("_ahead", "_destination", "_memo", "_waiting_on")

    def __init__(self, destination: Destination) -> None:
        self._destination = destination
        self._ahead: tuple[ReceivedMessage, Message] | None = None
        self._waiting_on: AmqpConnection | None = None  # has our work for its next wait
        # its senders' headers and annotations, decoded once; made by the first message (an
        # idle consumer holds none: thousands of them are restored at once after a failover)
        self._memo: SectionMemo | None = None

    def decode(self, raw: ReceivedMessage, prefixes: DestinationPrefixes) -> Message:
        """The JMS message for ``raw`` (decoded ahead, or now).

        Raises:
            MessageFormatError: ``raw`` is not a valid AMQP message or JMS mapping.
        """
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] is raw:
            return ahead[1]
        return self._decode_now(raw, prefixes)

    def decode_ahead(
        self, amqp: AmqpConnection, receiver: Receiver, prefixes: DestinationPrefixes
    ) -> None:
        """When a call on ``amqp`` next waits for the broker, decode the message that waits
        first on ``receiver`` then, for ``decode``."""
        if self._waiting_on is not amqp:  # once per wait (a new connection after failover)
            self._waiting_on = amqp
            amqp.while_waiting(lambda: self._decode_next(amqp, receiver, prefixes))

    def _decode_next(
        self, amqp: AmqpConnection, receiver: Receiver, prefixes: DestinationPrefixes
    ) -> None:
        self._waiting_on = None
        raw = amqp.peek(receiver)
        if raw is None or (self._ahead is not None and self._ahead[0] is raw):
            return
        try:
            self._ahead = (raw, self._decode_now(raw, prefixes))
        except Exception as exc:  # taking it decodes it again, and reports what is wrong there
            log.debug("not decoded ahead: %s", exc)

    def _decode_now(self, raw: ReceivedMessage, prefixes: DestinationPrefixes) -> Message:
        memo = self._memo
        if memo is None:
            memo = self._memo = SectionMemo()
        return from_amqp(
            MessageView(raw.payload, memo),
            prefixes=prefixes,
            consumer_destination=self._destination,
        )
