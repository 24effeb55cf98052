"""Recorded answers as input (option ``responses``): parse them, send nothing.

Each line of a file is either a raw chat completion body, or a line of the output that vLLM's
batch runner and OpenAI's batch API write::

    {"id": "...", "custom_id": "req-1", "response": {"status_code": 200, "body": {...}},
     "error": null}

A batch line with an ``error``, or with a status other than 200, becomes a row with ``_error``
(status, type, message; ``attempts`` unknown), as a failed request does.
"""

from __future__ import annotations

import bisect
import functools
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import LongType, MapType, StringType, StructField, StructType

from dspark_json.inputs.listing import Segment, segment_packed
from dspark_json.parse.arrow import shown_as_text, string_buffers
from dspark_json.parse.convert import arrow_schema
from dspark_json.parse.json import (
    NESTED_STRIDE,
    TypeTable,
    compile_type,
    holds_bytes,
    holds_escape,
    read_events,
    scan_codes,
    scan_envelope_fit,
)
from dspark_json.records import Outcome, Outcomes, PromptRecord, PromptRows
from dspark_json.rows import RowError, load_json, row_error

__all__ = ["read_recorded"]

#: RE2 pattern: the key ``"custom_id"`` as a row holds it, any of its letters possibly written as
#: a ``\\u`` escape (a batch line all the same).
_KEY_PATTERN = '"' + "".join(f"(?:{chr(c)}|\\\\u00(?i:{c:x}))" for c in b"custom_id") + '"'
#: The prefilters, over a segment's bytes whole: the key as usually spelt (a raw body may hold
#: the word too), and a ``\\u`` escape of one of its letters (all are from U+005F, ``_``, to
#: U+0075, ``u``).
_KEY = b"custom_id"
_KEY_BYTES = np.frombuffer(_KEY, np.uint8)
_LETTERS = (min(_KEY), max(_KEY))

#: Recorded rows pass no prompt fields through (one shared, never written).
_NO_FIELDS: dict[str, Any] = {}


def read_recorded(segments: Sequence[Segment]) -> tuple[PromptRows, Outcomes]:
    """The recorded rows of ``segments``, in order, and their answers, by column.

    A raw body goes to the parser as the line's bytes, without a Python object per row: only
    batch lines (which hold the key ``custom_id``) are read in Python, for their body or error.
    """
    parts = [segment_packed(segment) for segment in segments]
    firsts = np.cumsum([0, *(len(offsets) - 1 for _, offsets in parts)]).tolist()
    raw = _binary(parts)
    texts = shown_as_text(raw)  # as the parser shows a body
    custom_ids: list[str | None] = [None] * len(raw)
    errors: dict[int, RowError] = {}
    bodies = texts
    batch = _batch_lines(raw, [data for data, _ in parts])
    if len(batch):
        taken: list[str | None] = []
        plain = _plain_batch_lines(texts.take(pa.array(batch)))
        for row, fast in zip(batch.tolist(), plain, strict=True):
            if fast is not None:
                custom_ids[row], body = fast
                taken.append(body)
                continue
            custom_ids[row], outcome = _recorded(texts[row].as_py())
            taken.append(outcome.body)
            if outcome.error is not None:
                errors[row] = outcome.error
        mask = np.zeros(len(raw), np.bool_)
        mask[batch] = True
        bodies = pc.replace_with_mask(texts, pa.array(mask), pa.array(taken, pa.large_string()))

    def record(row: int) -> PromptRecord:
        k = bisect.bisect_right(firsts, row) - 1
        segment = segments[k]
        return PromptRecord(
            custom_id=custom_ids[row],
            messages=None,
            fields=_NO_FIELDS,
            raw=texts[row].as_py(),
            where=segment.where(segment.start + row - firsts[k]),
        )

    rows = PromptRows(custom_ids, fields=None, problems={}, record=record)
    return rows, Outcomes(bodies, errors)


def _binary(parts: Sequence[tuple[np.ndarray, np.ndarray]]) -> pa.Array:
    """Packed rows (bytes, offsets) as one Arrow binary array."""
    arrays = [
        pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )
        for data, offsets in parts
    ]
    if len(arrays) == 1:
        return arrays[0]
    return pa.concat_arrays(arrays) if arrays else pa.array([], pa.large_binary())


def _batch_lines(raw: pa.Array, packed: Sequence[np.ndarray]) -> np.ndarray:
    """The rows that hold the key ``custom_id``, however it is spelt (batch lines); the rest
    are raw bodies, which the parser reads. ``packed``: each segment's rows' bytes, end to end.

    Most files hold no batch line, so each segment's bytes are first searched whole, for the
    key and for an escaped letter of it (compiled scans, 64 bytes at a time, which beat C's
    ``memmem`` with a word-at-a-time escape scan, and Python's regex searches: figures in
    benchmarks/README.md). Only when one of them hits are all the partition's rows
    matched against the key, one by one."""
    if not any(_holds(data, _KEY_BYTES) or _holds_escaped_letter(data) for data in packed):
        return np.zeros(0, np.int64)
    hits = pc.match_substring_regex(raw, _KEY_PATTERN)
    return np.flatnonzero(hits.to_numpy(zero_copy_only=False))


def _holds(data: np.ndarray, needle: np.ndarray) -> bool:
    """Whether the bytes ``data`` hold ``needle``."""
    return bool(holds_bytes(np.ascontiguousarray(data, np.uint8), needle))


def _holds_escaped_letter(data: np.ndarray) -> bool:
    """Whether the bytes ``data`` may hold a ``\\u`` escape of a letter of ``custom_id``."""
    return bool(holds_escape(np.ascontiguousarray(data, np.uint8), *_LETTERS))


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


def _plain_batch_lines(lines: pa.Array) -> list[tuple[str | None, str] | None]:
    """Per batch line, ``(custom_id, body)`` where the line is the plain case, read by one
    compiled scan: strict JSON, a string ``custom_id``, status 200 (or none), no error,
    and a JSON object as the body, taken as it was written (no parse and dump in Python);
    ``None`` for every other line, which :func:`_recorded` reads."""
    table = _batch_line_table()
    offsets, data, valid = string_buffers(lines)
    scan = scan_envelope_fit(offsets, data, valid, table.nodes, False, True, 0, len(lines))
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
        if plain_line and statuses[row] in (None, 200) and data[v0] == 123:  # {
            body = data[v0:v1].tobytes().rstrip(b" \t\r\n").decode("utf-8")
            out[row] = (custom_ids[row], body)
    return out


def _recorded(text: str) -> tuple[str | None, Outcome]:
    try:
        obj = load_json(text)
    except ValueError:  # not JSON, nested too deep, an integer beyond the digit limit
        return None, Outcome(body=text)  # the parser calls it corrupt and keeps the text
    if not (isinstance(obj, dict) and "custom_id" in obj and ("response" in obj or "error" in obj)):
        return None, Outcome(body=text)  # a raw body
    custom_id = None if obj["custom_id"] is None else str(obj["custom_id"])
    recorded = obj.get("response")
    response: dict[str, Any] = recorded if isinstance(recorded, dict) else {}
    status = response.get("status_code")
    body = response.get("body")
    error = obj.get("error")
    if isinstance(error, dict) and error:
        return custom_id, Outcome(error=_error(status, error))
    if status not in (None, 200):
        detail = body.get("error") if isinstance(body, dict) else None
        return custom_id, Outcome(error=_error(status, detail if isinstance(detail, dict) else {}))
    if body is None:
        return custom_id, Outcome(error=_error(status, {"message": "no response body recorded"}))
    return custom_id, Outcome(body=body if isinstance(body, str) else json.dumps(body))


def _error(status: Any, detail: dict[str, Any]) -> RowError:
    return row_error(
        status=status if isinstance(status, int) else None,
        type=str(detail.get("type") or detail.get("code") or "batch_error"),
        message=str(detail.get("message") or f"recorded HTTP {status}"),
        attempts=None,
    )
