"""Rows copied into JSON lines for a reader (pyarrow's, cuDF's): the bytes the scans found fitting,
one line each, with a prefix and suffix around them."""

from __future__ import annotations

from typing import Any

import numpy as np

from dspark_json.buffers.bytes import CR, LBRACE, LF, RBRACE, SPACE
from dspark_json.buffers.compiled import leaf

__all__ = ["gather_lines", "line_lengths"]


@leaf
def gather_lines(
    data: Any, starts: Any, ends: Any, take: Any, prefix: Any, suffix: Any, out: Any
) -> None:
    """Copy rows into a JSON-lines buffer ``out`` (sized by :func:`line_lengths`): for each
    row, ``prefix + data[starts[i]:ends[i]] + suffix`` where ``take[i]``, else ``{}`` (a row of
    nulls), then a newline. CR and LF become spaces (in valid JSON they are only whitespace)."""
    pos = 0
    for i in range(len(starts)):
        if take[i]:
            for b in prefix:
                out[pos] = b
                pos += 1
            for j in range(starts[i], ends[i]):
                c = data[j]
                out[pos] = SPACE if c == LF or c == CR else c
                pos += 1
            for b in suffix:
                out[pos] = b
                pos += 1
        else:
            out[pos] = LBRACE
            out[pos + 1] = RBRACE
            pos += 2
        out[pos] = LF
        pos += 1


def line_lengths(starts: Any, ends: Any, take: Any, extra: int) -> Any:
    """The length of each line :func:`gather_lines` writes (``extra``: prefix + suffix)."""
    return np.where(take, ends - starts + extra + 1, 3)
