"""The ``dspark-delta`` Spark data source: executors write the Parquet files, the driver commits;
and ``spark.read.format("dspark-delta").load(path)`` reads the table back (:mod:`.reader`).

    df.writeStream.format("dspark-delta")
      .option("checkpointLocation", "/data/_checkpoints/answers")
      .option("partitionBy", "lang")          # optional; comma-separated
      .start("/data/answers")                 # or s3://, gs://, abfs://, hdfs://

    df.write.format("dspark-delta").mode("append").save("/data/answers")   # batch

Each task's ``write()`` (on an executor) writes its rows as Parquet files straight into the table
location and returns their ``add`` actions; ``commit()`` (on the driver) commits them in one Delta
transaction carrying ``(dspark-json:<query id>, batch id)``. A replayed micro-batch whose id the
table holds already is not committed again, and the files its tasks wrote are deleted. No row
travels to the driver.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from dspark_json.compat import to_arrow_schema
from dspark_json.delta.files import (
    DataFile,
    delete_files,
    partition_error,
    utc_timestamps,
    write_files,
)
from dspark_json.delta.from_rows import batches_from_rows
from dspark_json.delta.log import commit_files, committed_version, table_partitioning
from dspark_json.delta.reader import (
    DeltaTableReader,
    known_options,
    read_storage,
    snapshot,
    table_schema,
)
from dspark_json.errors import OptionError, short_errors
from dspark_json.fs import mask_uris, query_problem, read_text
from dspark_json.storage import StorageSettings, missing_credentials, parse_settings

try:  # Spark 4.1+
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase

    _ARROW_STREAMS = True
except ImportError:  # Spark 4.0: rows, turned back into Arrow (delta.from_rows)
    from pyspark.sql.datasource import (  # type: ignore[assignment]
        DataSourceStreamWriter as _StreamWriterBase,
    )

    _ARROW_STREAMS = False

__all__ = ["SINK_FORMAT", "DeltaFiles", "DeltaSink"]

logger = logging.getLogger("dspark_json")

SINK_FORMAT = "dspark-delta"

#: The sink's options (Spark passes ``path`` and ``checkpointLocation`` through as options).
_OPTIONS = ("path", "checkpointLocation", "partitionBy", "storageOptions")


@dataclass
class DeltaFiles(WriterCommitMessage):
    """A task's commit message: the data files it wrote."""

    files: list[DataFile] = field(default_factory=list)


@dataclass(frozen=True)
class _Target:
    """What the driver settled before the tasks run; pickled to the executors."""

    table: str
    partition_by: tuple[str, ...]
    schema: pa.Schema  # the rows', timestamps in UTC
    checkpoint: str | None
    spark_schema: StructType  # what Spark 4.0's Rows hold
    storage: StorageSettings  # option storageOptions over the environment variables


class DeltaSink(DataSource):
    """``format("dspark-delta")``: streaming (append) and batch (append, overwrite) writes into a
    Delta table, the data files written by the executors; batch reads of its snapshot."""

    #: What ``reader()`` returns: one that pushes partition filters down (Spark asks for
    #: ``spark.sql.python.filterPushdown.enabled``, which ``register(spark)`` sets).
    reader_class: ClassVar[type[DeltaTableReader]] = DeltaTableReader

    @classmethod
    def name(cls) -> str:
        return SINK_FORMAT

    @short_errors
    def schema(self) -> StructType:
        table = snapshot(self.options, format_name=SINK_FORMAT)
        # The version read here is the one the reader reads, even if a commit lands between.
        self.__dict__["_version"] = table.version()
        return table_schema(table)

    @short_errors
    def reader(self, schema: StructType) -> DeltaTableReader:
        options = dict(self.options)
        version = self.__dict__.get("_version")
        if version is not None and not any(k.lower() == "timestampasof" for k in options):
            options["versionAsOf"] = str(version)
        table = snapshot(options, format_name=SINK_FORMAT)
        columns = table_schema(table).names
        missing = [n for n in schema.names if n not in columns]
        if missing:
            raise OptionError(
                f"The schema given to spark.read.format({SINK_FORMAT!r}) names column(s) "
                f"{', '.join(missing)} that the Delta table {self.options.get('path')} does "
                f"not have (its columns: {', '.join(columns)})."
            )
        return self.reader_class(table, schema, storage=read_storage(self.options))

    @short_errors
    def writer(self, schema: StructType, overwrite: bool) -> DeltaBatchWriter:
        return DeltaBatchWriter(_target(self.options, schema, streaming=False), overwrite)

    @short_errors
    def streamWriter(self, schema: StructType, overwrite: bool) -> DeltaStreamWriter:
        if overwrite:
            raise OptionError(
                f"format {SINK_FORMAT!r} appends: use outputMode('append'), not 'complete'."
            )
        return DeltaStreamWriter(_target(self.options, schema, streaming=True))


class DeltaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("dspark-delta")``: one commit for the whole write."""

    def __init__(self, target: _Target, overwrite: bool) -> None:
        self.target = target
        self.overwrite = overwrite

    def write(self, iterator: Iterator[pa.RecordBatch]) -> DeltaFiles:
        return DeltaFiles(_write(self.target, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        files = _files(messages)
        commit_files(
            self.target.table,
            files,
            schema=self.target.schema,
            partition_by=self.target.partition_by,
            storage=self.target.storage,
            mode="overwrite" if self.overwrite else "append",
        )
        logger.info("Delta %s: %d file(s) committed", self.target.table, len(files))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _discard(self.target, messages, "the write failed")


class DeltaStreamWriter(_StreamWriterBase):
    """``df.writeStream.format("dspark-delta")``: one idempotent commit per micro-batch."""

    def __init__(self, target: _Target) -> None:
        self.target = target

    def write(self, iterator: Iterator[Any]) -> DeltaFiles:
        if not _ARROW_STREAMS:  # Spark 4.0 hands Rows
            iterator = batches_from_rows(iterator, self.target.spark_schema, self.target.schema)
        return DeltaFiles(_write(self.target, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        files = _files(messages)
        app_id = _app_id(self.target)
        done = committed_version(self.target.table, app_id, storage=self.target.storage)
        if done is not None and done >= batchId:
            deleted = delete_files(self.target.table, files, storage=self.target.storage)
            logger.info(
                "Delta %s: batch %d already committed by %s; skipped (%d file(s) of the replay "
                "deleted)",
                self.target.table,
                batchId,
                app_id,
                deleted,
            )
            return
        commit_files(
            self.target.table,
            files,
            schema=self.target.schema,
            partition_by=self.target.partition_by,
            storage=self.target.storage,
            transaction=(app_id, batchId),
        )
        logger.info(
            "Delta %s: batch %d committed, %d file(s), %d rows",
            self.target.table,
            batchId,
            len(files),
            sum(f.rows for f in files),
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _discard(self.target, messages, f"batch {batchId} failed")


def _target(options: Mapping[str, str], schema: StructType, *, streaming: bool) -> _Target:
    """Check the options against the rows' schema and the table, on the driver."""
    given = known_options(options, _OPTIONS, what=f"format {SINK_FORMAT!r}")
    table = given.get("path", "")
    if not table:
        raise OptionError(
            f"format {SINK_FORMAT!r} needs the table's location: .start(path) (streaming), "
            ".save(path) (batch), or .option('path', ...)."
        )
    problem = query_problem("path", table)
    if problem:
        raise OptionError(f"format {SINK_FORMAT!r}: {problem}.")
    storage = parse_settings(given.get("storageoptions"), name="storageOptions")
    missing = missing_credentials(table, storage)
    if missing:
        raise OptionError(f"format {SINK_FORMAT!r}, table {mask_uris(table)}: {missing}.")
    checkpoint = given.get("checkpointlocation") or None
    if streaming and checkpoint is None:
        raise OptionError(
            f"format {SINK_FORMAT!r} needs .option('checkpointLocation', ...): the query id kept "
            "there makes each micro-batch's commit idempotent."
        )
    arrow = utc_timestamps(to_arrow_schema(schema))
    requested = tuple(c.strip() for c in given.get("partitionby", "").split(",") if c.strip())
    existing = table_partitioning(table, storage=storage)
    if existing is not None and requested and list(requested) != existing:
        raise OptionError(
            f"option partitionBy={','.join(requested)!r}, but the Delta table {table} is "
            f"partitioned by {','.join(existing) or 'nothing'!r}: leave partitionBy out (the "
            "table's partitioning is used) or write to a new table."
        )
    partition_by = tuple(existing) if existing is not None else requested
    problem = partition_error(arrow, partition_by)
    if problem:
        raise OptionError(f"format {SINK_FORMAT!r}: {problem}.")
    return _Target(table, partition_by, arrow, checkpoint, schema, storage)


def _write(target: _Target, iterator: Iterator[pa.RecordBatch]) -> list[DataFile]:
    from pyspark import TaskContext

    context = TaskContext.get()
    task = context.partitionId() if context is not None else 0
    return write_files(
        iterator,
        target.table,
        storage=target.storage,
        partition_by=target.partition_by,
        task=task,
    )


def _files(messages: list[WriterCommitMessage | None]) -> list[DataFile]:
    return [f for m in messages if isinstance(m, DeltaFiles) for f in m.files]


def _discard(target: _Target, messages: list[WriterCommitMessage | None], why: str) -> None:
    deleted = delete_files(target.table, _files(messages), storage=target.storage)
    logger.warning(
        "Delta %s: %s; %d data file(s) of it deleted, nothing committed",
        mask_uris(target.table),
        why,
        deleted,
    )


def _app_id(target: _Target) -> str:
    """``dspark-json:<query id>``: the id Spark keeps in the checkpoint across restarts."""
    assert target.checkpoint is not None  # checked by _target for streaming writes
    metadata = json.loads(
        read_text(target.checkpoint.rstrip("/") + "/metadata", storage=target.storage)
    )
    return f"dspark-json:{metadata['id']}"
