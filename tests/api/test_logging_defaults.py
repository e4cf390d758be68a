"""What a newcomer sees on stderr: the library logs nowhere unless the
application configures logging, and a failure that is raised is not also logged at ERROR."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

import haclient.aio as aio
from chaos.net import free_port
from haclient.errors import ConnectionFailedError

ROOT = Path(__file__).resolve().parents[2]

# A broker that is not there, and a warning after every failed attempt.
UNREACHABLE = "failover:(amqp://127.0.0.1:{port})?failover.cyclecount=2" + (
    "&failover.connectdelay=0&failover.warnAfterReconnectAttempts=1"
)

SCRIPT = """
import sys
import haclient
try:
    haclient.connect(sys.argv[1])
except haclient.ConnectionFailedError:
    print("raised")
"""


def test_the_library_logs_nowhere_unless_the_application_configures_logging() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, UNREACHABLE.format(port=free_port())],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.strip() == "raised"
    assert done.stderr == ""  # no "attempt 1 ... failed" warnings, no "could not connect" ERROR


def test_the_haclient_logger_has_a_null_handler() -> None:
    handlers = logging.getLogger("haclient").handlers
    assert any(isinstance(handler, logging.NullHandler) for handler in handlers)


@pytest.mark.anyio
async def test_F4_a_failed_connect_is_raised_not_logged_at_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="haclient")
    with anyio.fail_after(30), pytest.raises(ConnectionFailedError):
        await aio.connect(UNREACHABLE.format(port=free_port()))
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert any("could not connect" in r.getMessage() for r in caplog.records)  # at INFO
