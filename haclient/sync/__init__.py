"""The blocking JMS-style API: ``haclient.aio`` driven from threads (re-exported by ``haclient``).

The connections of a process run their ``haclient.aio`` connections on one event loop in a
daemon thread (``private_loop=True``: one of its own); every blocking method is one call into
that loop, and Ctrl-C during a blocking call cancels it. A connection never closed is closed at
interpreter exit (C6).
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
