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
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dspark_json.buffers.arrow import shown_as_text
from dspark_json.inputs.listing import Segment, segment_packed
from dspark_json.parse import holds_bytes, holds_escape, plain_batch_lines
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


def read_recorded(
    segments: Sequence[Segment], *, max_bytes: int | None = None
) -> tuple[PromptRows, Outcomes]:
    """The recorded rows of ``segments``, in order, and their answers, by column.

    A raw body goes to the parser as the line's bytes, without a Python object per row: only
    batch lines (which hold the key ``custom_id``) are read in Python, for their body or error.
    A line over ``max_bytes`` (option ``maxResponseBytes``) is neither parsed nor read in
    Python: its row's ``_error`` is ``response_too_large``, as a live answer that large.
    """
    parts = [segment_packed(segment) for segment in segments]
    firsts = np.cumsum([0, *(len(offsets) - 1 for _, offsets in parts)]).tolist()
    raw = _binary(parts)
    texts = shown_as_text(raw)  # as the parser shows a body
    custom_ids: list[str | None] = [None] * len(raw)
    errors: dict[int, RowError] = {}
    bodies = texts
    large = _over(raw, max_bytes)
    for row in large.tolist():
        errors[row] = _too_large(len(raw[row].as_buffer()), max_bytes or 0)
    batch = _batch_lines(raw, [data for data, _ in parts])
    if len(large):
        batch = np.setdiff1d(batch, large, assume_unique=True)
    if len(batch):
        taken: list[str | None] = []
        plain = plain_batch_lines(texts.take(pa.array(batch)))
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
    if len(large):
        mask = np.zeros(len(raw), np.bool_)
        mask[large] = True
        bodies = pc.replace_with_mask(bodies, pa.array(mask), pa.nulls(len(large), bodies.type))

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


def _over(raw: pa.Array, max_bytes: int | None) -> np.ndarray:
    """The rows of ``raw`` longer than ``max_bytes`` (none where it is ``None``)."""
    if max_bytes is None or not len(raw):
        return np.zeros(0, np.int64)
    lengths = pc.binary_length(raw).to_numpy(zero_copy_only=False)
    return np.flatnonzero(lengths > max_bytes)


def _too_large(size: int, max_bytes: int) -> RowError:
    return row_error(
        status=None,
        type="response_too_large",
        message=(
            f"the recorded answer is {size} bytes, over the limit set by "
            f"maxResponseBytes={max_bytes}; it was not parsed. Raise maxResponseBytes if such "
            "answers are expected."
        ),
        attempts=None,
    )


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
