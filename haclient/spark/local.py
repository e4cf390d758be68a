"""A local SparkSession with the ``haclient`` source registered, for examples, tests and benches.

The driver binds loopback only and serves no UI, and Spark's own logging is at WARN: what a
session on a developer's machine or a CI runner wants. Production sessions are the user's own.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession

from haclient.spark.source import HAClientDataSource

__all__ = ["local_session"]

_LOOPBACK_NO_UI = {
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.ui.enabled": "false",
}


def local_session(
    master: str = "local[2]", app_name: str | None = None, config: Mapping[str, str] = {}
) -> SparkSession:
    """Get (or create) a local session on loopback, quiet, with ``HAClientDataSource`` registered.

    Args:
        master: Spark's master URL, ``local[N]`` or ``local[N,attempts]``.
        app_name: The application's name (Spark picks one when None).
        config: More Spark settings, applied after (and over) the loopback, no-UI ones.
    """
    builder = SparkSession.builder.master(master)
    if app_name is not None:
        builder = builder.appName(app_name)
    for key, value in {**_LOOPBACK_NO_UI, **config}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    session.dataSource.register(HAClientDataSource)
    return session
