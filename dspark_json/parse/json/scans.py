"""Whole columns of documents, one compiled loop each: :func:`scan_envelope_fit` over response
bodies, :func:`scan_content_fit` over the texts of messages. Each row is checked by
:func:`~dspark_json.parse.json.conform.check_row` (or, for an envelope that repeats the shape of a
row before it, matched by :func:`~dspark_json.parse.json.shapes.match_shape`), and the results are
gathered by column: a code per row, the events of the rows that fit (for
:mod:`dspark_json.parse.json.decode`), and the spans of unknown keys (for
:mod:`dspark_json.parse.json.rescue`)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from dspark_json.buffers.bytes import LBRACE, LBRACKET, LOWER_N
from dspark_json.buffers.compiled import kernel, leaf
from dspark_json.buffers.words import prefetch
from dspark_json.parse.json.candidates import fallback_candidate
from dspark_json.parse.json.conform import (
    CODE_EXTRA,
    CODE_FITS,
    CODE_INVALID,
    CODE_MISFIT,
    CODE_NONE,
    CODE_NULL,
    FOUND,
    NESTED_STRIDE,
    Found,
    Scratch,
    TypeNodes,
    check_row,
    emit_null,
    found_keys,
    room,
    scratch,
)
from dspark_json.parse.json.grammar import (
    KIND_INVALID,
    KIND_NONE,
    KIND_OBJECT,
    strip,
)
from dspark_json.parse.json.shapes import (
    Shape,
    learn_shape,
    match_shape,
    no_shape,
    records_keys,
    replay_keys,
)

__all__ = [
    "NO_SPARE",
    "ContentScan",
    "EnvelopeScan",
    "scan_content_fit",
    "scan_envelope_fit",
    "spare_events",
    "widest_value",
]


class EnvelopeScan(NamedTuple):
    """What :func:`scan_envelope_fit` finds in a range of bodies: per row its ``codes``
    (``CODE_*``) and whether its unknown keys need a walk in Python (``deep``); the top-level
    unknown keys: their ``rows`` and ``(key start, key end, value start, value end)``
    ``spans``; the ``events`` of the rows that fit (a null row for the others), for
    :mod:`dspark_json.parse.json.decode`; the unknown keys deeper down: their ``nested_rows``
    and ``nested`` spans with paths (``NESTED_STRIDE`` entries each, as
    :class:`~dspark_json.parse.json.conform.Found` holds them); and per row,
    ``repeats_keys_of``: the index (among all rows) of the row whose envelope unknown keys and
    values it repeats byte for byte (the row a shape with such keys was learnt from, for each
    row that matched it and for that row itself), else -1. A group id: rows in one group rescue
    the same envelope keys (their contents' keys may differ). Row indexes count from row 0 of
    the batch, not of the range."""

    codes: np.ndarray
    deep: np.ndarray
    rows: np.ndarray
    spans: np.ndarray
    events: np.ndarray
    nested_rows: np.ndarray
    nested: np.ndarray
    repeats_keys_of: np.ndarray


class ContentScan(NamedTuple):
    """What :func:`scan_content_fit` finds in a range of message texts: where each one's JSON
    candidate ``starts`` and ``ends``, then the fields of :class:`EnvelopeScan` but its last."""

    starts: np.ndarray
    ends: np.ndarray
    codes: np.ndarray
    deep: np.ndarray
    rows: np.ndarray
    spans: np.ndarray
    events: np.ndarray
    nested_rows: np.ndarray
    nested: np.ndarray


#: The scans' events start with room for this many rows (16 events each); once they are full,
#: :func:`~dspark_json.parse.json.conform.room` sizes them for the whole range from the rows
#: scanned: a copy of a few rows' events, where room for every row at once grew (doubled) midway
#: through a large batch and copied half of its events.
_FIRST_ROWS = 256

#: After a shape is learnt: once this many rows that fit have not matched it (since it last
#: matched one, or since the last try to learn), the latest is learnt instead.
_RELEARN = 8
#: A row that cannot be learnt (an unknown key holds a string, number or boolean, or there are
#: more unknown keys than recorded) doubles the wait before the next try, up to this many rows:
#: a batch whose rows all hold such keys pays for few tries.
_MAX_LEARN_WAIT = 1024


@leaf
def widest_value(nodes: TypeNodes) -> int:
    """At least the most events one value of the type ``nodes`` writes (a struct that closes
    writes a null for each field it did not hold, fewer than its closure's nodes): what a scan
    makes room for per byte of a row (:func:`_grown`), and what
    :class:`~dspark_json.parse.vectorised.Vectorised` sizes its spare buffers by."""
    closure_at = nodes.closure_at
    widest = 1
    for node in range(len(closure_at) - 1):
        widest = max(widest, closure_at[node + 1] - closure_at[node])
    return widest


#: A scan's ``spare`` where it has none: the scan makes its own room.
NO_SPARE = np.empty(0, np.int64)


@kernel
def spare_events(size: int) -> Any:
    """Room for ``size`` entries of a scan's events, to lend to the scans as their ``spare``:
    allocated as the scans allocate theirs (numba's allocator: ``malloc``), not by numpy,
    which asks the kernel for huge pages for a large array (``madvise``), whose faults a
    fresh array pays for (each zeroed whole, the memory compacted first where it is
    fragmented: tenths of a second of system time on a busy machine)."""
    return np.empty(size, np.int64)


@kernel
def _first_events(spare: Any, rows: int) -> Any:
    """Where a scan of ``rows`` rows starts writing its events: ``spare`` (a buffer of an
    earlier scan, whose events were read: its pages are the process's already, where a fresh
    array's are faulted in and zeroed by the kernel, about a fifth of a large batch's time)
    where it holds the first rows' room, else a fresh array. Either grows as the scan needs
    (:func:`_grown`)."""
    first = 3 * 16 * max(min(rows, _FIRST_ROWS), 1)
    if len(spare) >= first:
        return spare
    return np.empty(first, np.int64)


@kernel
def _grown(
    events: Any, n: int, need: int, offsets: Any, i: int, lo: int, hi: int, widest: int
) -> Any:
    """:func:`~dspark_json.parse.json.conform.room` for ``need`` events at row ``i`` of the rows
    ``lo..hi``: projected from the rows scanned so far, at most what the rows from ``i`` on can
    write (each byte, and each row's end, a value of ``widest`` events)."""
    most = n + (offsets[hi] - offsets[i] + hi - i) * widest
    return room(events, n, need, i - lo, hi - lo, most)


class _Kept(NamedTuple):
    """Recorded keys gathered over a scan: per key its row in ``rows`` and ``stride`` entries in
    ``spans`` (four a top-level key, ``NESTED_STRIDE`` a nested one); how many are kept is the
    scan's state (:data:`_TOP`, :data:`_DEEPER`)."""

    rows: np.ndarray
    spans: np.ndarray


# What a scan's row loop (a leaf: :func:`_envelope_rows`, :func:`_content_rows`) and its kernel
# share, an entry each of a ``_STATE`` array: the loop runs without reference counts (numba
# counts a reference to an array each time a loop reassigns it: the events, the kept keys, the
# shape), and returns to its kernel only for what allocates: more room, a shape to learn.
_TOP = 0  # top-level keys kept
_DEEPER = 1  # keys deeper down kept
_NEED = 2  # the events the row the loop stopped at needs room for (0: none)
_LEARN = 3  # the first event of the row the loop stopped after, to learn a shape from (-1: none)
_UNLIKE = 4  # rows that fit but did not match the shape, since it last matched or a try to learn
_LEARN_AFTER = 5  # try to learn at the row that brings _UNLIKE to this
_SHAPE_ROW = 6  # the row the shape was learnt from (-1: none learnt yet)
_STATE = 7


@kernel
def _kept(stride: int) -> _Kept:
    """Room for the keys of a scan, ``stride`` entries each."""
    return _Kept(np.empty(16, np.int64), np.empty(stride * 16, np.int64))


@kernel
def _kept_room(kept: _Kept, n: int, free: int, stride: int) -> _Kept:
    """``kept`` (``n`` keys in it), grown where fewer than ``free`` more keys fit. Element loops
    only: numba compiles 2-D slice copies slowly."""
    rows, spans = kept.rows, kept.spans
    if len(rows) - n >= free:
        return kept
    size = max(2 * len(rows), n + free)
    grown_rows = np.empty(size, np.int64)
    grown_spans = np.empty(stride * size, np.int64)
    for i in range(n):
        grown_rows[i] = rows[i]
    for i in range(stride * n):
        grown_spans[i] = spans[i]
    return _Kept(grown_rows, grown_spans)


@kernel
def _room_after(
    events: Any,
    n: int,
    state: Any,
    offsets: Any,
    i: int,
    lo: int,
    hi: int,
    widest: int,
    top: _Kept,
    nested: _Kept,
    found: Found,
) -> tuple[Any, _Kept, _Kept]:
    """What a scan's row loop stopped at row ``i`` for, done in its kernel: room for the events
    the row needs (``state[_NEED]``: here, not a call per row, benchmarks/README.md) and for
    the keys the next row may keep (its most top-level keys, its most deeper ones)."""
    if state[_NEED] > 0:
        events = _grown(events, n, state[_NEED], offsets, i, lo, hi, widest)
        state[_NEED] = 0
    top = _kept_room(top, state[_TOP], FOUND, 4)
    nested = _kept_room(nested, state[_DEEPER], _deeper(found), NESTED_STRIDE)
    return events, top, nested


@leaf
def _keep(
    kept: _Kept, spans: Any, at: int, n: int, stride: int, row: int, state: Any, slot: int
) -> None:
    """``n`` recorded keys of ``row`` (``stride`` entries each, from ``spans[at]`` on) appended
    to ``kept``, which has room; ``state[slot]`` counts them."""
    rows, out, count = kept.rows, kept.spans, state[slot]
    for r in range(n):
        rows[count] = row
        for c in range(stride):
            out[stride * count + c] = spans[at + stride * r + c]
        count += 1
    state[slot] = count


@leaf
def _keep_row(found: Found, row: int, top: _Kept, nested: _Kept, state: Any) -> bool:
    """After :func:`check_row` of a row that fits but for unknown keys: whether it needs a
    walk in Python (more keys than recorded), else its keys appended to ``top`` and
    ``nested`` (which have room for a row's: :func:`_room`)."""
    if found.counts[0] < 0:
        return True
    _keep(top, found.spans, 0, found.counts[0], 4, row, state, _TOP)
    _keep(nested, found.spans, 4 * FOUND, found.counts[1], NESTED_STRIDE, row, state, _DEEPER)
    return False


@leaf
def _deeper(found: Found) -> int:
    """The most keys deeper down ``found`` records in a row."""
    return (len(found.spans) - 4 * FOUND) // NESTED_STRIDE


@leaf
def _room(top: _Kept, nested: _Kept, found: Found, state: Any) -> bool:
    """Whether ``top`` and ``nested`` have room for the most keys a row records."""
    top_room: bool = len(top.rows) - state[_TOP] >= FOUND
    return top_room and len(nested.rows) - state[_DEEPER] >= _deeper(found)


#: Bytes in a cache line (x86 and most ARM cores).
_LINE = 64


@leaf
def _prefetch_row(data: Any, offsets: Any, i: int, hi: int) -> None:
    """Ask for row ``i``'s bytes (if it is one of the scan's) a cache line at a time."""
    if i < hi:
        for pos in range(offsets[i], offsets[i + 1], _LINE):
            prefetch(data, pos)


@kernel
def _new_state() -> Any:
    """A scan's state (``_STATE`` entries) before its first row: no keys kept, no room asked
    for, no shape learnt, one fitting row before the first try to learn."""
    state = np.zeros(_STATE, np.int64)
    state[_LEARN] = -1
    state[_LEARN_AFTER] = 1
    state[_SHAPE_ROW] = -1
    return state


@leaf
def _envelope_rows(
    offsets: Any,
    data: Any,
    valid: Any,
    nodes: TypeNodes,
    strict: bool,
    shapes: bool,
    lo: int,
    i: int,
    hi: int,
    widest: int,
    events: Any,
    n_events: Any,
    work: Scratch,
    found: Found,
    shape: Shape,
    seg_pos: Any,
    top: _Kept,
    nested: _Kept,
    state: Any,
    codes: Any,
    deep: Any,
    repeats_keys_of: Any,
) -> int:
    """:func:`scan_envelope_fit`'s rows from ``i`` on, up to ``hi`` or to a row that needs its
    kernel (room for its events, ``state[_NEED]``, or for its keys), or after a row to learn a
    shape from (``state[_LEARN]``): the row to go on from."""
    while i < hi:
        start, end = offsets[i], offsets[i + 1]
        n0 = n_events[0]
        # A byte starts at most one value, and a value writes at most ``widest`` events.
        need = (end - start + 1) * widest
        if 3 * (n0 + need) > len(events):
            state[_NEED] = need
            return i
        if not _room(top, nested, found, state):
            return i
        _prefetch_row(data, offsets, i + 1, hi)
        matched = False
        shape_row = state[_SHAPE_ROW]
        if valid[i] and shapes and shape_row >= 0:
            n1 = match_shape(data, start, end, shape, nodes, events, n0, seg_pos)
            if n1 >= 0:
                n_events[0] = n1
                matched = True
                state[_UNLIKE] = 0
                codes[i - lo] = CODE_FITS
                if records_keys(shape):  # its unknown keys, where the walk records them
                    replay_keys(shape, seg_pos, found)
                    codes[i - lo] = CODE_EXTRA
                    repeats_keys_of[i - lo] = shape_row
        learn = False
        if valid[i] and not matched:
            json_kind, code = check_row(
                data, start, end, nodes, work, found, strict, events, n_events
            )
            codes[i - lo] = code if json_kind == KIND_OBJECT else CODE_INVALID
            fits = codes[i - lo] == CODE_FITS or codes[i - lo] == CODE_EXTRA
            if shapes and fits:
                state[_UNLIKE] += 1
                learn = state[_UNLIKE] >= state[_LEARN_AFTER]  # the first shape, or a new one
        if codes[i - lo] == CODE_EXTRA:
            deep[i - lo] = _keep_row(found, i, top, nested, state)
        if codes[i - lo] != CODE_FITS and codes[i - lo] != CODE_EXTRA:
            n_events[0] = emit_null(events, n0, 0, nodes)
        i += 1
        if learn:
            state[_LEARN] = n0
            return i
    return i


@kernel
def scan_envelope_fit(
    offsets: Any,
    data: Any,
    valid: Any,
    nodes: TypeNodes,
    strict: bool,
    shapes: bool,
    lo: int,
    hi: int,
    spare: Any,
) -> EnvelopeScan:
    """The :class:`EnvelopeScan` of bodies ``lo..hi``: codes ``CODE_NULL``, ``CODE_INVALID``
    (invalid JSON or not an object), ``CODE_FITS``, ``CODE_EXTRA`` or ``CODE_MISFIT`` against
    the envelope type ``nodes``. ``strict``: always False, the envelope is never lenient (a
    parameter, not a constant, so that :func:`check_row` compiles once for every caller);
    ``shapes``: rows that repeat the shape of a row before them skip the walk
    (:mod:`dspark_json.parse.json.shapes`), with the same result. The rows are walked by
    :func:`_envelope_rows`; this loop makes room and learns shapes."""
    codes = np.full(hi - lo, CODE_NULL, np.int8)
    deep = np.zeros(hi - lo, np.bool_)
    work = scratch(len(nodes.field_node))
    found = found_keys()
    top = _kept(4)
    nested = _kept(NESTED_STRIDE)
    widest = widest_value(nodes)
    events = _first_events(spare, hi - lo)
    n_events = np.zeros(1, np.int64)
    repeats_keys_of = np.full(hi - lo, -1, np.int64)
    shape = no_shape()
    seg_pos = np.empty(1, np.int64)  # where the shape's static segments start in a row
    state = _new_state()
    i = lo
    while i < hi:
        i = _envelope_rows(
            offsets, data, valid, nodes, strict, shapes, lo, i, hi, widest, events, n_events,
            work, found, shape, seg_pos, top, nested, state, codes, deep, repeats_keys_of,
        )  # fmt: skip
        events, top, nested = _room_after(
            events, n_events[0], state, offsets, i, lo, hi, widest, top, nested, found
        )
        if state[_LEARN] >= 0:  # the row before i fits, and it is time to learn its shape
            row = i - 1
            learnt, learned = learn_shape(
                data, offsets[row], offsets[row + 1], events, state[_LEARN], n_events[0],
                nodes.kind, found,
            )  # fmt: skip
            state[_LEARN] = -1
            state[_UNLIKE] = 0
            if learnt:
                shape = learned
                state[_SHAPE_ROW] = row
                if records_keys(shape):
                    repeats_keys_of[row - lo] = row
                seg_pos = np.empty(len(shape[1]), np.int64)
                state[_LEARN_AFTER] = _RELEARN
            else:  # not learnable: wait twice as long before the next try
                state[_LEARN_AFTER] = min(2 * state[_LEARN_AFTER], _MAX_LEARN_WAIT)
    return EnvelopeScan(
        codes,
        deep,
        top.rows[: state[_TOP]],
        top.spans[: 4 * state[_TOP]],
        events[: 3 * n_events[0]],
        nested.rows[: state[_DEEPER]],
        nested.spans[: NESTED_STRIDE * state[_DEEPER]],
        repeats_keys_of,
    )


@leaf
def _content_rows(
    offsets: Any,
    data: Any,
    valid: Any,
    nodes: TypeNodes,
    lenient: bool,
    lo: int,
    i: int,
    hi: int,
    widest: int,
    events: Any,
    n_events: Any,
    work: Scratch,
    found: Found,
    top: _Kept,
    nested: _Kept,
    state: Any,
    starts: Any,
    ends: Any,
    codes: Any,
    deep: Any,
) -> int:
    """:func:`scan_content_fit`'s rows from ``i`` on, up to ``hi`` or to a row that needs
    its kernel (room for its events, ``state[_NEED]``, or for its keys): the row to go on
    from."""
    lenient_off = lenient and not lenient  # noqa: SIM220  (False, typed bool: one check_row)
    no_events = n_events[:0]
    while i < hi:
        n0 = n_events[0]
        if 3 * (n0 + widest) > len(events):
            state[_NEED] = widest
            return i
        if not _room(top, nested, found, state):
            return i
        _prefetch_row(data, offsets, i + 1, hi)
        if not valid[i]:
            n_events[0] = emit_null(events, n0, 0, nodes)
            i += 1
            continue
        start, end = strip(data, offsets[i], offsets[i + 1])
        need = (end - start + 1) * widest
        if 3 * (n0 + need) > len(events):
            state[_NEED] = need
            return i
        json_kind, code = KIND_NONE, CODE_MISFIT
        if start < end:
            json_kind, code = check_row(
                data, start, end, nodes, work, found, lenient_off, events, n_events
            )
            if json_kind == KIND_INVALID and data[start] != LBRACE and data[start] != LBRACKET:
                located, start, end = fallback_candidate(data, start, end)
                if located:
                    n_events[0] = n0
                    json_kind, code = check_row(
                        data, start, end, nodes, work, found, lenient_off, events, n_events
                    )
                else:
                    json_kind = KIND_NONE
            if json_kind == KIND_INVALID and lenient:
                json_kind, code = check_row(
                    data, start, end, nodes, work, found, lenient, events, no_events
                )
                code = CODE_MISFIT
        starts[i - lo], ends[i - lo] = start, end
        if json_kind == KIND_NONE:
            codes[i - lo] = CODE_NONE
        elif json_kind == KIND_INVALID:
            codes[i - lo] = CODE_INVALID
        elif data[start] == LOWER_N:  # null
            codes[i - lo] = CODE_MISFIT
        else:
            codes[i - lo] = code
            if code == CODE_EXTRA:
                deep[i - lo] = _keep_row(found, i, top, nested, state)
        if codes[i - lo] != CODE_FITS and codes[i - lo] != CODE_EXTRA:
            n_events[0] = emit_null(events, n0, 0, nodes)
        i += 1
    return i


@kernel
def scan_content_fit(
    offsets: Any,
    data: Any,
    valid: Any,
    nodes: TypeNodes,
    lenient: bool,
    lo: int,
    hi: int,
    spare: Any,
) -> ContentScan:
    """The :class:`ContentScan` of message texts ``lo..hi``: codes as in
    :func:`scan_envelope_fit` (against the content type ``nodes``) plus ``CODE_NONE`` where the
    text holds no JSON candidate (a bare ``null`` is left to the reference parser: it decides
    whether null fits the content type).

    The candidate is found by the strict rule; with ``lenient``, a candidate that is valid JSON
    but for raw control characters inside strings is ``CODE_MISFIT`` (the reference parser reads
    it; pyarrow's reader would refuse it), not ``CODE_INVALID``: a clean row costs nothing more.
    ``spare``: where the events are written (:func:`_first_events`). The rows are walked by
    :func:`_content_rows`; this loop makes room.
    """
    starts = np.zeros(hi - lo, np.int64)
    ends = np.zeros(hi - lo, np.int64)
    codes = np.full(hi - lo, CODE_NULL, np.int8)
    deep = np.zeros(hi - lo, np.bool_)
    work = scratch(len(nodes.field_node))
    found = found_keys()
    top = _kept(4)
    nested = _kept(NESTED_STRIDE)
    widest = widest_value(nodes)
    events = _first_events(spare, hi - lo)
    n_events = np.zeros(1, np.int64)
    state = _new_state()
    i = lo
    while i < hi:
        i = _content_rows(
            offsets, data, valid, nodes, lenient, lo, i, hi, widest, events, n_events, work,
            found, top, nested, state, starts, ends, codes, deep,
        )  # fmt: skip
        events, top, nested = _room_after(
            events, n_events[0], state, offsets, i, lo, hi, widest, top, nested, found
        )
    return ContentScan(
        starts,
        ends,
        codes,
        deep,
        top.rows[: state[_TOP]],
        top.spans[: 4 * state[_TOP]],
        events[: 3 * n_events[0]],
        nested.rows[: state[_DEEPER]],
        nested.spans[: NESTED_STRIDE * state[_DEEPER]],
    )
