"""The blocking JMS-style API: ``haclient.aio`` driven from threads (re-exported by ``haclient``).

The connections of a process run their ``haclient.aio`` connections on one event loop in a
daemon thread (``private_loop=True``: one of its own). Each connection has one thread boundary
(``_boundary``): every blocking method puts one request of plain data (the operation, the handle
of the object it acts on, its arguments as values, its deadline, where its outcome goes) into
it, and the loop carries the requests out in batches (``_served``); no function, coroutine or
application object crosses, and the async core is read from no other thread. Ctrl-C during a
blocking call cancels its request. A connection never closed is closed at
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
