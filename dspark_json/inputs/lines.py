"""JSON lines text as rows: which lines are rows (blank ones and a UTF-8 BOM opening a line are
not), where each starts, and the rows packed end to end by compiled kernels, 64 bytes at a time,
without a Python object per row (the layout of Arrow's text).

numpy only: the listing counts rows here while Spark plans a micro-batch, in a Python process
started for the call; the kernels (:mod:`dspark_json.inputs.line_kernels`, numba) are imported
by the task that packs rows."""

from __future__ import annotations

import numpy as np

__all__ = ["count_rows", "pack_rows", "row_starts", "rows_of"]

UTF8_BOM = b"\xef\xbb\xbf"
#: First bytes of a line that may still be blank: whitespace, and a BOM's first byte.
_MAYBE_BLANK = np.array([9, 11, 12, 13, 32, 0xEF], np.uint8)


def rows_of(data: bytes) -> list[bytes]:
    """The non-blank lines of JSON lines text: its rows (a UTF-8 BOM opening a line dropped)."""
    if UTF8_BOM in data:
        lines = [line.removeprefix(UTF8_BOM) for line in data.splitlines()]
        return [line for line in lines if line.strip()]
    return [line for line in data.splitlines() if line.strip()]


def count_rows(piece: bytes) -> int:
    """How many rows the text ``piece`` holds (as :func:`rows_of` counts them)."""
    if b"\r" not in piece:
        return len(row_starts(piece))
    return len(rows_of(piece))


def row_starts(text: bytes) -> np.ndarray:
    """Where each row of ``text`` (lines split at LF, as :func:`rows_of` takes them when no lone
    CR ends one) starts. A line whose first byte is not blank is a row; the few others (a
    space, a BOM, a CR first) are looked at one by one."""
    data = np.frombuffer(text, np.uint8)
    breaks = np.flatnonzero(data == 10)
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks, [len(data)]])
    empty = starts >= ends
    first = data[np.minimum(starts, max(len(data) - 1, 0))] if len(data) else starts
    unsure = ~empty & np.isin(first, _MAYBE_BLANK)
    row = ~empty & ~unsure
    for line in np.flatnonzero(unsure).tolist():
        row[line] = bool(text[starts[line] : ends[line]].removeprefix(UTF8_BOM).strip())
    return starts[row]


def pack_rows(text: bytes, skip: int, take: int) -> tuple[np.ndarray, np.ndarray]:
    """``rows_of(text)[skip:skip + take]`` packed end to end: the rows' bytes and offsets.

    The same rows as :func:`rows_of`: lines end at LF, CR or CRLF (the blank line between a CR
    and an LF is not a row anyway), a UTF-8 BOM opening a line is dropped, and a line of
    spaces, tabs, VT and FF only is blank. Compiled, 64 bytes at a time: faster than Arrow's
    split and than numpy's search with a byte loop's copy (figures: benchmarks/README.md)."""
    from dspark_json.inputs.line_kernels import line_ends, pack

    data = np.frombuffer(text, np.uint8)
    ends = line_ends(data, b"\r" not in text)
    return pack(data, ends, max(skip, 0), max(take, 0))
