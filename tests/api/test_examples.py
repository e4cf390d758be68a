"""The scripts in ``examples/`` run as the README says, against a reference broker."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.broker import BrokerThread

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    with BrokerThread() as broker:
        yield broker


def run_example(name: str, *args: str) -> str:
    """Run ``examples/name`` to its end (killed after 60 s); its stdout."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_resilient_orders_sends_and_receives_every_order(broker: BrokerThread) -> None:
    url = f"failover:({broker.url})?failover.method=roundrobin"
    out = run_example("resilient_orders.py", url, "--count", "300", "--queue", "ex-orders")
    summary = out.splitlines()[-1]
    assert summary.startswith("sent 300 orders, received 300 distinct (0 redelivered"), out
    assert ", lost 0, in " in summary
    assert broker.queue_depth("ex-orders") == 0


def test_hello_and_hello_async_send_and_receive_one_order(broker: BrokerThread) -> None:
    """The getting-started programs, pointed at this broker (they name 127.0.0.1:5672)."""
    for name, order in (("hello.py", "order 1"), ("hello_async.py", "order 2")):
        source = (EXAMPLES / name).read_text()
        assert 'URL = "failover:(amqp://app:secret@127.0.0.1:5672)"' in source
        program = source.replace("amqp://app:secret@127.0.0.1:5672", broker.url)
        done = subprocess.run(
            [sys.executable, "-c", program],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [f"sent: {order}", f"received: {order}"]


def test_request_reply_answers_each_request(broker: BrokerThread) -> None:
    out = run_example("request_reply.py", broker.url)
    assert out.splitlines() == ["hello -> HELLO", "failover -> FAILOVER", "world -> WORLD"]


def test_transacted_forwarder_moves_every_message(broker: BrokerThread) -> None:
    out = run_example("transacted_forwarder.py", broker.url, "--count", "12", "--batch", "5")
    assert "forwarded 12 messages from forwarder-in to forwarder-out" in out
    assert broker.queue_depth("forwarder-in") == 0
    assert broker.queue_depth("forwarder-out") == 12


def test_tracing_prints_one_trace_from_producer_to_listener(broker: BrokerThread) -> None:
    out = run_example("tracing.py", broker.url, "--queue", "ex-traced")
    assert '"name": "send ex-traced"' in out and '"name": "process ex-traced"' in out
    assert '"name": "ship order"' in out
    assert "one trace from the shop to the warehouse: " in out.splitlines()[-1]


def test_exactly_once_orders_ships_every_order_once_and_skips_the_copies(
    broker: BrokerThread,
) -> None:
    out = run_example("exactly_once_orders.py", broker.url, "--count", "20", "--queue", "ex-x")
    assert out.splitlines()[-1] == "orders 20, shipped 20, copies skipped 20", out
    assert broker.queue_depth("ex-x") == 0
