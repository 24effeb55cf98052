"""Whole JSON documents, checked in one byte pass (:func:`check_row`): are they valid, and do they
fit a Spark type exactly? The check decides, per row, whether the vectorised reader may take it
or the reference parser must; the column scans (:mod:`dspark_json.parse.json.scans`),
:func:`validate_row` and :func:`extract_row` (the content rule) run the same pass.

What "valid JSON" means for dspark-json (RFC 8259, and what Arrow can hold): the grammar exactly
(no NaN/Infinity, no comments, no trailing commas, whitespace only space, tab, CR and LF, no
byte-order mark); strings of valid UTF-8 without raw control characters, ``\\u`` escapes that
form code points (a lone surrogate is rejected: UTF-8 cannot hold it); nesting at most
``MAX_DEPTH`` deep.

A document *fits* when pyarrow's reader, given the read type, yields exactly what the reference
parser would: every key is known (unknown keys may only hold ``null``), no key repeats, objects
are where structs are, arrays where arrays are, strings where strings are, integers are whole
numbers within range, doubles are numbers of sane magnitude, booleans are ``true``/``false``.
Anything else (drift to rescue, a value to convert, an edge case) does not fit and goes to the
reference parser, row by row; there are few such rows, and the rule keeps the two paths equal.

The type is compiled once into flat arrays (:class:`TypeTable`), so the scan is a numba loop.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampType,
)

from dspark_json.buffers.bytes import (
    BACKSLASH,
    COLON,
    COMMA,
    CONTROL_END,
    DOT,
    LBRACE,
    LBRACKET,
    LOWER_E,
    LOWER_N,
    LOWER_T,
    MINUS,
    NINE,
    PLUS,
    QUOTE,
    RBRACE,
    RBRACKET,
    UPPER_E,
    ZERO,
)
from dspark_json.buffers.compiled import kernel, leaf
from dspark_json.parse.json.candidates import fallback_candidate
from dspark_json.parse.json.grammar import (
    KIND_ARRAY,
    KIND_INVALID,
    KIND_NONE,
    KIND_OBJECT,
    KIND_SCALAR,
    MAX_DEPTH,
    same_bytes,
    same_run,
    scan_literal,
    scan_number,
    scan_string,
    skip_ws,
    strip,
)
from dspark_json.response.convert import is_tuple

__all__ = [
    "CODE_EXTRA",
    "CODE_FITS",
    "CODE_INVALID",
    "CODE_MISFIT",
    "CODE_NONE",
    "CODE_NULL",
    "FOUND",
    "JSON_TEXT",
    "NESTED_PATH",
    "NESTED_STRIDE",
    "TEXT_ANY",
    "T_BOOL",
    "T_DOUBLE",
    "T_INT",
    "T_MAP",
    "T_STRING",
    "T_STRUCT",
    "Found",
    "Scratch",
    "TypeNodes",
    "TypeTable",
    "check_row",
    "compile_type",
    "emit_null",
    "extract_row",
    "found_keys",
    "room",
    "scan_fitted_number",
    "scratch",
    "validate_row",
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
#: A map<string, T>: an object of any keys; its keys are node ``first[i]`` (strings), its
#: values node ``high[i]``; its event's ``b`` is its entry count, as an array's.
T_MAP = 8

#: ``low`` of a string node that takes any JSON value, a non-string as its JSON text (a Spark
#: string column: free-form values, unions of scalars; dates and timestamps read as text do not).
TEXT_ANY = 1
#: ``low`` of a struct node that is a tuple (:func:`is_tuple`): it takes a JSON array too, its
#: items by position (item ``j`` is field ``j``; an item past the fields is an unknown key whose
#: name is its position, rescued as ``path[j]``), as well as an object.
TUPLE_ITEMS = 1
#: An event's ``a`` for a value held as JSON text: ``JSON_TEXT - start`` (``<= JSON_TEXT``;
#: ``b`` its end), apart from a string's body (``a >= 0``) and a null (``a = -1``).
JSON_TEXT = -3

#: Doubles with a decimal exponent beyond this (or as many integer digits) go to the reference
#: parser, which decides between a value, zero and overflow the way Python does.
_MAX_EXPONENT = 300
#: Integers with more digits go to the reference parser (19 digits can overflow a long).
_MAX_INT_DIGITS = 18

#: Top-level unknown keys recorded per row; a row with more is walked in Python.
FOUND = 64
#: Unknown keys deeper down recorded per row, with their path of at most ``NESTED_PATH``
#: levels: ``NESTED_STRIDE`` entries each (key start, key end, value start, value end, path
#: length, then per level above the key's object: the type node of the container entered
#: through an object's field, or ``-(index + 1)`` of an array's element). A row with more,
#: or deeper, is walked in Python.
_NESTED = 32
NESTED_PATH = 8
NESTED_STRIDE = 5 + NESTED_PATH


class TypeNodes(NamedTuple):
    """A Spark type as arrays, as the kernels take it (:attr:`TypeTable.nodes`): node ``i`` has
    ``kind[i]``; a struct's fields are ``field_node[first[i]:first[i] + field_count[i]]``, named
    by ``keys[key_start[j]:key_end[j]]`` (a name that is not plain has no ``key_end``: -1); an
    array's element is node ``first[i]``; a map's keys node ``first[i]`` and values ``high[i]``;
    an integer's range is ``low[i]..high[i]``. ``closure[closure_at[i]:closure_at[i + 1]]`` are
    the nodes a null at node ``i`` makes null: itself and every node below it through struct
    fields (not through arrays: a null list has no elements), rejected nodes excepted."""

    kind: np.ndarray
    first: np.ndarray
    field_count: np.ndarray
    low: np.ndarray
    high: np.ndarray
    field_node: np.ndarray
    key_start: np.ndarray
    key_end: np.ndarray
    keys: np.ndarray
    closure: np.ndarray
    closure_at: np.ndarray


@dataclass(frozen=True)
class TypeTable:
    """A Spark type compiled (:func:`compile_type`): its :class:`TypeNodes`, which the kernels
    take, and for Python each field slot's name (``nodes.field_node``'s order; a name that is
    not plain has no ``key_end``)."""

    nodes: TypeNodes
    names: tuple[str, ...]

    @functools.cached_property
    def fields(self) -> tuple[dict[str, int], ...]:
        """Per node, a struct's fields: name -> the field's node (other nodes: empty). For
        Python's reads, built once per table, not once per batch."""
        nodes, names = self.nodes, self.names
        out: list[dict[str, int]] = []
        for node in range(len(nodes.kind)):
            start = int(nodes.first[node]) if nodes.kind[node] == T_STRUCT else 0
            count = int(nodes.field_count[node]) if nodes.kind[node] == T_STRUCT else 0
            out.append({names[j]: int(nodes.field_node[j]) for j in range(start, start + count)})
        return tuple(out)

    @functools.cached_property
    def kinds(self) -> tuple[int, ...]:
        """Each node's ``T_*``, as Python ints (for Python's reads)."""
        return tuple(int(k) for k in self.nodes.kind)


class Scratch(NamedTuple):
    """What :func:`check_row` keeps of the open containers (``MAX_DEPTH`` entries each) and of
    the keys it has seen, reused from row to row (:func:`scratch` makes one):

    - ``stack``: the open brackets; ``stack_node``: their type nodes (-1: untyped, inside an
      unknown key or a misfit); ``stack_count``: per open array, its elements so far, and per
      open object, the field its next key most likely is (the one after the last found);
    - ``stack_stamp``: a stamp per open object; ``stamps``: per struct field, the stamp of the
      object it was last seen in (a repeated key has its object's stamp); ``clock``: the last
      stamp given (one entry). Both kept across rows, so they are never reset."""

    stack: np.ndarray
    stack_node: np.ndarray
    stack_count: np.ndarray
    stack_stamp: np.ndarray
    stamps: np.ndarray
    clock: np.ndarray


class Found(NamedTuple):
    """The unknown keys holding values that :func:`check_row` records in a row
    (:func:`found_keys` makes one): ``spans`` holds the top-level ones first (key start, key
    end, value start, value end: four entries each, ``counts[0]`` keys), and after
    ``4 * FOUND`` entries the deeper ones (``NESTED_STRIDE`` entries each, with their path:
    ``counts[1]`` keys). More than fit, or a path too long, set ``counts[0]`` to -1: the row
    is then walked in Python."""

    spans: np.ndarray
    counts: np.ndarray


_INT_RANGES = {
    LongType: (-(2**63), 2**63 - 1),
    IntegerType: (-(2**31), 2**31 - 1),
}


def compile_type(
    dtype: DataType,
    *,
    timestamp_range: tuple[int, int] | None = None,
    json_text: bool = False,
    events: bool = False,
) -> TypeTable:
    """The table for ``dtype``. Timestamps are read as unix seconds in ``timestamp_range`` when
    it is given, else as text (converted afterwards); dates always as text.
    ``json_text`` (a table read from the scan's events): a string column takes any JSON value,
    a non-string as its JSON text (:data:`TEXT_ANY`), as the reference parser fills it, a map
    is read as a map (:data:`T_MAP`) and a tuple struct takes a JSON array too
    (:data:`TUPLE_ITEMS`). ``events`` alone (the envelope's table, read from the events): maps
    are read as maps and tuple structs take arrays, the rest as without ``json_text``. Without
    either, a map never fits and a tuple struct takes an object only."""
    kind: list[int] = []
    first: list[int] = []
    count: list[int] = []
    low: list[int] = []
    high: list[int] = []
    field_node: list[int] = []
    key_start: list[int] = []
    key_end: list[int] = []
    names: list[str] = []
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
            if (json_text or events) and is_tuple(t):
                low[index] = TUPLE_ITEMS
            # Reserve the struct's field slots before compiling children.
            start = len(field_node)
            names.extend(f.name for f in t.fields)
            for name in (f.name.encode() for f in t.fields):
                field_node.append(-1)
                key_start.append(len(keys))
                keys.extend(name)
                # A name with a quote, a backslash or a control character never matches a
                # key as written: such a key is escaped (or holds raw control characters,
                # in lenient content), and the reference parser decides what it names.
                plain = not any(b < CONTROL_END or b in (QUOTE, BACKSLASH) for b in name)
                key_end.append(len(keys) if plain else -1)
            first[index], count[index] = start, len(t.fields)
            for offset, f in enumerate(t.fields):
                field_node[start + offset] = add(f.dataType)
        elif isinstance(t, ArrayType):
            kind[index] = T_ARRAY
            first[index] = add(t.elementType)
        elif isinstance(t, MapType) and (json_text or events):
            kind[index] = T_MAP
            first[index] = add(StringType())
            high[index] = add(t.valueType)
        elif isinstance(t, StringType | DateType):
            kind[index] = T_STRING
            if json_text and isinstance(t, StringType):
                low[index] = TEXT_ANY
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

    def below(node: int) -> list[int]:
        if kind[node] == T_REJECT:
            return []
        if kind[node] != T_STRUCT:
            return [node]
        fields = field_node[first[node] : first[node] + count[node]]
        return [node, *(k for j in fields for k in below(j))]

    closures = [below(node) for node in range(len(kind))]

    nodes = TypeNodes(
        kind=np.array(kind, dtype=np.int8),
        first=ints(first),
        field_count=ints(count),
        low=ints(low),
        high=ints(high),
        field_node=ints(field_node),
        key_start=ints(key_start),
        key_end=ints(key_end),
        keys=np.frombuffer(bytes(keys) or b"\0", dtype=np.uint8).copy(),
        closure=ints([k for c in closures for k in c] or [0]),
        closure_at=ints([0, *np.cumsum([len(c) for c in closures]).tolist()]),
    )
    return TypeTable(nodes, tuple(names))


@leaf
def scan_fitted_number(
    data: Any, pos: int, end: int, node_kind: int, lo: int, hi: int
) -> tuple[int, bool, int]:
    """``pos`` at a number's first byte (a minus or a digit), for a node of ``node_kind``
    (``T_INT``, with the range ``lo..hi``, or ``T_DOUBLE``): where the number ends, as
    :func:`~dspark_json.parse.json.grammar.scan_number` says (-1: not a number), whether it
    fits the node, and for an integer node its value; in one pass over its bytes (a scan,
    then a second pass to fit, read each digit twice)."""
    negative = data[pos] == MINUS
    if negative:
        pos += 1
    if pos >= end or not ZERO <= data[pos] <= NINE:
        return -1, False, 0
    digits = 0
    value = 0
    nonzero = data[pos] != ZERO  # a leading zero is the integer part's only digit
    if nonzero:
        while pos < end and ZERO <= data[pos] <= NINE:
            if digits < _MAX_INT_DIGITS:
                value = value * 10 + (data[pos] - ZERO)
            digits += 1
            pos += 1
    else:
        digits = 1
        pos += 1
    fraction = pos < end and data[pos] == DOT
    if fraction:
        pos += 1
        if pos >= end or not ZERO <= data[pos] <= NINE:
            return -1, False, 0
        while pos < end and ZERO <= data[pos] <= NINE:
            pos += 1
    exponent = 0
    exponent_sign = 1
    has_exponent = pos < end and (data[pos] == LOWER_E or data[pos] == UPPER_E)
    if has_exponent:
        pos += 1
        if pos < end and (data[pos] == PLUS or data[pos] == MINUS):
            exponent_sign = -1 if data[pos] == MINUS else 1
            pos += 1
        if pos >= end or not ZERO <= data[pos] <= NINE:
            return -1, False, 0
        while pos < end and ZERO <= data[pos] <= NINE:
            if exponent <= _MAX_EXPONENT:
                exponent = exponent * 10 + (data[pos] - ZERO)
            pos += 1
    if node_kind == T_INT:
        if fraction or has_exponent or digits > _MAX_INT_DIGITS:
            return pos, False, 0
        if negative:
            value = -value
        return pos, lo <= value <= hi, value
    # A double: "-0" (an integer) is 0.0 for Python but -0.0 for Arrow.
    if negative and not nonzero and not fraction and not has_exponent:
        return pos, False, 0
    if exponent > _MAX_EXPONENT or digits > _MAX_EXPONENT:
        return pos, False, 0
    if digits + exponent_sign * exponent > _MAX_EXPONENT:  # 1e10 * 1e300: beyond a double
        return pos, False, 0
    return pos, True, 0


@leaf
def _emit(events: Any, n: int, node: int, a: int, b: int) -> int:
    """Event ``n`` (the caller made room); returns ``n + 1``."""
    events[3 * n] = node
    events[3 * n + 1] = a
    events[3 * n + 2] = b
    return n + 1


@leaf
def emit_null(events: Any, n: int, node: int, nodes: TypeNodes) -> int:
    """A null for ``node`` and for every node below it through struct fields (its closure,
    :class:`TypeNodes`): one event, ``(node, -1, 0)``, which the reader of the events expands
    (:mod:`dspark_json.parse.json.decode`), where an event per node of the closure made the
    scans write, and the reader's passes read, more than half of a vLLM envelope's events
    (the extras nobody sends). None for a rejected node (its closure is empty)."""
    if nodes.closure_at[node + 1] == nodes.closure_at[node]:
        return n
    return _emit(events, n, node, -1, 0)


@leaf
def _emit_close(
    events: Any, n: int, node: int, nodes: TypeNodes, stamps: Any, stamp: int, elements: int
) -> int:
    """A struct or array of type ``node`` just closed: a null for each field the struct did
    not hold (``stamps`` of its fields differ from its ``stamp``), then the container."""
    if nodes.kind[node] != T_STRUCT:
        return _emit(events, n, node, 1, elements)
    first = nodes.first[node]
    for j in range(first, first + nodes.field_count[node]):
        if stamps[j] != stamp:
            n = emit_null(events, n, nodes.field_node[j], nodes)
    return _emit(events, n, node, 1, 0)


@kernel
def room(events: Any, n: int, need: int, done: int = 0, rows: int = 0, most: int = 0) -> Any:
    """``events``, grown when fewer than ``need`` events fit after the first ``n``: at least
    twice as large, and once ``done`` of a scan's ``rows`` are scanned, to what they project
    for all of them (an eighth more), but never past ``most``, the most events the scan can
    still write (its bytes left, each a value of the widest node: rows that start long do not
    project a huge array): one or two copies of a large array instead of one per doubling
    (figures: benchmarks/README.md)."""
    if 3 * (n + need) <= len(events):
        return events
    size = max(2 * len(events), 3 * (n + need))
    if done >= 64:
        projected = n * rows // done
        projected = min(projected + projected // 8 + need, most)
        size = max(size, 3 * projected)
    grown = np.empty(size, np.int64)
    grown[: 3 * n] = events[: 3 * n]
    return grown


@leaf
def _recorded(data: Any, start: int, stop: int, found: Found) -> bool:
    """Whether the key ``data[start:stop]`` has the bytes of an unknown key recorded so far in
    the row (at any depth: a key of another object with the same name counts too)."""
    spans, top = found.spans, found.counts[0]
    for r in range(top + found.counts[1]):
        at = 4 * r if r < top else 4 * FOUND + NESTED_STRIDE * (r - top)
        if spans[at] >= 0 and same_bytes(data, spans[at], spans[at + 1], start, stop):
            return True
    return False


@leaf
def _under_map(kind: Any, stack_node: Any, depth: int) -> bool:
    """Whether an open container of the ``depth`` open ones is a map's value (its path
    holds a key)."""
    for level in range(depth):
        node = stack_node[level]
        if node >= 0 and kind[node] == T_MAP:
            return True
    return False


@leaf
def _item(node: int, index: int, nodes: TypeNodes, stamps: Any, stamp: int) -> int:
    """The type node of item ``index`` of the tuple struct ``node`` (its field, stamped as held
    by the tuple of ``stamp``), or -1 for an item past its fields."""
    if index >= nodes.field_count[node]:
        return -1
    slot = nodes.first[node] + index
    stamps[slot] = stamp
    return int(nodes.field_node[slot])


@leaf
def check_row(
    data: Any,
    start: int,
    end: int,
    nodes: TypeNodes,
    scratch: Scratch,
    found: Found,
    lenient: bool,
    events: Any,
    n_events: Any,
) -> tuple[int, int]:
    """One pass over ``data[start:end]``: ``(json kind, fit code)``. The kind is as
    :func:`validate_row` says (``KIND_INVALID`` for invalid JSON);
    the code, for valid JSON, whether it fits type node 0 of ``nodes``: ``CODE_FITS``,
    ``CODE_EXTRA`` (fits but for unknown keys holding values: pyarrow reads it ignoring them,
    they are rescued separately) or ``CODE_MISFIT``.

    ``scratch`` is where the pass keeps the open containers (:class:`Scratch`); the unknown
    keys holding values go to ``found`` (:class:`Found`). ``lenient``: raw control characters
    are allowed inside strings (:func:`~dspark_json.parse.json.grammar.scan_string`).

    With ``n_events`` of one entry, the pass also *shreds* the document: each typed value is
    written to ``events`` from event ``n_events[0]`` on, as :mod:`dspark_json.parse.json.decode`
    describes; the caller makes room, and drops the events of a document that does not fit.
    With ``n_events`` empty, nothing is written.
    """
    kind, first, count = nodes.kind, nodes.first, nodes.field_count
    low, high = nodes.low, nodes.high
    field_node, key_start, key_end, keys = (
        nodes.field_node, nodes.key_start, nodes.key_end, nodes.keys
    )  # fmt: skip
    stack, stack_node, stack_count = scratch.stack, scratch.stack_node, scratch.stack_count
    stack_stamp, stamps, clock = scratch.stack_stamp, scratch.stamps, scratch.clock
    found_n = found.counts
    spans = found.spans
    emit = len(n_events) > 0
    n = n_events[0] if emit else 0
    pos = skip_ws(data, start, end)
    if pos >= end:
        return KIND_INVALID, CODE_MISFIT
    top = data[pos]
    depth = 0
    node = 0  # the type node of the value expected next (-1: untyped)
    unknown = False  # that value belongs to an unknown key of a typed object
    misfit = False
    extra = False
    state = 0  # 0: a value is expected, 1: a value just ended, 2: a key is expected
    found_n[0] = 0
    found_n[1] = 0
    recording = False
    nesting = 0  # the depth of the object whose unknown key's value is being recorded
    recording_nested = False  # among the keys deeper down (with a path)
    item = -1  # the unknown key ahead is a tuple's item past its fields, at this position
    key_begin = key_stop = 0
    # A container held whole as a string node's JSON text (TEXT_ANY): its node, where it
    # begins, and the depth it was opened at (-1: none open; its inside is untyped).
    text_node = text_begin = 0
    text_depth = -1
    while True:
        pos = skip_ws(data, pos, end)
        if state == 1:
            if recording and depth == nesting:
                if not recording_nested:
                    spans[4 * found_n[0] + 3] = pos
                    found_n[0] += 1
                else:
                    spans[4 * FOUND + NESTED_STRIDE * found_n[1] + 3] = pos
                    found_n[1] += 1
                recording = False
            if depth == 0:
                if pos != end:
                    return KIND_INVALID, CODE_MISFIT
                json_kind = (
                    KIND_OBJECT if top == LBRACE else KIND_ARRAY if top == LBRACKET else KIND_SCALAR
                )
                if misfit:
                    return json_kind, CODE_MISFIT
                if emit:
                    n_events[0] = n
                return json_kind, CODE_EXTRA if extra else CODE_FITS
            if pos >= end:
                return KIND_INVALID, CODE_MISFIT
            c = data[pos]
            bracket = stack[depth - 1]
            if c == COMMA:
                pos += 1
                parent = stack_node[depth - 1]
                if bracket == LBRACE:
                    state = 2
                else:
                    if parent >= 0 and kind[parent] == T_STRUCT:  # a tuple's next item
                        index = stack_count[depth - 1]
                        node = _item(parent, index, nodes, stamps, stack_stamp[depth - 1])
                        unknown = node < 0  # past its fields: rescued as path[index]
                        item = index if unknown else -1
                    else:
                        node = first[parent] if parent >= 0 else -1
                    stack_count[depth - 1] += 1
                    state = 0
            elif (c == RBRACE and bracket == LBRACE) or (c == RBRACKET and bracket == LBRACKET):
                depth -= 1
                pos += 1
                if depth == text_depth:
                    text_depth = -1
                    if emit:
                        n = _emit(events, n, text_node, JSON_TEXT - text_begin, pos)
                elif emit and stack_node[depth] >= 0:
                    n = _emit_close(
                        events, n, stack_node[depth], nodes, stamps, stack_stamp[depth],
                        stack_count[depth],
                    )  # fmt: skip
            else:
                return KIND_INVALID, CODE_MISFIT
        elif state == 2:
            if pos >= end or data[pos] != QUOTE:
                return KIND_INVALID, CODE_MISFIT
            key_begin = pos + 1
            parent = stack_node[depth - 1]
            # Documents mostly hold their keys in the schema's order: the field after the last
            # one found (an object's stack_count holds it) is looked at first, and where the
            # key is its name as written, followed by the closing quote, the key needs no scan
            # (a name matched as written is plain: no quote, backslash or control character).
            expected = (
                stack_count[depth - 1]
                if parent >= 0 and kind[parent] == T_STRUCT and count[parent] > 0
                else -1
            )
            length = key_end[expected] - key_start[expected] if expected >= 0 else -1
            as_expected = (
                length >= 0
                and key_begin + length < end
                and data[key_begin + length] == QUOTE
                and same_run(keys, key_start[expected], data, key_begin, length)
            )
            if as_expected:
                key_stop = key_begin + length
                pos = key_stop + 1
            else:
                pos = scan_string(data, pos, end, lenient)
                if pos < 0:
                    return KIND_INVALID, CODE_MISFIT
                key_stop = pos - 1
            node = -1
            unknown = False
            if parent >= 0 and kind[parent] == T_MAP:  # any key: the next entry
                if emit:
                    n = _emit(events, n, first[parent], key_begin, key_stop)
                stack_count[depth - 1] += 1
                node = high[parent]
            elif parent >= 0:
                field = -1
                lo, hi = first[parent], first[parent] + count[parent]
                if as_expected:  # the field looked at first: no second compare
                    field = expected
                else:  # every field, from the expected one on
                    for k in range(hi - lo):
                        j = expected + k
                        if j >= hi:
                            j -= hi - lo
                        if key_end[j] - key_start[j] != key_stop - key_begin:
                            continue
                        if same_run(keys, key_start[j], data, key_begin, key_stop - key_begin):
                            field = j
                            break
                if field >= 0:  # the next key most likely names the field after it
                    stack_count[depth - 1] = field + 1 if field + 1 < hi else lo
                if field < 0:  # a name matched as written is plain (compile_type)
                    # Escaped, or raw control bytes: the reference parser decides what it names.
                    for b in range(key_begin, key_stop):
                        if data[b] == BACKSLASH or data[b] < CONTROL_END:
                            misfit = True
                            break
                if field < 0:
                    unknown = True
                elif stamps[field] == stack_stamp[depth - 1]:
                    misfit = True  # a repeated key
                else:
                    stamps[field] = stack_stamp[depth - 1]
                    node = field_node[field]
            pos = skip_ws(data, pos, end)
            if pos >= end or data[pos] != COLON:
                return KIND_INVALID, CODE_MISFIT
            pos += 1
            state = 0
        else:
            if pos >= end:
                return KIND_INVALID, CODE_MISFIT
            c = data[pos]
            if unknown:
                if c != LOWER_N:
                    extra = True
                    if found_n[0] < 0:
                        pass  # already too many: the row is walked
                    elif depth == 1 and item < 0 and found_n[0] < FOUND:
                        spans[4 * found_n[0]] = key_begin
                        spans[4 * found_n[0] + 1] = key_stop
                        spans[4 * found_n[0] + 2] = pos
                        recording = True
                        recording_nested = False
                        nesting = 1
                    elif _under_map(kind, stack_node, depth):
                        misfit = True  # a path through a map's key: the reference rescues it
                    elif (
                        (depth > 1 or item >= 0)
                        and depth <= NESTED_PATH + 1
                        and (found_n[1] < _NESTED)
                    ):
                        # A key deeper down, or a tuple's item past its fields (at any depth,
                        # rescued as path[i]: its key start is -(i + 1), its key end 0).
                        at = 4 * FOUND + NESTED_STRIDE * found_n[1]
                        spans[at] = key_begin if item < 0 else -(item + 1)
                        spans[at + 1] = key_stop if item < 0 else 0
                        spans[at + 2] = pos
                        spans[at + 4] = depth - 1
                        for level in range(depth - 1):
                            if stack[level] == LBRACKET:  # in an array: the element's index
                                spans[at + 5 + level] = -stack_count[level]
                            else:  # in an object: the field's type node
                                spans[at + 5 + level] = stack_node[level + 1]
                        recording = True
                        recording_nested = True
                        nesting = depth
                    else:
                        found_n[0] = -1
                elif (
                    item < 0
                    and found_n[0] >= 0
                    and found_n[0] + found_n[1] > 0
                    and _recorded(data, key_begin, key_stop, found)
                ):
                    # A null for a key recorded before it: Python keeps the last value (no
                    # rescue for it), which the recorded spans cannot say. The reference decides.
                    misfit = True
                unknown = False
                item = -1
            t = kind[node] if node >= 0 else 0
            # A non-string for a string node that takes JSON text: held as its text.
            as_text = t == T_STRING and low[node] == TEXT_ANY and c != QUOTE and c != LOWER_N
            if c == LBRACE or c == LBRACKET:
                if depth == MAX_DEPTH:
                    return KIND_INVALID, CODE_MISFIT
                if as_text:
                    text_node, text_begin, text_depth = node, pos, depth
                    node = -1  # its inside is untyped
                # A tuple struct's items, by position: an array at a struct node (TUPLE_ITEMS).
                tuple_items = c == LBRACKET and t == T_STRUCT and low[node] == TUPLE_ITEMS
                if node >= 0 and ((t == T_MAP and c == LBRACE) or tuple_items):
                    pass
                elif node >= 0 and t != (T_STRUCT if c == LBRACE else T_ARRAY):
                    misfit = True
                    node = -1
                stack[depth] = c
                stack_node[depth] = node
                # An array's element count; a struct's next expected field; a map's entries.
                stack_count[depth] = first[node] if c == LBRACE and t == T_STRUCT else 0
                if c == LBRACE or tuple_items:  # the fields this object or tuple holds
                    clock[0] += 1
                    stack_stamp[depth] = clock[0]
                depth += 1
                pos = skip_ws(data, pos + 1, end)
                # {} or []: each closing bracket is its opening one + 2 (LBRACE + 2 == RBRACE).
                if pos < end and data[pos] == c + 2:
                    depth -= 1
                    pos += 1
                    state = 1
                    if depth == text_depth:
                        text_depth = -1
                        if emit:
                            n = _emit(events, n, text_node, JSON_TEXT - text_begin, pos)
                    elif emit and node >= 0:
                        n = _emit_close(events, n, node, nodes, stamps, stack_stamp[depth], 0)
                elif c == LBRACE:
                    state = 2
                else:
                    stack_count[depth - 1] = 1
                    if tuple_items:  # its first item (a tuple has a field at least)
                        node = _item(node, 0, nodes, stamps, stack_stamp[depth - 1])
                    else:
                        node = first[node] if node >= 0 else -1
                continue
            begin = pos
            if c == QUOTE:
                if node >= 0 and t != T_STRING:
                    misfit = True
                pos = scan_string(data, pos, end, lenient)
                if emit and t == T_STRING:
                    n = _emit(events, n, node, begin + 1, pos - 1)
            elif c == MINUS or ZERO <= c <= NINE:
                if node >= 0 and (t == T_INT or t == T_DOUBLE):
                    pos, fits, value = scan_fitted_number(data, pos, end, t, low[node], high[node])
                    if pos >= 0 and not fits:
                        misfit = True
                    elif emit and pos >= 0 and t == T_INT:
                        n = _emit(events, n, node, 1, value)
                    elif emit and pos >= 0:
                        n = _emit(events, n, node, begin, pos)
                else:
                    pos = scan_number(data, pos, end)
                    if as_text and pos >= 0:
                        if emit:
                            n = _emit(events, n, node, JSON_TEXT - begin, pos)
                    elif node >= 0 and pos >= 0:
                        misfit = True  # a number for a string, a boolean, a container
            else:
                if node >= 0 and c != LOWER_N and t != T_BOOL and not as_text:
                    misfit = True
                pos = scan_literal(data, pos, end)
                if emit and node >= 0 and pos >= 0:
                    if c == LOWER_N:
                        n = emit_null(events, n, node, nodes)
                    elif as_text:
                        n = _emit(events, n, node, JSON_TEXT - begin, pos)
                    elif t == T_BOOL:
                        n = _emit(events, n, node, 1, 1 if c == LOWER_T else 0)
            if pos < 0:
                return KIND_INVALID, CODE_MISFIT
            state = 1


@kernel
def scratch(fields: int) -> Scratch:
    """A :class:`Scratch` for :func:`check_row` against a table of ``fields`` field slots."""
    return Scratch(
        np.empty(MAX_DEPTH, np.uint8),
        np.empty(MAX_DEPTH, np.int64),
        np.empty(MAX_DEPTH, np.int64),
        np.empty(MAX_DEPTH, np.int64),
        np.zeros(max(fields, 1), np.int64),
        np.zeros(1, np.int64),
    )


@kernel
def found_keys() -> Found:
    """A :class:`Found` with room for the unknown keys :func:`check_row` records in a row."""
    return Found(np.empty(4 * FOUND + NESTED_STRIDE * _NESTED, np.int64), np.zeros(2, np.int64))


#: Any table serves for validation alone: the JSON kind check_row returns does not depend on it.
_ANY = compile_type(StringType()).nodes


def validate_row(data: np.ndarray, start: int, end: int, *, lenient: bool = False) -> int:
    """The kind of the one JSON value in ``data[start:end]``, or ``KIND_INVALID`` (one
    document, from Python; the scans run :func:`check_row` themselves). ``lenient``: raw
    control characters allowed inside strings."""
    no_events = np.zeros(0, np.int64)
    json_kind, _ = check_row(
        data, start, end, _ANY, scratch(len(_ANY.field_node)), found_keys(), lenient, no_events,
        no_events,
    )  # fmt: skip
    return int(json_kind)


def extract_row(data: np.ndarray, start: int, end: int) -> tuple[int, int, int]:
    """Where the JSON inside a message's text is, and its kind: ``(start, end, kind)``, for one
    text from Python (:func:`~dspark_json.parse.json.scans.scan_content_fit` applies the same rule
    to whole columns).

    The rule (the reference for both backends), after stripping whitespace and BOMs:

    1. text that is valid JSON, or that starts with ``{`` or ``[``, is taken whole;
    2. else the body of the first ```` ``` ```` fence, when it starts with ``{`` or ``[``;
    3. else the text from the first ``{`` to the last ``}``;
    4. else there is no JSON (``KIND_NONE``).
    """
    start, end = strip(data, start, end)
    if start >= end:
        return start, end, KIND_NONE
    kind = validate_row(data, start, end)
    if kind != KIND_INVALID or data[start] in (LBRACE, LBRACKET):
        return start, end, kind
    found, first, last = fallback_candidate(data, start, end)
    if not found:
        return start, end, KIND_NONE
    return int(first), int(last), validate_row(data, first, last)
