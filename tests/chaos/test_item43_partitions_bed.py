"""The chaos bed against brokers that behave as ActiveMQ 5.x does (issue 43): a set-up that
waits for brokers still starting, workloads that stop once their connection is closed for good
instead of calling on in a hot loop, repeated violations summarised in the report, and the
bed's ActiveMQ mode."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import anyio
import pytest

from chaos.audit import AuditResult, Ledger, Violation
from chaos.bed import Bed
from chaos.broker import BrokerThread
from chaos.broker.state import ACTIVEMQ_IDLE_TIMEOUT, BrokerMode
from chaos.cli import SetupFailed, _preflight, main
from chaos.net import free_port
from chaos.report import _violation_lines
from chaos.scenarios.workloads import WORKLOADS, WorkloadContext
from chaos.toxiproxy import ToxiproxyServer
from haclient.errors import ConfigurationError

pytestmark = pytest.mark.timeout(120)


def test_item5_the_set_up_waits_for_brokers_that_are_starting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Through a proxy, a broker not started yet looks like one that is starting: the TCP
    connection is accepted and closed. A connect retries such a broker for its connect timeout
    (F1); past that, the set-up says it waits, and goes on once the broker answers."""
    port = free_port()
    with ToxiproxyServer.running() as server:
        bed = Bed(broker_urls=[f"amqp://127.0.0.1:{port}"], toxiproxy_url=server.url)
        with bed, BrokerThread(port=port) as broker:
            broker.stop()  # the port is known and free again; it serves 1 s from now
            starter = threading.Timer(1.5, broker.start)
            starter.start()
            try:
                _preflight(bed, setup_timeout=30, connect_timeout=0.3)
            finally:
                starter.join()
    err = capsys.readouterr().err
    assert "no broker answered through the proxies yet" in err
    assert "waiting up to 30 s for them to start" in err
    assert "the brokers answered after" in err


def test_item5_brokers_that_never_answer_fail_the_set_up_within_its_time(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["run", "--broker", f"amqp://127.0.0.1:{free_port()}", "--count", "1"]
    started = time.monotonic()
    assert main([*argv, "--setup-timeout", "1", "--out", str(tmp_path / "report")]) == 2
    assert time.monotonic() - started < 30  # a hang catcher: the wait is 1 s
    err = capsys.readouterr().err
    assert "set-up failed, nothing was run: cannot connect" in err
    assert "within 1 s" in err


def test_item5_a_refused_login_ends_the_set_up_at_once() -> None:
    with ToxiproxyServer.running() as server, BrokerThread(users={"app": "s3cret"}) as broker:
        given = f"amqp://app:wrong@127.0.0.1:{broker.port}"
        with Bed(broker_urls=[given], toxiproxy_url=server.url) as bed:
            started = time.monotonic()
            with pytest.raises(SetupFailed, match="refused"):
                _preflight(bed, setup_timeout=60)
            assert time.monotonic() - started < 30  # not the set-up time


def test_item4_a_workload_whose_connection_is_closed_for_good_stops_for_the_round() -> None:
    """The broker dies for good and the failover gives up: the producer and the consumer each
    write one error and a ``stopped`` event, then stop, where they called on in a hot loop."""
    ledger = Ledger()
    stop = threading.Event()
    with BrokerThread() as broker:
        url = (
            f"failover:({broker.url})?failover.giveupafter=500&failover.connectdelay=50"
            "&failover.maxdelay=50"
        )
        context = WorkloadContext(url, "auto-r0", ledger, stop, drain=2.0)

        async def run() -> None:
            with anyio.fail_after(60):
                await play()

        async def play() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(WORKLOADS["auto"], context)
                while not context.expected:  # the producer is under way
                    await anyio.sleep(0.01)
                broker.kill()
                await anyio.sleep(3.0)  # the give-up comes after 0.5 s
                stop.set()

        anyio.run(run)
    events = ledger.snapshot()
    stopped = {e.actor for e in events if e.kind == "stopped"}
    assert stopped == {"producer", "consumer"}, stopped
    for actor in ("producer", "consumer"):
        errors = [e for e in events if e.kind == "error" and e.actor == actor]
        assert 1 <= len(errors) <= 3, (actor, [(e.call, e.error) for e in errors])


def test_item4_the_report_summarises_repeats_of_one_violation() -> None:
    result = AuditResult()
    for n in range(200):
        result.violations.append(
            Violation("auto-r0", "unexpected_error", f"producer send: ClosedError: closed {n}")
        )
    result.violations.append(Violation("auto-r0", "lost", "ID:abc:1:1:1 accepted, never consumed"))
    lines = _violation_lines(result)
    assert lines[1] == "## Broken promises (201, 2 kinds)"
    repeated = [line for line in lines if "unexpected_error" in line]
    assert len(repeated) == 1 and "(200 times; the first:)" in repeated[0], lines
    assert "closed 0" in repeated[0]
    assert any("lost" in line and "ID:abc:1:1:1" in line for line in lines)


def test_item1_the_beds_activemq_mode_notices_dead_connections_as_activemq_does() -> None:
    assert Bed().stale_after == 2.0
    activemq = Bed(broker_mode="activemq")
    assert activemq.broker_mode is BrokerMode.ACTIVEMQ
    assert activemq.stale_after == 2 * ACTIVEMQ_IDLE_TIMEOUT
    assert Bed(broker_mode="activemq", broker_idle_timeout=2.5).stale_after == 5.0
    with pytest.raises(ConfigurationError, match="unknown broker mode 'artemis'"):
        Bed(broker_mode="artemis")
    with pytest.raises(ConfigurationError, match="idle timeout must be 0 s or more"):
        Bed(broker_idle_timeout=-1)
    with Bed(broker_mode="activemq", broker_idle_timeout=2.5) as bed:
        for member in bed.members:
            assert member.broker is not None
            assert member.broker.mode is BrokerMode.ACTIVEMQ


def test_item1_broker_mode_is_for_the_embedded_brokers(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--broker", "amqp://127.0.0.1:5672", "--broker-mode", "activemq"]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--broker-mode sets up the embedded brokers: not with --broker" in err
