"""The pytest plugin, as a user's project sees it: a tiny test file using each fixture, run by
pytest in a subprocess with the plugin loaded (``-p chaos.pytest_plugin``, what the ``pytest11``
entry point does once haclient-chaos is installed)."""

from __future__ import annotations

import os
from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]

USER_TESTS = """
import time
import haclient
from haclient import Queue, TextMessage

def test_broker(chaos_broker):
    with haclient.connect(chaos_broker.url) as conn:
        with conn.create_session() as session:
            session.create_producer(Queue("q")).send(TextMessage("hi"))
    assert chaos_broker.queue_depth("q") == 1

def test_ha_pair_survives_a_kill(chaos_ha_pair):
    with haclient.connect(chaos_ha_pair.url()) as conn:
        conn.start()
        with conn.create_session() as session:
            producer = session.create_producer(Queue("orders"))
            producer.send(TextMessage("before"))
            chaos_ha_pair.kill()
            producer.send(TextMessage("after"))
            consumer = session.create_consumer(Queue("orders"))
            texts = {consumer.receive(timeout=10).text, consumer.receive(timeout=10).text}
    assert texts == {"before", "after"}

def test_bed_has_two_brokers(chaos_bed):
    assert len(chaos_bed.members) == 2
    assert chaos_bed.url().startswith("failover:(amqp://127.0.0.1:")

def test_proxy_with_latency(chaos_broker, chaos_proxy):
    proxied = chaos_proxy(f"127.0.0.1:{chaos_broker.port}")
    with haclient.connect(proxied.url) as conn:
        with conn.create_session() as session:
            producer = session.create_producer(Queue("slow"))
            with proxied.toxic("latency", latency=300):
                start = time.monotonic()
                producer.send(TextMessage("late"))
                assert time.monotonic() - start >= 0.3
    assert chaos_broker.queue_depth("slow") == 1
"""


@pytest.mark.slow
def test_the_plugin_fixtures_work_in_a_users_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_user=USER_TESTS)
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}{os.pathsep}{path}" if path else str(ROOT))
    # Installed haclient registers the plugin through its entry point; a checkout not installed
    # since the entry point was added loads it by name.
    installed = any(e.name == "haclient_chaos" for e in entry_points(group="pytest11"))
    load = [] if installed else ["-p", "chaos.pytest_plugin"]
    result = pytester.runpytest_subprocess(*load, "-q", timeout=180)
    result.assert_outcomes(passed=4)
