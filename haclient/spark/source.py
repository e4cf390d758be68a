"""The data source Spark registers: format name ``haclient``.

``spark.dataSource.register(HAClientDataSource)``, then ``df.write.format("haclient")``,
``df.writeStream.format("haclient")``, ``spark.read.format("haclient")`` and
``spark.readStream.format("haclient")``, each with ``.option("url", ...)`` and
``.option("address", ...)`` (see ``SparkOptions`` for the others). Options are checked when the
job is planned, on the driver.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from haclient.spark.options import SparkOptions
from haclient.spark.reader import HAClientBatchReader, HAClientStreamReader
from haclient.spark.schema import read_schema
from haclient.spark.writer import HAClientStreamWriter, HAClientWriter

__all__ = ["HAClientDataSource"]


class HAClientDataSource(DataSource):
    """Messages of an AMQP 1.0 queue or topic, through haclient and its failover.

    Raises (when the job is planned):
        ConfigurationError: an option is missing, unknown or invalid.
    """

    @classmethod
    def name(cls) -> str:
        return "haclient"

    @property
    def settings(self) -> SparkOptions:
        """The checked options."""
        return SparkOptions.parse(self.options)

    def schema(self) -> str:
        settings = self.settings
        return read_schema(settings.body_format, settings.trace_context)

    def reader(self, schema: StructType) -> DataSourceReader:
        return HAClientBatchReader(self.settings)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return HAClientStreamReader(self.settings)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return HAClientWriter(self.settings)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return HAClientStreamWriter(self.settings)
