"""haclient: a failover-aware, JMS-style messaging client for AMQP 1.0 brokers.

The blocking JMS-style API (``connect``, ``ConnectionFactory``, ``Connection``, ``Session`` ...,
from ``haclient.sync``; ``haclient.aio`` is the async API it wraps), the exception tree
(``haclient.errors``), messages and destinations with the AMQP-JMS mapping Qpid JMS uses
(``haclient.message``, ``haclient.destination``), the selector language (``haclient.selector``)
and the AMQP engine (``haclient.amqp``).

Importing ``haclient`` (or any ``haclient.*`` module, which runs this file first) loads only the
error tree, which needs nothing but the standard library. Every other name is imported on first
use (PEP 562's module ``__getattr__``), so that the layers below the client, ``failover`` above
all, can use ``haclient.errors`` without loading the client, anyio or proton;
``tests/unit/test_layers.py`` keeps it so.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# The client's option table registers itself with the URL parser (``failover.options``) when
# imported: ``failover.url.parse_url`` knows the ``jms.*``/``amqp.*`` options wherever haclient is.
import haclient.options  # noqa: F401
from haclient.errors import *  # noqa: F403  (the error tree is part of the public API)
from haclient.errors import __all__ as _errors_all

# The names of ``_LAZY`` below, for type checkers. ``__all__`` is built, so they cannot read it:
# ``X as X`` and ``import *`` mark each name re-exported.
if TYPE_CHECKING:
    from haclient.destination import Destination as Destination
    from haclient.destination import Queue as Queue
    from haclient.destination import TemporaryQueue as TemporaryQueue
    from haclient.destination import TemporaryTopic as TemporaryTopic
    from haclient.destination import Topic as Topic
    from haclient.message import Byte as Byte
    from haclient.message import BytesMessage as BytesMessage
    from haclient.message import DeliveryMode as DeliveryMode
    from haclient.message import Double as Double
    from haclient.message import Float as Float
    from haclient.message import Int as Int
    from haclient.message import Long as Long
    from haclient.message import MapMessage as MapMessage
    from haclient.message import Message as Message
    from haclient.message import Short as Short
    from haclient.message import StreamMessage as StreamMessage
    from haclient.message import TextMessage as TextMessage
    from haclient.modes import *  # noqa: F403  (all of it: AckConfirmation, AckMode)
    from haclient.sync import *  # noqa: F403  (all of it: the blocking API)

__version__ = "0.1.0"

# Public name -> the module it is imported from on first use. The one list of the re-exported
# names: ``__all__`` and ``__dir__`` come from it; the TYPE_CHECKING imports above say it again for
# type checkers, and tests/unit/test_layers.py keeps the two equal.
_LAZY: dict[str, str] = {
    "AckConfirmation": "haclient.modes",
    "AckMode": "haclient.modes",
    "Byte": "haclient.message",
    "BytesMessage": "haclient.message",
    "CompletionListener": "haclient.sync",
    "Connection": "haclient.sync",
    "ConnectionFactory": "haclient.sync",
    "DeliveryMode": "haclient.message",
    "Destination": "haclient.destination",
    "Double": "haclient.message",
    "Float": "haclient.message",
    "Int": "haclient.message",
    "Long": "haclient.message",
    "MapMessage": "haclient.message",
    "Message": "haclient.message",
    "MessageConsumer": "haclient.sync",
    "MessageListener": "haclient.sync",
    "MessageProducer": "haclient.sync",
    "Queue": "haclient.destination",
    "QueueBrowser": "haclient.sync",
    "Session": "haclient.sync",
    "Short": "haclient.message",
    "StreamMessage": "haclient.message",
    "TemporaryQueue": "haclient.destination",
    "TemporaryTopic": "haclient.destination",
    "TextMessage": "haclient.message",
    "Topic": "haclient.destination",
    "connect": "haclient.sync",
}

__all__ = [*_errors_all, *_LAZY, "__version__"]

# Subpackages that ``import haclient; haclient.aio...`` reaches (they used to be loaded eagerly).
_SUBMODULES = frozenset(
    {"aio", "amqp", "destination", "errors", "mapping", "message", "modes", "selector", "sync"}
)


def __getattr__(name: str) -> object:
    """Import a public name (or a subpackage) on first use, then keep it as a plain global."""
    if name in _LAZY:
        value: object = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, *_SUBMODULES})
