"""The GPU backend's parser: the vectorised path (:mod:`dspark_json.parse.vectorised`) with the
fit check on the device (:mod:`.fit`) and cuDF reading the documents that fit (:mod:`.reader`),
in an RMM pool of its share of the device (:func:`~dspark_json.parse.gpu.use_memory_pool`). No
pass over the bodies' bytes runs on the CPU for the rows that fit; the rows that do not, or that
hold what cuDF reads otherwise (:func:`~dspark_json.parse.gpu.fit.reader_hazards`), go to the
reference parser."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.types import StructType

from dspark_json.parse.gpu import use_memory_pool
from dspark_json.parse.gpu.fit import DeviceFit
from dspark_json.parse.gpu.reader import CudfLines
from dspark_json.parse.vectorised import Vectorised
from dspark_json.rows import Backend

__all__ = ["GpuParser"]


class GpuParser:
    """Parses response bodies into the columns of ``schema`` that come from the response
    (a :class:`~dspark_json.parse.parser.Parser`): the device decides the fit, cuDF reads the
    fitting documents. ``lines``: another reader of the device's JSON lines (tests stand one
    in for cuDF's)."""

    backend: Backend = "gpu"

    def __init__(
        self,
        schema: StructType,
        *,
        memory_fraction: float | None = None,
        lenient: bool = True,
        lines: CudfLines | None = None,
    ) -> None:
        if memory_fraction is not None:
            use_memory_pool(memory_fraction)
        self.schema = schema
        self.device_fit = DeviceFit()
        self.vectorised = Vectorised(
            schema, lines=lines or CudfLines(), fit=self.device_fit, lenient=lenient
        )
        #: How many rows of the last batch the reference parser took, and why.
        self.reference_rows = 0
        self.reference_reasons: dict[str, int] = {}

    def parse(self, bodies: pa.Array | pa.ChunkedArray | Sequence[str | bytes | None]) -> pa.Table:
        """One row per body, in order (no cold path: the GPU run compiles its kernels first)."""
        table = self.vectorised.parse(bodies)
        self.reference_rows = self.vectorised.reference_rows
        self.reference_reasons = self.vectorised.reference_reasons
        return table
