"""``parse_responses``: response bodies already in hand (a table, Kafka values, logs) -> Arrow.

The same parser the ``dspark-json`` source runs on its executors, as a plain function.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa
from pyspark.sql.types import StringType, StructField, StructType

from dspark_json.errors import OptionError, RecordError, SchemaError
from dspark_json.parse import make_parser, select_backend
from dspark_json.schema import MALFORMED, RESPONSE_COLUMNS, output_schema

__all__ = ["MODES", "check_mode", "parse_responses", "response_schema"]

logger = logging.getLogger("dspark_json")

_SYSTEM = ("_status", "_rescued_data", "_corrupt_record")
#: The record modes, as in Spark's JSON source.
MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")
_SNIPPET = 200


def response_schema(
    schema: str | StructType | pa.Schema | None = None,
    response_format: Mapping[str, Any] | None = None,
) -> StructType:
    """The columns ``parse_responses`` yields: ``schema`` (or the vLLM envelope, with ``parsed``
    typed from ``response_format``) plus ``_status``, ``_rescued_data`` and ``_corrupt_record``."""
    if schema is None:
        full = output_schema(response_format=response_format)
        return StructType([f for f in full.fields if f.name in RESPONSE_COLUMNS])
    if response_format is not None:
        raise OptionError(
            "parse_responses got both schema and response_format; the schema wins in the "
            "source, so pass only one of them."
        )
    struct = _struct_of(schema)
    missing = [StructField(name, StringType()) for name in _SYSTEM if name not in struct.names]
    return StructType([*struct.fields, *missing])


def parse_responses(
    bodies: pa.Array | pa.ChunkedArray | Sequence[str | bytes | None],
    *,
    schema: str | StructType | pa.Schema | None = None,
    response_format: Mapping[str, Any] | None = None,
    backend: Literal["auto", "cpu", "gpu"] = "auto",
    mode: Literal["PERMISSIVE", "DROPMALFORMED", "FAILFAST"] = "PERMISSIVE",
) -> pa.Table:
    """Parse chat completion response bodies into one typed Arrow table, a row per body.

    ``bodies``: a string or binary Arrow array (or a list of str/bytes/None). ``schema``: a Spark
    DDL string, StructType or pyarrow schema of the columns wanted; by default vLLM's envelope with
    ``parsed`` typed from ``response_format`` (a JSON Schema). ``backend``: ``auto`` (the GPU when
    cuDF and a device are there, else the CPU, with a warning), ``cpu`` or ``gpu``. ``mode`` as in
    Spark's JSON source: PERMISSIVE keeps malformed rows (``_corrupt_record``), DROPMALFORMED
    drops them, FAILFAST raises :class:`~dspark_json.RecordError` naming the first one.
    """
    check_mode(mode)
    target = response_schema(schema, response_format)
    chosen = select_backend(backend)
    parser = make_parser(target, chosen)
    started = time.perf_counter()
    table = parser.parse(bodies)
    elapsed = time.perf_counter() - started
    logger.info(
        "parsed %d response bodies on %s in %.3fs (%d row(s) by the reference parser)",
        table.num_rows,
        chosen,
        elapsed,
        parser.reference_rows,
    )
    if mode == "PERMISSIVE":
        return table
    status = table.column("_status").to_pylist()
    malformed = [s in MALFORMED for s in status]
    if mode == "FAILFAST" and any(malformed):
        row = malformed.index(True)
        text = table.column("_corrupt_record")[row].as_py() or ""
        shown = text if len(text) <= _SNIPPET else text[:_SNIPPET] + "..."
        raise RecordError(
            f"mode=FAILFAST: response body {row} is malformed ({status[row]}): {shown!r}. "
            "Use mode=PERMISSIVE to keep such rows with _corrupt_record, or DROPMALFORMED "
            "to drop them."
        )
    return table.filter(pa.array([not m for m in malformed]))


def check_mode(mode: str) -> None:
    """Raise :class:`OptionError` unless ``mode`` is one of :data:`MODES`."""
    if mode not in MODES:
        raise OptionError(f"mode={mode!r} is not a mode; use one of {', '.join(MODES)}.")


def _struct_of(schema: str | StructType | pa.Schema) -> StructType:
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
