"""C7: a blocking connection opened with ``jms.useDaemonThread=false`` keeps the process alive
while it is open, as a Qpid JMS connection keeps the JVM alive; without it (C6) the process
exits at once.

Each case runs a script in a subprocess (``test_exit``'s helpers) whose main function sets a
message listener and returns, as a Java application's ``main`` does; the test then checks the
process is still running, sends it messages through the reference broker, and the listener
closes its connection on the last one, after which the process exits by itself within a
generous bound.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from test_exit import EXIT_BOUND, UNCLOSED, run_script, start_script

import haclient
from chaos.broker import BrokerThread

STILL_RUNNING = 1.0
"""Seconds the test watches a kept process after its main function returned."""

LISTENING = """
def main(url, queue):
    conn = haclient.connect(url, {options})
    conn.start()
    consumer = conn.create_session().create_consumer(haclient.Queue(queue))

    def on_message(message):
        print('got', message.body, flush=True)
        if message.body == 'stop':
            conn.close()

    consumer.set_message_listener(on_message)
    print('main returns', flush=True)

main(URL, {queue!r})
"""


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    with BrokerThread() as thread:
        yield thread


def _send(url: str, queue: str, *bodies: str) -> None:
    with haclient.connect(url) as connection:
        producer = connection.create_session().create_producer(haclient.Queue(queue))
        for body in bodies:
            producer.send(haclient.TextMessage(body))


@contextmanager
def _after_main(body: str, url: str) -> Iterator[subprocess.Popen[str]]:
    """``body`` running in a subprocess whose main function has returned; killed by its pid
    at the end if it is still running."""
    process = start_script(body, url)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "main returns"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _exit(process: subprocess.Popen[str]) -> tuple[str, str]:
    """The output of ``process`` once it exited by itself (within the bound), status 0."""
    stdout, stderr = process.communicate(timeout=EXIT_BOUND)
    assert process.returncode == 0, stderr
    return stdout, stderr


def _still_running(process: subprocess.Popen[str]) -> bool:
    """Whether ``process`` is still running after ``STILL_RUNNING`` seconds (an exit before
    that ends the wait at once)."""
    try:
        process.wait(timeout=STILL_RUNNING)
    except subprocess.TimeoutExpired:
        return True
    return False


def test_C7_a_kept_connection_keeps_consuming_until_a_listener_closes_it(
    broker: BrokerThread,
) -> None:
    queue = "c7-kept"
    with _after_main(
        LISTENING.format(options="use_daemon_thread=False", queue=queue), broker.url
    ) as process:
        assert _still_running(process)  # main returned; the connection keeps the process alive
        _send(broker.url, queue, "one", "two", "stop")
        stdout, stderr = _exit(process)
    assert stdout.split() == ["got", "one", "got", "two", "got", "stop"], stdout
    assert UNCLOSED not in stderr and "Traceback" not in stderr, stderr


def test_C7_the_url_option_keeps_it_too(broker: BrokerThread) -> None:
    """``jms.useDaemonThread=false`` in the URL, as a Java application's URL carries it."""
    queue = "c7-url"
    body = LISTENING.format(options="", queue=queue).replace(
        "haclient.connect(url, )", "haclient.connect(url + '?jms.useDaemonThread=false')"
    )
    with _after_main(body, broker.url) as process:
        assert _still_running(process)
        _send(broker.url, queue, "stop")
        _exit(process)


def test_C7_by_default_the_process_exits_when_main_returns(broker: BrokerThread) -> None:
    result = run_script(LISTENING.format(options="", queue="c7-default"), broker.url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "main returns"
    assert UNCLOSED in result.stderr  # C6: closed at exit


def test_C7_a_kept_connection_whose_failover_gave_up_lets_the_process_exit() -> None:
    with BrokerThread() as own:
        url = own.url + "?failover.maxReconnectAttempts=2&failover.initialReconnectDelay=10"
        body = LISTENING.format(options="use_daemon_thread=False", queue="c7-failed")
        with _after_main(body, url) as process:
            own.close()
            _exit(process)


def test_C7_the_option_reaches_the_blocking_connection() -> None:
    options = haclient.ConnectionFactory("amqp://a?jms.useDaemonThread=false").options
    assert options.use_daemon_thread is False
    assert haclient.ConnectionFactory("amqp://a").options.use_daemon_thread is True
