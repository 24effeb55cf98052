"""Response bodies you already have (a table, Kafka values, logs) -> the source's typed columns.

``parse_responses`` parses bodies in hand into a pyarrow table; ``parse_dataframe`` does it on a
Spark DataFrame's column, on the executors. Both run the same parser as the ``dspark-json``
source, take the same keywords (``schema``, ``response_format``, ``tools``, ``backend``,
``mode``) and apply the record mode with :func:`dspark_json.rows.apply_mode`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeAlias

import pyarrow as pa
from pyspark.sql.types import BinaryType, StringType, StructType

from dspark_json.buffers.arrow import contiguous
from dspark_json.errors import OptionError, SchemaError
from dspark_json.parse import make_parser, new_fields, select_backend
from dspark_json.rows import (
    COLUMNS,
    CORRUPT_RECORD,
    PARSE_MODES,
    RECORD_MODES,
    RESCUED_DATA,
    STATUS,
    ParseMode,
    RecordMode,
    apply_mode,
)
from dspark_json.schema.fit import find_misfits, mark_misfits, warn_once
from dspark_json.schema.json_schema import ResponseFormat, as_json_schema
from dspark_json.schema.output import output_schema, response_fields, tool_arguments
from dspark_json.schema.tools import Tool, as_tools

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["Bodies", "Columns", "parse_dataframe", "parse_responses", "response_schema"]

logger = logging.getLogger("dspark_json")

_SNIPPET = 200

#: Response bodies: a string or binary Arrow array, or a list of str / bytes / None.
Bodies: TypeAlias = pa.Array | pa.ChunkedArray | Sequence[str | bytes | None]
#: The columns wanted: Spark DDL, a StructType or a pyarrow schema.
Columns: TypeAlias = str | StructType | pa.Schema


def response_schema(
    schema: Columns | None = None,
    response_format: ResponseFormat | None = None,
    tools: Sequence[Tool] | None = None,
) -> StructType:
    """The columns ``parse_responses`` yields: ``schema`` (or the vLLM envelope, with ``parsed``
    typed from ``response_format``) plus ``_status``, ``_rescued_data`` and ``_corrupt_record``.

    Parameters
    ----------
    schema:
        The columns wanted: Spark DDL (needs an active SparkSession), a StructType or a pyarrow
        schema; ``None``: vLLM's envelope.
    response_format:
        The JSON Schema of the content, which types ``parsed`` (only without ``schema``), or a
        Pydantic model class (its ``model_json_schema()``).
    tools:
        The tools the requests offered (OpenAI tool definitions, or Pydantic model classes):
        column ``tool_calls`` types each function's calls from its ``parameters`` (only without
        ``schema``; a function without parameters: its arguments' JSON text).
    """
    response_format = as_json_schema(response_format)
    if schema is None:
        arguments = tool_arguments(as_tools(tools, "tools")) if tools is not None else None
        full = output_schema(response_format=response_format, tools=arguments)
        return response_fields(full)
    if response_format is not None or tools is not None:
        raise OptionError(
            "parse_responses got both schema and response_format or tools; the schema wins in "
            "the source, so pass only one of them."
        )
    struct = _struct_of(schema)
    missing = [c.field for c in COLUMNS if c.stage == "parse" and c.name not in struct.names]
    return StructType([*struct.fields, *missing])


def parse_responses(
    bodies: Bodies,
    *,
    schema: Columns | None = None,
    response_format: ResponseFormat | None = None,
    tools: Sequence[Tool] | None = None,
    backend: ParseMode = "auto",
    mode: RecordMode = "PERMISSIVE",
    allow_unquoted_control_chars: bool = True,
) -> pa.Table:
    """Parse chat completion response bodies into one typed Arrow table, a row per body.

    Parameters
    ----------
    bodies:
        A string or binary Arrow array, or a list of str / bytes / None.
    schema:
        The columns wanted (see :func:`response_schema`); by default vLLM's envelope with
        ``parsed`` typed from ``response_format``.
    response_format:
        The JSON Schema of the content, or a Pydantic model class.
    tools:
        The tools the requests offered, which type column ``tool_calls`` (see
        :func:`response_schema`).
    backend:
        ``auto`` (the GPU when cuDF and a device are there, else the CPU, with a warning),
        ``cpu`` or ``gpu`` (an error where it cannot run).
    mode:
        As in Spark's JSON source: PERMISSIVE keeps malformed rows (``_corrupt_record``),
        DROPMALFORMED drops them, FAILFAST raises :class:`~dspark_json.RecordError` naming the
        first one.
    allow_unquoted_control_chars:
        Accept raw control characters inside JSON strings in a message's content (models and
        guided decoding write them), as Spark's JSON option of that name; the envelope is
        always strict.
    """
    check_keywords(backend, mode)
    target = response_schema(schema, response_format, tools)
    parse = _parse_with(target, backend, allow_unquoted_control_chars)
    table = parse(bodies)
    keep = _apply_mode(table, mode)
    return table if keep is None else table.filter(keep)


def _parse_with(
    target: StructType, backend: ParseMode, lenient: bool
) -> Callable[[Bodies], pa.Table]:
    """One parser for ``target`` on ``backend``, as a function of bodies that logs each parse:
    made once, then called for each batch (a task of ``parse_dataframe`` parses many)."""
    chosen = select_backend(PARSE_MODES[backend])
    parser = make_parser(target, chosen, lenient=lenient)
    call = uuid.uuid4().hex  # the misfits' WARN: once per call (per task of parse_dataframe)

    def parse(bodies: Bodies) -> pa.Table:
        started = time.perf_counter()
        table = _with_misfits(parser.parse(bodies), target, call)
        logger.info(
            "parsed %d response bodies on %s in %.3fs (%d row(s) by the reference parser%s)",
            table.num_rows,
            chosen,
            time.perf_counter() - started,
            parser.reference_rows,
            "".join(f"; {reason}: {rows}" for reason, rows in parser.reference_reasons.items()),
        )
        return table

    return parse


def _with_misfits(table: pa.Table, target: StructType, call: str) -> pa.Table:
    """``table`` with its ``ok`` rows whose answer does not fit ``parsed``'s type
    ``schema_mismatch`` (one WARN per ``call``; :mod:`dspark_json.schema.fit`)."""
    if not {"parsed", STATUS.name, RESCUED_DATA.name} <= set(table.column_names):
        return table
    rescued = table.column(RESCUED_DATA.name)
    found = find_misfits(rescued, target["parsed"].dataType, new_fields(rescued))
    if not found:
        return table
    statuses = table.column(STATUS.name).to_pylist()
    marked = mark_misfits(statuses, found)
    warn_once(call, marked, lambda row: f"response body {row}", rows=table.num_rows)
    i = table.column_names.index(STATUS.name)
    return table.set_column(
        i, table.schema.field(i), pa.array(statuses, table.schema.field(i).type)
    )


def _apply_mode(table: pa.Table, mode: RecordMode) -> pa.Array | None:
    """The rows to keep (``None``: all) of a parsed table; FAILFAST raises on the first
    malformed body, quoting its start."""
    if mode == "PERMISSIVE":  # keeps every row: no need to read the statuses
        return None

    def snippet(row: int) -> str:
        text = table.column(CORRUPT_RECORD.name)[row].as_py() or ""
        return f": {text if len(text) <= _SNIPPET else text[:_SNIPPET] + '...'!r}"

    keep = apply_mode(
        mode,
        table.column(STATUS.name).to_pylist(),
        describe=lambda row: f"response body {row}",
        detail=snippet if CORRUPT_RECORD.name in table.column_names else None,
    )
    return None if keep is None else pa.array(keep, pa.bool_())


def check_keywords(backend: ParseMode, mode: RecordMode) -> None:
    """Raise :class:`OptionError` unless ``backend`` and ``mode`` are allowed values."""
    if backend not in PARSE_MODES:
        raise OptionError(
            f"backend={backend!r} is not a backend; use one of {', '.join(PARSE_MODES)}."
        )
    if mode not in RECORD_MODES:
        raise OptionError(f"mode={mode!r} is not a mode; use one of {', '.join(RECORD_MODES)}.")


def _struct_of(schema: Columns) -> StructType:
    if isinstance(schema, StructType):
        return schema
    if isinstance(schema, pa.Schema):
        from pyspark.sql.pandas.types import from_arrow_schema

        return from_arrow_schema(schema)
    if isinstance(schema, str):
        from pyspark.sql import SparkSession

        if SparkSession.getActiveSession() is None:
            raise SchemaError(
                f"schema={schema!r} is DDL, which Spark parses, and no SparkSession is active. "
                "Start one first, or pass a StructType or a pyarrow schema."
            )
        parsed = StructType.fromDDL(schema)
        if not isinstance(parsed, StructType):
            raise SchemaError(f"schema={schema!r} is not a struct: list columns, e.g. 'id STRING'")
        return parsed
    raise SchemaError(
        "schema must be a DDL string, a StructType or a pyarrow schema, "
        f"not {type(schema).__name__}"
    )


def parse_dataframe(
    df: DataFrame,
    column: str = "value",
    *,
    schema: Columns | None = None,
    response_format: ResponseFormat | None = None,
    tools: Sequence[Tool] | None = None,
    backend: ParseMode = "auto",
    mode: RecordMode = "PERMISSIVE",
    allow_unquoted_control_chars: bool = True,
) -> DataFrame:
    """``df`` with the bodies in ``column`` (string or binary) parsed, on the executors, by
    :func:`parse_responses`: its other columns, then the response columns.

        answers = dspark_json.parse_dataframe(
            spark.readStream.format("kafka")...load(), "value", response_format=schema
        )

    Parameters
    ----------
    df:
        Batch or streaming.
    column:
        The string or binary column of response bodies.
    schema, response_format, tools, backend, mode, allow_unquoted_control_chars:
        As in :func:`parse_responses`; DROPMALFORMED drops the other columns of a dropped row
        too.
    """
    check_keywords(backend, mode)
    if column not in df.columns:
        raise OptionError(
            f"parse_dataframe: column {column!r} is not in the DataFrame (columns: "
            f"{', '.join(df.columns)}). Pass the column that holds the response bodies."
        )
    if not isinstance(df.schema[column].dataType, StringType | BinaryType):
        raise SchemaError(
            f"parse_dataframe: column {column!r} is {df.schema[column].dataType.simpleString()}"
            "; response bodies must be a string or binary column (cast it first)."
        )
    parsed = response_schema(schema, response_format, tools)
    kept = [f for f in df.schema.fields if f.name != column]
    clash = sorted({f.name for f in kept} & set(parsed.names))
    if clash:
        raise SchemaError(
            f"parse_dataframe: the DataFrame already has column(s) {', '.join(clash)}, which "
            "the parsed response brings too. Rename or drop them first."
        )
    out = StructType([*kept, *parsed.fields])
    index = df.columns.index(column)

    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parse_bodies = _parse_with(parsed, backend, allow_unquoted_control_chars)
        for batch in batches:
            table = parse_bodies(batch.column(index))
            rest = batch.drop_columns([column])
            keep = _apply_mode(table, mode)  # to the other columns too
            if keep is not None:
                table, rest = table.filter(keep), rest.filter(keep)
            columns = [*rest.columns, *(contiguous(c) for c in table.columns)]
            yield pa.RecordBatch.from_arrays(columns, names=out.names)

    return df.mapInArrow(parse, out)
