"""The candidates of the content rule (:func:`~dspark_json.parse.json.conform.extract_row`): a
fenced block, else the outermost braces, in text that is not JSON as a whole."""

from __future__ import annotations

from typing import Any

from dspark_json.buffers.bytes import BACKTICK, LBRACE, LBRACKET, LF, RBRACE
from dspark_json.buffers.compiled import leaf
from dspark_json.parse.json.grammar import find_byte, strip

__all__ = ["fallback_candidate", "find_fence"]


@leaf
def find_fence(data: Any, start: int, end: int) -> int:
    i = find_byte(data, start, end - 2, BACKTICK)
    while i >= 0:
        if data[i + 1] == BACKTICK and data[i + 2] == BACKTICK:
            return i
        i = find_byte(data, i + 1, end - 2, BACKTICK)
    return -1


@leaf
def fallback_candidate(data: Any, start: int, end: int) -> tuple[bool, int, int]:
    """Rules 2 and 3 of :func:`extract_row` for stripped text that is not JSON as a whole:
    ``(found, start, end)`` of the candidate."""
    fence = find_fence(data, start, end)
    if fence >= 0:
        newline = find_byte(data, fence, end, LF)
        if newline >= 0:
            close = find_fence(data, newline + 1, end)
            body_start, body_end = strip(data, newline + 1, close if close >= 0 else end)
            if body_start < body_end and (
                data[body_start] == LBRACE or data[body_start] == LBRACKET
            ):
                return True, body_start, body_end
    first = find_byte(data, start, end, LBRACE)
    last = -1
    for i in range(end - 1, start - 1, -1):
        if data[i] == RBRACE:
            last = i
            break
    if 0 <= first < last:
        return True, first, last + 1
    return False, start, end
