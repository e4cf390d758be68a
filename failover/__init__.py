"""The protocol-agnostic failover layer: failover URLs, broker policies, back-off, the gate that
holds calls while the connection is restored, epochs and the tiered restore of resources.

Nothing here knows AMQP; ``haclient.aio`` supplies the connector. Nothing here imports
``haclient``, and the AMQP engine imports nothing of it: the errors both raise are the root of
the exception tree, in the bottom layer ``haerrors``; ``failover.errors`` holds the errors
this layer raises or classifies, and ``haclient.errors`` re-exports the whole tree. Only
``failover.manager``, ``failover.gate``, ``failover.supervisor``, ``failover.restore`` and
``failover.standby`` import anyio, and url, policy, states and protocols are pure
(``failover.schedule`` too, but for importing tenacity, whose strategies are pure functions).
``tests/unit/test_layers.py`` keeps all three so.

- ``failover.errors``: the errors it raises or classifies: its own outcomes (connection failed,
  failover timeout, the return to a preferred broker) and the classes of ``haerrors`` it uses.
- ``failover.options`` (with ``failover.option_kinds``): the one way options are declared
  (``Option``: names, kind, default, scope, status, secret), tables of them, "did you mean",
  and the one masker of secrets. Nothing is registered: the client passes its table
  (``haclient.options.CLIENT_OPTIONS``) to the URL parser and the maskers wherever it parses.
- ``failover.url``: ``parse_url(text, options=table) -> FailoverURL`` (brokers, policy,
  connection options) and back with ``FailoverURL.to_string()``; ``merge_broker_lists`` for the
  ``exchange`` method.
- ``failover.policy``: ``FailoverPolicy`` (an immutable value, from URL options and back) and its
  pure plan ``policy.attempts(brokers, start_index=...)``: which broker next, after what delay.
- ``failover.states``: the state machine of the logical connection (``TRANSITIONS``) and the
  pure decisions on it: give up or fail over, and the plan of a connect or a failover.
- ``failover.protocols``: what the manager is given (``ManagedConnection``, ``Connector``,
  ``Resource`` and ``StagedResource``, ``FailoverListener``) and ``restore_tiers``, the order
  resources restore in.
- ``failover.schedule``: the reconnect schedule as tenacity wait and stop strategies (the
  policy's own, or any given to the manager) and ``ReconnectPlan``, the attempts of one connect
  or failover: which broker, how long to wait, when to give up.
- ``failover.manager``: ``ConnectionManager``, the logical connection over a connector, and
  its public API: the gate (``wait_connected``), epochs, registering resources, listeners
  (F14) and the ``exchange`` list (F12). It is a facade over the three parts below, and
  re-exports the names of ``failover.states`` and ``failover.protocols`` that callers use.
- ``failover.gate``: ``ConnectionGate``, the state and the callers waiting for CONNECTED
  (on the injected clock).
- ``failover.machine``: ``FailoverMachine``, every decision of a logical connection as one
  sans-IO machine: events in (an attempt failed, a connection opened, a tier restored, a
  loss, a spare ready, a probe succeeded, a timer, close), actions out (connect to B after D,
  open or close the gate, restore tier T, keep or drop the spare, return, give up, tell the
  listeners); it holds every counter those decisions need. ``failover.events`` holds its
  vocabulary, the events and the actions, frozen values.
- ``failover.supervisor``: ``Supervisor``, the machine's executor: one task, a loop that feeds
  it the events and carries out its actions. Its parts do the work and report the outcome as
  the next event: ``failover.walk`` (``Walker``: one attempt, its wait and its connect),
  ``failover.restore`` (``Restore``: one tier of resources on the new connection) and
  ``failover.standby`` (``Standby``: the warm spare a failover takes first, F17, and the
  probe of the preferred brokers that starts a return, F16).
- ``failover.listeners``: ``Listeners``, the failover listeners (F14) called in order.
"""

import logging

# A library does not decide where its log goes (the logging HOWTO): without this, Python's
# last-resort handler would print our warnings on stderr of applications that set up no logging.
# Every logger of haclient and failover is under "haclient".
logging.getLogger("haclient").addHandler(logging.NullHandler())
