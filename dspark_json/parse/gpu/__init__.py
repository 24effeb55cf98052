"""The GPU backend (cuDF). The only module that imports cuDF, RMM or CUDA, and only on use.

:class:`GpuParser` is the CPU parser with pyarrow's JSON reader swapped for cuDF's
(``cudf.read_json`` with ``lines=True``, explicit dtypes and column pruning): the envelope and
content reads, the bulk of the work, run on the device; the numba scans that validate bodies,
check them against the schema and find the JSON in each message still run on the CPU (no
allocation, no objects: device code could take them over, but for the word loads of
:mod:`dspark_json.parse.words`, which are CPU instructions).

Status: written without a device to try it on. It has not run yet, so ``parseMode=auto`` does not
pick it; ``parseMode=gpu`` does, and the conformance suite (``tests/test_conformance.py``, the
``gpu`` backend) is the check it must pass on a GPU machine before ``auto`` may choose it.
"""

from __future__ import annotations

import importlib.util
import io
import logging
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.types import StructType

from dspark_json.parse.columns import JsonLines
from dspark_json.parse.cpu import CpuParser

__all__ = ["INSTALL_HINT", "GpuParser", "unavailable_reason", "verified"]

logger = logging.getLogger("dspark_json")

INSTALL_HINT = "pip install 'dspark-json[gpu]' (CUDA 12) or 'dspark-json[gpu-cu13]' (CUDA 13)"

#: Whether the cuDF parser has passed the conformance suite on a GPU (``auto`` picks it then).
verified = False

#: The RMM pool this process made (its share of device memory), once made.
_pool: dict[str, float] = {}


def unavailable_reason() -> str | None:
    """Why the GPU backend cannot run here, or ``None`` when it can."""
    if importlib.util.find_spec("cudf") is None:
        return f"cuDF is not installed ({INSTALL_HINT})"
    try:
        import cudf  # noqa: F401
        from numba import cuda
    except Exception as exc:  # cuDF raises many kinds of errors without a driver
        return f"cuDF failed to import ({type(exc).__name__}: {exc})"
    if not cuda.is_available():  # type: ignore[no-untyped-call]
        return "no CUDA device is visible to this process"
    return None


def use_memory_pool(fraction: float) -> None:
    """Give RMM a pool of ``fraction`` of the device memory (once per process), so the parser
    can share the GPU with vLLM instead of growing into its memory."""
    if _pool:
        return
    import rmm
    from numba import cuda

    free, total = cuda.current_context().get_memory_info()  # type: ignore[no-untyped-call]
    size = int(total * fraction) // 256 * 256
    if size > free:
        raise MemoryError(
            f"gpuMemoryFraction={fraction} asks for {size >> 20} MiB of GPU memory, but only "
            f"{free >> 20} MiB are free (vLLM may hold the rest). Lower gpuMemoryFraction."
        )
    rmm.reinitialize(pool_allocator=True, initial_pool_size=size, maximum_pool_size=size)
    _pool["fraction"] = fraction
    logger.info("RMM pool of %d MiB (%.0f%% of the GPU) for parsing", size >> 20, fraction * 100)


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


class GpuParser(CpuParser):
    """:class:`CpuParser` with cuDF reading the JSON lines (see the module doc)."""

    backend = "gpu"

    def __init__(
        self, schema: StructType, *, memory_fraction: float | None = None, lenient: bool = True
    ) -> None:
        if memory_fraction is not None:
            use_memory_pool(memory_fraction)
        super().__init__(schema, lines=CudfLines(), lenient=lenient)


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
