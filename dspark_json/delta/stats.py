"""Delta file statistics (``numRecords``, ``minValues``, ``maxValues``, ``nullCount``), gathered
batch by batch while a data file is written, so that readers can skip the file.

A value goes into ``minValues`` / ``maxValues`` only where the bound is exact or on the safe
side: strings longer than :data:`STRING_PREFIX` characters keep a cut minimum and no maximum,
timestamps are rounded outwards to the millisecond Delta writes, a float column holding NaN and
decimals (no exact JSON form) get no bounds. Lists, maps and binary columns get no statistics;
as in Delta, only the first :data:`INDEXED_COLUMNS` leaf columns are indexed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

__all__ = ["INDEXED_COLUMNS", "STRING_PREFIX", "FileStats"]

#: Delta's default ``delta.dataSkippingNumIndexedCols``.
INDEXED_COLUMNS = 32
#: Delta (Spark) cuts string statistics to this many characters.
STRING_PREFIX = 32


@dataclass
class _Leaf:
    """The statistics of one leaf column so far."""

    path: tuple[str, ...]
    bounded: bool  # whether the type gets min / max at all
    nulls: int = 0
    low: Any = None
    high: Any = None
    keep_low: bool = True
    keep_high: bool = True
    seen: bool = False  # a non-null value was met


class FileStats:
    """The statistics of one data file; :meth:`add` each batch written, then :meth:`to_json`."""

    def __init__(self, schema: pa.Schema, *, indexed: int = INDEXED_COLUMNS) -> None:
        self.rows = 0
        self._leaves: list[_Leaf] = []
        for path, dtype in _leaf_types(schema):
            if len(self._leaves) == indexed:
                break
            if _counted(dtype):
                self._leaves.append(_Leaf(path, _bounded(dtype)))
            else:
                self._leaves.append(_Leaf(path, bounded=False, nulls=-1))  # no statistics

    def add(self, batch: pa.RecordBatch) -> None:
        """Count ``batch`` (whose schema is the one given) into the statistics."""
        self.rows += batch.num_rows
        if batch.num_rows == 0:
            return
        for leaf, array in zip(self._leaves, _leaf_arrays(batch), strict=False):
            if leaf.nulls < 0:
                continue
            leaf.nulls += array.null_count
            if leaf.bounded and array.null_count < len(array):
                _widen(leaf, array)

    def to_json(self) -> str:
        """The ``stats`` string of the file's Delta ``add`` action."""
        low: dict[str, Any] = {}
        high: dict[str, Any] = {}
        nulls: dict[str, Any] = {}
        for leaf in self._leaves:
            if leaf.nulls < 0:
                continue
            _put(nulls, leaf.path, leaf.nulls)
            if leaf.seen and leaf.keep_low:
                _put(low, leaf.path, _json_value(leaf.low, ceiling=False))
            if leaf.seen and leaf.keep_high:
                # The last millisecond of year 9999 has no ceiling: no maximum then.
                with contextlib.suppress(OverflowError):
                    _put(high, leaf.path, _json_value(leaf.high, ceiling=True))
        stats = {"numRecords": self.rows, "minValues": low, "maxValues": high, "nullCount": nulls}
        return json.dumps(stats, separators=(",", ":"))


def _leaf_types(schema: pa.Schema) -> Iterator[tuple[tuple[str, ...], pa.DataType]]:
    def walk(prefix: tuple[str, ...], dtype: pa.DataType) -> Iterator[tuple[tuple[str, ...], Any]]:
        if pa.types.is_struct(dtype):
            for i in range(dtype.num_fields):
                child = dtype.field(i)
                yield from walk((*prefix, child.name), child.type)
        else:
            yield prefix, dtype

    for f in schema:
        yield from walk((f.name,), f.type)


def _leaf_arrays(batch: pa.RecordBatch) -> Iterator[pa.Array]:
    """The leaf columns of ``batch`` in :func:`_leaf_types` order; a struct's null rows count
    as nulls of its fields (``StructArray.flatten``)."""

    def walk(array: pa.Array) -> Iterator[pa.Array]:
        if pa.types.is_struct(array.type):
            for child in array.flatten():
                yield from walk(child)
        else:
            yield array

    for column in batch.columns:
        yield from walk(column)


def _counted(dtype: pa.DataType) -> bool:
    nested = pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_map(dtype)
    binary = pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype)
    return not (nested or binary or pa.types.is_fixed_size_list(dtype))


def _bounded(dtype: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(dtype)
        or pa.types.is_floating(dtype)
        or pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_date32(dtype)
        or pa.types.is_timestamp(dtype)
    )


def _widen(leaf: _Leaf, array: pa.Array) -> None:
    import pyarrow.compute as pc  # here: the sink's commit imports this module, runs no stats

    if pa.types.is_floating(array.type) and pc.any(pc.is_nan(array)).as_py():
        leaf.keep_low = leaf.keep_high = False
        return
    bounds = pc.min_max(array)
    try:
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
    except (ValueError, OverflowError):  # a timestamp outside Python's datetime range
        leaf.keep_low = leaf.keep_high = False
        return
    if isinstance(low, float) and not (math.isfinite(low) and math.isfinite(high)):
        leaf.keep_low = leaf.keep_high = False  # JSON has no infinity
        return
    if isinstance(high, str) and len(high) > STRING_PREFIX:
        leaf.keep_high = False  # a cut maximum would be below the value
    if not leaf.seen:
        leaf.low, leaf.high, leaf.seen = low, high, True
    else:
        leaf.low, leaf.high = min(leaf.low, low), max(leaf.high, high)


def _json_value(value: Any, *, ceiling: bool) -> Any:
    if isinstance(value, str):
        return value[:STRING_PREFIX]
    if isinstance(value, dt.datetime):
        return _timestamp(value, ceiling=ceiling)
    if isinstance(value, dt.date):
        return value.isoformat()
    return value


def _timestamp(value: dt.datetime, *, ceiling: bool) -> str:
    """Delta writes milliseconds: round the minimum down and the maximum up."""
    if value.tzinfo is not None:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    cut = value.replace(microsecond=value.microsecond // 1000 * 1000)
    if ceiling and cut != value:
        cut += dt.timedelta(milliseconds=1)
    return cut.strftime("%Y-%m-%dT%H:%M:%S.") + f"{cut.microsecond // 1000:03d}Z"


def _put(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        tree = tree.setdefault(name, {})
    tree[path[-1]] = value
