"""An engine's proton objects are freed with it: our session and link wrappers sit in proton's C
records, a cycle Python's collector cannot see, so a connection that ends must take them off
(``Engine.release``); a delivery is forgotten by its engine once settled here."""

from __future__ import annotations

import gc
import weakref

from enginekit import AcceptAll, Pair, make_pair

from haclient.amqp import Terminus
from haclient.amqp.codec import AmqpMessage, encode_message


def _sent(pair: Pair, count: int) -> None:
    """``count`` unsettled messages from the client to the server."""
    pair.client.open()
    pair.pump()
    session = pair.client.open_session()
    sender = session.open_sender("s", Terminus(address="q"))
    session.open_receiver("r", Terminus(address="q"), credit=5)
    pair.pump()
    for n in range(count):
        sender.send(encode_message(AmqpMessage(body=f"m{n}")))
    pair.pump()


def test_settled_deliveries_leave_no_wrapper_behind() -> None:
    pair = make_pair()
    server = AcceptAll(pair)  # accepts and settles each message
    _sent(pair, 20)
    assert len(server.received) == 20
    assert pair.server.unsettled == {}
    assert len(pair.client.unsettled) == 20  # the client has not settled its end yet
    for delivery in list(pair.client.unsettled.values()):
        delivery.settle()
    assert pair.client.unsettled == {}


def test_a_released_engine_is_freed_with_deliveries_in_flight() -> None:
    pair = make_pair()
    server = AcceptAll(pair)
    server.settle = False  # both ends keep their deliveries unsettled
    _sent(pair, 3)
    assert len(pair.server.unsettled) == 3
    pair.client.close()
    pair.pump()
    engines = [weakref.ref(pair.client), weakref.ref(pair.server)]
    pair.client.release()
    pair.server.release()
    server.received.clear()
    del pair, server
    gc.collect()
    assert [ref() for ref in engines] == [None, None]
