"""A local SparkSession with the ``haclient`` source registered, for examples, tests and benches.

The driver binds loopback only and serves no UI, and Spark's own logging is at WARN: what a
session on a developer's machine or a CI runner wants. Spark's Python workers run this
interpreter (``PYSPARK_PYTHON``, unless set), so a virtual environment need not be activated
for them to import haclient. Production sessions are the user's own.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

from haclient.spark.source import HAClientDataSource

__all__ = ["local_session"]

log = logging.getLogger("haclient.spark")

_LOOPBACK_NO_UI = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
}


def local_session(
    master: str = "local[2]", app_name: str | None = None, config: Mapping[str, str] = {}
) -> SparkSession:
    """Get (or create) a local session on loopback, quiet, with ``HAClientDataSource`` registered.

    Sets ``PYSPARK_PYTHON`` to this interpreter when it is not set (Spark would start its
    workers with whatever ``python3`` is on ``PATH``, which may lack haclient). Calling it
    again returns the same session and registers nothing twice.

    Args:
        master: Spark's master URL, ``local[N]`` or ``local[N,attempts]``.
        app_name: The application's name (Spark picks one when None).
        config: More Spark settings, applied after (and over) the loopback, no-UI ones.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master)
    if app_name is not None:
        builder = builder.appName(app_name)
    for key, value in {**_LOOPBACK_NO_UI, **config}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    if not _registered(session, HAClientDataSource.name()):
        session.dataSource.register(HAClientDataSource)
    return session


def _registered(session: SparkSession, name: str) -> bool:
    """Whether ``session`` has a data source called ``name`` (registering it again would
    log Spark's "replaced a previously registered data source" warning)."""
    try:
        manager = session._jsparkSession.sessionState().dataSourceManager()
        return bool(manager.dataSourceExists(name))
    except Exception:  # Spark's internals moved: registering again is harmless
        log.debug("cannot tell whether %r is registered", name, exc_info=True)
        return False
