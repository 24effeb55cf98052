"""cuDF's JSON lines reader (``cudf.read_json`` with ``lines=True``, explicit dtypes and column
pruning): the GPU backend's reader of the documents the scans found fitting."""

from __future__ import annotations

import io
import logging
from typing import Any

import numpy as np
import pyarrow as pa

from dspark_json.parse.reader import JsonLines

__all__ = ["CudfLines"]

logger = logging.getLogger("dspark_json")


class CudfLines(JsonLines):
    """JSON lines read by cuDF on the device: one chunk per batch (the GPU is the parallelism).
    A chunk cuDF rejects comes back as not read, like pyarrow's, for the reference parser."""

    def __init__(self) -> None:
        super().__init__(chunk_bytes=1 << 62, threads=1)

    def read_chunk(self, chunk: np.ndarray, schema: pa.Schema) -> pa.Table | None:
        import cudf

        try:
            frame = cudf.read_json(
                io.BytesIO(chunk.tobytes()),
                engine="cudf",
                lines=True,
                dtype={f.name: _cudf_dtype(f.type) for f in schema},
                prune_columns=True,
            )
            return frame.to_arrow()
        except Exception as exc:  # cuDF's errors have no common base
            logger.warning(
                "cuDF rejected %d bytes of JSON lines (%s); parsing them on the CPU",
                len(chunk),
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
