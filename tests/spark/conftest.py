"""One local[2] SparkSession for every Spark test, and the reference brokers' HA pair.

Spark runs the data source in Python worker processes it starts itself: they get this
interpreter (``PYSPARK_PYTHON``) and this checkout first on ``PYTHONPATH``, so they import the
haclient under test; they reach the brokers over 127.0.0.1. Without pyspark or Java the tests
skip, or fail under ``HACLIENT_REQUIRE_BROKERS=1`` (``make test`` installs pyspark).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "rules"))  # failoverkit's HaPair

_ENVIRONMENT = {
    "PYSPARK_PYTHON": sys.executable,
    "PYSPARK_DRIVER_PYTHON": sys.executable,
    "SPARK_LOCAL_IP": "127.0.0.1",
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}


def _missing(reason: str) -> None:
    """Skip, or fail under ``HACLIENT_REQUIRE_BROKERS=1`` (as tests/conftest.py's
    ``skip_or_fail``, which this directory cannot import by name)."""
    if os.environ.get("HACLIENT_REQUIRE_BROKERS") == "1":
        pytest.fail(f"{reason}, and HACLIENT_REQUIRE_BROKERS=1 forbids skipping", pytrace=False)
    pytest.skip(reason)


def _check_installed() -> None:
    if importlib.util.find_spec("pyspark") is None:
        _missing("pyspark is not installed (`make test` installs the spark extra)")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        _missing("Spark needs Java: no java on PATH and no JAVA_HOME")


@pytest.fixture(scope="session")
def pyspark_installed() -> None:
    """Skip (or fail, see above) unless pyspark and Java are installed."""
    _check_installed()


@pytest.fixture(scope="session")
def spark(pyspark_installed: None) -> Iterator[Any]:
    """A local[2] session (up to 4 attempts per task) with the ``haclient`` source registered;
    loopback only, no UI, Spark's own logging at WARN."""
    from haclient.spark.local import local_session

    saved = {name: os.environ.get(name) for name in _ENVIRONMENT}
    os.environ.update(_ENVIRONMENT)
    session = local_session(
        "local[2,4]",
        "haclient-tests",
        {"spark.ui.showConsoleProgress": "false", "spark.sql.shuffle.partitions": "2"},
    )
    try:
        yield session
    finally:
        session.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
