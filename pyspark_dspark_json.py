"""Format ``dspark-json`` as Spark registers it by itself: Spark 4 imports every installed
top-level module whose name starts with ``pyspark_`` and registers its ``DefaultSource``
(``pyspark/sql/worker/lookup_data_sources.py``), so ``spark.read.format("dspark-json")`` works
in a fresh session without ``dspark_json.register(spark)``.

What ``register(spark)`` adds still: Spark redacts option ``apiKey`` (and ``storageOptions``,
credentials in URIs) from plans and the UI; a query that passes one through this source gets a
WARN (:attr:`dspark_json.source.DSparkJsonDataSource.registered_by_session`).
"""

from dspark_json.source import DSparkJsonDataSource

__all__ = ["DefaultSource"]


class DefaultSource(DSparkJsonDataSource):
    """``dspark-json``, registered by Spark's lookup rather than by ``register(spark)``."""

    registered_by_session = False
