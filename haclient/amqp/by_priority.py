"""The arrivals of a receiver handed out highest priority first (Qpid JMS's
``jms.localMessagePriority``, its ``PriorityMessageQueue``).

How this works: one FIFO per JMS priority (0-9); a message's priority is its header's (4 when
absent, as AMQP says; above 9 counts as 9, as Qpid JMS clamps it). Taking looks at the ten
FIFOs from 9 down, so a take costs at most ten checks whatever the number of messages waiting.
It has the deque methods the receiver's inbox uses, so an inbox holds either.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Final, Generic, Protocol, TypeVar

from haclient.amqp.codec.message import MessageView
from haclient.jms_errors import MessageFormatError

__all__ = ["ByPriority", "priority_of"]


class _Arrived(Protocol):
    @property
    def payload(self) -> bytes: ...


M = TypeVar("M", bound=_Arrived)  # a received message (``connection.M``)

_LEVELS: Final = 10
_DEFAULT: Final = 4


def priority_of(payload: bytes) -> int:
    """The JMS priority (0-9) of an encoded message: its header's, 4 when it has none or cannot
    be read (the consumer rejects an undecodable message when it takes it)."""
    try:
        priority = MessageView(payload).priority
    except MessageFormatError:
        return _DEFAULT
    return max(0, min(int(priority), _LEVELS - 1))


class ByPriority(Generic[M]):
    """Received messages in the order a consumer hands them out: by priority, highest first;
    in arrival order within a priority."""

    __slots__ = ("_count", "_levels")

    def __init__(self) -> None:
        self._levels: list[deque[M]] = [deque() for _ in range(_LEVELS)]
        self._count = 0

    def append(self, message: M) -> None:
        self._levels[priority_of(message.payload)].append(message)
        self._count += 1

    def popleft(self) -> M:
        """The next message to hand out, removed.

        Raises:
            IndexError: none is waiting.
        """
        for level in reversed(self._levels):
            if level:
                self._count -= 1
                return level.popleft()
        raise IndexError("no message is waiting")

    def __getitem__(self, index: int) -> M:
        """``[0]``: the next message to hand out, left where it is (no other index)."""
        if index != 0:
            raise IndexError("only the next message ([0]) can be looked at")
        for level in reversed(self._levels):
            if level:
                return level[0]
        raise IndexError("no message is waiting")

    def clear(self) -> None:
        for level in self._levels:
            level.clear()
        self._count = 0

    def __iter__(self) -> Iterator[M]:
        """The waiting messages in the order they would be handed out."""
        for level in reversed(self._levels):
            yield from level

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0
