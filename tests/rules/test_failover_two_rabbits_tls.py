"""Failover between two real RabbitMQ nodes over TLS, logged in by the client certificate (SASL
EXTERNAL): no username, no password, the certificate's common name is the user.

The nodes (``two_rabbitmq_tls_nodes``) share one test CA and one client identity; they refuse a
TLS client without a certificate, and the user the certificate names has no password, so PLAIN
cannot log it in. ``amqp.saslMechanisms=EXTERNAL`` lets the client log in no other way, so a
connection that opens has logged in with the certificate; the node's log names the user it
authenticated. The node in use dies by SIGKILL of its Erlang VM; the connection resumes on the
other node, over TLS and EXTERNAL again (F5).
"""

from __future__ import annotations

import os
import signal
import ssl
import time
from urllib.parse import quote

import pytest
from apikit import Api, Bed, eventually
from failoverkit import TIMEOUT, Recorder, port_of

from chaos.rabbitmq import RabbitMQNode
from chaos.rabbitmq_tls import RabbitMQTls
from haclient.destination import Queue
from haclient.errors import AuthenticationError
from haclient.message import TextMessage

pytestmark = [pytest.mark.anyio, pytest.mark.rabbitmq]

Nodes = tuple[RabbitMQNode, RabbitMQNode]

_FAILOVER = "failover.method=roundrobin&failover.connectdelay=0&failover.cyclecount=100"


def _tls(node: RabbitMQNode) -> RabbitMQTls:
    assert node.tls is not None
    return node.tls


def _url(nodes: Nodes, *options: str) -> str:
    """Both nodes' ``amqps`` listeners in one failover URL, with ``options`` connection-wide."""
    brokers = ",".join(node.amqps_url for node in nodes)
    return f"failover:({brokers})?{'&'.join((_FAILOVER, *options))}"


def _certificate_options(tls: RabbitMQTls) -> tuple[str, ...]:
    """The ``transport.*`` options that trust the test CA and present the client certificate,
    and EXTERNAL as the only mechanism allowed."""
    return (
        f"transport.trustStoreLocation={quote(str(tls.ca_file))}",
        f"transport.certFile={quote(str(tls.client_cert_file))}",
        f"transport.keyFile={quote(str(tls.client_key_file))}",
        "amqp.saslMechanisms=EXTERNAL",
    )


async def _logged_in(node: RabbitMQNode, user: str) -> None:
    """Wait until the node's log says an AMQP 1.0 connection authenticated ``user`` (RabbitMQ
    writes its log file with a delay of up to some seconds)."""
    assert node.base_dir is not None
    log = node.base_dir / "log" / "node.log"
    line = "AMQP 1.0 connection <"
    said = f": user '{user}' authenticated"

    def found() -> bool:
        return any(line in entry and said in entry for entry in log.read_text().splitlines())

    await eventually(found, timeout=TIMEOUT, interval=0.1)


def _kill(node: RabbitMQNode) -> None:
    """SIGKILL the node's VM: sockets reset, no TLS close_notify; the fixture cleans up."""
    assert node.vm_pid is not None
    os.kill(node.vm_pid, signal.SIGKILL)


async def test_T2_F5_external_login_fails_over_between_two_tls_rabbitmq_nodes(
    api: Api, two_rabbitmq_tls_nodes: Nodes
) -> None:
    first, second = two_rabbitmq_tls_nodes
    queue = Queue(Bed.unique("rabbit-tls-failover"))
    recorder = Recorder()
    url = _url(two_rabbitmq_tls_nodes, *_certificate_options(_tls(first)))
    async with await api.connect(url, attach_timeout=10) as connection:
        await connection.add_listener(recorder)
        await connection.start()
        session = await connection.create_session()
        producer = await session.create_producer(queue)
        consumer = await session.create_consumer(queue)
        for n in range(3):
            await producer.send(TextMessage(f"before {n}"))
        before = [(await consumer.receive(TIMEOUT)).text for _ in range(3)]
        assert before == [f"before {n}" for n in range(3)]

        _kill(first)
        for n in range(3):  # the first blocks until the second node is in use
            await producer.send(TextMessage(f"after {n}"))
        after = []
        for _ in range(3):
            message = await consumer.receive(TIMEOUT * 3)
            assert message is not None, f"stopped after {after}"
            after.append(message.text)
        completed = await recorder.wait_for("completed")
        await _logged_in(second, "haclient-tls")  # the certificate's common name
    assert [port_of(b) for b in completed] == [second.tls_port]
    assert after == [f"after {n}" for n in range(3)]


@pytest.mark.parametrize("api_variant", [("blocking", "asyncio")], ids=["blocking"])
async def test_T1_an_ssl_context_logs_in_with_external_and_no_certificate_is_refused(
    api: Api, two_rabbitmq_tls_nodes: Nodes
) -> None:
    """One node pair, two clients: ``ssl_context=`` (the test's own context, holding the
    client certificate) round trips over EXTERNAL; a client trusting the CA but without a
    certificate is refused by both nodes, and failover gives up at once with the reason."""
    first, _ = two_rabbitmq_tls_nodes
    tls = _tls(first)
    context = ssl.create_default_context(cafile=tls.ca_file)
    assert tls.client_cert_file is not None
    context.load_cert_chain(tls.client_cert_file, tls.client_key_file)
    queue = Queue(Bed.unique("rabbit-tls-context"))
    url = _url(two_rabbitmq_tls_nodes, "amqp.saslMechanisms=EXTERNAL")
    async with await api.connect(url, ssl_context=context, attach_timeout=10) as connection:
        await connection.start()
        session = await connection.create_session()
        producer = await session.create_producer(queue)
        consumer = await session.create_consumer(queue)
        await producer.send(TextMessage("through ssl_context"))
        message = await consumer.receive(TIMEOUT)
        assert message is not None and message.text == "through ssl_context"

    no_certificate = _url(
        two_rabbitmq_tls_nodes, f"transport.trustStoreLocation={quote(str(tls.ca_file))}"
    )
    began = time.monotonic()
    with pytest.raises(AuthenticationError) as refused:
        await api.connect(no_certificate)
    took = time.monotonic() - began
    text = str(refused.value)
    assert "requires a client certificate" in text, text
    for node in two_rabbitmq_tls_nodes:  # each broker of the pass, named
        assert f"amqps://127.0.0.1:{node.tls_port} failed" in text, text
    assert took < 5.0, f"refused after {took:.1f} s"
