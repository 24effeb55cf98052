"""Does a valid JSON document fit a Spark type exactly? A byte scan that decides, per row,
whether the vectorised reader may take it or the reference parser must.

A document *fits* when pyarrow's reader, given the read type, yields exactly what the reference
parser would: every key is known (unknown keys may only hold ``null``), no key repeats, objects
are where structs are, arrays where arrays are, strings where strings are, integers are whole
numbers within range, doubles are numbers of sane magnitude, booleans are ``true``/``false``.
Anything else (drift to rescue, a value to convert, an edge case) does not fit and goes to the
reference parser, row by row; there are few such rows, and the rule keeps the two paths equal.

The type is compiled once into flat arrays (:class:`TypeTable`), so the scan is a numba loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    StructType,
    TimestampType,
)

from dspark_json.parse.kernels import (
    KIND_INVALID,
    KIND_NONE,
    KIND_OBJECT,
    MAX_DEPTH,
    extract_row,
    validate_row,
)

__all__ = [
    "CODE_EXTRA",
    "CODE_FITS",
    "CODE_INVALID",
    "CODE_MISFIT",
    "CODE_NONE",
    "CODE_NULL",
    "TypeTable",
    "compile_type",
    "scan_content_fit",
    "scan_envelope_fit",
]

# Row codes returned by the scans.
CODE_NULL = -2  # a null row (no body, no content)
CODE_NONE = -1  # no JSON found in the text (content only)
CODE_INVALID = 0  # not valid JSON (for envelopes: or not an object)
CODE_FITS = 1
CODE_MISFIT = 2  # valid JSON that the reference parser must handle
CODE_EXTRA = 3  # fits, but for unknown keys with values: read it, and rescue those separately

# Node types.
T_STRUCT, T_ARRAY, T_STRING, T_INT, T_DOUBLE, T_BOOL, T_REJECT = 1, 2, 3, 4, 5, 6, 7

#: Doubles with a decimal exponent beyond this (or as many integer digits) go to the reference
#: parser, which decides between a value, zero and overflow the way Python does.
_MAX_EXPONENT = 300
#: Integers with more digits go to the reference parser (19 digits can overflow a long).
_MAX_INT_DIGITS = 18

_jit = njit(cache=True, nogil=True)


@dataclass(frozen=True)
class TypeTable:
    """A Spark type as arrays: node ``i`` has ``kind[i]``; a struct's fields are
    ``field_node[first[i]:first[i] + count[i]]`` named by ``keys[key_start[j]:key_end[j]]``;
    an array's element is node ``first[i]``; an integer's range is ``low[i]..high[i]``."""

    kind: np.ndarray
    first: np.ndarray
    count: np.ndarray
    low: np.ndarray
    high: np.ndarray
    field_node: np.ndarray
    key_start: np.ndarray
    key_end: np.ndarray
    keys: np.ndarray

    def arrays(self) -> tuple[np.ndarray, ...]:
        return (
            self.kind,
            self.first,
            self.count,
            self.low,
            self.high,
            self.field_node,
            self.key_start,
            self.key_end,
            self.keys,
        )


_INT_RANGES = {
    LongType: (-(2**63), 2**63 - 1),
    IntegerType: (-(2**31), 2**31 - 1),
}


def compile_type(dtype: DataType, *, timestamp_range: tuple[int, int] | None = None) -> TypeTable:
    """The table for ``dtype``. Timestamps are read as unix seconds in ``timestamp_range`` when
    it is given, else as text (converted afterwards); dates always as text; maps never fit."""
    kind: list[int] = []
    first: list[int] = []
    count: list[int] = []
    low: list[int] = []
    high: list[int] = []
    field_node: list[int] = []
    key_start: list[int] = []
    key_end: list[int] = []
    keys = bytearray()

    def add(t: DataType) -> int:
        index = len(kind)
        kind.append(0)
        first.append(0)
        count.append(0)
        low.append(0)
        high.append(0)
        if isinstance(t, StructType):
            kind[index] = T_STRUCT
            # Reserve the struct's field slots before compiling children.
            start = len(field_node)
            names = [f.name.encode() for f in t.fields]
            for name in names:
                field_node.append(-1)
                key_start.append(len(keys))
                keys.extend(name)
                key_end.append(len(keys))
            first[index], count[index] = start, len(names)
            for offset, f in enumerate(t.fields):
                field_node[start + offset] = add(f.dataType)
        elif isinstance(t, ArrayType):
            kind[index] = T_ARRAY
            first[index] = add(t.elementType)
        elif isinstance(t, StringType | DateType):
            kind[index] = T_STRING
        elif isinstance(t, TimestampType):
            if timestamp_range is None:
                kind[index] = T_STRING
            else:
                kind[index] = T_INT
                low[index], high[index] = timestamp_range
        elif isinstance(t, LongType | IntegerType):
            kind[index] = T_INT
            low[index], high[index] = _INT_RANGES[type(t)]
        elif isinstance(t, DoubleType | FloatType):
            kind[index] = T_DOUBLE
        elif isinstance(t, BooleanType):
            kind[index] = T_BOOL
        else:
            kind[index] = T_REJECT
        return index

    add(dtype)

    def ints(values: list[int]) -> np.ndarray:
        return np.array(values, dtype=np.int64)

    return TypeTable(
        kind=np.array(kind, dtype=np.int8),
        first=ints(first),
        count=ints(count),
        low=ints(low),
        high=ints(high),
        field_node=ints(field_node),
        key_start=ints(key_start),
        key_end=ints(key_end),
        keys=np.frombuffer(bytes(keys) or b"\0", dtype=np.uint8).copy(),
    )


@_jit
def _skip_ws(data: Any, pos: int, end: int) -> int:
    while pos < end and (data[pos] == 32 or data[pos] == 9 or data[pos] == 10 or data[pos] == 13):
        pos += 1
    return pos


@_jit
def _string_end(data: Any, pos: int) -> int:
    """``pos`` at an opening quote of a valid string: the position after its closing quote."""
    pos += 1
    while data[pos] != 34:
        pos += 2 if data[pos] == 92 else 1
    return pos + 1


@_jit
def _number_fits(data: Any, pos: int, end: int, node_kind: int, lo: int, hi: int) -> int:
    """``pos`` at a valid number: its end when it fits the node, else -1."""
    negative = data[pos] == 45
    if negative:
        pos += 1
    digits = 0
    value = 0
    nonzero = False
    while pos < end and 48 <= data[pos] <= 57:
        if digits < _MAX_INT_DIGITS:
            value = value * 10 + (data[pos] - 48)
        nonzero = nonzero or data[pos] != 48
        digits += 1
        pos += 1
    fraction = pos < end and data[pos] == 46
    if fraction:
        pos += 1
        while pos < end and 48 <= data[pos] <= 57:
            pos += 1
    exponent = 0
    has_exponent = pos < end and (data[pos] == 101 or data[pos] == 69)
    if has_exponent:
        pos += 1
        if data[pos] == 43 or data[pos] == 45:
            pos += 1
        while pos < end and 48 <= data[pos] <= 57:
            if exponent <= _MAX_EXPONENT:
                exponent = exponent * 10 + (data[pos] - 48)
            pos += 1
    if node_kind == T_INT:
        if fraction or has_exponent or digits > _MAX_INT_DIGITS:
            return -1
        if negative:
            value = -value
        return pos if lo <= value <= hi else -1
    # A double: "-0" (an integer) is 0.0 for Python but -0.0 for Arrow.
    if negative and not nonzero and not fraction and not has_exponent:
        return -1
    if exponent > _MAX_EXPONENT or digits > _MAX_EXPONENT:
        return -1
    return pos


@_jit
def _skip_value(data: Any, pos: int, end: int) -> int:
    """``pos`` at a valid JSON value: the position after it."""
    c = data[pos]
    if c == 34:
        return _string_end(data, pos)
    if c == 123 or c == 91:
        depth = 0
        while True:
            c = data[pos]
            if c == 34:
                pos = _string_end(data, pos)
                continue
            if c == 123 or c == 91:
                depth += 1
            elif c == 125 or c == 93:
                depth -= 1
                if depth == 0:
                    return pos + 1
            pos += 1
    while pos < end:
        c = data[pos]
        if c == 44 or c == 125 or c == 93 or c == 32 or c == 9 or c == 10 or c == 13:
            break
        pos += 1
    return pos


@_jit
def fits_row(
    data: Any,
    start: int,
    end: int,
    kind: Any,
    first: Any,
    count: Any,
    low: Any,
    high: Any,
    field_node: Any,
    key_start: Any,
    key_end: Any,
    keys: Any,
    stack_node: Any,
    stack_stamp: Any,
    stamps: Any,
    clock: Any,
) -> int:
    """Whether the valid JSON document in ``data[start:end]`` fits type node 0 (see module doc):
    ``CODE_MISFIT``, ``CODE_FITS``, or ``CODE_EXTRA`` when it fits but for unknown keys holding
    values (pyarrow reads it, ignoring them; they are rescued separately).

    ``stack_node``/``stack_stamp`` are scratch of ``MAX_DEPTH`` entries; ``stamps`` one entry per
    struct field, and ``clock`` a one-element counter, both kept across calls (duplicate keys).
    """
    pos = _skip_ws(data, start, end)
    depth = 0
    node = 0
    extra = False
    state = 0  # 0: a value of type ``node`` starts at pos; 1: a value ended; 2: a key starts
    while True:
        if state == 0:
            c = data[pos]
            t = kind[node]
            state = 1
            if c == 110:  # null fits anything
                pos += 4
            elif t == T_STRUCT or t == T_ARRAY:
                if c != (123 if t == T_STRUCT else 91):
                    return CODE_MISFIT
                stack_node[depth] = node
                clock[0] += 1
                stack_stamp[depth] = clock[0]
                depth += 1
                pos = _skip_ws(data, pos + 1, end)
                if data[pos] == 125 or data[pos] == 93:
                    depth -= 1
                    pos += 1
                elif t == T_ARRAY:
                    node = first[node]
                    state = 0
                else:
                    state = 2
            elif t == T_STRING:
                if c != 34:
                    return CODE_MISFIT
                pos = _string_end(data, pos)
            elif t == T_INT or t == T_DOUBLE:
                if not (c == 45 or 48 <= c <= 57):
                    return CODE_MISFIT
                pos = _number_fits(data, pos, end, t, low[node], high[node])
                if pos < 0:
                    return CODE_MISFIT
            elif t == T_BOOL:
                if c == 116:
                    pos += 4
                elif c == 102:
                    pos += 5
                else:
                    return CODE_MISFIT
            else:
                return CODE_MISFIT
        elif state == 1:
            if depth == 0:
                return CODE_EXTRA if extra else CODE_FITS
            pos = _skip_ws(data, pos, end)
            c = data[pos]
            if c == 125 or c == 93:
                depth -= 1
                pos += 1
                continue
            pos = _skip_ws(data, pos + 1, end)  # the comma
            parent = stack_node[depth - 1]
            if kind[parent] == T_ARRAY:
                node = first[parent]
                state = 0
            else:
                state = 2
        else:
            parent = stack_node[depth - 1]
            key_begin = pos + 1
            pos = _string_end(data, pos)
            key_stop = pos - 1
            for b in range(key_begin, key_stop):
                if data[b] == 92:  # an escaped key: leave it to the reference parser
                    return CODE_MISFIT
            field = -1
            for j in range(first[parent], first[parent] + count[parent]):
                if key_end[j] - key_start[j] != key_stop - key_begin:
                    continue
                same = True
                for b in range(key_stop - key_begin):
                    if keys[key_start[j] + b] != data[key_begin + b]:
                        same = False
                        break
                if same:
                    field = j
                    break
            pos = _skip_ws(data, pos, end)
            pos = _skip_ws(data, pos + 1, end)  # the colon
            if field < 0:  # an unknown key: skip its value, note it unless null
                extra = extra or data[pos] != 110
                pos = _skip_value(data, pos, end)
                state = 1
                continue
            if stamps[field] == stack_stamp[depth - 1]:
                return CODE_MISFIT  # a repeated key
            stamps[field] = stack_stamp[depth - 1]
            node = field_node[field]
            state = 0


@_jit
def scan_envelope_fit(offsets: Any, data: Any, valid: Any, table: Any, lo: int, hi: int) -> Any:
    """For bodies ``lo..hi``: ``CODE_NULL``, ``CODE_INVALID`` (not valid JSON, or not an object),
    ``CODE_FITS``, ``CODE_EXTRA`` or ``CODE_MISFIT`` against the envelope type."""
    kind, first, count, low, high, field_node, key_start, key_end, keys = table
    codes = np.full(hi - lo, CODE_NULL, np.int8)
    stack = np.empty(MAX_DEPTH, np.uint8)
    stack_node = np.empty(MAX_DEPTH, np.int64)
    stack_stamp = np.empty(MAX_DEPTH, np.int64)
    stamps = np.zeros(max(len(field_node), 1), np.int64)
    clock = np.zeros(1, np.int64)
    for i in range(lo, hi):
        if not valid[i]:
            continue
        start, end = offsets[i], offsets[i + 1]
        if validate_row(data, start, end, stack) != KIND_OBJECT:
            codes[i - lo] = CODE_INVALID
            continue
        codes[i - lo] = fits_row(
            data, start, end, kind, first, count, low, high, field_node, key_start, key_end,
            keys, stack_node, stack_stamp, stamps, clock,
        )  # fmt: skip
    return codes


@_jit
def scan_content_fit(
    offsets: Any, data: Any, valid: Any, table: Any, lo: int, hi: int
) -> tuple[Any, Any, Any]:
    """For message texts ``lo..hi``: the JSON candidate's ``(starts, ends, codes)``, codes as in
    :func:`scan_envelope_fit` plus ``CODE_NONE`` where the text holds no JSON candidate. A bare
    ``null`` is left to the reference parser (it decides whether null fits the content type)."""
    kind, first, count, low, high, field_node, key_start, key_end, keys = table
    starts = np.zeros(hi - lo, np.int64)
    ends = np.zeros(hi - lo, np.int64)
    codes = np.full(hi - lo, CODE_NULL, np.int8)
    stack = np.empty(MAX_DEPTH, np.uint8)
    stack_node = np.empty(MAX_DEPTH, np.int64)
    stack_stamp = np.empty(MAX_DEPTH, np.int64)
    stamps = np.zeros(max(len(field_node), 1), np.int64)
    clock = np.zeros(1, np.int64)
    for i in range(lo, hi):
        if not valid[i]:
            continue
        start, end, found = extract_row(data, offsets[i], offsets[i + 1], stack)
        starts[i - lo], ends[i - lo] = start, end
        if found == KIND_NONE:
            codes[i - lo] = CODE_NONE
        elif found == KIND_INVALID:
            codes[i - lo] = CODE_INVALID
        elif data[start] == 110:
            codes[i - lo] = CODE_MISFIT
        else:
            codes[i - lo] = fits_row(
                data, start, end, kind, first, count, low, high, field_node, key_start,
                key_end, keys, stack_node, stack_stamp, stamps, clock,
            )  # fmt: skip
    return starts, ends, codes
