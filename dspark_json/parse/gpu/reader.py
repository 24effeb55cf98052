"""cuDF's JSON lines reader (``cudf.read_json`` with ``lines=True``, explicit dtypes and column
pruning): the GPU backend's reader of the documents the device's fit check found fitting
(:mod:`.fit`). The lines are gathered on the device (:func:`gather_row`, a thread per row at
offsets the host computes from the row lengths), not by a pass over the bytes on the CPU.
Double columns are read as text and converted on the device with the CPU's rules
(:mod:`.doubles`)."""

from __future__ import annotations

import io
import logging
from typing import Any

import numpy as np
import pyarrow as pa

from dspark_json.parse.gpu.doubles import DeviceDoubles, NotANumber, text_schema
from dspark_json.parse.gpu.kernels import LINE_BLOCK, LINE_THREADS, simulated
from dspark_json.parse.gpu.targets import portable
from dspark_json.parse.reader import JsonLines

__all__ = ["CudfLines", "gather_row"]

logger = logging.getLogger("dspark_json")

_SPACE, _LF, _CR = 32, 10, 13


@portable
def gather_row(
    data: Any, start: int, end: int, take: bool, prefix: Any, suffix: Any, out: Any, pos: int
) -> None:
    """One row of :func:`~dspark_json.parse.json.lines.gather_lines` at ``out[pos:]``:
    ``prefix + data[start:end] + suffix`` (CR and LF as spaces) where ``take``, else ``{}``;
    then a newline."""
    if take:
        for b in range(len(prefix)):
            out[pos] = prefix[b]
            pos += 1
        for j in range(start, end):
            c = data[j]
            out[pos] = _SPACE if c == _LF or c == _CR else c
            pos += 1
        for b in range(len(suffix)):
            out[pos] = suffix[b]
            pos += 1
    else:
        out[pos] = 123
        out[pos + 1] = 125
        pos += 2
    out[pos] = _LF


class CudfLines(JsonLines):
    """JSON lines gathered and read on the device, one read per batch (the GPU is the
    parallelism). A batch cuDF rejects comes back as not read, like pyarrow's chunks, for the
    reference parser. :meth:`read_lines` is the one call into cuDF; it reads every
    floating-point column as text (:func:`~.doubles.text_schema`), which :attr:`doubles`
    converts on the device."""

    def __init__(self) -> None:
        super().__init__(chunk_bytes=1 << 62, threads=1)
        self.doubles = DeviceDoubles()

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
        from numba import cuda

        from dspark_json.parse.gpu.fit import device_target
        from dspark_json.parse.gpu.kernels import gather_kernel
        from dspark_json.parse.json import line_lengths

        n = len(starts)
        ok = np.ones(n, np.bool_)
        if n == 0:
            return schema.empty_table(), ok
        lengths = line_lengths(starts, ends, take, len(prefix) + len(suffix))
        line_at = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        head = np.frombuffer(prefix or b"\0", np.uint8)[: len(prefix)]
        tail = np.frombuffer(suffix or b"\0", np.uint8)[: len(suffix)]
        lines = cuda.device_array(int(line_at[-1]), np.uint8)
        threads = min(LINE_THREADS, n)
        block = min(LINE_BLOCK, threads)
        if simulated():
            block = threads = min(4, n)  # a Python thread each
        kernel = gather_kernel(device_target().compile(gather_row))
        kernel[(threads + block - 1) // block, block](
            *(
                cuda.to_device(np.ascontiguousarray(a))
                for a in (data, starts, ends, take, head, tail, line_at[:-1])
            ),
            lines,
        )
        as_text = text_schema(schema)
        table = self.read_lines(lines, as_text)
        if table is not None and table.num_rows == n:
            table = table.select(as_text.names).cast(as_text).combine_chunks()
            try:
                return self.doubles.table(table, schema), ok
            except NotANumber as exc:
                logger.warning("%s; parsing these %d rows on the CPU", exc, n)
        ok[:] = False
        return pa.table([pa.nulls(n, f.type) for f in schema], schema=schema), ok

    def read_lines(self, lines: Any, schema: pa.Schema) -> pa.Table | None:
        """JSON lines in device memory (a numba device array) as a table of ``schema`` (unknown
        keys pruned; a number in a string column as its text), or None where cuDF rejects
        them."""
        import cudf

        try:
            frame = cudf.read_json(
                io.BytesIO(lines.copy_to_host()),
                engine="cudf",
                lines=True,
                dtype={f.name: _cudf_dtype(f.type) for f in schema},
                prune_columns=True,
            )
            return frame.to_arrow()
        except Exception as exc:  # cuDF's errors have no common base
            logger.warning(
                "cuDF rejected %d bytes of JSON lines (%s); parsing them on the CPU",
                lines.size,
                exc,
            )
            return None


def _cudf_dtype(arrow_type: pa.DataType) -> Any:
    """The cuDF dtype cuDF's JSON reader takes for an Arrow type."""
    import cudf

    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        return cudf.ListDtype(_cudf_dtype(arrow_type.value_type))
    if pa.types.is_struct(arrow_type):
        return cudf.StructDtype({f.name: _cudf_dtype(f.type) for f in arrow_type})
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return cudf.dtype("str")
    return cudf.dtype(arrow_type.to_pandas_dtype())
