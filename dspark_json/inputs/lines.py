"""JSON lines text as rows: which lines are rows (blank ones and a UTF-8 BOM opening a line are
not), where each starts, and the rows packed end to end by compiled kernels, 64 bytes at a time,
without a Python object per row (the layout of Arrow's text)."""

from __future__ import annotations

import numpy as np

from dspark_json.buffers.compiled import kernel
from dspark_json.buffers.words import BLOCK, block_equal, copy_block, lowest_bit

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
    data = np.frombuffer(text, np.uint8)
    ends = _line_ends(data, b"\r" not in text)
    return _pack(data, ends, max(skip, 0), max(take, 0))


@kernel
def _line_ends(data: np.ndarray, lone_lf: bool) -> np.ndarray:
    """Where the lines of ``data`` end: each LF, and each CR unless ``lone_lf``."""
    found = 0
    for counting in (True, False):
        if not counting:
            ends = np.empty(found, np.int64)
        k = pos = 0
        while pos <= len(data) - BLOCK:
            mask = block_equal(data, pos, 10)
            if not lone_lf:
                mask |= block_equal(data, pos, 13)
            while mask:
                if not counting:
                    ends[k] = pos + lowest_bit(mask)
                k += 1
                mask &= mask - np.uint64(1)
            pos += BLOCK
        for i in range(pos, len(data)):
            if data[i] == 10 or (data[i] == 13 and not lone_lf):
                if not counting:
                    ends[k] = i
                k += 1
        found = k
    return ends


@kernel
def _pack(
    data: np.ndarray, ends: np.ndarray, skip: int, take: int
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pack_rows` of ``data`` whose lines end at ``ends``; each row copied a block at a
    time (a block may write past its end: the next row, or the block of slack, takes it)."""
    out = np.empty(len(data) + BLOCK, np.uint8)
    offsets = np.zeros(take + 1, np.int64)
    rows = 0
    size = 0
    i = 0
    for line in range(len(ends) + 1):
        if rows >= take:
            break
        j = ends[line] if line < len(ends) else len(data)
        s = i
        i = j + 1
        if j - s >= 3 and data[s] == 0xEF and data[s + 1] == 0xBB and data[s + 2] == 0xBF:
            s += 3
        blank = True
        for k in range(s, j):
            if data[k] not in (32, 9, 11, 12):
                blank = False
                break
        if blank:
            continue
        if skip > 0:
            skip -= 1
            continue
        shift = size - s  # data[k] goes to out[k + shift]
        k = s
        while k < j and k + BLOCK <= len(data):
            copy_block(data, k, out, k + shift)
            k += BLOCK
        while k < j:
            out[k + shift] = data[k]
            k += 1
        size += j - s
        rows += 1
        offsets[rows] = size
    return out[:size], offsets[: rows + 1]
