"""F18 (connection redirects, ``amqp.allowNonSecureRedirects``) through both APIs: reference
brokers that answer Opens with ``amqp:connection:redirect`` (``Broker.redirect``), a TLS one
redirecting to plain TCP, and a scripted peer sending a garbled redirect."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import trustme
from apikit import Api
from failoverkit import TIMEOUT, Recorder, brokers, connected, failover_url, port_of

from chaos.broker import BrokerThread
from chaos.peer import ScriptedPeer
from failover.states import MAX_REDIRECTS
from failover.url import BrokerURL
from haclient.aio.redirect import redirect_target
from haclient.amqp import ErrorCondition
from haclient.amqp.config import TlsServerOptions
from haclient.destination import Queue
from haclient.message import TextMessage
from haclient.modes import AckMode
from haclient.options import CLIENT_OPTIONS

pytestmark = pytest.mark.anyio


async def _send(connection: object, queue: str) -> None:
    session = await connection.create_session(AckMode.AUTO)  # type: ignore[attr-defined]
    producer = await session.create_producer(Queue(queue))
    await producer.send(TextMessage("here"))


async def test_F18_a_redirect_on_open_is_followed_to_a_broker_not_in_the_list(api: Api) -> None:
    with brokers(3) as (first, target, last):
        first.redirect(target.url)
        async with await connected(api, failover_url(first, last), Recorder()) as connection:
            await _send(connection, "f18-open")
        assert target.queue_depth("f18-open") == 1


async def test_F18_a_connection_in_use_redirected_fails_over_to_the_target(api: Api) -> None:
    with brokers(3) as (first, target, last):
        recorder = Recorder()
        async with await connected(api, failover_url(first, last), recorder) as connection:
            first.redirect(target.url, open_too=True)
            completed = await recorder.wait_for("completed")
            assert port_of(completed[0]) == target.port
            await _send(connection, "f18-use")
        assert target.queue_depth("f18-use") == 1


async def test_F18_a_loop_of_redirects_ends_and_the_plan_goes_on(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    with brokers(3) as (first, second, last):
        first.redirect(second.url)
        second.redirect(first.url)
        with caplog.at_level(logging.INFO, logger="haclient.failover"):
            async with await connected(api, failover_url(first, last), Recorder()) as connection:
                await _send(connection, "f18-loop")
        assert last.queue_depth("f18-loop") == 1
    followed = [r for r in caplog.records if r.getMessage().startswith("following the redirect")]
    assert len(followed) == MAX_REDIRECTS
    assert any(f"{MAX_REDIRECTS} redirects in a row" in r.getMessage() for r in caplog.records)


def test_F18_what_a_redirect_may_not_do_is_said() -> None:
    tls = BrokerURL(
        "amqps", "a.test", 5671, options={"transport.verifyHost": "false"}, table=CLIENT_OPTIONS
    )
    target = redirect_target(
        {"network-host": "b.test", "port": 6000, "hostname": "vh"}, tls, allow_non_secure=False
    )
    assert (target.scheme, target.host, target.port) == ("amqps", "b.test", 6000)
    assert target.options == {"transport.verifyHost": "false", "amqp.vhost": "vh"}
    plain = {"network-host": "b.test", "port": 5672, "scheme": "amqp"}
    with pytest.raises(ValueError, match="allowNonSecureRedirects=true"):
        redirect_target(plain, tls, allow_non_secure=False)
    assert redirect_target(plain, tls, allow_non_secure=True).scheme == "amqp"
    for garbled, why in (
        ({"port": 1}, "no network-host"),
        ({"network-host": "b.test"}, "port None is not a number"),
        ({"network-host": "b.test", "port": 1, "scheme": "amqpws"}, "not amqp or amqps"),
        ({"network-host": "b test", "port": 1}, "not a broker URL"),
    ):
        with pytest.raises(ValueError, match=why):
            redirect_target(garbled, tls, allow_non_secure=True)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    root = tmp_path_factory.mktemp("f18-tls")
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    paths = [root / "ca.pem", root / "cert.pem", root / "key.pem"]
    for path, data in zip(
        paths,
        (ca.cert_pem.bytes(), cert.cert_chain_pems[0].bytes(), cert.private_key_pem.bytes()),
        strict=True,
    ):
        path.write_bytes(data)
    return str(paths[0]), str(paths[1]), str(paths[2])


@pytest.fixture
def tls_pair(tls_files: tuple[str, str, str]) -> Iterator[tuple[BrokerThread, BrokerThread]]:
    _, cert, key = tls_files
    with (
        BrokerThread(tls=TlsServerOptions(cert, key)) as a,
        BrokerThread(tls=TlsServerOptions(cert, key)) as b,
    ):
        yield a, b


@pytest.mark.parametrize("allowed", [False, True], ids=["refused", "allowed"])
async def test_F18_a_redirect_from_amqps_to_amqp_is_followed_only_when_allowed(
    api: Api,
    tls_files: tuple[str, str, str],
    tls_pair: tuple[BrokerThread, BrokerThread],
    allowed: bool,
) -> None:
    ca = tls_files[0]
    first, last = tls_pair
    with brokers(1) as (plain,):
        first.redirect(plain.url)  # amqps -> amqp: a downgrade
        url = failover_url(first, last) + f"&transport.trustStoreLocation={ca}"
        if allowed:
            url += "&amqp.allowNonSecureRedirects=true"
        async with await connected(api, url, Recorder()) as connection:
            await _send(connection, "f18-tls")
        landed = plain if allowed else last
        assert landed.queue_depth("f18-tls") == 1


async def test_F18_a_garbled_redirect_is_not_followed(api: Api) -> None:
    garbled = ErrorCondition("amqp:connection:redirect", "go away", {"port": "not-a-port"})
    peer = ScriptedPeer()
    peer.expect_open().refuse(garbled)
    with brokers(1) as (last,):
        async with peer.serving() as port:
            url = failover_url(_At(f"amqp://127.0.0.1:{port}"), last)
            async with await connected(api, url, Recorder()) as connection:
                await _send(connection, "f18-garbled")
            await peer.wait_script_done(timeout=TIMEOUT)
        assert last.queue_depth("f18-garbled") == 1


class _At:
    def __init__(self, url: str) -> None:
        self.url = url
