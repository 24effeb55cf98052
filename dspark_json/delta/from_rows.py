"""Spark 4.0 hands a Python stream writer Rows (``DataSourceStreamArrowWriter`` is new in 4.1):
turn them back into Arrow batches of the sink's schema.

Spark made each value of a Row from Arrow: a TIMESTAMP became a naive datetime in the worker's
local time zone, BINARY a ``bytearray``, a struct a ``Row``, a map a ``dict``. Each is put back
here, the timestamp as the UTC instant it was.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    MapType,
    StructType,
    TimestampType,
)

__all__ = ["batches_from_rows"]

#: Rows per Arrow batch: bounds the memory of a task's Python lists.
BATCH_ROWS = 4096


def batches_from_rows(
    rows: Iterable[Any], schema: StructType, arrow: pa.Schema, *, size: int = BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """``rows`` (Spark Rows of ``schema``) as record batches of ``arrow``."""
    convert = _converter(schema)
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(convert(row))
        if len(chunk) == size:
            yield pa.RecordBatch.from_pylist(chunk, schema=arrow)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk, schema=arrow)


def _converter(dtype: DataType) -> Callable[[Any], Any]:
    if isinstance(dtype, StructType):
        names = dtype.names
        fields = [_converter(f.dataType) for f in dtype.fields]

        def struct(value: Any) -> Any:
            if value is None:
                return None
            return {n: c(v) for n, c, v in zip(names, fields, value, strict=True)}

        return struct
    if isinstance(dtype, ArrayType):
        element = _converter(dtype.elementType)
        return lambda value: None if value is None else [element(v) for v in value]
    if isinstance(dtype, MapType):
        key, item = _converter(dtype.keyType), _converter(dtype.valueType)
        return lambda value: (
            None if value is None else [(key(k), item(v)) for k, v in value.items()]
        )
    if isinstance(dtype, TimestampType):
        return _instant
    if isinstance(dtype, BinaryType):
        return lambda value: None if value is None else bytes(value)
    return _same


def _instant(value: dt.datetime | None) -> dt.datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.astimezone(dt.UTC)  # a naive datetime is local time


def _same(value: Any) -> Any:
    return value
