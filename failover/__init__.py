"""The protocol-agnostic failover layer: failover URLs, broker policies, back-off, the gate that
holds calls while the connection is restored, epochs and the tiered restore of resources.

Nothing here knows AMQP; ``haclient.aio`` supplies the connector. The only import from
``haclient`` is ``haclient.errors`` (for the exceptions it raises), which loads nothing but the
standard library; only ``failover.manager`` imports anyio. ``tests/unit/test_layers.py`` keeps
both so.

- ``failover.url``: ``parse_url(text) -> FailoverURL`` (brokers, policy, connection options) and
  back with ``FailoverURL.to_string()``; ``merge_broker_lists`` for the ``exchange`` method.
- ``failover.policy``: ``FailoverPolicy`` (an immutable value, from URL options and back) and its
  pure plan ``policy.attempts(brokers, start_index=...)``: which broker next, after what delay.
- ``failover.states``: the state machine of the logical connection (``TRANSITIONS``) and the
  pure decisions on it: give up or fail over, and the plan of a connect or a failover.
- ``failover.protocols``: what the manager is given (``ManagedConnection``, ``Connector``,
  ``Resource``, ``FailoverListener``) and ``restore_tiers``, the order resources restore in.
- ``failover.manager``: ``ConnectionManager``, the logical connection over a connector: the
  supervisor, the gate (``wait_connected``), epochs, the tiered restore, listeners (F14) and
  the ``exchange`` list (F12). The only module here that uses anyio (it owns tasks); it
  re-exports the names of ``failover.states`` and ``failover.protocols`` that callers use.
"""
