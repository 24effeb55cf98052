"""The type of ``parsed`` inferred from sample answers, when nothing states it.

The union of the fields of every sample, in first-seen order; numbers widen int -> double, and any
other mix of kinds (or a field only ever null) becomes string, which holds the JSON text as
Spark's JSON reader does. Only the content is inferred: the envelope (``created``, ``usage``,
``choices``...) is typed from vLLM's documented shape, never guessed.

Nothing here recurses on untrusted depth: a body or content nested more than
:data:`~dspark_json.rows.MAX_NESTING` levels is skipped before it is parsed, and types stop at
:data:`TYPED_NESTING` levels (deeper values are typed string, their JSON text): Spark's own
schema code recurses per level, and no answer needs more.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
)

from dspark_json.response.answers import first_message
from dspark_json.response.content import extract_json
from dspark_json.rows import load_json

__all__ = [
    "TYPED_NESTING",
    "contents_of",
    "infer_type",
    "merge_types",
    "nesting",
    "scalar_type",
    "settle",
]

#: The deepest type inference builds (and ``validateSchema`` checks): deeper values are typed
#: string (their JSON text).
TYPED_NESTING = 64


def contents_of(bodies: Iterable[str | None]) -> list[Any]:
    """The JSON values the model wrote in the first choice's content of each body (by the
    parser's content rule: whole, fenced, or the outer braces); bodies without one, or nested
    more than ``MAX_NESTING`` levels, are skipped."""
    values = []
    for body in bodies:
        message = first_message(body)
        content = message.get("content") if isinstance(message, dict) else None
        found = extract_json(content) if isinstance(content, str) else None
        if found is None:
            continue
        try:
            # As the parser reads content (allowUnquotedControlChars): models and guided
            # decoding write raw control characters inside strings.
            values.append(load_json(found, strict=False))
        except ValueError:
            continue  # a candidate that is not valid JSON tells nothing about the type
    return values


def nesting(value: Any, limit: int = TYPED_NESTING) -> int:
    """How many arrays/objects ``value`` has inside each other, counted without recursion and
    up to ``limit + 1`` (enough to say it is deeper than ``limit``)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            depth += 1
            deepest = max(deepest, depth)
            if depth > limit:
                break
            stack.extend(
                (child, depth) for child in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def infer_type(values: Iterable[Any]) -> DataType:
    """The widest type of ``values`` (nulls ignored; none at all -> string; values nested
    deeper than :data:`TYPED_NESTING` -> string)."""
    merged: DataType = NullType()
    for value in values:
        merged = merge_types(merged, _type_of(value, TYPED_NESTING))
    return settle(merged)


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


def _type_of(value: Any, levels: int) -> DataType:
    """The type of ``value``, with at most ``levels`` levels of structs and arrays (the
    recursion is bounded by it)."""
    if isinstance(value, dict | list) and levels == 0:
        return StringType()
    if isinstance(value, dict):
        return StructType([StructField(str(k), _type_of(v, levels - 1)) for k, v in value.items()])
    if isinstance(value, list):
        element: DataType = NullType()
        for item in value:
            element = merge_types(element, _type_of(item, levels - 1))
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


def settle(dtype: DataType) -> DataType:
    """Null-only fields, elements and map values become string (a column that is always null
    holds JSON text, as Spark's reader types it)."""
    if isinstance(dtype, NullType):
        return StringType()
    if isinstance(dtype, StructType):
        return StructType([StructField(f.name, settle(f.dataType)) for f in dtype.fields])
    if isinstance(dtype, ArrayType):
        return ArrayType(settle(dtype.elementType))
    if isinstance(dtype, MapType):
        return MapType(StringType(), settle(dtype.valueType))
    return dtype
