"""The content rule (:mod:`dspark_json.response.content`, where it is stated) compiled: one text
at a time through :func:`dspark_json.parse.json.conform.extract_row`, the rule the vectorised
scans run over whole columns.
"""

from __future__ import annotations

import numpy as np

from dspark_json.parse.json import KIND_NONE, extract_row
from dspark_json.response.content import extract_json as extract_json_python

__all__ = ["extract_json", "extract_json_python"]


def extract_json(text: str) -> str | None:
    """The JSON candidate inside ``text`` (not necessarily valid), or ``None`` where none."""
    raw = text.encode("utf-8", "surrogatepass")
    start, end, kind = extract_row(np.frombuffer(raw, np.uint8), 0, len(raw))
    if kind == KIND_NONE:
        return None
    return raw[start:end].decode("utf-8", "surrogatepass")
