"""Exactly-once effects through application crashes: a transactional outbox and an idempotent
inbox (rules X1-X6 of docs/semantics.md; the guide is docs/guide/outbox-inbox.md).

How this works, in one picture::

    application transaction                relay (task or process)           consumer
    ------------------------               -----------------------           --------
    UPDATE orders ...           ─┐         read oldest rows                  receive (CLIENT)
    outbox: INSERT row (id fixed)├ COMMIT  send each (same id) ───────────► inbox.handle:
                                 ┘         wait for the broker's accept        BEGIN
                                           DELETE the accepted rows            id seen? skip
                                                                               effect + INSERT id
                                                                               COMMIT
                                                                             acknowledge

Modules, one job each: ``schema`` (the tables, their version and upgrades), ``rows`` (a message
as a row), ``outbox`` (the writer), ``relay`` (the async relay), ``reading`` (its SQL),
``blocking`` (the blocking relay), ``inbox`` (the idempotent consumer), ``aio`` (the async
twins), ``cli`` (the ``haclient-relay`` command), ``database`` (SQLite or PostgreSQL behind one
set of calls), ``worker`` (the async twins' database thread), ``tracing`` (the write span,
X6). The database is SQLite (stdlib, WAL) or PostgreSQL (psycopg, the ``postgresql`` extra).

The blocking API is here; the async one is ``haclient.exactly_once.aio``.
"""

from __future__ import annotations

from haclient.exactly_once.blocking import Relay
from haclient.exactly_once.inbox import DEFAULT_RETENTION, Inbox, InboxStatistics
from haclient.exactly_once.outbox import Outbox, OutboxStatistics, OutboxTransaction, outbox_depth
from haclient.exactly_once.relay import RelayStatistics
from haclient.exactly_once.schema import SCHEMA_VERSION, install, require, version

__all__ = [
    "DEFAULT_RETENTION",
    "SCHEMA_VERSION",
    "Inbox",
    "InboxStatistics",
    "Outbox",
    "OutboxStatistics",
    "OutboxTransaction",
    "Relay",
    "RelayStatistics",
    "install",
    "outbox_depth",
    "require",
    "version",
]
