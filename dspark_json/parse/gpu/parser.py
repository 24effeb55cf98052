"""The GPU backend's parser: the vectorised path (:mod:`dspark_json.parse.vectorised`) with
cuDF reading the documents that fit (:mod:`.reader`), in an RMM pool of its share of the device
(:func:`~dspark_json.parse.gpu.use_memory_pool`)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.types import StructType

from dspark_json.parse.gpu import use_memory_pool
from dspark_json.parse.gpu.reader import CudfLines
from dspark_json.parse.vectorised import Vectorised
from dspark_json.rows import Backend

__all__ = ["GpuParser"]


class GpuParser:
    """Parses response bodies into the columns of ``schema`` that come from the response
    (a :class:`~dspark_json.parse.parser.Parser`), cuDF reading the fitting documents."""

    backend: Backend = "gpu"

    def __init__(
        self, schema: StructType, *, memory_fraction: float | None = None, lenient: bool = True
    ) -> None:
        if memory_fraction is not None:
            use_memory_pool(memory_fraction)
        self.schema = schema
        self.vectorised = Vectorised(schema, lines=CudfLines(), lenient=lenient)
        #: How many rows of the last batch the reference parser took.
        self.reference_rows = 0

    def parse(self, bodies: pa.Array | pa.ChunkedArray | Sequence[str | bytes | None]) -> pa.Table:
        """One row per body, in order (no cold path: the GPU run compiles its kernels first)."""
        table = self.vectorised.parse(bodies)
        self.reference_rows = self.vectorised.reference_rows
        return table
