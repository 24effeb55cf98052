"""Doubles on the GPU backend: cuDF reads each double column as text (a ``str`` dtype: the
number's own bytes, as spark-rapids reads them for the same reason), and a ``numba.cuda``
kernel, a thread per value, converts the text to float64 with the CPU's own definition,
:func:`~dspark_json.parse.json.decode._double_of` (Clinger's exact fast path: at most 15
significant digits, a decimal exponent within +-22), compiled for the device by
:class:`~.targets.Target` as the fit check's rules are. The few numbers outside that path go
to Python's ``float`` on the host, exactly as the CPU's reader of events does
(``decode._Columns``), so every double is the one the reference parser reads, and no row goes
to the reference parser for a fraction or an exponent.

Text that is not a JSON number (should cuDF's ``str`` dtype give a null as ``null``, or keep a
value's quotes: unverified, benchmarks/gpu/cudf_numbers.py checks it) is never converted: the
kernel checks each value with the CPU's own ``scan_number`` and :meth:`DeviceDoubles.convert`
raises :class:`NotANumber`, which the reader makes a rejected batch (the reference parser's).

Why not cuDF's own float64 read: its ``parse_numeric`` adds each fraction digit times a power
of ten (``0.3`` is ``3 * 0.1 = 0.30000000000000004``), not the correctly rounded double
(``cpp/src/io/utilities/parsing_utils.cuh``, read for this; benchmarks/gpu/cudf_numbers.py
measures it on a device).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from dspark_json.parse.gpu.kernels import LINE_BLOCK, LINE_THREADS, doubles_kernel, simulated
from dspark_json.parse.gpu.targets import portable
from dspark_json.parse.json.decode import _POW10, _double_of
from dspark_json.parse.json.grammar import scan_number

__all__ = ["DeviceDoubles", "NotANumber", "double_row", "text_schema"]

#: How :func:`double_row` left value ``i`` (``how[i]``): converted by the device's fast path,
#: left to the host's ``float``, or not a JSON number's text.
DEVICE, HOST, NOT_A_NUMBER = 0, 1, 2


class NotANumber(ValueError):
    """A double column's text is not a JSON number (cuDF's ``str`` dtype gave other text)."""


def text_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every floating-point column (at any depth) read as text."""
    return pa.schema([f.with_type(_as_text(f.type)) for f in schema])


def _as_text(arrow_type: pa.DataType) -> pa.DataType:
    if pa.types.is_floating(arrow_type):
        return pa.string()
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        item = arrow_type.value_field.with_type(_as_text(arrow_type.value_type))
        return pa.large_list(item) if pa.types.is_large_list(arrow_type) else pa.list_(item)
    if pa.types.is_struct(arrow_type):
        return pa.struct([f.with_type(_as_text(f.type)) for f in arrow_type])
    return arrow_type


@portable
def _is_space(c: int) -> bool:
    """JSON's whitespace: space, tab, LF, CR."""
    return c == 32 or c == 9 or c == 10 or c == 13


@portable
def double_row(data: Any, offsets: Any, i: int, pow10: Any, values: Any, how: Any) -> None:
    """Value ``i`` of a string column (``data[offsets[i]:offsets[i + 1]]``, a JSON number, or
    empty for a null) as a double in ``values[i]``, and in ``how[i]`` whether the fast path
    gave it (:data:`DEVICE`), the host's ``float`` must (:data:`HOST`), or the text is no JSON
    number (:data:`NOT_A_NUMBER`). Whitespace around the number is skipped, should cuDF's text
    keep any (unverified; ``float`` skips it too)."""
    start, end = offsets[i], offsets[i + 1]
    while start < end and _is_space(data[start]):
        start += 1
    while end > start and _is_space(data[end - 1]):
        end -= 1
    values[i] = 0.0
    if start == end:
        how[i] = DEVICE
    elif scan_number(data, start, end) != end:
        how[i] = NOT_A_NUMBER
    else:
        ok, value = _double_of(data, start, end, pow10)
        values[i] = value
        how[i] = DEVICE if ok else HOST


class DeviceDoubles:
    """Converts the text columns :func:`text_schema` made back to their floating-point types,
    on the device. ``threads``: threads per launch."""

    def __init__(self, *, threads: int | None = None) -> None:
        self.simulated = simulated()
        # The simulator runs a Python thread per device thread: a few are enough.
        self.threads = threads or (4 if self.simulated else LINE_THREADS)
        #: Values the fast path did not cover (converted by ``float``), since made or zeroed.
        self.host_values = 0
        self._pow10: Any = None

    def table(self, table: pa.Table, schema: pa.Schema) -> pa.Table:
        """``table`` (read with :func:`text_schema` of ``schema``) with its text columns
        converted to the floating-point types of ``schema``."""
        columns = [self._column(table.column(f.name).combine_chunks(), f.type) for f in schema]
        return pa.Table.from_arrays(columns, schema=schema)

    def _column(self, array: pa.Array, arrow_type: pa.DataType) -> pa.Array:
        """``array`` (text where ``arrow_type`` is floating, at any depth) as ``arrow_type``."""
        if pa.types.is_floating(arrow_type):
            return self.convert(array).cast(arrow_type)
        if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
            if not _has_floating(arrow_type):
                return array
            values = self._column(array.values, arrow_type.value_type)
            offsets = array.offsets
            mask = array.is_null() if array.null_count else None
            return type(array).from_arrays(offsets, values, type=arrow_type, mask=mask)
        if pa.types.is_struct(arrow_type):
            if not _has_floating(arrow_type):
                return array
            children = [self._column(array.field(k), f.type) for k, f in enumerate(arrow_type)]
            mask = array.is_null() if array.null_count else None
            return pa.StructArray.from_arrays(children, fields=list(arrow_type), mask=mask)
        return array

    def convert(self, texts: pa.Array) -> pa.Array:
        """A string array of JSON numbers (nulls allowed) as float64, each the double Python's
        ``float`` reads: the fast path on the device, the rest with ``float`` on the host.
        Raises :class:`NotANumber` where a value's text is not a JSON number."""
        from numba import cuda

        from dspark_json.parse.gpu.fit import device_target

        n = len(texts)
        if n == 0:
            return pa.array([], pa.float64())
        large = texts.cast(pa.large_string())
        _, offsets_buffer, data_buffer = large.buffers()
        offsets = np.frombuffer(offsets_buffer, np.int64)[large.offset : large.offset + n + 1]
        data = np.zeros(1, np.uint8)  # a device array is never empty
        if data_buffer is not None and data_buffer.size:
            data = np.frombuffer(data_buffer, np.uint8)
        text = data
        if self.simulated:
            # As for the fit kernel (fit.py _to_device): NumPy's uint8 arithmetic wraps in the
            # simulator where the device widens a byte first.
            data = data.astype(np.int64)
        if self._pow10 is None:
            self._pow10 = cuda.to_device(_POW10)
        values = cuda.device_array(n, np.float64)
        how = cuda.device_array(n, np.int8)
        threads = max(1, min(self.threads, n))
        block = min(LINE_BLOCK, threads)
        kernel = doubles_kernel(device_target().compile(double_row))
        kernel[(threads + block - 1) // block, block](
            cuda.to_device(np.ascontiguousarray(data)),
            cuda.to_device(np.ascontiguousarray(offsets)),
            self._pow10,
            values,
            how,
        )
        out = values.copy_to_host()
        null = large.is_null().to_numpy(zero_copy_only=False)
        kinds = how.copy_to_host()
        wrong = np.flatnonzero((kinds == NOT_A_NUMBER) & ~null)
        if len(wrong):
            i = int(wrong[0])
            raise NotANumber(
                f"{len(wrong)} value(s) of a double column read as text are not a JSON number, "
                f"e.g. {text[offsets[i] : offsets[i + 1]].tobytes()[:40]!r}: cuDF's str dtype "
                "did not give the number's own text (benchmarks/gpu/cudf_numbers.py checks it)"
            )
        slow = np.flatnonzero((kinds == HOST) & ~null)
        self.host_values += len(slow)
        for i in slow.tolist():  # as decode._Columns does: Python's float, from the bytes
            out[i] = float(text[offsets[i] : offsets[i + 1]].tobytes())
        out[null] = 0.0
        return pa.array(out, mask=null if null.any() else None)


def _has_floating(arrow_type: pa.DataType) -> bool:
    if pa.types.is_floating(arrow_type):
        return True
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return _has_floating(arrow_type.value_type)
    if pa.types.is_struct(arrow_type):
        return any(_has_floating(f.type) for f in arrow_type)
    return False
