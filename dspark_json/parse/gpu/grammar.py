"""The three pieces of the CPU grammar that are CPU instructions (word and block loads,
:mod:`dspark_json.buffers.words`), as byte loops for the device: a thread per body reads its
bytes one at a time, and the device's parallelism is across bodies. Each decides exactly what its
CPU namesake decides (``tests/parse/gpu/test_device_fit.py`` holds them to each other); the
rest of the grammar is the CPU's own source, compiled for the device (:mod:`.targets`)."""

from __future__ import annotations

from typing import Any

from dspark_json.parse.gpu.targets import portable
from dspark_json.parse.json.grammar import _hex4, _utf8_length

__all__ = ["find_byte", "same_run", "scan_string"]

_QUOTE, _BACKSLASH = 34, 92


@portable
def scan_string(data: Any, pos: int, end: int, lenient: bool) -> int:
    """:func:`dspark_json.parse.json.grammar.scan_string`: ``pos`` at an opening quote; the
    position after the closing quote, or -1 (invalid UTF-8, a raw control character unless
    ``lenient``, a bad escape, a lone surrogate, no closing quote)."""
    pos += 1
    while pos < end:
        c = data[pos]
        if c == _QUOTE:
            return pos + 1
        if c == _BACKSLASH:
            if pos + 1 >= end:
                return -1
            e = data[pos + 1]
            if e == 117:  # \uXXXX
                unit = _hex4(data, pos + 2, end)
                if unit < 0:
                    return -1
                pos += 6
                if 0xD800 <= unit <= 0xDBFF:
                    if pos + 1 < end and data[pos] == _BACKSLASH and data[pos + 1] == 117:
                        low = _hex4(data, pos + 2, end)
                        if 0xDC00 <= low <= 0xDFFF:
                            pos += 6
                            continue
                    return -1
                if 0xDC00 <= unit <= 0xDFFF:
                    return -1
                continue
            if (
                e == 34
                or e == 92
                or e == 47
                or e == 98
                or e == 102
                or e == 110
                or e == 114
                or e == 116
            ):
                pos += 2
                continue
            return -1
        if c < 32:
            if not lenient:
                return -1
            pos += 1
            continue
        if c < 128:
            pos += 1
            continue
        length = _utf8_length(data, pos, end)
        if length == 0:
            return -1
        pos += length
    return -1


@portable
def same_run(x: Any, a: int, y: Any, b: int, length: int) -> bool:
    """:func:`dspark_json.parse.json.grammar.same_run`: whether ``x[a:a + length]`` and
    ``y[b:b + length]`` are the same bytes."""
    for i in range(length):
        if x[a + i] != y[b + i]:
            return False
    return True


@portable
def find_byte(data: Any, start: int, end: int, byte: int) -> int:
    """:func:`dspark_json.parse.json.grammar.find_byte`: where ``byte`` first is in
    ``data[start:end]``, or -1."""
    for i in range(start, end):
        if data[i] == byte:
            return i
    return -1
