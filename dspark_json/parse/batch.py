"""Batch lines (the output of vLLM's batch runner and OpenAI's batch API, option
``responses``) in the plain case, read by the envelope scan: ``(custom_id, body)`` without a
Python object per line (:mod:`dspark_json.inputs.recorded` reads the others)."""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType

from dspark_json.buffers.arrow import string_buffers
from dspark_json.parse.json import (
    NESTED_STRIDE,
    NO_SPARE,
    TypeTable,
    compile_type,
    read_events,
    scan_codes,
    scan_envelope_fit,
)
from dspark_json.response.convert import arrow_schema

__all__ = ["plain_batch_lines"]


#: A batch line as the scan checks it: ``body`` is left out so that the scan records its span
#: (an unknown key, with its path); an ``error`` that is not null does not fit (a map).
_BATCH_LINE = StructType(
    [
        StructField("custom_id", StringType()),
        StructField("response", StructType([StructField("status_code", LongType())])),
        StructField("error", MapType(StringType(), StringType())),
    ]
)
#: What is read of it (the error's type fits nothing, so it is not read).
_BATCH_LINE_READ = pa.struct(list(arrow_schema(StructType(_BATCH_LINE.fields[:2]))))


@functools.cache
def _batch_line_table() -> TypeTable:
    return compile_type(_BATCH_LINE)


def plain_batch_lines(lines: pa.Array) -> list[tuple[str | None, str] | None]:
    """Per batch line, ``(custom_id, body)`` where the line is the plain case, read by one
    compiled scan: strict JSON, a string ``custom_id``, status 200 (or none), no error,
    and a JSON object as the body, taken as it was written (no parse and dump in Python);
    ``None`` for every other line, which :func:`_recorded` reads."""
    table = _batch_line_table()
    offsets, data, valid = string_buffers(lines)
    scan = scan_envelope_fit(
        offsets, data, valid, table.nodes, False, True, 0, len(lines), NO_SPARE
    )
    read = read_events(data, [scan.events], table, _BATCH_LINE_READ)
    custom_ids = read.field("custom_id").to_pylist()
    statuses = read.field("response").field("status_code").to_pylist()
    response = int(table.nodes.field_node[int(table.nodes.first[0]) + 1])
    entries = scan.nested.reshape(-1, NESTED_STRIDE)
    k0 = entries[:, 0]
    is_body = (entries[:, 4] == 1) & (entries[:, 5] == response) & (entries[:, 1] - k0 == 4)
    for i, byte in enumerate(b"body"):
        is_body &= data[np.minimum(k0 + i, len(data) - 1)] == byte
    bodies: dict[int, tuple[int, int]] = dict(  # the last one wins, as in json.loads
        zip(scan.nested_rows[is_body].tolist(), entries[is_body, 2:4].tolist(), strict=True)
    )
    plain = np.isin(scan.codes, (scan_codes.CODE_FITS, scan_codes.CODE_EXTRA)) & ~scan.deep
    out: list[tuple[str | None, str] | None] = [None] * len(lines)
    for row, (v0, v1) in bodies.items():
        # A null custom_id is also what a missing one reads as: a raw body may hold the word
        # and a response key, so such lines are left to the Python reading.
        plain_line = plain[row] and custom_ids[row] is not None
        if plain_line and statuses[row] in (None, 200) and data[v0] == ord("{"):
            body = data[v0:v1].tobytes().rstrip(b" \t\r\n").decode("utf-8")
            out[row] = (custom_ids[row], body)
    return out
