"""The blocking JMS-style API: ``haclient.aio`` driven from threads (re-exported by ``haclient``).

Each connection runs its ``haclient.aio`` connection on an event loop in a thread of its own;
every blocking method is one call into that loop, and Ctrl-C during a blocking call cancels it.
Message listeners and ``send_async`` completion callbacks run on the session's dispatcher
thread, never on the loop. Calling the blocking API from the loop thread raises
``IllegalStateError``. ``close()`` may be called from any thread, also from inside a listener.
"""

from __future__ import annotations

from haclient.sync.browser import QueueBrowser
from haclient.sync.connection import Connection, ConnectionFactory, connect
from haclient.sync.consumer import MessageConsumer, MessageListener
from haclient.sync.producer import CompletionListener, MessageProducer
from haclient.sync.session import Session

__all__ = [
    "CompletionListener",
    "Connection",
    "ConnectionFactory",
    "MessageConsumer",
    "MessageListener",
    "MessageProducer",
    "QueueBrowser",
    "Session",
    "connect",
]
