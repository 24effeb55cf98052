"""A row's *shape*, learnt from one row that fits and matched byte for byte by the rows after it.

Machine-written JSON repeats itself. Every answer one vLLM server writes has the same keys in
the same order, the same nulls (``"refusal": null``, ``"logprobs": null``, ...), the same
whitespace; only the values differ: the id, the content, the token counts. Walking such a row
key by key (:func:`~dspark_json.parse.json.conform.check_row`) pays for every key and every null
again. A shape pays for them once:

- **learning** (:func:`learn_shape`): from a row that fits its type, keep the bytes outside its
  values (keys, brackets, nulls, whitespace: the *static* bytes), the type node of each value
  (string, number or boolean), and the events ``check_row`` wrote for the row;
- **matching** (:func:`match_shape`): a later row matches when its bytes equal the static bytes
  between its values, and each value is a valid token that fits its node. Its events are the
  shape's, each value's event rewritten with the row's own span or number.

Why that is the same answer, not a different one: JSON's tokens end where the grammar says (a
string at its closing quote, a number at its last digit, the same scans ``check_row`` uses). A
row whose bytes outside its values equal those of a row that fit therefore has the same keys,
the same structure and the same nulls: ``check_row`` would walk it the same way and write the
same events but for the values. Anything else (a value of another kind, a null where the shape
has a value, an extra or a missing key, other whitespace) does not match, and the row is
walked by ``check_row`` as before. The fuzz tests hold the two to the same events, row by row.

Unknown keys. A row with unknown keys that hold values (``CODE_EXTRA``) is learnt too where
each such key and its value lie in the static bytes (``"tool_calls": []`` in a message the
schema leaves it out of; never a value with a string, number or boolean in it): the shape then
keeps where each recorded key sits (its static segment and the offset in it, and the path of a
nested one), and a row that matches records the same keys at its own positions, as the walk
would (the rescue needs their spans). A row whose unknown keys hold a string, a number or a
boolean is not learnt (such a value has no event to pair with) and is walked each time; its keys
are not in any shape's static bytes, so it never matches a shape learnt without them.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from dspark_json.buffers.bytes import COLON, LOWER_F, LOWER_T, MINUS, NINE, QUOTE, ZERO
from dspark_json.buffers.compiled import kernel, leaf
from dspark_json.parse.json.conform import (
    FOUND,
    JSON_TEXT,
    NESTED_STRIDE,
    T_BOOL,
    T_DOUBLE,
    T_INT,
    T_MAP,
    T_STRING,
    Found,
    TypeNodes,
    scan_fitted_number,
)
from dspark_json.parse.json.grammar import same_run, scan_literal, scan_number, scan_string, skip_ws

__all__ = [
    "Shape",
    "learn_shape",
    "match_shape",
    "no_shape",
    "records_keys",
    "replay_keys",
]


class Shape(NamedTuple):
    """A shape, learnt from one row (:func:`learn_shape`; :func:`no_shape` before any): static
    bytes ``static[segments[j]:segments[j + 1]]`` come before value ``j`` (the last segment
    after the last value); value ``j`` is of type node ``slot_nodes[j]`` and its event is
    ``events[3 * slot_events[j]:3 * slot_events[j] + 3]`` of the shape's events (three entries
    each, as :func:`~dspark_json.parse.json.conform.check_row` writes them). ``top`` and
    ``nested``: the unknown keys a matching row records, as ``check_row`` records them (four
    entries a top-level key, ``NESTED_STRIDE`` a nested one), each position written as
    ``segment * _SEGMENT_RADIX + offset`` in that static segment."""

    static: np.ndarray
    segments: np.ndarray
    slot_nodes: np.ndarray
    slot_events: np.ndarray
    events: np.ndarray
    top: np.ndarray
    nested: np.ndarray


#: Positions in a shape's recorded keys: ``segment * _SEGMENT_RADIX + offset`` (a row is
#: shorter than 2**40 bytes).
_SEGMENT_RADIX = 2**40


@kernel
def no_shape() -> Shape:
    """A placeholder of a shape's type, before one is learnt: not to be matched (it would match
    a blank row)."""
    return Shape(
        np.zeros(0, np.uint8),
        np.zeros(1, np.int64),
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
    )


@leaf
def _is_value(kind: int) -> bool:
    return kind == T_STRING or kind == T_INT or kind == T_DOUBLE or kind == T_BOOL


@kernel
def learn_shape(
    data: Any, start: int, end: int, events: Any, first: int, stop: int, kind: Any, found: Found
) -> tuple[bool, Shape]:
    """The shape of the row ``data[start:end]``, which fits (``CODE_FITS``, or ``CODE_EXTRA``
    with the unknown keys ``check_row`` recorded in ``found``) and whose events
    are ``first..stop`` of ``events``; ``(False, no_shape())`` where its values and its events
    do not pair up one to one: always where an unknown key's value holds a string, a number or
    a boolean (it has no event), never for a row without unknown keys (a safety net)."""
    top_n, nested_n = found.counts[0], found.counts[1]
    if top_n < 0:  # more unknown keys than recorded: walked in Python
        return False, no_shape()
    written = events[3 * first : 3 * stop].copy()
    m = stop - first
    slot_events = np.empty(m, np.int64)
    values = 0
    for e in range(m):
        # A value held as JSON text, a map (its keys are values): no shape holds them.
        if written[3 * e + 1] <= JSON_TEXT or kind[written[3 * e]] == T_MAP:
            return False, no_shape()
        # A value's event: a scalar node, not a null (a null's first entry is -1).
        if _is_value(kind[written[3 * e]]) and written[3 * e + 1] != -1:
            slot_events[values] = e
            values += 1
    begins = np.empty(values, np.int64)
    stops = np.empty(values, np.int64)
    k = 0
    pos = start
    while pos < end:
        c = data[pos]
        if c == QUOTE:  # a string: a key when a colon follows
            after = scan_string(data, pos, end, False)
            if after < 0:
                return False, no_shape()
            colon = skip_ws(data, after, end)
            if colon < end and data[colon] == COLON:
                pos = after
                continue
        elif c == MINUS or ZERO <= c <= NINE:
            after = scan_number(data, pos, end)
        elif c == LOWER_T or c == LOWER_F:  # true, false (a null is static)
            after = scan_literal(data, pos, end)
        else:
            pos += 1
            continue
        if after < 0 or k >= values:
            return False, no_shape()
        node_kind = kind[written[3 * slot_events[k]]]
        boolean = c == LOWER_T or c == LOWER_F
        if (c == QUOTE) != (node_kind == T_STRING) or boolean != (node_kind == T_BOOL):
            return False, no_shape()
        begins[k] = pos
        stops[k] = after
        k += 1
        pos = after
    if k != values:
        return False, no_shape()
    size = (end - start) - int(np.sum(stops - begins))
    static = np.empty(size, np.uint8)
    segments = np.empty(values + 2, np.int64)
    segments[0] = 0
    at = 0
    pos = start
    for j in range(values + 1):
        stop_at = begins[j] if j < values else end
        for b in range(pos, stop_at):
            static[at] = data[b]
            at += 1
        segments[j + 1] = at
        if j < values:
            pos = stops[j]
    slot_nodes = np.empty(values, np.int64)
    for j in range(values):
        slot_nodes[j] = written[3 * slot_events[j]]
    # Where each static segment starts in this row: the unknown keys' positions, relative.
    seg_start = np.empty(values + 1, np.int64)
    seg_start[0] = start
    for j in range(values):
        seg_start[j + 1] = stops[j]
    spans = found.spans
    top = np.empty(4 * top_n, np.int64)
    for r in range(top_n):
        if not _relative(spans, 4 * r, seg_start, segments, top, 4 * r):
            return False, no_shape()
    nested = np.empty(NESTED_STRIDE * nested_n, np.int64)
    for r in range(nested_n):
        at = 4 * FOUND + NESTED_STRIDE * r
        if not _relative(spans, at, seg_start, segments, nested, NESTED_STRIDE * r):
            return False, no_shape()
        for c in range(4, NESTED_STRIDE):
            nested[NESTED_STRIDE * r + c] = spans[at + c]
    shape = Shape(static, segments, slot_nodes, slot_events[:values].copy(), written, top, nested)
    return True, shape


@leaf
def _relative(spans: Any, at: int, seg_start: Any, segments: Any, out: Any, to: int) -> bool:
    """A recorded key's four positions (``spans[at:at + 4]`` of a :class:`~.conform.Found`: key
    start and end, value start and end) as ``segment * _SEGMENT_RADIX + offset`` into
    ``out[to:to + 4]``, all in one static segment; False where they are not (a safety net: once
    the values and the events have paired up, no value lies between them)."""
    p = spans[at]
    j = len(seg_start) - 1
    while j > 0 and seg_start[j] > p:
        j -= 1
    base = seg_start[j]
    length = segments[j + 1] - segments[j]
    for c in range(4):
        q = spans[at + c]
        if q < base or q > base + length:
            return False
        out[to + c] = j * _SEGMENT_RADIX + (q - base)
    return True


@leaf
def replay_keys(shape: Shape, seg_pos: Any, found: Found) -> None:
    """The unknown keys of a row that matched ``shape`` (its static segments start at
    ``seg_pos``), into ``found`` as :func:`~dspark_json.parse.json.conform.check_row` records
    them."""
    top, nested, spans = shape.top, shape.nested, found.spans
    kt = len(top) // 4
    for r in range(kt):
        for c in range(4):
            v = top[4 * r + c]
            spans[4 * r + c] = seg_pos[v // _SEGMENT_RADIX] + v % _SEGMENT_RADIX
    kn = len(nested) // NESTED_STRIDE
    for r in range(kn):
        at = 4 * FOUND + NESTED_STRIDE * r
        for c in range(NESTED_STRIDE):
            v = nested[NESTED_STRIDE * r + c]
            spans[at + c] = seg_pos[v // _SEGMENT_RADIX] + v % _SEGMENT_RADIX if c < 4 else v
    found.counts[0] = kt
    found.counts[1] = kn


@leaf
def records_keys(shape: Shape) -> bool:
    """Whether a row that matches ``shape`` records unknown keys (``CODE_EXTRA``)."""
    return len(shape.top) > 0 or len(shape.nested) > 0


@leaf
def match_shape(
    data: Any,
    start: int,
    end: int,
    shape: Shape,
    nodes: TypeNodes,
    events: Any,
    n: int,
    seg_pos: Any,
) -> int:
    """Whether the row ``data[start:end]`` has ``shape``: the number of events after its own
    (written from event ``n`` on, as :func:`~dspark_json.parse.json.conform.check_row` would write
    them), else -1 (what was written past ``n`` is then garbage, for the caller to overwrite).
    The values' events are written as the values are matched; the shape's other events only
    once the whole row has matched. ``seg_pos`` (as long as the shape's segments, at least):
    where each static segment starts in the row, for :func:`replay_keys`."""
    static, segments, written = shape.static, shape.segments, shape.events
    slot_nodes, slot_events = shape.slot_nodes, shape.slot_events
    kind, low, high = nodes.kind, nodes.low, nodes.high
    m = len(written) // 3
    if end - start < len(static) or 3 * (n + m) > len(events):
        return -1
    values = len(slot_nodes)
    pos = start
    if len(seg_pos) < values + 1:
        return -1
    for j in range(values + 1):
        s0 = segments[j]
        length = segments[j + 1] - s0
        if pos + length > end:
            return -1
        seg_pos[j] = pos
        if not same_run(data, pos, static, s0, length):
            return -1
        pos += length
        if j == values:
            break
        if pos >= end:
            return -1
        node = slot_nodes[j]
        t = kind[node]
        at = 3 * (n + slot_events[j])
        events[at] = node
        c = data[pos]
        if t == T_STRING:
            if c != QUOTE:
                return -1
            after = scan_string(data, pos, end, False)
            if after < 0:
                return -1
            events[at + 1] = pos + 1
            events[at + 2] = after - 1
        elif t == T_BOOL:
            if c != LOWER_T and c != LOWER_F:
                return -1
            after = scan_literal(data, pos, end)
            if after < 0:
                return -1
            events[at + 1] = 1
            events[at + 2] = 1 if c == LOWER_T else 0
        else:
            if c != MINUS and not ZERO <= c <= NINE:
                return -1
            after, fits, value = scan_fitted_number(data, pos, end, t, low[node], high[node])
            if after < 0 or not fits:
                return -1
            if t == T_INT:
                events[at + 1] = 1
                events[at + 2] = value
            else:
                events[at + 1] = pos
                events[at + 2] = after
        pos = after
    if skip_ws(data, pos, end) != end:
        return -1
    j = 0  # the values' events, in order among the others
    for e in range(m):
        if j < values and slot_events[j] == e:
            j += 1
            continue
        for k in range(3):
            events[3 * (n + e) + k] = written[3 * e + k]
    return n + m
