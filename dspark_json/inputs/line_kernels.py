"""The compiled kernels of :func:`dspark_json.inputs.lines.pack_rows`: where lines end, and the
rows copied end to end, 64 bytes at a time. Apart from :mod:`~dspark_json.inputs.lines` so that
counting rows (the listing, while Spark plans) does not import numba."""

from __future__ import annotations

import numpy as np

from dspark_json.buffers.compiled import kernel
from dspark_json.buffers.words import BLOCK, block_equal, copy_block, lowest_bit

__all__ = ["line_ends", "pack"]


@kernel
def line_ends(data: np.ndarray, lone_lf: bool) -> np.ndarray:
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
def pack(data: np.ndarray, ends: np.ndarray, skip: int, take: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~dspark_json.inputs.lines.pack_rows` of ``data`` whose lines end at ``ends``; each
    row copied a block at a time (a block may write past its end: the next row, or the block of
    slack, takes it)."""
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
