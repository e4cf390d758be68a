"""C6: a blocking connection the application never closed does not keep the process alive.

Each case runs a small script in a subprocess against the reference broker (run in this
process on a free loopback port) and checks that the process ends by itself, with the exit
status the script asked for, within a generous bound, and that a ``ResourceWarning`` names the
connection left open. Before the blocking runtime's exit hook, every one of these hung at
interpreter shutdown (the loop thread was joined forever).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.broker import BrokerThread

EXIT_BOUND = 30.0
"""Seconds a script may take to run and exit (it takes about one); past that it hung."""
HANG = 10.0

ROOT = Path(__file__).resolve().parents[2]
UNCLOSED = "ResourceWarning: unclosed haclient connection"


@pytest.fixture(scope="module")
def broker() -> Iterator[BrokerThread]:
    with BrokerThread() as thread:
        yield thread


def start_script(
    body: str, url: str, *, stdin: int = subprocess.DEVNULL, warnings: str = "always"
) -> subprocess.Popen[str]:
    """``body`` (with ``URL`` defined) in a fresh interpreter that shows ResourceWarnings (or,
    with ``warnings="error"``, raises them)."""
    script = f"import haclient\nURL = {url!r}\n" + textwrap.dedent(body)
    return subprocess.Popen(
        [sys.executable, "-W", f"{warnings}::ResourceWarning", "-c", script],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def run_script(body: str, url: str) -> subprocess.CompletedProcess[str]:
    """Run ``body`` to its end; kill it by its pid if it outlives ``EXIT_BOUND``, and fail."""
    process = start_script(body, url)
    try:
        stdout, stderr = process.communicate(timeout=EXIT_BOUND)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        pytest.fail(f"the script did not exit within {EXIT_BOUND} s:\n{stdout}\n{stderr}")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


CASES = {
    "never closed": ("conn = haclient.connect(URL)\nprint('end')", 0),
    "with a session and a consumer": (
        """
        conn = haclient.connect(URL)
        conn.start()
        session = conn.create_session(haclient.AckMode.CLIENT)
        consumer = session.create_consumer(haclient.Queue("exit-test"))
        print('end')
        """,
        0,
    ),
    "uncaught exception": (
        "conn = haclient.connect(URL)\nconn.create_session()\nraise RuntimeError('boom')",
        1,
    ),
    "sys.exit": ("import sys\nconn = haclient.connect(URL)\nsys.exit(3)", 3),
    "private loop": ("conn = haclient.connect(URL, private_loop=True)\nprint('end')", 0),
    "opened from a non-main thread": (
        """
        import threading
        kept = []
        opener = threading.Thread(target=lambda: kept.append(haclient.connect(URL)))
        opener.start()
        opener.join()
        print('end')
        """,
        0,
    ),
    "a receive blocked in another thread": (
        """
        import threading, time
        conn = haclient.connect(URL)
        conn.start()
        consumer = conn.create_session().create_consumer(haclient.Queue("exit-blocked"))
        threading.Thread(target=consumer.receive).start()  # not a daemon: blocks for ever
        time.sleep(0.2)
        print('end')
        """,
        0,
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_C6_an_unclosed_connection_does_not_keep_the_process_alive(
    broker: BrokerThread, case: str
) -> None:
    body, status = CASES[case]
    result = run_script(body, broker.url)
    assert result.returncode == status, result.stderr
    assert UNCLOSED in result.stderr, result.stderr
    assert "Traceback" not in result.stderr or status == 1, result.stderr


def test_C6_after_connection_failed_error_the_process_exits() -> None:
    """The broker went away and failover gave up: the uncaught ``ConnectionFailedError``
    ends the script, and the failed connection does not hold it."""
    with BrokerThread() as own:
        url = own.url + "?failover.maxReconnectAttempts=2&failover.initialReconnectDelay=10"
        body = """
        import socket, sys
        conn = haclient.connect(URL)
        print('connected', flush=True)
        sys.stdin.readline()  # the test kills the broker meanwhile
        conn.create_session(timeout=20)
        """
        process = start_script(body, url, stdin=subprocess.PIPE)
        try:
            assert process.stdout is not None and process.stdin is not None
            assert process.stdout.readline().strip() == "connected"
            own.close()
            process.stdin.write("go\n")
            process.stdin.flush()
            _, stderr = process.communicate(timeout=EXIT_BOUND)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert process.returncode == 1, stderr
    assert "ConnectionFailedError" in stderr, stderr
    assert UNCLOSED in stderr, stderr


@pytest.mark.parametrize("warnings", ["always", "error"])
def test_C6_a_connection_collected_by_the_garbage_collector_is_closed(
    broker: BrokerThread, warnings: str
) -> None:
    """Dropped without ``close()``: the collector's ``__del__`` closes it and warns (the
    broker sees the connection end while the process still runs), also when the warning is
    an error (``-W error``: it is then reported as unraisable, after the close)."""
    client_id = f"collected-by-gc-{warnings}"
    body = f"""
    import gc, sys
    conn = haclient.connect(URL, client_id={client_id!r})
    print('connected', flush=True)
    del conn
    gc.collect()
    print('collected', flush=True)
    sys.stdin.readline()
    """
    process = start_script(body, broker.url, stdin=subprocess.PIPE, warnings=warnings)
    try:
        assert process.stdout is not None and process.stdin is not None
        assert process.stdout.readline().strip() == "connected"
        assert process.stdout.readline().strip() == "collected"
        deadline = time.monotonic() + HANG
        while client_id in broker.connections() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client_id not in broker.connections()
        process.stdin.write("done\n")
        process.stdin.flush()
        _, stderr = process.communicate(timeout=EXIT_BOUND)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    assert UNCLOSED in stderr, stderr
