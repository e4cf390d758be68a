"""Client and server engines joined in memory: open, attach, transfer, settle, credit."""

from __future__ import annotations

import pytest
from enginekit import AcceptAll, Pair, make_pair

from haclient.amqp import (
    Accepted,
    ConnectionRemoteOpen,
    DeliveryUpdated,
    EngineConfig,
    ErrorCondition,
    LinkFlow,
    LinkRemoteClose,
    LinkRemoteOpen,
    MessageReceived,
    Modified,
    ReceiverSettleMode,
    Rejected,
    Released,
    Role,
    SenderSettleMode,
    SessionRemoteOpen,
    Terminus,
    TransactionalState,
)
from haclient.amqp.codec import AmqpMessage, decode_message, encode_message


def opened(pair: Pair) -> None:
    pair.client.open()
    pair.pump()


def test_open_exchanges_identity_and_properties() -> None:
    pair = make_pair(
        EngineConfig(container_id="app-1", properties={"product": "haclient"}),
        EngineConfig(
            container_id="broker",
            role=Role.SERVER,
            offered_capabilities=("ANONYMOUS-RELAY",),
            properties={"failover-server-list": []},
        ),
    )
    AcceptAll(pair)
    opened(pair)
    [server_saw] = pair.of_type("server", ConnectionRemoteOpen)
    assert server_saw.container_id == "app-1"
    assert server_saw.properties == {"product": "haclient"}
    [client_saw] = pair.of_type("client", ConnectionRemoteOpen)
    assert client_saw.container_id == "broker"
    assert client_saw.offered_capabilities == ("ANONYMOUS-RELAY",)
    assert "failover-server-list" in client_saw.properties


def test_attach_both_directions_carries_termini(pair: Pair) -> None:
    AcceptAll(pair)
    opened(pair)
    session = pair.client.open_session()
    source = Terminus(address="orders", capabilities=("queue",), filter=None)
    receiver = session.open_receiver("r1", source, credit=5)
    sender = session.open_sender("s1", Terminus(address="topic://prices", capabilities=("topic",)))
    pair.pump()
    assert len(pair.of_type("client", SessionRemoteOpen)) == 1
    server_links = {e.link.name: e.link for e in pair.of_type("server", LinkRemoteOpen)}
    assert server_links["r1"].is_sender and not server_links["s1"].is_sender
    assert server_links["r1"].remote_source.address == "orders"
    assert server_links["r1"].remote_source.capabilities == ("queue",)
    assert server_links["s1"].remote_target.capabilities == ("topic",)
    client_links = {e.link for e in pair.of_type("client", LinkRemoteOpen)}
    assert client_links == {receiver, sender}
    assert server_links["r1"].credit == 5


@pytest.mark.parametrize(
    ("snd_mode", "expect_outcome"),
    [
        (SenderSettleMode.UNSETTLED, True),
        (SenderSettleMode.MIXED, True),
        (SenderSettleMode.SETTLED, False),
    ],
)
def test_transfer_with_each_sender_settle_mode(
    pair: Pair, snd_mode: SenderSettleMode, expect_outcome: bool
) -> None:
    acceptor = AcceptAll(pair)
    opened(pair)
    sender = pair.client.open_session().open_sender(
        "s", Terminus(address="q"), snd_settle_mode=snd_mode
    )
    pair.pump()
    payload = encode_message(AmqpMessage(body="hello", durable=True))
    delivery = sender.send(payload, settled=snd_mode is SenderSettleMode.SETTLED)
    pair.pump()
    [(server_delivery, received)] = acceptor.received
    assert decode_message(received).body == "hello"
    updates = [e for e in pair.of_type("client", DeliveryUpdated) if e.delivery is delivery]
    if expect_outcome:
        assert updates[-1].outcome == Accepted() and updates[-1].settled
    else:
        assert updates == [] and server_delivery.remote_settled


def test_receiver_settle_mode_second_confirms_after_peer_settles(pair: Pair) -> None:
    """In mode second the broker settles first; the client's view shows the confirmation."""
    acceptor = AcceptAll(pair, outcome=False)
    opened(pair)
    receiver = pair.client.open_session().open_receiver(
        "r", Terminus(address="q"), rcv_settle_mode=ReceiverSettleMode.SECOND, credit=1
    )
    pair.pump()
    [server_link] = [e.link for e in pair.of_type("server", LinkRemoteOpen)]
    assert server_link.remote_rcv_settle_mode is ReceiverSettleMode.SECOND
    server_delivery = server_link.send(encode_message(AmqpMessage(body=1)))  # type: ignore[attr-defined]
    pair.pump()
    [message] = pair.of_type("client", MessageReceived)
    assert message.delivery.link is receiver
    message.delivery.update(Accepted(), settle=False)
    pair.pump()
    [update] = [e for e in pair.of_type("server", DeliveryUpdated) if e.delivery is server_delivery]
    assert update.outcome == Accepted() and not update.settled
    server_delivery.settle()
    pair.pump()
    confirmations = [e for e in pair.of_type("client", DeliveryUpdated) if e.settled]
    assert [c.delivery for c in confirmations] == [message.delivery]
    assert acceptor.received == []


@pytest.mark.parametrize(
    "outcome",
    [
        Accepted(),
        Released(),
        Modified(delivery_failed=True, undeliverable_here=True, annotations={"x-opt-why": "test"}),
        Rejected(ErrorCondition("amqp:invalid-field", "bad body", {"field": "body"})),
    ],
)
def test_dispositions_reach_the_sender_intact(pair: Pair, outcome: object) -> None:
    AcceptAll(pair, outcome=outcome)
    opened(pair)
    sender = pair.client.open_session().open_sender("s", Terminus(address="q"))
    pair.pump()
    delivery = sender.send(b"\x00Sw\xa1\x01x")
    pair.pump()
    [update] = [e for e in pair.of_type("client", DeliveryUpdated) if e.delivery is delivery]
    assert update.outcome == outcome
    assert update.settled


def test_transactional_state_round_trips(pair: Pair) -> None:
    acceptor = AcceptAll(pair, outcome=TransactionalState(b"txn-1", Accepted()))
    opened(pair)
    sender = pair.client.open_session().open_sender("s", Terminus(address="q"))
    pair.pump()
    delivery = sender.send(b"\x00Sw\xa1\x01x", state=TransactionalState(b"txn-1"))
    pair.pump()
    [(server_delivery, _)] = acceptor.received
    assert server_delivery.remote_outcome == TransactionalState(b"txn-1", None)
    [update] = [e for e in pair.of_type("client", DeliveryUpdated) if e.delivery is delivery]
    assert update.outcome == TransactionalState(b"txn-1", Accepted())


def test_credit_limits_transfers_and_drain_returns_unused_credit(pair: Pair) -> None:
    AcceptAll(pair)
    opened(pair)
    receiver = pair.client.open_session().open_receiver("r", Terminus(address="q"), credit=2)
    pair.pump()
    [server_link] = [e.link for e in pair.of_type("server", LinkRemoteOpen)]
    for n in range(3):
        server_link.send(encode_message(AmqpMessage(body=n)))  # type: ignore[attr-defined]
    pair.pump()
    assert [decode_message(m.payload).body for m in pair.of_type("client", MessageReceived)] == [
        0,
        1,
    ]
    receiver.drain(5)
    pair.pump()
    # The sender has one message queued and 5 credits: it sends it, then answers the drain.
    assert server_link.drain_requested  # type: ignore[attr-defined]
    server_link.drained()  # type: ignore[attr-defined]
    pair.pump()
    assert [decode_message(m.payload).body for m in pair.of_type("client", MessageReceived)] == [
        0,
        1,
        2,
    ]
    assert not receiver.draining
    assert receiver.credit == 0
    assert any(isinstance(e, LinkFlow) and e.link is receiver for e in pair.client_events)


def test_refused_attach_reports_the_condition(pair: Pair) -> None:
    opened_pair = pair

    def refuse(event: object) -> None:
        if isinstance(event, ConnectionRemoteOpen):
            opened_pair.server.open()
        elif isinstance(event, SessionRemoteOpen):
            event.session.open()
        elif isinstance(event, LinkRemoteOpen):
            event.link.open(source=Terminus.null())
            event.link.close(ErrorCondition("amqp:not-found", "no queue 'nope'"))

    pair.on_server_event = refuse
    opened(pair)
    receiver = pair.client.open_session().open_receiver("r", Terminus(address="nope"))
    pair.pump()
    [attach] = pair.of_type("client", LinkRemoteOpen)
    assert attach.link is receiver and attach.link.remote_source.kind.value == "null"
    [close] = pair.of_type("client", LinkRemoteClose)
    assert close.closed and close.error == ErrorCondition("amqp:not-found", "no queue 'nope'")
    assert receiver.is_closed  # answered automatically


def test_a_message_larger_than_the_input_buffer_arrives_whole(pair: Pair) -> None:
    """Input is pushed in capacity-sized slices; a 4 MiB message crosses many frames."""
    acceptor = AcceptAll(pair)
    opened(pair)
    sender = pair.client.open_session().open_sender("s", Terminus(address="q"))
    pair.pump()
    body = bytes(range(256)) * (4 * 4096)
    sender.send(encode_message(AmqpMessage(body=body)))
    pair.pump()
    [(_, payload)] = acceptor.received
    assert decode_message(payload).body == body


def test_coordinator_link_declare_and_discharge(pair: Pair) -> None:
    from haclient.amqp import Declared
    from haclient.amqp.codec import (
        Declare,
        Discharge,
        decode_coordinator_request,
        encode_declare,
        encode_discharge,
    )

    requests: list[object] = []

    def coordinator(event: object) -> None:
        if isinstance(event, ConnectionRemoteOpen):
            pair.server.open()
        elif isinstance(event, SessionRemoteOpen):
            event.session.open()
        elif isinstance(event, LinkRemoteOpen):
            assert event.link.is_coordinator
            event.link.open()
            event.link.flow(10)  # type: ignore[attr-defined]
        elif isinstance(event, MessageReceived):
            request = decode_coordinator_request(event.payload)
            requests.append(request)
            answer = Declared(b"tx-7") if isinstance(request, Declare) else Accepted()
            event.delivery.update(answer)

    pair.on_server_event = coordinator
    opened(pair)
    link = pair.client.open_session().open_coordinator("txn")
    pair.pump()
    declare = link.send(encode_declare())
    pair.pump()
    discharge = link.send(encode_discharge(b"tx-7", fail=True))
    pair.pump()
    assert requests == [Declare(), Discharge(b"tx-7", fail=True)]
    outcomes = {e.delivery: e.outcome for e in pair.of_type("client", DeliveryUpdated)}
    assert outcomes == {declare: Declared(b"tx-7"), discharge: Accepted()}
