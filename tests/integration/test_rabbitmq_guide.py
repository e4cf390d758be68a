"""The RabbitMQ guide (docs/guide/brokers.md), checked on a private RabbitMQ node: a
TRANSACTED session needs ``jms.transactions=emulate`` there, and with it in the URL the session
commits, emulated and saying so; selectors are applied by the client."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

import haclient
from chaos.rabbitmq import RabbitMQNode
from haclient import AckMode, NotImplementedByBrokerError, Queue, TextMessage

pytestmark = pytest.mark.rabbitmq

ROOT = Path(__file__).resolve().parents[2]


def test_the_guide_names_the_plugin_and_the_option() -> None:
    section = (ROOT / "docs" / "guide" / "brokers.md").read_text()
    section = section.split("\n## ", 1)[0]
    assert "rabbitmq-plugins enable rabbitmq_amqp1_0" in section
    assert re.search(r"`jms\.transactions=emulate`", section)
    assert "NotImplementedByBrokerError" in section


def test_a_transacted_session_needs_emulation_on_rabbitmq(rabbitmq: RabbitMQNode) -> None:
    with haclient.connect(rabbitmq.url) as conn, pytest.raises(NotImplementedByBrokerError):
        conn.create_session(AckMode.TRANSACTED)


def test_jms_transactions_emulate_in_the_url_commits(
    rabbitmq: RabbitMQNode, caplog: pytest.LogCaptureFixture
) -> None:
    queue = Queue("guide-emulated-tx")
    with haclient.connect(f"{rabbitmq.url}?jms.transactions=emulate") as conn:
        conn.start()
        with caplog.at_level(logging.WARNING), conn.create_session(AckMode.TRANSACTED) as session:
            assert session.transactions_emulated
            session.create_producer(queue).send(TextMessage("committed"))
            session.commit()
        assert any("emulat" in r.getMessage() for r in caplog.records)
        with conn.create_session() as reader:
            consumer = reader.create_consumer(queue, selector="JMSType IS NULL")
            assert consumer.selector_emulated
            message = consumer.receive(timeout=10)
    assert message is not None and message.text == "committed"
