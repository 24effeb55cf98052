"""The executors' half of the Delta sink: a task's rows become Parquet data files in the table
location, through pyarrow's filesystems (local, ``s3://``, ``gs://``, ``abfs://``, ``hdfs://``).

Nothing here touches the Delta log, or imports ``deltalake``: a task returns what it wrote
(:class:`DataFile`: path, size, partition values, statistics) and the driver commits it. A file
name is unique (task partition and a random UUID), so a retried or speculative task never
overwrites another's file; a file no commit names is not part of the table (and
``DeltaTable.vacuum(full=True)`` removes it).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from dspark_json.delta.stats import FileStats
from dspark_json.fs import resolve
from dspark_json.storage import ENVIRONMENT_ONLY, StorageSettings

__all__ = [
    "DataFile",
    "delete_files",
    "partition_error",
    "utc_timestamps",
    "write_files",
]

logger = logging.getLogger("dspark_json")

#: Where a null (or empty) partition value goes, as in Hive and Spark.
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
#: Characters Hive and Spark escape in a partition directory name (and the space).
_ESCAPED = frozenset("\"#%'*/:=?\\\x7f{[]^ ") | frozenset(chr(c) for c in range(1, 32))


@dataclass(frozen=True)
class DataFile:
    """One Parquet file a task wrote: what the driver's ``add`` action says about it."""

    path: str  # relative to the table root (delta-rs URI-encodes it in the log)
    size: int
    partition_values: dict[str, str | None]
    modification_time: int  # milliseconds since the epoch
    stats: str  # JSON: numRecords, minValues, maxValues, nullCount
    rows: int


def write_files(
    batches: Iterable[pa.RecordBatch],
    table_uri: str,
    *,
    storage: StorageSettings = ENVIRONMENT_ONLY,
    partition_by: Sequence[str] = (),
    task: int = 0,
) -> list[DataFile]:
    """Write ``batches`` into ``table_uri`` as Parquet files, one per partition value met, and
    return them. On an error the files begun are deleted before the error goes on."""
    fs, root = resolve(table_uri, storage)
    root = root.rstrip("/")
    open_files: dict[tuple[str | None, ...], _OpenFile] = {}
    try:
        for raw in batches:
            if raw.num_rows == 0:
                continue
            batch = _utc_batch(raw)
            for key, part in _split(batch, partition_by):
                target = open_files.get(key)
                if target is None:
                    target = _OpenFile(
                        fs, root, part.schema, partition_by=partition_by, key=key, task=task
                    )
                    open_files[key] = target
                target.write(part)
        return [f.close() for f in open_files.values()]
    except BaseException:
        for f in open_files.values():
            f.discard()
        raise


def delete_files(
    table_uri: str, files: Iterable[DataFile], *, storage: StorageSettings = ENVIRONMENT_ONLY
) -> int:
    """Delete files that no commit names (a replayed or aborted batch's); return how many."""
    fs, root = resolve(table_uri, storage)
    deleted = 0
    for f in files:
        try:
            fs.delete_file(f"{root.rstrip('/')}/{f.path}")
            deleted += 1
        except FileNotFoundError:
            pass
        except OSError as exc:  # left for vacuum; the table does not name it
            logger.warning("Delta %s: could not delete uncommitted %s: %s", table_uri, f.path, exc)
    return deleted


def utc_timestamps(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every timestamp (nested ones too) in UTC microseconds: what Delta's
    TIMESTAMP stores."""
    return pa.schema([f.with_type(_utc(f.type)) for f in schema], metadata=schema.metadata)


def partition_error(schema: pa.Schema, partition_by: Sequence[str]) -> str | None:
    """Why ``partition_by`` cannot partition rows of ``schema``, or None."""
    for name in partition_by:
        if name not in schema.names:
            return (
                f"partitionBy names column {name!r}, which the DataFrame does not have "
                f"(columns: {', '.join(schema.names)})"
            )
        dtype = schema.field(name).type
        if not _partition_type(dtype):
            return (
                f"partitionBy column {name!r} is {dtype}; partition by a string, integer, "
                "boolean or date column"
            )
    if partition_by and len(partition_by) == len(schema.names):
        return "partitionBy names every column; a data file needs at least one other column"
    return None


class _OpenFile:
    """One Parquet file being written by a task, and its statistics."""

    def __init__(
        self,
        fs: pafs.FileSystem,
        root: str,
        schema: pa.Schema,
        *,
        partition_by: Sequence[str],
        key: tuple[str | None, ...],
        task: int,
    ) -> None:
        directory = "/".join(
            f"{_escape(name)}={NULL_PARTITION if value is None else _escape(value)}"
            for name, value in zip(partition_by, key, strict=True)
        )
        name = f"part-{task:05d}-{uuid.uuid4()}-c000.snappy.parquet"
        self.relative = f"{directory}/{name}" if directory else name
        self.partition_values = dict(zip(partition_by, key, strict=True))
        self.fs = fs
        self.path = f"{root}/{self.relative}"
        fs.create_dir(f"{root}/{directory}" if directory else root, recursive=True)
        import pyarrow.parquet as pq  # here: the sink's commit, in a process per call, writes none

        self.stats = FileStats(schema)
        self.writer = pq.ParquetWriter(self.path, schema, filesystem=fs, compression="snappy")
        self.closed = False

    def write(self, batch: pa.RecordBatch) -> None:
        self.writer.write_batch(batch)
        self.stats.add(batch)

    def close(self) -> DataFile:
        self.writer.close()
        self.closed = True
        size = self.fs.get_file_info(self.path).size or 0
        return DataFile(
            path=self.relative,
            size=size,
            partition_values=self.partition_values,
            modification_time=int(time.time() * 1000),
            stats=self.stats.to_json(),
            rows=self.stats.rows,
        )

    def discard(self) -> None:
        try:
            if not self.closed:
                self.writer.close()
            self.fs.delete_file(self.path)
        except OSError as exc:
            logger.warning("Could not delete the unfinished data file %s: %s", self.path, exc)


def _split(
    batch: pa.RecordBatch, partition_by: Sequence[str]
) -> Iterable[tuple[tuple[str | None, ...], pa.RecordBatch]]:
    """``batch`` cut by partition value: (the values as Delta writes them, the other columns)."""
    import pyarrow.compute as pc

    if not partition_by:
        yield (), batch
        return
    data = batch.select([n for n in batch.schema.names if n not in partition_by])
    keys = pa.Table.from_batches([batch.select(list(partition_by))])
    groups = keys.group_by(list(partition_by), use_threads=False).aggregate([])
    for values in groups.to_pylist():
        mask = None
        for name in partition_by:
            column = batch.column(name)
            value = values[name]
            match = pc.is_null(column) if value is None else pc.equal(column, value)
            match = pc.fill_null(match, False)
            mask = match if mask is None else pc.and_(mask, match)
        key = tuple(_partition_value(values[name]) for name in partition_by)
        yield key, data.filter(mask)


def _partition_value(value: object) -> str | None:
    """A partition value as the Delta log writes it; an empty string is null, as in Spark."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def _partition_type(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_integer(dtype)
        or pa.types.is_boolean(dtype)
        or pa.types.is_date32(dtype)
    )


def _escape(text: str) -> str:
    """A partition directory name: Hive's escapes, and non-ASCII characters as UTF-8 escapes
    (as delta-rs writes them: its object store paths cannot hold them raw)."""
    return "".join(
        "".join(f"%{b:02X}" for b in c.encode()) if c in _ESCAPED or ord(c) > 127 else c
        for c in text
    )


def _utc_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    target = utc_timestamps(batch.schema)
    return batch if target.equals(batch.schema) else batch.cast(target)


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
