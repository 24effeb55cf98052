"""Fit JSON values to Spark types, rescuing what does not fit.

The semantics both backends must reproduce:

- a key the schema does not know, with a non-null value, is rescued under its column path
  (``metadata``, ``parsed.confidence``, ``choices[1].message.audio``);
- a value whose type does not fit its column is rescued the same way and the column is null;
- a string column takes any JSON value: non-strings as their JSON text, as Spark's JSON reader does;
- integers must be whole JSON numbers within range; doubles take any JSON number;
- timestamps take unix seconds or ISO-8601 text (UTC where no zone is given); dates ISO-8601 text.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
)

from dspark_json.compat import to_arrow_schema
from dspark_json.errors import SchemaError

__all__ = [
    "MISSING",
    "Converter",
    "arrow_schema",
    "check_supported",
    "dump_json",
    "is_tuple",
    "parse_date",
    "parse_timestamp",
    "text_value",
    "tuple_field",
]

#: What a scalar conversion returns for a value that does not fit (``None`` is a valid value).
MISSING = object()
_RANGES: dict[type[DataType], tuple[int, int]] = {
    LongType: (-(2**63), 2**63 - 1),
    IntegerType: (-(2**31), 2**31 - 1),
}


def tuple_field(position: int) -> str:
    """The name of a tuple struct's field for the item at ``position`` (from 0): ``_1``...
    (``prefixItems`` items by position, as Spark names a Scala tuple's)."""
    return f"_{position + 1}"


def is_tuple(dtype: StructType) -> bool:
    """Whether ``dtype`` is a tuple struct (fields ``_1``, ``_2``..., as JSON Schema's
    ``prefixItems`` maps): it takes a JSON array, item by position, as well as an object."""
    return bool(dtype.fields) and all(f.name == tuple_field(i) for i, f in enumerate(dtype.fields))


def dump_json(value: Any) -> str:
    """Compact JSON text, unicode kept as is."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects a reader to yield for ``schema`` (remembered: pyspark's
    conversion costs more than a small batch's parse)."""
    return _arrow_schema(schema)


@functools.lru_cache(maxsize=512)
def _arrow_schema(schema: StructType) -> pa.Schema:  # keyed by the schema's value (its text)
    return to_arrow_schema(schema)


def check_supported(dtype: DataType, where: str = "schema") -> None:
    """Raise :class:`SchemaError` for a type the parser cannot produce."""
    if isinstance(dtype, StructType):
        for f in dtype.fields:
            check_supported(f.dataType, f"{where}.{f.name}" if where != "schema" else f.name)
    elif isinstance(dtype, ArrayType):
        check_supported(dtype.elementType, f"{where}[]")
    elif isinstance(dtype, MapType):
        if not isinstance(dtype.keyType, StringType):
            raise SchemaError(
                f"Column {where} is a map with {dtype.keyType.simpleString()} keys; "
                "JSON object keys are strings, so use map<string, ...>."
            )
        check_supported(dtype.valueType, f"{where}{{}}")
    elif not isinstance(dtype, tuple(_SCALARS)):
        allowed = "struct, array, map, string, bigint, int, double, float, boolean, timestamp, date"
        raise SchemaError(
            f"Column {where} has type {dtype.simpleString()}, which dspark-json "
            f"cannot fill from JSON. Use one of: {allowed}."
        )


class Converter:
    """Turns rows of JSON values (dicts) into Arrow tables of one Spark schema."""

    def __init__(self, schema: StructType, *, not_rescued: Sequence[str] = ()) -> None:
        check_supported(schema)
        self.schema = schema
        self.arrow = arrow_schema(schema)
        self._not_rescued = tuple(not_rescued)

    def table(self, rows: Sequence[Mapping[str, Any]]) -> tuple[pa.Table, list[dict[str, Any]]]:
        """The typed table, and per row the values rescued (column path -> value)."""
        typed, rescued = [], []
        for row in rows:
            sink: dict[str, Any] = {}
            typed.append(self._struct(row, self.schema, "", sink))
            for key in [k for k in sink if self._skipped(k)]:
                del sink[key]
            rescued.append(sink)
        return pa.Table.from_pylist(typed, schema=self.arrow), rescued

    def extras(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """What :meth:`table` rescues from a row whose values all fit: its unknown keys, in the
        same order, without converting anything (for rows a vectorised reader has typed)."""
        sink: dict[str, Any] = {}
        _extras(row, self.schema, "", sink)
        for key in [k for k in sink if self._skipped(k)]:
            del sink[key]
        return sink

    def _skipped(self, key: str) -> bool:
        """Whether a rescued ``key`` lies at or under a path not rescued: the path itself, a
        key inside it or an item of it, not a sibling that begins with the same letters (a
        message's ``parsed_note`` is rescued beside ``parsed``)."""
        return any(
            key == path or key.startswith((path + ".", path + "[")) for path in self._not_rescued
        )

    def value(self, value: Any, dtype: DataType, path: str, sink: dict[str, Any]) -> Any:
        if value is None:
            return None
        if isinstance(dtype, StructType):
            if isinstance(value, dict):
                return self._struct(value, dtype, path + ".", sink)
            if isinstance(value, list) and is_tuple(dtype):
                return self._tuple(value, dtype, path, sink)
        elif isinstance(dtype, ArrayType):
            if isinstance(value, list):
                elem = dtype.elementType
                return [self.value(v, elem, f"{path}[{i}]", sink) for i, v in enumerate(value)]
        elif isinstance(dtype, MapType):
            if isinstance(value, dict):
                vt = dtype.valueType
                return [(k, self.value(v, vt, f"{path}.{k}", sink)) for k, v in value.items()]
        else:
            out = _SCALARS[type(dtype)](value, dtype)
            if out is not MISSING:
                return out
        sink[path] = value
        return None

    def _struct(
        self, obj: Mapping[str, Any], dtype: StructType, prefix: str, sink: dict[str, Any]
    ) -> dict[str, Any]:
        out = {}
        for f in dtype.fields:
            out[f.name] = self.value(obj.get(f.name), f.dataType, prefix + f.name, sink)
        for key, value in obj.items():
            if value is not None and key not in dtype.names:
                sink[prefix + key] = value
        return out

    def _tuple(
        self, items: list[Any], dtype: StructType, path: str, sink: dict[str, Any]
    ) -> dict[str, Any]:
        # A JSON array in a tuple struct: items by position, those past the fields rescued.
        out = {}
        for i, f in enumerate(dtype.fields):
            item = items[i] if i < len(items) else None
            out[f.name] = self.value(item, f.dataType, f"{path}[{i}]", sink)
        for i in range(len(dtype.fields), len(items)):
            if items[i] is not None:
                sink[f"{path}[{i}]"] = items[i]
        return out


def _extras(obj: Mapping[str, Any], dtype: StructType, prefix: str, sink: dict[str, Any]) -> None:
    # Only unknown keys are rescued here, so known scalar fields need no visit: the nested ones
    # are walked in schema order, then the unknown keys, which is the order ``table`` keeps.
    names, nested = _shape(dtype)
    for name, inner in nested:
        _extras_in(obj.get(name), inner, prefix + name, sink)
    if not obj.keys() <= names:
        for key, value in obj.items():
            if value is not None and key not in names:
                sink[prefix + key] = value


def _extras_in(value: Any, dtype: DataType, path: str, sink: dict[str, Any]) -> None:
    if isinstance(dtype, StructType):
        if isinstance(value, dict):
            _extras(value, dtype, path + ".", sink)
        elif isinstance(value, list) and is_tuple(dtype):
            _tuple_extras(value, dtype, path, sink)
    elif isinstance(dtype, ArrayType) and isinstance(value, list):
        element = dtype.elementType
        if isinstance(element, StructType):
            names, nested = _shape(element)
            for i, item in enumerate(value):
                if isinstance(item, dict) and (nested or not item.keys() <= names):
                    _extras(item, element, f"{path}[{i}].", sink)
                elif isinstance(item, list) and is_tuple(element):
                    _tuple_extras(item, element, f"{path}[{i}]", sink)
        elif isinstance(element, ArrayType):
            for i, item in enumerate(value):
                _extras_in(item, element, f"{path}[{i}]", sink)


def _tuple_extras(items: list[Any], dtype: StructType, path: str, sink: dict[str, Any]) -> None:
    # A JSON array in a tuple struct, in Converter._tuple's order: what its items hold, by
    # position, then the items past its fields.
    for i, f in enumerate(dtype.fields[: len(items)]):
        if _holds_struct(f.dataType):
            _extras_in(items[i], f.dataType, f"{path}[{i}]", sink)
    for i in range(len(dtype.fields), len(items)):
        if items[i] is not None:
            sink[f"{path}[{i}]"] = items[i]


def _holds_struct(dtype: DataType) -> bool:
    while isinstance(dtype, ArrayType):
        dtype = dtype.elementType
    return isinstance(dtype, StructType)


_SHAPES: dict[int, tuple[StructType, frozenset[str], tuple[tuple[str, DataType], ...]]] = {}


def _shape(dtype: StructType) -> tuple[frozenset[str], tuple[tuple[str, DataType], ...]]:
    """A struct's field names, and its fields that can hold unknown keys (structs, arrays of
    structs)."""
    cached = _SHAPES.get(id(dtype))
    if cached is None or cached[0] is not dtype:
        nested = tuple((f.name, f.dataType) for f in dtype.fields if _holds_struct(f.dataType))
        cached = (dtype, frozenset(dtype.names), nested)
        _SHAPES[id(dtype)] = cached
    return cached[1], cached[2]


def text_value(value: Any) -> str:
    """What a string column holds of a JSON value: a string itself, anything else its JSON
    text (a number beyond a double's range, kept as its text by the reader, as that text)."""
    return value if isinstance(value, str) else dump_json(value)


def _string(value: Any, _: DataType) -> Any:
    return text_value(value)


def _integral(value: Any, dtype: DataType) -> Any:
    low, high = _RANGES[type(dtype)]
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    return MISSING


def _floating(value: Any, _: DataType) -> Any:
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            as_float = float(value)
        except OverflowError:  # an integer beyond a double's range
            return MISSING
        return as_float if math.isfinite(as_float) else MISSING
    return MISSING


def _boolean(value: Any, _: DataType) -> Any:
    return value if isinstance(value, bool) else MISSING


def parse_timestamp(value: Any, _: DataType) -> Any:
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return datetime.fromtimestamp(value, UTC)
        if isinstance(value, str):
            parsed = datetime.fromisoformat(value)
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    except (ValueError, OverflowError, OSError):
        pass
    return MISSING


def parse_date(value: Any, _: DataType) -> Any:
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
    return MISSING


_SCALARS: dict[type[DataType], Callable[[Any, DataType], Any]] = {
    StringType: _string,
    LongType: _integral,
    IntegerType: _integral,
    DoubleType: _floating,
    FloatType: _floating,
    BooleanType: _boolean,
    TimestampType: parse_timestamp,
    DateType: parse_date,
}
