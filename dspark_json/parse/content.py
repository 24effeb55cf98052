"""Find the JSON document a model wrote inside its message content (one text at a time).

Models wrap JSON in Markdown fences (```json ... ```), put prose before or after it, or start with
a byte-order mark. The rule, after stripping whitespace and BOMs from both ends:

1. text that is valid JSON, or that starts with ``{`` or ``[``, is taken whole;
2. otherwise, the body of the first fenced block, when it starts with ``{`` or ``[``;
3. otherwise, the text from the first ``{`` to the last ``}``;
4. otherwise there is no JSON: the row's status is ``not_json``.

The rule lives in :func:`dspark_json.parse.json.conform.extract_row`, which the vectorised scans run
over whole columns; this wrapper applies it to one Python string.
"""

from __future__ import annotations

import numpy as np

from dspark_json.parse.json import KIND_NONE, extract_row
from dspark_json.parse.rules import loads_python

__all__ = ["extract_json", "extract_json_python"]

#: What the rule strips from both ends: JSON's whitespace and byte-order marks.
_STRIPPED = " \t\n\r\ufeff"


def extract_json(text: str) -> str | None:
    """The JSON candidate inside ``text`` (not necessarily valid), or ``None`` where none."""
    raw = text.encode("utf-8", "surrogatepass")
    start, end, kind = extract_row(np.frombuffer(raw, np.uint8), 0, len(raw))
    if kind == KIND_NONE:
        return None
    return raw[start:end].decode("utf-8", "surrogatepass")


def extract_json_python(text: str) -> str | None:
    """:func:`extract_json` without numba (the same rule in plain Python, for a process whose
    kernels are still compiling; the conformance suite holds the two equal)."""
    s = text.strip(_STRIPPED)
    if not s:
        return None
    if s[0] in "{[":
        return s
    try:
        loads_python(s.encode("utf-8", "surrogatepass"))
        return s
    except (ValueError, RecursionError):
        pass
    fence = s.find("```")
    if fence >= 0:
        newline = s.find("\n", fence)
        if newline >= 0:
            close = s.find("```", newline + 1)
            body = s[newline + 1 : close if close >= 0 else len(s)].strip(_STRIPPED)
            if body[:1] in ("{", "["):
                return body
    first, last = s.find("{"), s.rfind("}")
    if 0 <= first < last:
        return s[first : last + 1]
    return None
