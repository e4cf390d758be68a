"""F4 as a new user meets it: what a refused connection prints.

An application that connects to a port nobody listens on, and does not catch the error, sees
one short traceback that leads to its own call, the class under the name it imports
(``haclient.errors``), and words that fit one broker ("could not connect to amqp://..."), not
three chained tracebacks through the loop thread and the failover manager. The cause stays
(``cause`` and ``__cause__``: F4). Each case runs a small script in a subprocess, stopped by
its pid if it outlives a generous bound.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import failover.errors
from chaos.net import free_port
from haclient.errors import ConnectionFailedError, ConnectionLostError

ROOT = Path(__file__).resolve().parents[2]
BOUND = 30.0
"""Seconds a script may take (it takes about one); past that it hung."""

SCRIPTS = {
    "blocking": "import haclient\nhaclient.connect(URL)\n",
    "aio": textwrap.dedent(
        """
        import asyncio
        from haclient import aio

        async def main() -> None:
            await aio.connect(URL)

        asyncio.run(main())
        """
    ),
}


def _stderr_of(script: str, url: str) -> str:
    process = subprocess.Popen(
        [sys.executable, "-c", f"URL = {url!r}\n{script}"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        _, stderr = process.communicate(timeout=BOUND)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise AssertionError(f"the script outlived {BOUND} s") from None
    assert process.returncode == 1, stderr
    return stderr


@pytest.mark.parametrize("api", list(SCRIPTS))
def test_F4_a_refused_connection_prints_one_short_traceback_under_the_public_name(
    api: str,
) -> None:
    url = f"amqp://127.0.0.1:{free_port()}"
    stderr = _stderr_of(SCRIPTS[api], url)
    lines = stderr.strip().splitlines()
    if api == "blocking":  # (asyncio.run's own frames lengthen the other)
        assert len(lines) <= 25, stderr
    assert stderr.count("Traceback (most recent call last)") == 1, stderr
    assert "During handling of the above exception" not in stderr, stderr
    assert lines[-1].startswith(
        f"haclient.errors.ConnectionFailedError: could not connect to {url}"
    )
    assert "failover gave up" not in stderr, stderr
    assert "failover.errors." not in stderr, stderr
    # the frames of the failover manager and, for the blocking API, of the loop thread say
    # nothing the error does not
    assert "failover/" not in stderr, stderr
    if api == "blocking":
        assert "haclient/aio/" not in stderr, stderr


def test_F4_the_public_name_is_where_applications_import_from_and_pickles() -> None:
    error = ConnectionFailedError(cause=ConnectionLostError("refused"), first_connect=True)
    assert type(error).__module__ == "haclient.errors"
    assert repr(type(error)) == "<class 'haclient.errors.ConnectionFailedError'>"
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is ConnectionFailedError is failover.errors.ConnectionFailedError
    assert str(copy) == str(error) == "could not connect: refused"


def test_F4_an_error_unpickles_with_the_standard_library_alone() -> None:
    """A traceback shows the public name, yet unpickling imports only the defining module (a
    process that unpickles it needs nothing of the client)."""
    data = pickle.dumps(ConnectionFailedError(cause=ConnectionLostError("refused")))
    check = (
        "import pickle, sys\n"
        f"error = pickle.loads({data!r})\n"
        "assert type(error).__name__ == 'ConnectionFailedError', error\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] == 'haclient']\n"
        "assert not loaded, loaded\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", check],
        capture_output=True,
        text=True,
        timeout=BOUND,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_F4_the_cause_of_a_refused_first_connect_is_kept() -> None:
    import haclient

    with pytest.raises(ConnectionFailedError) as failed:
        haclient.connect(f"amqp://127.0.0.1:{free_port()}")
    error = failed.value
    assert error.__cause__ is error.cause
    assert isinstance(error.cause, ConnectionLostError)
    assert error.first_connect
