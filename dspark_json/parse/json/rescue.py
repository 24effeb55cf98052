"""``_rescued_data`` built in compiled code, straight from the spans the scans found.

The scans record where each unknown key and its value sit in the buffers (they are valid JSON by
then). For each row, this writes the JSON object the reference parser would write,
``json.dumps(sink, ensure_ascii=False, separators=(",", ":"))``, byte for byte, into one Arrow
string buffer — no Python object per row:

- keys at any depth (the caller gives each key's object as a column path and the keys in the
  reference's order, :class:`RescueEntries`), written ``<path>.<key>``, ``<key>`` at the top
  level, ``<path>[<position>]`` for an item past a tuple struct's fields;
- values re-serialised in Python's canonical form: whitespace dropped, strings with Python's
  escapes (``\\"``, ``\\\\``, ``\\n``, ``\\r``, ``\\t``, ``\\b``, ``\\f``, other control
  characters as ``\\u00xx``, every other character as UTF-8), integers as written, decimals as
  written where ``repr`` writes them so (16-17 digit ones are checked by the caller, one
  ``float``/``repr`` per number, no JSON per row).

A value whose canonical form needs Python (a double other than a short positional decimal, as
Python's ``repr`` would print it; ``-0``; an integer past Python's digit limit; an object that
repeats a key, or spells one with an escape), or a column path written twice in one row (a
repeated key, or a key that reads like another key's path: Python's dict keeps one), makes the
row *fall back*: the caller rescues it in Python. That is
rare on real answers; the conformance suite checks that both ways agree.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dspark_json.buffers.arrow import string_buffers
from dspark_json.buffers.bytes import (
    BACKSLASH,
    BACKSPACE,
    COLON,
    COMMA,
    CONTROL_END,
    CR,
    DOT,
    FORM_FEED,
    LBRACE,
    LBRACKET,
    LF,
    LOWER_B,
    LOWER_E,
    LOWER_F,
    LOWER_N,
    LOWER_R,
    LOWER_T,
    LOWER_U,
    MINUS,
    NINE,
    PLUS,
    QUOTE,
    RBRACE,
    RBRACKET,
    SPACE,
    TAB,
    UPPER_E,
    ZERO,
)
from dspark_json.buffers.compiled import kernel, leaf
from dspark_json.parse.json.grammar import (
    UNESCAPED,
    put_utf8,
    same_bytes,
    scan_string,
    skip_ws,
    unicode_escape,
)

__all__ = ["RescueEntries", "json_texts", "rescue_entries", "rescued_keys"]


_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
#: Python refuses to turn longer digit strings into an int (sys.int_info.default_max_str_digits).
_MAX_STR_DIGITS = 4300
#: Keys held at once on the way down a rescued value (the open objects' keys), and containers
#: open at once in it; a value with more falls back to Python.
_MAX_KEYS = 64
_MAX_OPEN = 64


@kernel
def _seen() -> Any:
    """Scratch for :func:`_put_value`: the keys it holds, then where each container's begin."""
    return np.empty(2 * _MAX_KEYS + _MAX_OPEN, np.int64)


@leaf
def _put(out: Any, pos: int, data: Any) -> int:
    for b in data:
        out[pos] = b
        pos += 1
    return pos


@leaf
def _put_int(out: Any, pos: int, value: int) -> int:
    if value == 0:
        out[pos] = ZERO
        return pos + 1
    digits = 0
    rest = value
    while rest > 0:
        digits += 1
        rest //= 10
    for i in range(digits - 1, -1, -1):
        out[pos + i] = ZERO + value % 10
        value //= 10
    return pos + digits


@leaf
def _put_char(out: Any, pos: int, code: int) -> int:
    """One code point as json.dumps(ensure_ascii=False) writes it inside a string."""
    if code == QUOTE or code == BACKSLASH:
        out[pos] = BACKSLASH
        out[pos + 1] = code
        return pos + 2
    if code < CONTROL_END:
        out[pos] = BACKSLASH
        short = 0
        if code == BACKSPACE:
            short = LOWER_B
        elif code == FORM_FEED:
            short = LOWER_F
        elif code == LF:
            short = LOWER_N
        elif code == CR:
            short = LOWER_R
        elif code == TAB:
            short = LOWER_T
        if short:
            out[pos + 1] = short
            return pos + 2
        out[pos + 1] = LOWER_U  # u00xx
        out[pos + 2] = ZERO
        out[pos + 3] = ZERO
        out[pos + 4] = _HEX[code >> 4]
        out[pos + 5] = _HEX[code & 15]
        return pos + 6
    return put_utf8(out, pos, code)


@leaf
def _put_string_body(out: Any, pos: int, data: Any, start: int, end: int) -> int:
    """The characters of a valid JSON string ``data[start:end]`` (quotes excluded), in
    Python's canonical form."""
    i = start
    while i < end:
        c = data[i]
        if c == BACKSLASH:
            e = data[i + 1]
            if e == LOWER_U:  # \uXXXX, a surrogate pair as one code point
                code, i = unicode_escape(data, i)
                pos = _put_char(out, pos, code)
                continue
            pos = _put_char(out, pos, int(UNESCAPED[e]))
            i += 2
        elif c < CONTROL_END:  # a raw control character (content read leniently)
            pos = _put_char(out, pos, c)
            i += 1
        else:
            out[pos] = c
            pos += 1
            i += 1
    return pos


_NOT_CANONICAL, _CANONICAL, _VERIFY = 0, 1, 2


@leaf
def _number(data: Any, start: int, end: int) -> int:
    """Whether the number ``data[start:end]`` is already in Python's canonical form:
    ``_CANONICAL`` for an integer (not ``-0``) or a double that ``repr`` prints back as written
    (a positional decimal of at most 15 significant digits, no exponent, from 1e-4 to below
    1e16, no trailing zero); ``_VERIFY`` for such a decimal of 16 or 17 significant digits
    (``repr`` writes it back when it is the shortest that reads back: the caller checks);
    ``_NOT_CANONICAL`` otherwise."""
    i = start
    if data[i] == MINUS:
        i += 1
    int_start = i
    while i < end and ZERO <= data[i] <= NINE:
        i += 1
    int_digits = i - int_start
    if i == end:  # an integer
        if int_digits > _MAX_STR_DIGITS:
            return _NOT_CANONICAL
        if data[start] == MINUS and int_digits == 1 and data[int_start] == ZERO:
            return _NOT_CANONICAL
        return _CANONICAL
    if data[i] != DOT:  # an exponent
        return _NOT_CANONICAL
    i += 1
    frac_start = i
    while i < end and ZERO <= data[i] <= NINE:
        i += 1
    if i != end:
        return _NOT_CANONICAL
    frac_digits = end - frac_start
    if int_digits > 16:
        return _NOT_CANONICAL
    zero_int = int_digits == 1 and data[int_start] == ZERO
    if frac_digits == 1 and data[frac_start] == ZERO:  # X.0, exact below 2**53
        return _CANONICAL if int_digits <= 15 else _NOT_CANONICAL
    if data[end - 1] == ZERO:  # a trailing zero: repr drops it
        return _NOT_CANONICAL
    significant = frac_digits
    if zero_int:
        leading = 0
        while leading < frac_digits and data[frac_start + leading] == ZERO:
            leading += 1
        if leading > 3:  # below 1e-4: repr writes an exponent
            return _NOT_CANONICAL
        significant -= leading
    else:
        significant += int_digits
    if significant <= 15:
        return _CANONICAL
    return _VERIFY if significant <= 17 else _NOT_CANONICAL


@leaf
def _put_value(
    out: Any, pos: int, data: Any, start: int, end: int, checks: Any, row: int, seen: Any
) -> int:
    """A valid JSON value ``data[start:end]`` in Python's canonical form; -1 where it needs
    Python (see :func:`_number`; an object in it that repeats a key, :func:`_new_key`; nesting
    deeper than :data:`_MAX_OPEN`). Numbers to verify are noted in ``checks``: ``checks[0]``
    triples follow, (row, start, end) in ``out``. ``seen``: scratch (:func:`_seen`)."""
    # The keys of the objects open on the way down (start, end each) and where each open
    # container's keys begin among them: a repeated key is Python's to settle.
    keys, frames = seen[: 2 * _MAX_KEYS], seen[2 * _MAX_KEYS :]
    depth = held = 0
    last_start = last_end = 0
    i = start
    while i < end:
        c = data[i]
        if c == SPACE or c == TAB or c == LF or c == CR:
            i += 1
        elif c == QUOTE:
            j = i + 1
            while data[j] != QUOTE:
                j += 2 if data[j] == BACKSLASH else 1
            out[pos] = QUOTE
            pos = _put_string_body(out, pos + 1, data, i + 1, j)
            out[pos] = QUOTE
            pos += 1
            last_start, last_end = i + 1, j
            i = j + 1
        elif c == MINUS or ZERO <= c <= NINE:
            j = i + 1
            while j < end:
                d = data[j]
                number = ZERO <= d <= NINE or d == DOT or d == LOWER_E or d == UPPER_E
                if not (number or d == PLUS or d == MINUS):
                    break
                j += 1
            kind = _number(data, i, j)
            if kind == _NOT_CANONICAL:
                return -1
            if kind == _VERIFY:
                at = 1 + 3 * checks[0]
                checks[at], checks[at + 1], checks[at + 2] = row, pos, pos + j - i
                checks[0] += 1
            for k in range(i, j):
                out[pos] = data[k]
                pos += 1
            i = j
        elif c == COLON or c == COMMA:  # no space after them
            if c == COLON:  # the string before it is a key of the innermost object
                if not _new_key(data, keys, frames[depth - 1], held, last_start, last_end):
                    return -1
                keys[2 * held], keys[2 * held + 1] = last_start, last_end
                held += 1
            out[pos] = c
            pos += 1
            i += 1
        else:  # { } [ ] and the letters of true, false, null
            if c == LBRACE or c == LBRACKET:
                if depth == _MAX_OPEN:
                    return -1
                frames[depth] = held
                depth += 1
            elif c == RBRACE or c == RBRACKET:
                depth -= 1
                held = frames[depth]
            out[pos] = c
            pos += 1
            i += 1
    return pos


@leaf
def _new_key(data: Any, keys: Any, first: int, held: int, start: int, end: int) -> bool:
    """Whether the key ``data[start:end]`` may be written as it is: not one of the keys
    ``first..held`` of its object (Python's dict keeps one entry, the last value at the first
    key's place), without an escape (two spellings of one key), and room left to hold it."""
    if held >= _MAX_KEYS:
        return False
    for b in range(start, end):
        if data[b] == BACKSLASH:
            return False
    for k in range(first, held):
        if same_bytes(data, keys[2 * k], keys[2 * k + 1], start, end):
            return False
    return True


class RescueEntries(NamedTuple):
    """The unknown keys of a batch to write as ``_rescued_data``, in the order they are
    written: by row, then by where each goes (the reference's order). Entry ``i`` is in row
    ``rows[i]``; its key and value lie at ``spans[4 * i:4 * i + 4]`` (key start, key end, value
    start, value end) in the buffer ``sources[i]`` names (0: the envelopes', 1: the contents');
    a key start below 0 stands for an item past a tuple struct's fields, ``-(position + 1)``.
    Its object's column path is place ``places[i]``: ``where[where_at[p]:where_at[p + 1]]``
    (empty for the top level)."""

    rows: np.ndarray
    sources: np.ndarray
    spans: np.ndarray
    places: np.ndarray
    where: np.ndarray
    where_at: np.ndarray


#: Keys one row writes at most in compiled code (each checked against the row's others); a row
#: with more is rescued in Python.
_MAX_ROW_KEYS = 256


@leaf
def _put_key(out: Any, pos: int, data: Any, k0: int, k1: int, where: Any, w0: int, w1: int) -> int:
    """A rescued key's column path, quotes excluded: ``<where>.<key>`` (``<key>`` at the top
    level), or ``<where>[<position>]`` for a tuple's item; -1 for an item at the top level
    (the reference's spelling there is Python's to give)."""
    if k0 < 0:
        if w1 == w0:
            return -1
        pos = _put(out, pos, where[w0:w1])
        out[pos] = LBRACKET
        pos = _put_int(out, pos + 1, -k0 - 1)
        out[pos] = RBRACKET
        return pos + 1
    if w1 > w0:
        pos = _put(out, pos, where[w0:w1])
        out[pos] = DOT
        pos += 1
    return _put_string_body(out, pos, data, k0, k1)


@leaf
def _put_entry(
    out: Any,
    pos: int,
    data: Any,
    spans: Any,
    s: int,
    where: Any,
    w0: int,
    w1: int,
    checks: Any,
    row: int,
    seen: Any,
    written: Any,
    held: int,
) -> int:
    """``"<path>":<value>`` at ``pos`` (after the comma the caller wrote), its path noted in
    ``written[2 * held:2 * held + 2]``; -1 where Python must write the row: the path is one
    already written in the row (Python's dict keeps one entry: a repeated key, or a key that
    reads like another's path), or the value needs Python (:func:`_put_value`)."""
    out[pos] = QUOTE
    key = pos + 1
    pos = _put_key(out, key, data, spans[s], spans[s + 1], where, w0, w1)
    if pos < 0:
        return -1
    for h in range(held):
        if same_bytes(out, written[2 * h], written[2 * h + 1], key, pos):
            return -1
    written[2 * held], written[2 * held + 1] = key, pos
    out[pos] = QUOTE
    out[pos + 1] = COLON
    return _put_value(out, pos + 2, data, spans[s + 2], spans[s + 3], checks, row, seen)


@kernel
def rescue_entries(
    n: int, entries: RescueEntries, envelopes: Any, contents: Any
) -> tuple[Any, Any, Any, Any, Any]:
    """``_rescued_data`` of rows ``0..n`` from their ``entries`` (rows without any: null):
    each row's keys as one JSON object, ``"<path>":<value>`` in the entries' order, the values
    in Python's canonical form. ``envelopes`` and ``contents``: the buffers the entries' spans
    point into.

    Returns (offsets, data, valid, fallback, checks): a large_string array's buffers, the rows
    to rescue in Python instead, and the numbers the caller must verify (row, start, end in
    ``data``, three entries each): where Python's ``repr`` would not write one back as it is,
    its row must be rescued in Python too.
    """
    rows, sources, spans, places = entries.rows, entries.sources, entries.spans, entries.places
    where, where_at = entries.where, entries.where_at
    m = len(rows)
    size = 2 * n + 1
    dots = 0  # at most one number to verify per '.'
    for e in range(m):
        s = 4 * e
        p = places[e]
        size += 32 + where_at[p + 1] - where_at[p]
        size += 6 * (max(spans[s + 1] - spans[s], 0) + spans[s + 3] - spans[s + 2])
        if sources[e] == 0:
            dots += _count(envelopes, spans[s + 2], spans[s + 3], DOT)
        else:
            dots += _count(contents, spans[s + 2], spans[s + 3], DOT)
    out = np.empty(size, np.uint8)
    checks = np.zeros(1 + 3 * dots, np.int64)
    seen = _seen()
    written = np.empty(2 * _MAX_ROW_KEYS, np.int64)
    offsets = np.zeros(n + 1, np.int64)
    valid = np.zeros(n, np.bool_)
    fallback = np.zeros(n, np.bool_)
    pos = 0
    e = 0
    for row in range(n):
        offsets[row] = pos
        if e == m or rows[e] != row:
            continue
        start = pos
        out[pos] = LBRACE
        pos += 1
        held = 0
        while e < m and rows[e] == row:
            if pos < 0:  # the row failed: its other entries are skipped
                e += 1
                continue
            if held == _MAX_ROW_KEYS:
                pos = -1
                continue
            if held:
                out[pos] = COMMA
                pos += 1
            s, p = 4 * e, places[e]
            w0, w1 = where_at[p], where_at[p + 1]
            if sources[e] == 0:
                pos = _put_entry(
                    out, pos, envelopes, spans, s, where, w0, w1, checks, row, seen, written, held
                )
            else:
                pos = _put_entry(
                    out, pos, contents, spans, s, where, w0, w1, checks, row, seen, written, held
                )
            held += 1
            e += 1
        if pos < 0:
            fallback[row] = True
            pos = start
            while checks[0] > 0 and checks[1 + 3 * (checks[0] - 1)] == row:
                checks[0] -= 1  # numbers noted in a row that falls back
        else:
            out[pos] = RBRACE
            pos += 1
            valid[row] = True
    offsets[n] = pos
    return offsets, out[:pos], valid, fallback, checks[1 : 1 + 3 * checks[0]]


@leaf
def _count(data: Any, start: int, end: int, byte: int) -> int:
    found = 0
    for i in range(start, end):
        if data[i] == byte:
            found += 1
    return found


def rescued_keys(rescued: pa.Array | pa.ChunkedArray) -> list[str]:
    """The distinct top-level keys of the ``_rescued_data`` objects ``rescued`` (nulls skipped),
    in the order first met (those of texts read by Python last): one compiled pass copies every
    key's bytes end to end, Arrow keeps the distinct ones, and only those are decoded (a key
    with an escape by Python's json). A text the pass cannot walk as an object (none that this
    package writes) is read by Python's json (reading each object whole by ``json.loads`` cost
    more: benchmarks/README.md)."""
    if isinstance(rescued, pa.ChunkedArray):
        rescued = rescued.combine_chunks()
    if rescued.null_count == len(rescued):
        return []
    offsets, data, valid = string_buffers(rescued)
    key_offsets, key_bytes, odd = _object_keys(offsets, data, valid)
    keys = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(),
        len(key_offsets) - 1,
        [None, pa.py_buffer(key_offsets), pa.py_buffer(key_bytes)],
    )
    found: dict[str, None] = {}
    for key in pc.unique(keys).to_pylist():
        found[json.loads(b'"' + key + b'"') if b"\\" in key else key.decode("utf-8")] = None
    for row in np.flatnonzero(odd).tolist():
        value = json.loads(rescued[row].as_py())
        found.update(dict.fromkeys(value if isinstance(value, dict) else ()))
    return list(found)


@kernel
def _object_keys(offsets: Any, data: Any, valid: Any) -> tuple[Any, Any, Any]:
    """Every top-level key of each valid JSON object text ``data[offsets[i]:offsets[i + 1]]``,
    as written (escapes kept), end to end: ``(key offsets, key bytes)``; and the rows it could
    not walk (not an object, or not as this package writes them), for Python."""
    n = len(offsets) - 1
    odd = np.zeros(n, np.bool_)
    size = 0
    for i in range(n):
        size += offsets[i + 1] - offsets[i] if valid[i] else 0
    out = np.empty(max(size, 1), np.uint8)
    ends = np.empty(16, np.int64)
    ends[0] = 0
    count = 0
    at = 0
    for i in range(n):
        if not valid[i]:
            continue
        end = offsets[i + 1]
        first = count
        pos = skip_ws(data, offsets[i], end)
        if pos >= end:
            continue  # an empty text holds no keys
        ok = data[pos] == LBRACE
        pos = skip_ws(data, pos + 1, end)
        if ok and pos < end and data[pos] == RBRACE:
            continue  # {}
        while ok:
            ok = pos < end and data[pos] == QUOTE
            after = scan_string(data, pos, end, True) if ok else -1
            ok = after > 0
            if not ok:
                break
            if count + 2 > len(ends):
                grown = np.empty(2 * len(ends), np.int64)
                grown[: count + 1] = ends[: count + 1]
                ends = grown
            for b in range(pos + 1, after - 1):
                out[at] = data[b]
                at += 1
            count += 1
            ends[count] = at
            pos = skip_ws(data, after, end)
            ok = pos < end and data[pos] == COLON
            pos = _skip_value(data, skip_ws(data, pos + 1, end), end)
            ok = ok and pos > 0
            pos = skip_ws(data, pos, end) if ok else end
            if ok and pos < end and data[pos] == COMMA:
                pos = skip_ws(data, pos + 1, end)
                continue
            ok = ok and pos < end and data[pos] == RBRACE and skip_ws(data, pos + 1, end) == end
            break
        if not ok:
            odd[i] = True
            count = first
            at = ends[count]
    return ends[: count + 1].copy(), out[:at].copy(), odd


@leaf
def _skip_value(data: Any, pos: int, end: int) -> int:
    """``pos`` at a JSON value: the position after it, or -1. Checked only as far as skipping
    needs (strings closed, brackets balanced): the texts are this package's own output."""
    depth = 0
    while pos < end:
        c = data[pos]
        if c == QUOTE:
            pos = scan_string(data, pos, end, True)
            if pos < 0:
                return -1
        elif c == LBRACE or c == LBRACKET:
            depth += 1
            pos += 1
        elif c == RBRACE or c == RBRACKET:
            if depth == 0:
                return pos  # the end of the object holding a scalar
            depth -= 1
            pos += 1
        elif depth == 0 and (c == COMMA or c == SPACE or c == TAB or c == LF or c == CR):
            return pos  # after a scalar
        else:
            pos += 1
        if depth == 0 and (c == QUOTE or c == RBRACE or c == RBRACKET):
            return pos
    return pos if depth == 0 else -1


@kernel
def json_texts(data: Any, starts: Any, ends: Any) -> tuple[Any, Any, Any, Any]:
    """The valid JSON values ``data[starts[i]:ends[i]]`` in Python's canonical form
    (``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` of what ``json.loads``
    reads), as a string column's text: the value held as its JSON text.

    Returns (offsets, out, python, checks): a large_string array's buffers, the values whose
    canonical form needs Python (:func:`_put_value` gave up: an empty string in ``out``), and
    the numbers to verify, (value, start, end in ``out``) three entries each after the count,
    as :func:`rescue_entries` notes them."""
    n = len(starts)
    size = 0
    dots = 0
    for i in range(n):
        # A raw control character (lenient content) is written as \\u00xx: 6 bytes for 1.
        size += 6 * (ends[i] - starts[i])
        dots += _count(data, starts[i], ends[i], DOT)
    out = np.empty(max(size, 1), np.uint8)
    checks = np.zeros(1 + 3 * dots, np.int64)
    seen = _seen()
    offsets = np.zeros(n + 1, np.int64)
    python = np.zeros(n, np.bool_)
    pos = 0
    for i in range(n):
        noted = checks[0]
        written = _put_value(out, pos, data, starts[i], ends[i], checks, i, seen)
        if written < 0:
            python[i] = True
            checks[0] = noted  # its numbers are Python's too, and their bytes overwritten
        else:
            pos = written
        offsets[i + 1] = pos
    return offsets, out, python, checks[1 : 1 + 3 * checks[0]]
