"""The protocol-agnostic failover layer: failover URLs, broker policies, back-off, the gate that
holds calls while the connection is restored, epochs and the tiered restore of resources.

Nothing here knows AMQP; ``haclient.aio`` supplies the connector. Nothing here imports
``haclient``: the exceptions it raises are the generic part of haclient's exception tree, which
lives here (``failover.errors``) and which ``haclient.errors`` re-exports. Only
``failover.manager`` and ``failover.supervisor`` import anyio, and url, policy, states and
protocols are pure. ``tests/unit/test_layers.py`` keeps all three so.

- ``failover.errors``: the root ``HAClientError`` and every error that knows no protocol
  (configuration, illegal state, connection failed or lost, failover timeout ...).

- ``failover.url``: ``parse_url(text) -> FailoverURL`` (brokers, policy, connection options) and
  back with ``FailoverURL.to_string()``; ``merge_broker_lists`` for the ``exchange`` method.
- ``failover.policy``: ``FailoverPolicy`` (an immutable value, from URL options and back) and its
  pure plan ``policy.attempts(brokers, start_index=...)``: which broker next, after what delay.
- ``failover.states``: the state machine of the logical connection (``TRANSITIONS``) and the
  pure decisions on it: give up or fail over, and the plan of a connect or a failover.
- ``failover.protocols``: what the manager is given (``ManagedConnection``, ``Connector``,
  ``Resource`` and ``StagedResource``, ``FailoverListener``) and ``restore_tiers``, the order
  resources restore in.
- ``failover.manager``: ``ConnectionManager``, the logical connection over a connector, and
  its public API: the gate (``wait_connected``), epochs, registering resources, listeners
  (F14) and the ``exchange`` list (F12). It re-exports the names of ``failover.states`` and
  ``failover.protocols`` that callers use.
- ``failover.supervisor``: the machinery under the manager (its base class): the state it
  keeps, the gate's waiting on the injected clock, and the supervisor task that connects,
  watches, fails over and restores the resources tier by tier.
"""

import logging

# A library does not decide where its log goes (the logging HOWTO): without this, Python's
# last-resort handler would print our warnings on stderr of applications that set up no logging.
# Every logger of haclient and failover is under "haclient".
logging.getLogger("haclient").addHandler(logging.NullHandler())
