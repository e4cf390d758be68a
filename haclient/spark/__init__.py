"""haclient on Spark: a PySpark data source (format ``haclient``) over the blocking API.

Install with the ``spark`` extra (pyspark 4, pyarrow, pandas). Then::

    spark.dataSource.register(HAClientDataSource)
    df.write.format("haclient").option("url", url).option("address", "orders").save()
    stream = spark.readStream.format("haclient").option("url", url).option("address", "orders")

Writers publish each partition in transactions with deterministic message ids
(``ID:<query>:<batch>:<partition>:<row>``), so a retried task or a re-run micro-batch repeats
ids instead of inventing new ones; the stream reader delivers every message at least once and
drops replays it has seen lately. Executors connect with the URL, so failover happens inside each
task. Modules: ``options`` (the options), ``schema`` (rows and messages), ``writer``, ``buffer``
and ``reader`` (the stream reader's driver-side buffer), ``source`` (the ``DataSource``).
"""

from __future__ import annotations

from haclient._extras import missing_extra

try:
    import pyspark  # noqa: F401  (every data-source module needs it: fail here, saying why)
except ModuleNotFoundError as exc:  # installed without the spark extra
    raise missing_extra(__name__, "spark", exc) from exc

from haclient.spark.options import SparkOptions
from haclient.spark.source import HAClientDataSource

__all__ = ["HAClientDataSource", "SparkOptions"]
