"""Streaming into a Delta table with delta-rs, one idempotent commit per micro-batch.

Delta's Spark jars are not always at hand (here they cannot be fetched), so the sink is a
``foreachBatch`` that writes each micro-batch with the ``deltalake`` package. Each commit carries an
application transaction (the query id, the batch id): a replayed batch finds its id already
committed and is skipped, so the table holds each batch once. Where delta-spark is installed,
``writeStream.format("delta")`` works as usual instead.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from dspark_json.errors import OptionError
from dspark_json.fs import read_text

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["write_delta"]

logger = logging.getLogger("dspark_json")


def write_delta(
    df: DataFrame,
    path: str,
    *,
    checkpoint: str,
    trigger: Mapping[str, Any] | None = None,
    query_name: str | None = None,
    partition_by: Sequence[str] | None = None,
) -> StreamingQuery:
    """Start streaming ``df`` into the Delta table at ``path``; return the running query.

    ``checkpoint`` is the query's checkpoint location (keep it to resume exactly where the query
    stopped). ``trigger`` holds ``DataStreamWriter.trigger`` keywords, e.g.
    ``{"availableNow": True}`` or ``{"processingTime": "10 seconds"}``. ``partition_by`` names
    the table's partition columns (used when the table is created).
    """
    missing = sorted(set(partition_by or ()) - set(df.columns))
    if missing:
        raise OptionError(
            f"write_delta: partition_by names column(s) {', '.join(missing)} that the DataFrame "
            f"does not have (columns: {', '.join(df.columns)})."
        )
    sink = _DeltaBatchWriter(path, checkpoint, partition_by)
    writer = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()


class _DeltaBatchWriter:
    """The ``foreachBatch`` function: materialise the batch once, commit it once."""

    def __init__(
        self, path: str, checkpoint: str, partition_by: Sequence[str] | None = None
    ) -> None:
        self.path = path
        self.checkpoint = checkpoint
        self.partition_by = list(partition_by) if partition_by else None
        self._app_id: str | None = None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
        from deltalake.exceptions import TableNotFoundError

        app_id = self._query_app_id()
        try:
            done = DeltaTable(self.path).transaction_version(app_id)
        except TableNotFoundError:
            done = None
        if done is not None and done >= batch_id:
            logger.info(
                "Delta %s: batch %d already committed by %s; skipped", self.path, batch_id, app_id
            )
            return
        table = _utc_timestamps(batch.toArrow())
        write_deltalake(
            self.path,
            table,
            mode="append",
            schema_mode="merge",
            partition_by=self.partition_by,
            commit_properties=CommitProperties(
                app_transactions=[Transaction(app_id=app_id, version=batch_id)]
            ),
        )
        logger.info("Delta %s: batch %d committed, %d rows", self.path, batch_id, table.num_rows)

    def _query_app_id(self) -> str:
        """The streaming query's id, which Spark keeps in the checkpoint across restarts."""
        if self._app_id is None:
            metadata = json.loads(read_text(self.checkpoint.rstrip("/") + "/metadata"))
            self._app_id = f"dspark-json:{metadata['id']}"
        return self._app_id


def _utc_timestamps(table: pa.Table) -> pa.Table:
    """Delta stores TIMESTAMP as UTC microseconds; make every timestamp column say so."""
    target = pa.schema([f.with_type(_utc(f.type)) for f in table.schema])
    return table if target.equals(table.schema) else table.cast(target)


def _utc(dtype: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(dtype):
        return pa.timestamp("us", tz="UTC")
    if pa.types.is_struct(dtype):
        return pa.struct(
            [dtype.field(i).with_type(_utc(dtype.field(i).type)) for i in range(dtype.num_fields)]
        )
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return pa.list_(dtype.value_field.with_type(_utc(dtype.value_type)))
    if pa.types.is_map(dtype):
        return pa.map_(dtype.key_field, dtype.item_field.with_type(_utc(dtype.item_type)))
    return dtype
