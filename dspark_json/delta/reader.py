"""``spark.read.format("dspark-delta").load(path)``: a Delta table read back without delta-spark.

    spark.read.format("dspark-delta").load("/data/answers")                      # current
    spark.read.format("dspark-delta").option("versionAsOf", 3).load(path)          # time travel
    spark.read.format("dspark-delta").option("timestampAsOf", "2026-12-01T10:00:00Z").load(path)
    spark.read.format("dspark-delta").schema("custom_id STRING, parsed STRUCT<...>").load(path)

The driver asks delta-rs for the snapshot (its schema, and its data files with their partition
values); each task reads its files with pyarrow, so no engine other than pyarrow touches the
data and deltalake's ``to_pyarrow_table()`` (which can end the process with "terminate called
without an active exception", exit 134, on deltalake 1.6) is never called. A file written
before the schema was widened reads with nulls for the columns and struct fields it lacks.

What Spark's Python data source API lets a reader skip: files whose partition values fail a
filter on a partition column (``pushFilters``, Spark 4.1 and later, with
``spark.sql.python.filterPushdown.enabled``), and the columns a user schema leaves out
(``.schema(...)`` with fewer columns: only those are read). Spark itself prunes any other
column after the read. Tables with deletion vectors or column mapping are refused: their rows
are not what the files hold.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from dspark_json.compat import to_arrow_schema
from dspark_json.errors import OptionError, mask_uris
from dspark_json.fs import query_problem, resolve
from dspark_json.storage import (
    ENVIRONMENT_ONLY,
    StorageSettings,
    delta_options,
    delta_uri,
    parse_settings,
)

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql.datasource import Filter

__all__ = [
    "READ_OPTIONS",
    "DeltaFilePartition",
    "DeltaTableReader",
    "known_options",
    "read_table",
    "snapshot",
    "table_schema",
]

#: The read options (``path`` is what ``.load(path)`` passes).
READ_OPTIONS = ("path", "versionAsOf", "timestampAsOf", "storageOptions")

#: Reader features whose rows differ from what the data files hold.
_UNSUPPORTED_FEATURES = ("deletionVectors", "columnMapping")


@dataclass(frozen=True)
class DeltaFilePartition(InputPartition):
    """One data file of the snapshot and its partition values (typed)."""

    uri: str
    partition_values: tuple[tuple[str, Any], ...]


def snapshot(options: Mapping[str, str], *, format_name: str) -> DeltaTable:
    """The table at ``path``, at ``versionAsOf`` / ``timestampAsOf`` when given, reached with
    option ``storageOptions`` (:func:`read_storage`)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    given = known_options(options, READ_OPTIONS, what=f"spark.read.format({format_name!r})")
    path = given.get("path", "")
    if not path:
        raise OptionError(
            f"spark.read.format({format_name!r}) needs the table's location: .load(path)."
        )
    problem = query_problem("path", path)
    if problem:
        raise OptionError(f"spark.read.format({format_name!r}): {problem}.")
    version, timestamp = given.get("versionasof"), given.get("timestampasof")
    if version is not None and timestamp is not None:
        raise OptionError("Give option 'versionAsOf' or option 'timestampAsOf', not both.")
    store = delta_options(path, read_storage(options)) or None
    try:
        table = DeltaTable(delta_uri(path), storage_options=store)
    except TableNotFoundError as exc:
        raise OptionError(
            f"There is no Delta table at {mask_uris(path)!r} (no _delta_log there). Check the "
            "path given to .load(); a stream's table appears with its first committed micro-batch."
        ) from exc
    try:
        if version is not None:
            table.load_as_version(_version(version))
        elif timestamp is not None:
            table.load_as_version(_timestamp(timestamp))
    except DeltaError as exc:
        which = "versionAsOf" if version is not None else "timestampAsOf"
        value = version if version is not None else timestamp
        raise OptionError(
            f"Option {which}={value!r}: the Delta table {mask_uris(path)} has no such version "
            f"({mask_uris(str(exc))}). "
            "Its versions run from its oldest kept one to "
            f"{DeltaTable(delta_uri(path), storage_options=store).version()}."
        ) from exc
    _check_readable(table, path)
    return table


def read_storage(options: Mapping[str, str]) -> StorageSettings:
    """A read's option ``storageOptions`` over the stores' environment variables."""
    given = {k.lower(): v for k, v in options.items()}
    return parse_settings(given.get("storageoptions"), name="storageOptions")


def known_options(
    options: Mapping[str, str], allowed: Sequence[str], *, what: str
) -> dict[str, str]:
    """``options`` by lowercased name, each one of ``allowed`` (any case), else an error with
    a "did you mean". Spark hands a Python data source the names lowercased."""
    given = {k.lower(): v for k, v in options.items()}
    known = {o.lower(): o for o in allowed}
    for key in given:
        if key not in known:
            close = difflib.get_close_matches(key, list(known), n=1)
            hint = f" Did you mean {known[close[0]]!r}?" if close else ""
            raise OptionError(
                f"{what} has no option {key!r} (as Spark passes it, lowercased).{hint} Its "
                f"options: {', '.join(allowed)}."
            )
    return given


def _version(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise OptionError(
            f"Option 'versionAsOf' must be a table version (an integer, 0 or more), got {text!r}."
        )
    return value


def _timestamp(text: str) -> dt.datetime:
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise OptionError(
            f"Option 'timestampAsOf' must be an ISO 8601 time, e.g. '2026-12-01T10:00:00Z', "
            f"got {text!r}."
        ) from exc
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def _check_readable(table: DeltaTable, path: str) -> None:
    features = set(table.protocol().reader_features or ())
    mapping = table.metadata().configuration.get("delta.columnMapping.mode", "none")
    found = sorted(features & set(_UNSUPPORTED_FEATURES))
    if mapping != "none" and "columnMapping" not in found:
        found.append("columnMapping")
    if found:
        raise OptionError(
            f"The Delta table {mask_uris(path)} uses {', '.join(found)}, which format "
            "'dspark-delta' does not read (its rows are not what the data files hold). Read it "
            "with delta-spark (format 'delta') or deltalake."
        )


def table_schema(table: DeltaTable) -> StructType:
    """The snapshot's schema as Spark types."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(pa.schema(table.schema().to_arrow()))


class DeltaTableReader(DataSourceReader):
    """The snapshot's data files, one partition each; ``schema`` is the columns to return."""

    def __init__(
        self,
        table: DeltaTable,
        schema: StructType,
        *,
        storage: StorageSettings = ENVIRONMENT_ONLY,
    ) -> None:
        self.schema = schema
        self.storage = storage
        self.partition_columns = tuple(table.metadata().partition_columns)
        self.files = _files(table)
        self.kept: list[Filter] = []

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Filters on partition columns select the files to read; every filter goes back to
        Spark too (it evaluates them on the rows read, so a file kept in doubt costs only its
        read)."""
        for f in filters:
            if _column(f) in self.partition_columns and _decide(f, {}) is not None:
                self.kept.append(f)
            yield f

    def partitions(self) -> Sequence[InputPartition]:
        chosen = [
            part
            for part in self.files
            if all(_decide(f, dict(part.partition_values)) for f in self.kept)
        ]
        # Spark reads one partition of its own when given none: an empty one of ours.
        return chosen or [DeltaFilePartition("", ())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, DeltaFilePartition)
        target = to_arrow_schema(self.schema)
        if not partition.uri:
            yield pa.RecordBatch.from_pylist([], schema=target)
            return
        yield from read_file(partition, target, storage=self.storage).to_batches(
            max_chunksize=10_000
        )


def read_file(
    partition: DeltaFilePartition,
    target: pa.Schema,
    *,
    storage: StorageSettings = ENVIRONMENT_ONLY,
) -> pa.Table:
    """One data file in ``target``: its partition values as columns, a column or struct field
    the file lacks (written before the schema widened) as nulls."""
    import pyarrow.parquet as pq  # here: the sink's planning and commit workers read no file

    values = dict(partition.partition_values)
    filesystem, path = resolve(partition.uri, storage)
    present = set(pq.read_schema(path, filesystem=filesystem).names)
    wanted = [f.name for f in target if f.name not in values and f.name in present]
    data = pq.read_table(path, columns=wanted, filesystem=filesystem)
    n = data.num_rows
    columns = []
    for field in target:
        if field.name in values:
            column: pa.Array | pa.ChunkedArray = pa.array([values[field.name]] * n, field.type)
        elif field.name in present:
            column = data.column(field.name).cast(field.type)
        else:
            column = pa.nulls(n, field.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=target)


def read_table(
    path: str, *, version: int | None = None, storage_options: Mapping[str, str] | None = None
) -> pa.Table:
    """The whole table at ``path`` (its current version, or ``version``) in this process, read
    like the Spark reader reads it: for scripts and the CLI, instead of ``to_pyarrow_table()``.
    ``storage_options``: as option ``storageOptions`` (an object store's settings)."""
    options = {"path": path}
    if version is not None:
        options["versionAsOf"] = str(version)
    if storage_options:
        options["storageOptions"] = json.dumps(dict(storage_options))
    table = snapshot(options, format_name="dspark-delta")
    target = pa.schema(table.schema().to_arrow())
    storage = read_storage(options)
    parts = [read_file(part, target, storage=storage) for part in _files(table)]
    return pa.concat_tables(parts) if parts else target.empty_table()


def _files(table: DeltaTable) -> list[DeltaFilePartition]:
    uris = table.file_uris()
    actions = pa.table(table.get_add_actions(flatten=True))
    paths = actions.column("path").to_pylist()
    columns = list(table.metadata().partition_columns)
    values = [actions.column(f"partition.{c}").to_pylist() for c in columns]
    out = []
    for i, (uri, path) in enumerate(zip(uris, paths, strict=True)):
        # Both lists come from the one snapshot, in the same order; checked, not assumed.
        if os.path.basename(uri) != os.path.basename(path):
            raise RuntimeError(f"delta-rs listed {uri} where its add actions hold {path}")
        row = tuple((c, v[i]) for c, v in zip(columns, values, strict=True))
        out.append(DeltaFilePartition(uri, row))
    return out


def _column(f: Filter) -> str | None:
    attribute = getattr(f, "attribute", None)
    return attribute[0] if isinstance(attribute, tuple) and len(attribute) == 1 else None


def _decide(f: Filter, row: Mapping[str, Any]) -> bool | None:
    """Whether a file with partition values ``row`` may hold rows that pass ``f`` (None: a
    filter this reader does not evaluate; True where in doubt). With an empty ``row``: only
    whether it evaluates ``f``."""
    name = _column(f)
    if name is None:
        return None
    value = row.get(name)
    given = getattr(f, "value", None)
    tests: dict[str, Any] = {
        "EqualTo": lambda: value is not None and value == given,
        "EqualNullSafe": lambda: value == given,
        "In": lambda: value is not None and value in (given or ()),
        "IsNull": lambda: value is None,
        "IsNotNull": lambda: value is not None,
        "GreaterThan": lambda: value is not None and value > given,
        "GreaterThanOrEqual": lambda: value is not None and value >= given,
        "LessThan": lambda: value is not None and value < given,
        "LessThanOrEqual": lambda: value is not None and value <= given,
    }
    kind = type(f).__name__
    if kind not in tests:
        return None
    if not row:
        return True
    try:
        return bool(tests[kind]())
    except TypeError:  # a value of another type than the column's: read the file
        return True
