"""The protocol-agnostic failover layer: failover URLs, broker policies, back-off, the gate that
holds calls while the connection is restored, epochs and the ordered restore of resources.

Nothing here knows AMQP; ``haclient.aio`` supplies the connector. The only import from
``haclient`` is ``haclient.errors`` (for the exceptions it raises); a unit test keeps it so.

- ``failover.url``: ``parse_url(text) -> FailoverURL`` (brokers, policy, connection options) and
  back with ``FailoverURL.to_string()``; ``merge_broker_lists`` for the ``exchange`` method.
- ``failover.policy``: ``FailoverPolicy`` (an immutable value, from URL options and back) and its
  pure plan ``policy.attempts(brokers, start_index=...)``: which broker next, after what delay.
- ``failover.manager``: ``ConnectionManager``, the logical connection over a connector
  (``Callable[[BrokerURL], Awaitable[P]]``): the state machine (``TRANSITIONS``), the gate
  (``wait_connected``), epochs, ordered restore of registered resources, listeners (F14) and
  the ``exchange`` list (F12). The only module here that uses anyio (it owns tasks).
"""

import logging

# haclient.errors is the one import from haclient. Importing it runs haclient/__init__, which
# builds the whole API, which imports failover.manager and failover.policy: done here first,
# so that importing failover.url (or .policy) before haclient does not meet its own half-built
# module in that cycle.
import haclient.errors  # noqa: F401

# A library does not decide where its log goes (the logging HOWTO): without this, Python's
# last-resort handler would print our warnings on stderr of applications that set up no logging.
# Every logger of haclient and failover is under "haclient".
logging.getLogger("haclient").addHandler(logging.NullHandler())
