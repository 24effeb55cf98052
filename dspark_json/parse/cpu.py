"""The CPU backend: the vectorised path (:mod:`.vectorised`, numba scans over the bodies'
Arrow buffers), with a small batch in a process whose kernels are still compiling parsed by the
reference parser instead (same output; :mod:`.warmup`)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from dspark_json.buffers.arrow import to_string_array
from dspark_json.parse import warmup
from dspark_json.parse.json import rescued_keys
from dspark_json.parse.parser import Reason, RescueScope
from dspark_json.parse.reference import ReferenceParser
from dspark_json.parse.vectorised import Vectorised, as_python
from dspark_json.response.envelope import envelope_fields
from dspark_json.rows import PARSER_COLUMNS, RESCUED_DATA, SYSTEM_FIELDS, Backend

__all__ = ["CpuParser", "warm_kernels"]


class CpuParser:
    """Parses response bodies into the columns of ``schema`` that come from the response
    (a :class:`~dspark_json.parse.parser.Parser`)."""

    backend: Backend = "cpu"

    def __init__(
        self, schema: StructType, *, lenient: bool = True, rescue: RescueScope = "all"
    ) -> None:
        self.schema = schema
        self.lenient = lenient
        self.vectorised = Vectorised(schema, lenient=lenient, rescue=rescue)
        #: How many rows of the last batch the reference parser took, and why (:class:`Reason`).
        self.reference_rows = 0
        self.reference_reasons: dict[str, int] = {}

    @functools.cached_property
    def cold(self) -> ReferenceParser:
        """For small batches while the kernels compile: the same rules without numba."""
        return ReferenceParser(self.schema, lenient=self.lenient, kernels=False)

    def parse(self, bodies: pa.Array | pa.ChunkedArray | Sequence[str | bytes | None]) -> pa.Table:
        """One row per body, in order. A small batch in a process whose kernels are still
        compiling is parsed by the reference parser (same output; :mod:`.warmup`)."""
        texts = to_string_array(bodies)
        if len(texts) < warmup.SMALL_BATCH and not warmup.ready():
            warmup.start(warm_kernels)
            self.reference_rows = len(texts)
            self.reference_reasons = {Reason.COLD: len(texts)} if len(texts) else {}
            return self.cold.parse(as_python(texts))
        return self.parse_vectorised(texts)

    def parse_vectorised(
        self, bodies: pa.Array | pa.ChunkedArray | Sequence[str | bytes | None]
    ) -> pa.Table:
        """:meth:`parse` on the vectorised path, whatever the batch (compiling as needed)."""
        table = self.vectorised.parse(bodies)
        self.reference_rows = self.vectorised.reference_rows
        self.reference_reasons = self.vectorised.reference_reasons
        return table


def warm_kernels() -> None:
    """One vectorised parse that touches every kernel, with each kind of argument the real
    schemas give (the same compiled code then serves them): :mod:`.warmup`'s job."""
    content = StructType(
        [
            StructField("s", StringType()),
            StructField("t", TimestampType()),
            StructField("d", DateType()),
            StructField("x", DoubleType()),
            StructField("b", BooleanType()),
            StructField("n", ArrayType(LongType())),
            StructField("j", StringType()),  # a free-form value: held as its JSON text
        ]
    )
    schema = StructType(
        [
            *envelope_fields(content),  # the envelope as the output schema types it
            StructField("parsed", content),
            *(f for f in SYSTEM_FIELDS if f.name in PARSER_COLUMNS),
        ]
    )
    value = {
        "s": "x\u00e9",
        "t": "2026-01-01T00:00:00Z",
        "d": "2026-01-01",
        "x": 0.5,
        "b": True,
        "n": [1],
        "j": {"k": [1, 0.5]},
        "extra": 0.5,
    }
    body = {
        "id": "w",
        "created": 1,
        "choices": [{"index": 0, "message": {"content": json.dumps(value)}}],
        "unexpected": [1],
    }
    table = Vectorised(schema).parse([json.dumps(body)])
    rescued_keys(table.column(RESCUED_DATA.name))  # the drift check's kernel (parse.drift)
