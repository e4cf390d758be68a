"""SASL failures through ``connect()``: scripted brokers on a socket (``chaos.hostile``) that
forge SCRAM's server signature or offer no mechanism the client allows. Each is an
``AuthenticationError`` at once (not retried, no timeout), its message naming the problem and
never the password."""

from __future__ import annotations

import base64
import struct
import time
from typing import Any

import anyio
import pytest
from anyio.abc import SocketStream
from proton import Array, Data, symbol, ubyte
from scramp import ScramMechanism

import haclient.aio as aio
from chaos.hostile import HostilePeer, Script
from haclient.amqp.codec import decode_value
from haclient.amqp.sasl_frames import SASL_HEADER, encode_frame
from haclient.errors import AuthenticationError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

PASSWORD = "canary-pw-0b7e"
BOUND = 4.0  # well below connect_timeout: a verdict, not a wait


async def _exactly(stream: SocketStream, count: int) -> bytes:
    data = b""
    while len(data) < count:
        data += await stream.receive(count - len(data))
    return data


async def _frame(stream: SocketStream) -> list[Any]:
    """The fields of the next SASL frame the client sent."""
    size = struct.unpack(">I", await _exactly(stream, 4))[0]
    body = (await _exactly(stream, size - 4))[4:]
    value, _ = decode_value(body)
    return list(value.value)


async def _hold(stream: SocketStream) -> None:
    while await stream.receive():
        pass


def _offering(*names: str) -> bytes:
    offered = Array(Data.NULL, Data.SYMBOL, *(symbol(n) for n in names))
    return SASL_HEADER + encode_frame(0x40, [offered])


def scram_broker(*, forge: bool) -> Script:
    """A broker that runs SCRAM-SHA-256 for ``app`` and, with ``forge``, accepts the client's
    proof unchecked and answers with a made-up server signature (a broker that does not know
    the password can do no better)."""
    mechanism = ScramMechanism("SCRAM-SHA-256")
    info = mechanism.make_auth_info(PASSWORD, iteration_count=4096)

    async def script(stream: SocketStream) -> None:
        await _exactly(stream, 8)
        await stream.send(_offering("SCRAM-SHA-256", "PLAIN"))
        server = mechanism.make_server(lambda user: info)
        _, first, *_ = await _frame(stream)
        server.set_client_first(first.decode())
        await stream.send(encode_frame(0x42, [server.get_server_first().encode()]))
        [final] = await _frame(stream)
        if forge:
            signature = b"v=" + base64.b64encode(b"\x01" * 32)
            await stream.send(encode_frame(0x44, [ubyte(0), signature]))
        else:
            server.set_client_final(final.decode())
            await stream.send(encode_frame(0x44, [ubyte(0), server.get_server_final().encode()]))
        await _hold(stream)

    return script


async def offering_gssapi(stream: SocketStream) -> None:
    await _exactly(stream, 8)
    await stream.send(_offering("GSSAPI", "PLAIN"))
    await _hold(stream)


async def _refused(url: str, **keywords: Any) -> AuthenticationError:
    started = time.monotonic()
    with anyio.fail_after(BOUND), pytest.raises(AuthenticationError) as raised:
        await aio.connect(url, username="app", password=PASSWORD, connect_timeout=10, **keywords)
    assert time.monotonic() - started < BOUND
    assert PASSWORD not in str(raised.value) and PASSWORD not in repr(raised.value)
    return raised.value


async def test_T3_a_broker_that_cannot_prove_it_knows_the_password_is_refused() -> None:
    async with HostilePeer(scram_broker(forge=True)) as peer:
        error = await _refused(peer.url)
        assert peer.connections == 1  # not retried: the same broker answers the same way
    text = str(error)
    assert error.condition == "haclient:sasl-failed" and not error.retriable
    assert "the broker could not prove it knows the password" in text, text
    assert "The login of user 'app' to" in text, text


async def test_a_broker_that_offers_no_mechanism_allowed_names_both_sides() -> None:
    async with HostilePeer(offering_gssapi) as peer:
        error = await _refused(peer.url, sasl_mechanisms="SCRAM-SHA-256,SCRAM-SHA-512")
    text = str(error)
    assert error.condition == "amqp:unauthorized-access"
    assert "the broker offers GSSAPI, PLAIN" in text, text
    assert "haclient allows SCRAM-SHA-512, SCRAM-SHA-256" in text, text


async def test_scram_over_a_socket_carries_the_login_to_the_amqp_header() -> None:
    """The genuine exchange passes: the client then sends its AMQP header (and the scripted
    broker, which speaks no further, lets the connect time out)."""
    async with HostilePeer(scram_broker(forge=False)) as peer:
        with anyio.fail_after(10), pytest.raises(Exception) as raised:
            await aio.connect(peer.url, username="app", password=PASSWORD, connect_timeout=1.5)
    assert "awaited: its login outcome and Open" in str(raised.value), raised.value


async def test_T6_the_clients_own_advice_is_never_cut_short() -> None:
    """Issue 39, item 5: the 200-character cut is for a broker's text; a login without
    credentials to a broker that wants them gets the client's whole advice."""
    from chaos.broker import Broker

    async with Broker(users={"app": PASSWORD}) as broker:
        with anyio.fail_after(BOUND * 5), pytest.raises(AuthenticationError) as raised:
            await aio.connect(broker.url)
    text = str(raised.value)
    assert "more characters" not in text, text
    assert "no SASL mechanism in common" in text and "needs a username and password" in text


def test_T6_a_brokers_long_description_is_still_cut() -> None:
    from haclient.amqp.conditions import error_from_condition

    error = error_from_condition("amqp:unauthorized-access", "x" * 1000)
    assert "(800 more characters)" in str(error)
