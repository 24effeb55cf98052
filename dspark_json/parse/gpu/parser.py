"""The GPU backend's parser: the vectorised path (:mod:`dspark_json.parse.vectorised`) with the
fit check on the device (:mod:`.fit`) and cuDF reading the documents that fit (:mod:`.reader`),
in an RMM pool of its share of the device (:func:`~dspark_json.parse.gpu.use_memory_pool`). No
pass over the bodies' bytes runs on the CPU for the rows that fit; the rows that do not, or that
hold what cuDF reads otherwise (:func:`~dspark_json.parse.gpu.fit.reader_hazards`), go to the
reference parser.

A schema cuDF's JSON lines reader cannot take but the CPU kernels can (a map, a tuple struct:
:func:`beyond_lines`) is parsed on the CPU kernels' path (the CPU backend's
:class:`~dspark_json.parse.vectorised.Vectorised`, without the device), not row by row by the
reference parser; the log says so once per process and column (INFO). Such a parser's
:attr:`~GpuParser.backend` is ``cpu``, so the metrics' ``backend`` and the driver's batch line
say where the batches were parsed; :attr:`GpuParser.cpu_kernels` says why."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.types import ArrayType, DataType, MapType, StructType

from dspark_json.parse.gpu import use_memory_pool
from dspark_json.parse.gpu.fit import DeviceFit
from dspark_json.parse.gpu.reader import CudfLines
from dspark_json.parse.parser import RescueScope
from dspark_json.parse.plan import plan_of
from dspark_json.parse.vectorised import Vectorised
from dspark_json.response.convert import is_tuple
from dspark_json.rows import Backend, data_fields

__all__ = ["GpuParser", "beyond_lines"]

logger = logging.getLogger("dspark_json")

#: The columns this process already logged as taken by the CPU kernels.
_logged: set[str] = set()


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
        rescue: RescueScope = "all",
    ) -> None:
        if memory_fraction is not None:
            use_memory_pool(memory_fraction)
        self.schema = schema
        self.device_fit = DeviceFit()
        self.lines = lines or CudfLines()
        #: Why the CPU kernels take this schema's batches (a column cuDF's reader cannot
        #: take), or None: the device and cuDF take them.
        self.cpu_kernels = beyond_lines(data_fields(schema))
        if self.cpu_kernels is None:
            self.vectorised = Vectorised(
                schema, lines=self.lines, fit=self.device_fit, lenient=lenient, rescue=rescue
            )
        else:
            self.vectorised = Vectorised(schema, lenient=lenient, rescue=rescue)
            self.backend = "cpu"  # where its batches are parsed: the metrics report it
        #: How many rows of the last batch the reference parser took, and why.
        self.reference_rows = 0
        self.reference_reasons: dict[str, int] = {}
        #: Doubles of the last batch outside the device's fast path (converted on the host).
        self.host_doubles = 0

    def parse(self, bodies: pa.Array | pa.ChunkedArray | Sequence[str | bytes | None]) -> pa.Table:
        """One row per body, in order (no cold path: the GPU run compiles its kernels first)."""
        if self.cpu_kernels is not None and self.cpu_kernels not in _logged:
            _logged.add(self.cpu_kernels)
            logger.info(
                "GPU backend: cuDF's JSON reader cannot read %s; the CPU kernels parse these "
                "batches, as on the CPU backend",
                self.cpu_kernels,
            )
        self.lines.doubles.host_values = 0
        table = self.vectorised.parse(bodies)
        self.reference_rows = self.vectorised.reference_rows
        self.reference_reasons = self.vectorised.reference_reasons
        self.host_doubles = self.lines.doubles.host_values
        return table


def beyond_lines(data: StructType) -> str | None:
    """What of the data columns ``data`` a JSON lines reader (cuDF's) cannot take but the CPU
    kernels can, named with its column (``a map (column 'parsed.tags')``), or None. A map has
    no JSON lines type; a tuple struct is a JSON array there, which a struct column does not
    read. A schema beyond the CPU kernels too is None here: the reference parser takes it on
    both paths (``column_types``)."""
    if plan_of(data, True) is None:
        return None
    for field in data.fields:
        found = _beyond(field.dataType, field.name)
        if found is not None:
            return found
    return None


def _beyond(dtype: DataType, path: str) -> str | None:
    if isinstance(dtype, MapType):
        return f"a map (column {path!r})"
    if isinstance(dtype, StructType):
        if is_tuple(dtype):
            return f"a tuple struct (column {path!r})"
        for f in dtype.fields:
            found = _beyond(f.dataType, f"{path}.{f.name}")
            if found is not None:
                return found
    if isinstance(dtype, ArrayType):
        return _beyond(dtype.elementType, f"{path}[]")
    return None
