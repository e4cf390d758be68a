"""Shorthands the failover unit tests share: the state machine's enums and three brokers."""

from __future__ import annotations

from failover.states import ConnectionState, ManagerEvent
from failover.url import BrokerURL

__all__ = ["A", "B", "C", "E", "S"]

S, E = ConnectionState, ManagerEvent
A, B, C = BrokerURL("amqp", "a"), BrokerURL("amqp", "b"), BrokerURL("amqp", "c")
