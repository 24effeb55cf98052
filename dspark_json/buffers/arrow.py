"""Arrow buffers for the scans: string arrays as numpy buffers (offsets, bytes, validity), and
back: one chunk per column, rows spread with nulls between, bodies shown as text."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

__all__ = [
    "as_type",
    "contiguous",
    "contiguous_table",
    "shown_as_text",
    "string_buffers",
    "to_string_array",
    "with_null_rows",
]


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


def as_type(array: pa.Array, arrow_type: pa.DataType) -> pa.Array:
    """``array`` cast to ``arrow_type``: itself where it is of that type already (a cast to
    its own type still costs a compute call, which adds up over a small batch's columns)."""
    return array if array.type.equals(arrow_type, check_metadata=True) else array.cast(arrow_type)


def contiguous(column: pa.ChunkedArray) -> pa.Array:
    """``column`` as one array: its chunk where it has one (``combine_chunks`` copies even
    that), else its chunks concatenated."""
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
    validity) are copied, where ``take`` copies every nested value."""
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
