"""Format ``dspark-delta`` as Spark registers it by itself (see :mod:`pyspark_dspark_json`):
``writeStream.format("dspark-delta")`` and ``read.format("dspark-delta")`` work in a fresh
session without ``dspark_json.register(spark)``.

What ``register(spark)`` adds still: it turns on ``spark.sql.python.filterPushdown.enabled``,
without which Spark 4.1 and later refuse a reader that pushes filters down. This one pushes
none: a read's filter on a partition column then reads every file of the snapshot (Spark
filters the rows), where ``register(spark)`` skips the files whose partition does not match.
"""

from pyspark.sql.datasource import DataSourceReader

from dspark_json.delta.reader import DeltaTableReader
from dspark_json.delta.sink import DeltaSink

__all__ = ["DefaultSource"]


class WholeSnapshotReader(DeltaTableReader):
    """The table's reader without filter pushdown (Spark refuses pushdown unless the session
    enables it, and this source cannot see the session's settings)."""

    pushFilters = DataSourceReader.pushFilters  # type: ignore[assignment]


class DefaultSource(DeltaSink):
    """``dspark-delta``, registered by Spark's lookup rather than by ``register(spark)``."""

    reader_class = WholeSnapshotReader
