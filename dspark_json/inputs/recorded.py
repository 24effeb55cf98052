"""Recorded answers as input (option ``responses``): parse them, send nothing.

Each line of a file is either a raw chat completion body, or a line of the output that vLLM's
batch runner and OpenAI's batch API write::

    {"id": "...", "custom_id": "req-1", "response": {"status_code": 200, "body": {...}},
     "error": null}

A batch line with an ``error``, or with a status other than 200, becomes a row with ``_error``
(status, type, message; ``attempts`` unknown), as a failed request does.
"""

from __future__ import annotations

import gc
import json
import re
from typing import Any

from dspark_json.inputs.listing import Segment, read_rows
from dspark_json.records import Outcome, PromptRecord
from dspark_json.rows import RowError, load_json, row_error

__all__ = ["read_recorded"]

#: The key ``"custom_id"`` with any of its letters written as a ``\\u`` escape: a batch line
#: all the same (a plain byte search finds the usual spelling).
_ESCAPED_CUSTOM_ID = re.compile(
    b'"' + b"".join(b"(?:%s|\\\\u00(?i:%x))" % (bytes([c]), c) for c in b"custom_id") + b'"'
)

#: Recorded rows pass no prompt fields through (one shared, never written).
_NO_FIELDS: dict[str, Any] = {}


def read_recorded(segment: Segment) -> list[tuple[PromptRecord, Outcome]]:
    """(the row, its answer) for each recorded line of ``segment``.

    Python's cyclic garbage collector is paused while the rows are made: none of them holds a
    cycle, and at tens of thousands of rows a partition its passes cost more than the rows.
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        return [_row(line, where) for line, where in read_rows(segment)]
    finally:
        if paused:
            gc.enable()


def _row(line: bytes, where: str) -> tuple[PromptRecord, Outcome]:
    text = line.decode("utf-8", errors="replace")
    if b"custom_id" in line or (b"\\u00" in line and _ESCAPED_CUSTOM_ID.search(line)):
        custom_id, outcome = _recorded(text)
    else:  # a raw body (a batch line has that key): the parser reads it
        custom_id, outcome = None, Outcome(body=text)
    return PromptRecord(
        custom_id=custom_id, messages=None, fields=_NO_FIELDS, raw=text, where=where
    ), outcome


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
