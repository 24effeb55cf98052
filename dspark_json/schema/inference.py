"""The type of ``parsed`` inferred from sample answers, when nothing states it.

The union of the fields of every sample, in first-seen order; numbers widen int -> double, and any
other mix of kinds (or a field only ever null) becomes string, which holds the JSON text as
Spark's JSON reader does. Only the content is inferred: the envelope (``created``, ``usage``,
``choices``...) is typed from vLLM's documented shape, never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    NullType,
    StringType,
    StructField,
    StructType,
)

from dspark_json.parse.content import extract_json

__all__ = ["contents_of", "infer_type", "merge_types", "scalar_type"]


def contents_of(bodies: Iterable[str | None]) -> list[Any]:
    """The JSON values the model wrote in the first choice's content of each body (by the
    parser's content rule: whole, fenced, or the outer braces); bodies without one are skipped."""
    values = []
    for body in bodies:
        try:
            content = json.loads(body or "")["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            continue
        found = extract_json(content) if isinstance(content, str) else None
        if found is None:
            continue
        try:
            values.append(json.loads(found))
        except ValueError:
            continue  # a candidate that is not valid JSON tells nothing about the type
    return values


def infer_type(values: Iterable[Any]) -> DataType:
    """The widest type of ``values`` (nulls ignored; none at all -> string)."""
    merged: DataType = NullType()
    for value in values:
        merged = merge_types(merged, _type_of(value))
    return _settle(merged)


def scalar_type(value: Any) -> DataType:
    """The Spark type of one JSON value read flat: null, boolean, bigint, double, else string
    (nested values as their JSON text). The one value -> type rule; :func:`infer_type` adds
    structs and arrays on top of it."""
    if value is None:
        return NullType()
    if isinstance(value, bool):
        return BooleanType()
    if isinstance(value, int):
        return LongType()
    if isinstance(value, float):
        return DoubleType()
    return StringType()


def _type_of(value: Any) -> DataType:
    if isinstance(value, dict):
        return StructType([StructField(str(k), _type_of(v)) for k, v in value.items()])
    if isinstance(value, list):
        element: DataType = NullType()
        for item in value:
            element = merge_types(element, _type_of(item))
        return ArrayType(element)
    return scalar_type(value)


def merge_types(a: DataType, b: DataType) -> DataType:
    """The narrowest type holding both: NullType gives way, int + double -> double, structs
    merge field by field, arrays by element; any other mix -> string."""
    if isinstance(a, NullType):
        return b
    if isinstance(b, NullType) or a == b:
        return a
    if {type(a), type(b)} == {LongType, DoubleType}:
        return DoubleType()
    if isinstance(a, StructType) and isinstance(b, StructType):
        fields = {f.name: f.dataType for f in a.fields}
        for f in b.fields:
            fields[f.name] = (
                merge_types(fields[f.name], f.dataType) if f.name in fields else f.dataType
            )
        return StructType([StructField(name, dtype) for name, dtype in fields.items()])
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        return ArrayType(merge_types(a.elementType, b.elementType))
    return StringType()


def _settle(dtype: DataType) -> DataType:
    """Null-only fields and elements become string."""
    if isinstance(dtype, NullType):
        return StringType()
    if isinstance(dtype, StructType):
        return StructType([StructField(f.name, _settle(f.dataType)) for f in dtype.fields])
    if isinstance(dtype, ArrayType):
        return ArrayType(_settle(dtype.elementType))
    return dtype
