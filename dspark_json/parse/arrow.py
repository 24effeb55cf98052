"""Arrow plumbing for the vectorised parser: string buffers as numpy, JSON lines through pyarrow's
reader in parallel chunks, read types turned into the target types, and how the work runs (row
ranges on threads)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from functools import partial
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DateType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dspark_json.parse.convert import MISSING, arrow_schema, parse_date, parse_timestamp
from dspark_json.parse.kernels import gather_lines, line_lengths
from dspark_json.parse.times import scan_dates, scan_timestamps

__all__ = [
    "JsonLines",
    "by_row_ranges",
    "contiguous",
    "contiguous_table",
    "finish",
    "on_threads",
    "read_type",
    "row_ranges",
    "shown_as_text",
    "string_buffers",
    "to_string_array",
    "with_null_rows",
]

logger = logging.getLogger("dspark_json")

_TIMESTAMP_US = pa.timestamp("us", tz="UTC")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_string_array(bodies: pa.Array | pa.ChunkedArray | Sequence[str | bytes | None]) -> pa.Array:
    """One (large_)string array of the bodies. Bytes are not decoded here: the scans check UTF-8."""
    if isinstance(bodies, pa.ChunkedArray):
        bodies = bodies.combine_chunks()
    if isinstance(bodies, pa.Array):
        if pa.types.is_binary(bodies.type):
            return bodies.view(pa.string())
        if pa.types.is_large_binary(bodies.type):
            return bodies.view(pa.large_string())
        if pa.types.is_string(bodies.type) or pa.types.is_large_string(bodies.type):
            return bodies
        raise TypeError(f"bodies must be a string or binary array, not {bodies.type}")
    items = list(bodies)
    if any(isinstance(b, bytes) for b in items):
        binary = pa.array(
            [b.encode("utf-8", "surrogatepass") if isinstance(b, str) else b for b in items],
            pa.large_binary(),
        )
        return binary.view(pa.large_string())
    try:
        return pa.array(items, pa.large_string())
    except UnicodeEncodeError:  # lone surrogates in a str: keep them as bytes the scans reject
        raw = [b.encode("utf-8", "surrogatepass") if b is not None else None for b in items]
        return pa.array(raw, pa.large_binary()).view(pa.large_string())


def contiguous(column: pa.ChunkedArray) -> pa.Array:
    """``column`` as one array: its chunk where it has one (``combine_chunks`` copies even
    that: 12 ms for the output of 50,000 vLLM answers), else its chunks concatenated."""
    if column.num_chunks == 1:
        return column.chunk(0)
    return column.combine_chunks()


def contiguous_table(table: pa.Table) -> pa.Table:
    """``table`` with one chunk per column, copying only the columns that have several."""
    if all(c.num_chunks == 1 for c in table.columns):
        return table
    return pa.Table.from_arrays([contiguous(c) for c in table.columns], schema=table.schema)


def shown_as_text(array: pa.Array) -> pa.Array:
    """``array`` (text or bytes) as one large_string array, invalid UTF-8 shown as U+FFFD: how
    ``_corrupt_record`` and a recorded answer show a body."""
    text = to_string_array(array).cast(pa.large_string())
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:
        binary = text.view(pa.large_binary()).to_pylist()
        shown = [None if b is None else b.decode("utf-8", "replace") for b in binary]
        return pa.array(shown, pa.large_string())
    return text


def string_buffers(array: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(offsets as int64, data as uint8, validity as bool)`` of a (large_)string array."""
    n = len(array)
    width = np.int64 if pa.types.is_large_string(array.type) else np.int32
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], width)[array.offset : array.offset + n + 1].astype(np.int64)
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(1, np.uint8)
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    return offsets, data, valid


def with_null_rows(array: pa.Array, present: np.ndarray) -> pa.Array:
    """``array``'s rows, in order, at the rows where ``present`` (bools, as many true as
    ``array`` has rows) is true, and null rows elsewhere: ``array.take`` of those indices with
    nulls, without copying what lists and strings hold. A list's or a string's offsets are
    repeated over the new rows and its values kept as they are; only fixed-width values (and
    validity) are copied: 1 ms where ``take`` copied every nested value (19 ms for the
    ``parsed`` of 50,000 vLLM answers)."""
    n = len(present)
    starts = np.cumsum(present) - present  # per row, the array's rows before it
    source = np.where(present, starts, -1)
    return _with_null_rows(array, present, starts, source, n)


def _with_null_rows(
    array: pa.Array, present: np.ndarray, starts: np.ndarray, source: np.ndarray, n: int
) -> pa.Array:
    dtype = array.type
    valid = present.copy()
    if array.null_count:
        valid[present] = array.is_valid().to_numpy(zero_copy_only=False)
    mask = pa.array(~valid)
    if pa.types.is_struct(dtype):
        children = [
            _with_null_rows(array.field(i), present, starts, source, n)
            for i in range(dtype.num_fields)
        ]
        return pa.StructArray.from_arrays(children, fields=list(dtype), mask=mask)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        offsets = array.offsets.to_numpy()
        spread = np.append(offsets[starts], offsets[-1])
        return type(array).from_arrays(pa.array(spread), array.values, type=dtype, mask=mask)
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        width = np.int64 if pa.types.is_large_string(dtype) else np.int32
        buffers = array.buffers()
        offsets = np.frombuffer(buffers[1], width)[array.offset : array.offset + len(array) + 1]
        spread = np.append(offsets[starts], offsets[-1])
        validity = pa.array(valid).buffers()[1]
        return pa.Array.from_buffers(
            dtype, n, [validity, pa.py_buffer(spread), buffers[2]], null_count=int(n - valid.sum())
        )
    return array.take(pa.array(source, mask=source < 0))


def row_ranges(n: int, threads: int) -> list[tuple[int, int]]:
    """``n`` rows cut in up to ``threads`` ranges of at least 4,096 rows (one range below)."""
    parts = max(1, min(threads, n // 4096))
    bounds = np.linspace(0, n, parts + 1).astype(np.int64).tolist()
    return list(pairwise(bounds))


def on_threads(threads: int, jobs: Sequence[Callable[[], Any]]) -> list[Any]:
    """The results of ``jobs``, run on up to ``threads`` threads (the numba kernels and pyarrow's
    reader release the GIL), in order."""
    if threads <= 1 or len(jobs) <= 1:
        return [job() for job in jobs]
    with ThreadPoolExecutor(min(threads, len(jobs))) as pool:
        return list(pool.map(lambda job: job(), jobs))


def by_row_ranges(
    scan: Callable[..., Any], n: int, threads: int, *args: Any, apart: int | None = None
) -> Any:
    """``scan(*args, lo, hi)`` over ``n`` rows, split in ranges run on ``threads`` threads;
    results (an array or a tuple of arrays) concatenated, but for the tuple's item ``apart``: a
    list of each range's array (to spare a large copy)."""
    jobs = [partial(scan, *args, lo, hi) for lo, hi in row_ranges(n, threads)]
    results = on_threads(threads, jobs)
    if isinstance(results[0], tuple):
        return tuple(
            list(column) if i == apart else np.concatenate(column)
            for i, column in enumerate(zip(*results, strict=True))
        )
    return np.concatenate(results)


class JsonLines:
    """Reads JSON lines with pyarrow in chunks of about ``chunk_bytes``, on ``threads`` threads.

    pyarrow stops a whole read at the first line it rejects; the scans before it make that rare,
    and when it happens only that chunk's rows are given back as failed (for the reference
    parser), never the batch.
    """

    def __init__(self, chunk_bytes: int = 4 << 20, threads: int = 2) -> None:
        self.chunk_bytes = chunk_bytes
        self.threads = threads

    def read(
        self,
        data: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        take: np.ndarray,
        schema: pa.Schema,
        *,
        prefix: bytes = b"",
        suffix: bytes = b"",
    ) -> tuple[pa.Table, np.ndarray]:
        """Parse ``prefix + data[starts[i]:ends[i]] + suffix`` for each row ``i`` where
        ``take[i]`` (a row of nulls elsewhere). Returns one table row per row, and a mask of
        the rows that were read (False for rows of a chunk pyarrow rejected; those are null)."""
        n = len(starts)
        ok = np.ones(n, np.bool_)
        if n == 0:
            return schema.empty_table(), ok
        lengths = line_lengths(starts, ends, take, len(prefix) + len(suffix))
        line_offsets = np.concatenate([[0], np.cumsum(lengths)])
        bounds = [0]
        while bounds[-1] < n:
            target = line_offsets[bounds[-1]] + self.chunk_bytes
            nxt = int(np.searchsorted(line_offsets, target, side="right")) - 1
            bounds.append(min(max(nxt, bounds[-1] + 1), n))
        spans = list(pairwise(bounds))
        head = np.frombuffer(prefix or b"\0", np.uint8)[: len(prefix)]
        tail = np.frombuffer(suffix or b"\0", np.uint8)[: len(suffix)]

        def one(span: tuple[int, int]) -> pa.Table | None:
            lo, hi = span
            chunk = np.empty(line_offsets[hi] - line_offsets[lo], np.uint8)
            gather_lines(data, starts[lo:hi], ends[lo:hi], take[lo:hi], head, tail, chunk)
            table = self.read_chunk(chunk, schema)
            return table if table is not None and table.num_rows == hi - lo else None

        tables = on_threads(self.threads, [partial(one, span) for span in spans])
        read = []
        for (lo, hi), table in zip(spans, tables, strict=True):
            if table is None:
                ok[lo:hi] = False
                nulls = [pa.nulls(hi - lo, f.type) for f in schema]
                read.append(pa.table(nulls, schema=schema))
            else:
                read.append(table.select(schema.names).cast(schema))
        return pa.concat_tables(read).combine_chunks(), ok

    def read_chunk(self, chunk: np.ndarray, schema: pa.Schema) -> pa.Table | None:
        """One chunk of JSON lines as a table of ``schema`` (unknown keys ignored), or None
        where the reader rejects it."""
        try:
            return pj.read_json(
                pa.BufferReader(pa.py_buffer(chunk)),
                read_options=pj.ReadOptions(use_threads=False, block_size=len(chunk) + 1),
                parse_options=pj.ParseOptions(
                    explicit_schema=schema, unexpected_field_behavior="ignore"
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            logger.debug("pyarrow rejected a chunk of JSON lines: %s", exc)
            return None


def read_type(dtype: DataType, *, seconds: bool = False) -> DataType:
    """The type pyarrow reads for ``dtype``: timestamps as unix seconds (``seconds``) or text,
    dates as text; :func:`finish` turns them into the target types."""
    if isinstance(dtype, StructType):
        return StructType(
            [StructField(f.name, read_type(f.dataType, seconds=seconds)) for f in dtype.fields]
        )
    if isinstance(dtype, ArrayType):
        return ArrayType(read_type(dtype.elementType, seconds=seconds))
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
    return isinstance(dtype, TimestampType | DateType)


def finish(array: pa.Array, dtype: DataType, rows: np.ndarray, bad: set[int]) -> pa.Array:
    """``array`` (as read for ``dtype``) in the target Arrow type. ``rows[i]`` is the row of
    element ``i``; rows with a value that does not convert are added to ``bad``."""
    if not _has_conversion(dtype):
        return array
    target = arrow_schema(StructType([StructField("v", dtype)])).field("v").type
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
