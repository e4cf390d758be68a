"""Rule 1 of the engine: proton objects never leave haclient.amqp."""

from __future__ import annotations

import dataclasses

from enginekit import AcceptAll, make_pair

import haclient.amqp
from haclient.amqp import Terminus
from haclient.amqp.codec import AmqpMessage, encode_message


def _proton_values(value: object, path: str = "event") -> list[str]:
    """Paths of every proton-defined object reachable from an event's fields."""
    found: list[str] = []
    module = type(value).__module__
    if module.startswith(("proton", "cproton")) and not isinstance(
        value, str | int | float | bytes
    ):
        found.append(f"{path}: {type(value).__module__}.{type(value).__name__}")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            found += _proton_values(getattr(value, field.name), f"{path}.{field.name}")
    elif isinstance(value, dict):
        for key, item in value.items():
            found += _proton_values(item, f"{path}[{key!r}]")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found += _proton_values(item, f"{path}[{index}]")
    return found


def test_events_carry_no_proton_objects() -> None:
    pair = make_pair()
    AcceptAll(pair)
    pair.client.open()
    pair.pump()
    session = pair.client.open_session()
    sender = session.open_sender("s", Terminus(address="q", capabilities=("queue",)))
    session.open_receiver("r", Terminus(address="q"), credit=1)
    pair.pump()
    sender.send(encode_message(AmqpMessage(body="x")))
    pair.client.close()
    pair.pump()
    events = pair.client_events + pair.server_events
    assert len({type(e) for e in events}) >= 6
    leaks = [leak for event in events for leak in _proton_values(event)]
    assert leaks == []


def test_the_public_surface_is_pinned() -> None:
    assert sorted(haclient.amqp.__all__) == sorted(
        [
            "Accepted",
            "ClientAuth",
            "ConnectionRemoteClose",
            "ConnectionRemoteOpen",
            "Declared",
            "Delivery",
            "DeliveryUpdated",
            "Engine",
            "EngineConfig",
            "EngineEvent",
            "ErrorCondition",
            "Link",
            "LinkFlow",
            "LinkRemoteClose",
            "LinkRemoteOpen",
            "MessageReceived",
            "Modified",
            "Outcome",
            "Receiver",
            "ReceiverSettleMode",
            "Received",
            "Rejected",
            "Released",
            "Role",
            "Sender",
            "SenderSettleMode",
            "ServerAuth",
            "Session",
            "SessionRemoteClose",
            "SessionRemoteOpen",
            "Terminus",
            "TerminusKind",
            "TlsClientOptions",
            "TlsServerOptions",
            "TransactionalState",
            "TransportClosed",
        ]
    )
