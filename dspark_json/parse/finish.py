"""Type finishing: the types a reader reads for the target types (timestamps as unix seconds or
text, dates as text), and the read arrays turned into the target types."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DateType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dspark_json.buffers.arrow import string_buffers
from dspark_json.parse.json import scan_dates, scan_timestamps
from dspark_json.response.convert import MISSING, arrow_schema, parse_date, parse_timestamp

__all__ = ["finish", "read_type"]

_TIMESTAMP_US = pa.timestamp("us", tz="UTC")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def read_type(dtype: DataType, *, seconds: bool = False) -> DataType:
    """The type pyarrow reads for ``dtype``: timestamps as unix seconds (``seconds``) or text,
    dates as text; :func:`finish` turns them into the target types."""
    if isinstance(dtype, StructType):
        return StructType(
            [StructField(f.name, read_type(f.dataType, seconds=seconds)) for f in dtype.fields]
        )
    if isinstance(dtype, ArrayType):
        return ArrayType(read_type(dtype.elementType, seconds=seconds))
    if isinstance(dtype, MapType):
        return MapType(dtype.keyType, read_type(dtype.valueType, seconds=seconds))
    if isinstance(dtype, TimestampType):
        return LongType() if seconds else StringType()
    if isinstance(dtype, DateType):
        return StringType()
    return dtype


def _has_conversion(dtype: DataType) -> bool:
    if isinstance(dtype, StructType):
        return any(_has_conversion(f.dataType) for f in dtype.fields)
    if isinstance(dtype, ArrayType):
        return _has_conversion(dtype.elementType)
    # A map's keys must not repeat (Python's dict keeps one): checked on the way.
    return isinstance(dtype, TimestampType | DateType | MapType)


#: Per type (by identity, the type kept alive with its entry): whether it has a conversion,
#: and its target Arrow type. The types come from the plans (:func:`~.plan.plan_of`), which
#: live as long as the process: a batch of a few hundred rows would otherwise spend more on
#: walking them (a pyspark type hashes by its text) than on converting.
_TARGETS: dict[int, tuple[DataType, bool, pa.DataType | None]] = {}


def _target(dtype: DataType) -> tuple[bool, pa.DataType | None]:
    """Whether ``dtype`` has a conversion, and, where it has, its target Arrow type."""
    known = _TARGETS.get(id(dtype))
    if known is None or known[0] is not dtype:
        has = _has_conversion(dtype)
        target = None
        if has:
            target = arrow_schema(StructType([StructField("v", dtype)])).field("v").type
        if len(_TARGETS) > 4096:  # schemas built anew each batch: do not grow without end
            _TARGETS.clear()
        known = _TARGETS[id(dtype)] = (dtype, has, target)
    return known[1], known[2]


def finish(array: pa.Array, dtype: DataType, rows: np.ndarray, bad: set[int]) -> pa.Array:
    """``array`` (as read for ``dtype``) in the target Arrow type. ``rows[i]`` is the row of
    element ``i``; rows with a value that does not convert are added to ``bad``."""
    has, target = _target(dtype)
    if not has:
        return array
    assert target is not None
    if isinstance(dtype, StructType):
        children = [
            finish(array.field(i), f.dataType, rows, bad) for i, f in enumerate(dtype.fields)
        ]
        return pa.StructArray.from_arrays(
            children, fields=list(target), mask=array.is_null() if array.null_count else None
        )
    if isinstance(dtype, ArrayType):
        values = array.flatten()
        parents = pc.list_parent_indices(array).to_numpy()
        converted = finish(values, dtype.elementType, rows[parents], bad)
        lengths = pc.fill_null(pc.list_value_length(array), 0).to_numpy()
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        return pa.ListArray.from_arrays(
            pa.array(offsets),
            converted,
            type=target,
            mask=array.is_null() if array.null_count else None,
        )
    if isinstance(dtype, MapType):
        return _finish_map(array, dtype, target, rows, bad)
    if pa.types.is_integer(array.type):  # unix seconds, range checked by the scan
        return pc.multiply(array, 1_000_000).cast(_TIMESTAMP_US)
    offsets, data, valid = string_buffers(array)
    is_timestamp = isinstance(dtype, TimestampType)
    scan = scan_timestamps if is_timestamp else scan_dates
    values, done = scan(offsets, data, valid)
    missing = ~valid
    for i in np.flatnonzero(valid & ~done):  # other shapes: value by value, as the reference
        text = array[int(i)].as_py()
        value = parse_timestamp(text, dtype) if is_timestamp else parse_date(text, dtype)
        if value is MISSING:
            bad.add(int(rows[i]))
            missing[i] = True
        elif is_timestamp:
            values[i] = (value - _EPOCH) // _MICROSECOND
        else:
            values[i] = (value - _EPOCH.date()).days
    return pa.array(values, mask=missing).cast(target)


def _finish_map(
    array: pa.Array, dtype: MapType, target: pa.DataType, rows: np.ndarray, bad: set[int]
) -> pa.Array:
    """A map read from the events: its values finished, and the rows of a map that repeats a
    key (``{"a": 1, "a": 2}``, or one key spelled two ways) added to ``bad``: Python's dict
    keeps one entry, the last value at the first key's place, which the reference decides."""
    # By its offsets (pyarrow's list kernels do not take a map).
    bounds = array.offsets.to_numpy()
    lengths = np.diff(bounds)
    parents = np.repeat(np.arange(len(array)), lengths)
    keys = array.keys.slice(bounds[0], bounds[-1] - bounds[0])
    if len(keys):
        entries = pa.table({"map": parents, "key": keys})
        counted = entries.group_by(["map", "key"]).aggregate([([], "count_all")])
        repeated = counted.filter(pc.greater(counted.column("count_all"), 1))
        maps = repeated.column("map").to_numpy()
        bad.update(np.unique(rows[maps]).tolist())
    values = array.items.slice(bounds[0], bounds[-1] - bounds[0])
    items = finish(values, dtype.valueType, rows[parents], bad)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.MapArray.from_arrays(
        pa.array(offsets),
        keys,
        items,
        type=target,
        mask=array.is_null() if array.null_count else None,
    )
