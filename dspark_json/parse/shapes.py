"""A row's *shape*, learnt from one row that fits and matched byte for byte by the rows after it.

Machine-written JSON repeats itself. Every answer one vLLM server writes has the same keys in
the same order, the same nulls (``"refusal": null``, ``"logprobs": null``, ...), the same
whitespace; only the values differ: the id, the content, the token counts. Walking such a row
key by key (:func:`~dspark_json.parse.conform.check_row`) pays for every key and every null
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

Only rows whose code is ``CODE_FITS`` are learnt: a row with unknown keys that hold values
(``CODE_EXTRA``) records their spans for the rescue, which a shape does not do, and such rows
never match a shape learnt from a row without them (their keys are not in its static bytes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit

from dspark_json.parse.conform import T_BOOL, T_DOUBLE, T_INT, T_STRING, number_fits
from dspark_json.parse.kernels import scan_literal, scan_number, scan_string, skip_ws

__all__ = ["Shape", "learn_shape", "match_shape", "no_shape"]

_jit = njit(cache=True, nogil=True)

#: A shape as numba passes it: ``(static, segments, slot_nodes, slot_events, events)``:
#: static bytes ``static[segments[j]:segments[j + 1]]`` come before value ``j`` (the last
#: segment after the last value); value ``j`` is of type node ``slot_nodes[j]`` and its event is
#: ``events[3 * slot_events[j]:3 * slot_events[j] + 3]`` of the shape's events (three entries
#: each, as :func:`~dspark_json.parse.conform.check_row` writes them).
Shape = tuple[Any, Any, Any, Any, Any]


@_jit
def no_shape() -> Shape:
    """A placeholder of a shape's type, before one is learnt: not to be matched (it would match
    a blank row)."""
    return (
        np.zeros(0, np.uint8),
        np.zeros(1, np.int64),
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
        np.zeros(0, np.int64),
    )


@_jit
def _is_value(kind: int) -> bool:
    return kind == T_STRING or kind == T_INT or kind == T_DOUBLE or kind == T_BOOL


@_jit
def learn_shape(
    data: Any, start: int, end: int, events: Any, first: int, stop: int, kind: Any
) -> tuple[bool, Shape]:
    """The shape of the row ``data[start:end]``, which fits (``CODE_FITS``) and whose events
    are ``first..stop`` of ``events``; ``(False, no_shape())`` where its values and its events
    do not pair up one to one (never for a row that fits: a safety net)."""
    written = events[3 * first : 3 * stop].copy()
    m = stop - first
    slot_events = np.empty(m, np.int64)
    values = 0
    for e in range(m):
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
        if c == 34:  # a string: a key when a colon follows
            after = scan_string(data, pos, end, False)
            if after < 0:
                return False, no_shape()
            colon = skip_ws(data, after, end)
            if colon < end and data[colon] == 58:
                pos = after
                continue
        elif c == 45 or 48 <= c <= 57:
            after = scan_number(data, pos, end)
        elif c == 116 or c == 102:  # true, false (a null is static)
            after = scan_literal(data, pos, end)
        else:
            pos += 1
            continue
        if after < 0 or k >= values:
            return False, no_shape()
        node_kind = kind[written[3 * slot_events[k]]]
        if (c == 34) != (node_kind == T_STRING) or (c == 116 or c == 102) != (node_kind == T_BOOL):
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
    return True, (static, segments, slot_nodes, slot_events[:values].copy(), written)


@_jit
def match_shape(
    data: Any,
    start: int,
    end: int,
    shape: Shape,
    kind: Any,
    low: Any,
    high: Any,
    events: Any,
    n: int,
) -> int:
    """Whether the row ``data[start:end]`` has ``shape``: the number of events after its own
    (written from event ``n`` on, as :func:`~dspark_json.parse.conform.check_row` would write
    them), else -1 (what was written past ``n`` is then garbage, for the caller to overwrite).
    The values' events are written as the values are matched; the shape's other events only
    once the whole row has matched."""
    static, segments, slot_nodes, slot_events, written = shape
    m = len(written) // 3
    if end - start < len(static) or 3 * (n + m) > len(events):
        return -1
    values = len(slot_nodes)
    pos = start
    for j in range(values + 1):
        s0 = segments[j]
        length = segments[j + 1] - s0
        if pos + length > end:
            return -1
        for b in range(length):
            if data[pos + b] != static[s0 + b]:
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
            if c != 34:
                return -1
            after = scan_string(data, pos, end, False)
            if after < 0:
                return -1
            events[at + 1] = pos + 1
            events[at + 2] = after - 1
        elif t == T_BOOL:
            if c != 116 and c != 102:
                return -1
            after = scan_literal(data, pos, end)
            if after < 0:
                return -1
            events[at + 1] = 1
            events[at + 2] = 1 if c == 116 else 0
        else:
            if c != 45 and not 48 <= c <= 57:
                return -1
            after = scan_number(data, pos, end)
            if after < 0:
                return -1
            fits, value = number_fits(data, pos, after, t, low[node], high[node])
            if fits < 0:
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
