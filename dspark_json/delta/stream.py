"""``write_delta``: stream a DataFrame into a Delta table through the ``dspark-delta`` sink."""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dspark_json.errors import OptionError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.datasource import DataSource
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["register_once", "register_sink", "write_delta"]

#: The data sources registered with each live session: Spark logs a WARN ("replaced a
#: previously registered data source") for each registration after the first.
_registered: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()

#: Spark 4.1 and later refuse a Python reader that implements ``pushFilters`` unless this is
#: true (the dspark-delta reader selects files by their partition values with it).
FILTER_PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register_once(spark: SparkSession, source: type[DataSource]) -> None:
    """Register ``source`` with ``spark`` unless it is already (no WARN on every run)."""
    names = _registered.setdefault(spark, set())
    if source.name() not in names:
        spark.dataSource.register(source)
        names.add(source.name())


def register_sink(spark: SparkSession) -> None:
    """Register the ``dspark-delta`` format with ``spark`` (classic or Spark Connect), and let
    Spark push filters down to Python readers (:data:`FILTER_PUSHDOWN_CONF`)."""
    from dspark_json.delta.sink import DeltaSink

    register_once(spark, DeltaSink)
    if spark.conf.get(FILTER_PUSHDOWN_CONF, "false") != "true":
        spark.conf.set(FILTER_PUSHDOWN_CONF, "true")


def write_delta(
    df: DataFrame,
    path: str,
    *,
    checkpoint: str,
    trigger: Mapping[str, Any] | None = None,
    query_name: str | None = None,
    partition_by: Sequence[str] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> StreamingQuery:
    """Start streaming ``df`` into the Delta table at ``path``; return the running query.

    The short form of ``df.writeStream.format("dspark-delta")``: the executors write the data
    files, the driver commits each micro-batch once. ``checkpoint`` is the query's checkpoint
    location (keep it to resume exactly where the query stopped). ``trigger`` holds
    ``DataStreamWriter.trigger`` keywords, e.g. ``{"availableNow": True}`` or
    ``{"processingTime": "10 seconds"}``. ``partition_by`` names the table's partition columns
    (used when the table is created). ``storage_options``: the table's object store settings
    (the sink's option ``storageOptions``: keys as delta-rs spells them, over the environment
    variables; docs/guide/object-stores.md).
    """
    missing = sorted(set(partition_by or ()) - set(df.columns))
    if missing:
        raise OptionError(
            f"write_delta: partition_by names column(s) {', '.join(missing)} that the DataFrame "
            f"does not have (columns: {', '.join(df.columns)})."
        )
    from dspark_json.compat import start
    from dspark_json.delta.sink import SINK_FORMAT

    register_sink(df.sparkSession)
    writer = df.writeStream.format(SINK_FORMAT).option("checkpointLocation", checkpoint)
    if partition_by:
        writer = writer.option("partitionBy", ",".join(partition_by))
    if storage_options:
        writer = writer.option("storageOptions", json.dumps(dict(storage_options)))
    if query_name:
        writer = writer.queryName(query_name)
    return start(writer, trigger, path=path)
