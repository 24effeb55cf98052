"""``_rescued_data`` built in compiled code, straight from the spans the scans found.

The scans record where each unknown key and its value sit in the buffers (they are valid JSON by
then). For each row, this writes the JSON object the reference parser would write,
``json.dumps(sink, ensure_ascii=False, separators=(",", ":"))``, byte for byte, into one Arrow
string buffer — no Python object per row:

- keys and paths in the reference's order: each column's paths in schema order (for the content:
  ``parsed.<key>`` for the first choice where a ``parsed`` column exists, else
  ``choices[k].message.parsed.<key>``), the envelope's unknown keys (``<key>``) last;
- values re-serialised in Python's canonical form: whitespace dropped, strings with Python's
  escapes (``\\"``, ``\\\\``, ``\\n``, ``\\r``, ``\\t``, ``\\b``, ``\\f``, other control
  characters as ``\\u00xx``, every other character as UTF-8), integers as written, decimals as
  written where ``repr`` writes them so (16-17 digit ones are checked by the caller, one
  ``float``/``repr`` per number, no JSON per row).

A value whose canonical form needs Python (a double other than a short positional decimal, as
Python's ``repr`` would print it; ``-0``; an integer past Python's digit limit; an object that
repeats a key, or spells one with an escape), or a key that could collide with a path, makes the
row *fall back*: the caller rescues it in Python. That is
rare on real answers; the conformance suite checks that both ways agree.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dspark_json.parse.arrow import string_buffers
from dspark_json.parse.json.compiled import kernel, leaf
from dspark_json.parse.json.grammar import (
    UNESCAPED,
    put_utf8,
    same_bytes,
    scan_string,
    skip_ws,
    unicode_escape,
)

__all__ = ["KeySpans", "json_texts", "rescue_rows", "rescued_keys"]


class KeySpans(NamedTuple):
    """Unknown keys a scan found, by owner (a row, or a choice): owner ``i``'s keys are
    ``spans[4 * j:4 * j + 4]`` (key start, key end, value start, value end in ``data``) for
    ``j`` in ``start[i]..end[i]``."""

    data: np.ndarray
    start: np.ndarray
    end: np.ndarray
    spans: np.ndarray


_QUOTE, _BACKSLASH = 34, 92
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
#: Python refuses to turn longer digit strings into an int (sys.int_info.default_max_str_digits).
_MAX_STR_DIGITS = 4300
_CHOICES = np.frombuffer(b"choices[", np.uint8)
_MESSAGE_PARSED = np.frombuffer(b"].message.parsed.", np.uint8)
_PARSED = np.frombuffer(b"parsed.", np.uint8)
#: Keys held at once on the way down a rescued value (the open objects' keys), and containers
#: open at once in it; a value with more falls back to Python.
_MAX_KEYS = 64
_MAX_DEPTH = 64


@kernel
def _seen() -> Any:
    """Scratch for :func:`_put_value`: the keys it holds, then where each container's begin."""
    return np.empty(2 * _MAX_KEYS + _MAX_DEPTH, np.int64)


@leaf
def _put(out: Any, pos: int, data: Any) -> int:
    for b in data:
        out[pos] = b
        pos += 1
    return pos


@leaf
def _put_int(out: Any, pos: int, value: int) -> int:
    if value == 0:
        out[pos] = 48
        return pos + 1
    digits = 0
    rest = value
    while rest > 0:
        digits += 1
        rest //= 10
    for i in range(digits - 1, -1, -1):
        out[pos + i] = 48 + value % 10
        value //= 10
    return pos + digits


@leaf
def _put_char(out: Any, pos: int, code: int) -> int:
    """One code point as json.dumps(ensure_ascii=False) writes it inside a string."""
    if code == _QUOTE or code == _BACKSLASH:
        out[pos] = _BACKSLASH
        out[pos + 1] = code
        return pos + 2
    if code < 32:
        out[pos] = _BACKSLASH
        short = 0
        if code == 8:
            short = 98  # b
        elif code == 12:
            short = 102  # f
        elif code == 10:
            short = 110  # n
        elif code == 13:
            short = 114  # r
        elif code == 9:
            short = 116  # t
        if short:
            out[pos + 1] = short
            return pos + 2
        out[pos + 1] = 117  # u00xx
        out[pos + 2] = 48
        out[pos + 3] = 48
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
        if c == _BACKSLASH:
            e = data[i + 1]
            if e == 117:  # \uXXXX, a surrogate pair as one code point
                code, i = unicode_escape(data, i)
                pos = _put_char(out, pos, code)
                continue
            pos = _put_char(out, pos, int(UNESCAPED[e]))
            i += 2
        elif c < 32:  # a raw control character (content read leniently)
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
    if data[i] == 45:
        i += 1
    int_start = i
    while i < end and 48 <= data[i] <= 57:
        i += 1
    int_digits = i - int_start
    if i == end:  # an integer
        if int_digits > _MAX_STR_DIGITS:
            return _NOT_CANONICAL
        if data[start] == 45 and int_digits == 1 and data[int_start] == 48:
            return _NOT_CANONICAL
        return _CANONICAL
    if data[i] != 46:  # an exponent
        return _NOT_CANONICAL
    i += 1
    frac_start = i
    while i < end and 48 <= data[i] <= 57:
        i += 1
    if i != end:
        return _NOT_CANONICAL
    frac_digits = end - frac_start
    if int_digits > 16:
        return _NOT_CANONICAL
    zero_int = int_digits == 1 and data[int_start] == 48
    if frac_digits == 1 and data[frac_start] == 48:  # X.0, exact below 2**53
        return _CANONICAL if int_digits <= 15 else _NOT_CANONICAL
    if data[end - 1] == 48:  # a trailing zero: repr drops it
        return _NOT_CANONICAL
    significant = frac_digits
    if zero_int:
        leading = 0
        while leading < frac_digits and data[frac_start + leading] == 48:
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
    deeper than :data:`_MAX_DEPTH`). Numbers to verify are noted in ``checks``: ``checks[0]``
    triples follow, (row, start, end) in ``out``. ``seen``: scratch (:func:`_seen`)."""
    # The keys of the objects open on the way down (start, end each) and where each open
    # container's keys begin among them: a repeated key is Python's to settle.
    keys, frames = seen[: 2 * _MAX_KEYS], seen[2 * _MAX_KEYS :]
    depth = held = 0
    last_start = last_end = 0
    i = start
    while i < end:
        c = data[i]
        if c == 32 or c == 9 or c == 10 or c == 13:
            i += 1
        elif c == _QUOTE:
            j = i + 1
            while data[j] != _QUOTE:
                j += 2 if data[j] == _BACKSLASH else 1
            out[pos] = _QUOTE
            pos = _put_string_body(out, pos + 1, data, i + 1, j)
            out[pos] = _QUOTE
            pos += 1
            last_start, last_end = i + 1, j
            i = j + 1
        elif c == 45 or 48 <= c <= 57:
            j = i + 1
            while j < end:
                d = data[j]
                if not (48 <= d <= 57 or d == 46 or d == 101 or d == 69 or d == 43 or d == 45):
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
        elif c == 58 or c == 44:  # : and , get no space after them
            if c == 58:  # the string before it is a key of the innermost object
                if not _new_key(data, keys, frames[depth - 1], held, last_start, last_end):
                    return -1
                keys[2 * held], keys[2 * held + 1] = last_start, last_end
                held += 1
            out[pos] = c
            pos += 1
            i += 1
        else:  # { } [ ] and the letters of true, false, null
            if c == 123 or c == 91:
                if depth == _MAX_DEPTH:
                    return -1
                frames[depth] = held
                depth += 1
            elif c == 125 or c == 93:
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
        if data[b] == _BACKSLASH:
            return False
    for k in range(first, held):
        if same_bytes(data, keys[2 * k], keys[2 * k + 1], start, end):
            return False
    return True


@leaf
def _collides(data: Any, start: int, end: int) -> bool:
    """An envelope key that reads like one of the content's paths."""
    return _starts_with(data, start, end, _PARSED) or _starts_with(data, start, end, _CHOICES)


@leaf
def _repeats(data: Any, spans: Any, lo: int, hi: int) -> bool:
    """Whether two of the keys ``lo..hi`` are the same bytes (Python's dict keeps the last
    value at the first key's place: the row falls back)."""
    for a in range(lo, hi):
        for b in range(a + 1, hi):
            if same_bytes(data, spans[4 * a], spans[4 * a + 1], spans[4 * b], spans[4 * b + 1]):
                return True
    return False


@leaf
def _starts_with(data: Any, start: int, end: int, prefix: Any) -> bool:
    if end - start < len(prefix):
        return False
    for b in range(len(prefix)):
        if data[start + b] != prefix[b]:
            return False
    return True


@leaf
def _entry(
    out: Any,
    pos: int,
    count: int,
    head: Any,
    k: int,
    data: Any,
    span: Any,
    s: int,
    checks: Any,
    row: int,
    seen: Any,
) -> tuple[int, int]:
    """``"<head><k>.message.parsed.<key>":<value>`` (``k >= 0``) or ``"<head><key>":<value>``,
    after a comma where one is due; (-1, count) when the value needs Python."""
    if count:
        out[pos] = 44
        pos += 1
    out[pos] = _QUOTE
    pos = _put(out, pos + 1, head)
    if k >= 0:
        pos = _put_int(out, pos, k)
        pos = _put(out, pos, _MESSAGE_PARSED)
    pos = _put_string_body(out, pos, data, span[s], span[s + 1])
    out[pos] = _QUOTE
    out[pos + 1] = 58
    pos = _put_value(out, pos + 2, data, span[s + 2], span[s + 3], checks, row, seen)
    return pos, count + 1


@kernel
def rescue_rows(
    needs: Any,
    envelope: KeySpans,
    content: KeySpans,
    first: Any,
    lengths: Any,
    has_parsed: bool,
    choices_first: bool,
) -> tuple[Any, Any, Any, Any, Any]:
    """``_rescued_data`` of every row where ``needs`` (the others: null).

    A row's envelope keys are ``envelope``'s of that row; the keys of its choice ``c``
    (``first[row] + k``, ``k < lengths[row]``) are ``content``'s of that choice.
    ``has_parsed``: the first choice's keys go under ``parsed.``; ``choices_first``: the choices
    column comes before ``parsed``.

    Returns (offsets, data, valid, fallback, checks): a large_string array's buffers, the rows
    to rescue in Python instead, and the numbers the caller must verify (row, start, end in
    ``data``, three entries each): where Python's ``repr`` would not write one back as it is,
    its row must be rescued in Python too.
    """
    env_data, env_start, env_end, env_spans = (
        envelope.data, envelope.start, envelope.end, envelope.spans
    )  # fmt: skip
    content_data, key_start, key_end, content_spans = (
        content.data, content.start, content.end, content.spans
    )  # fmt: skip
    n = len(needs)
    bound = np.zeros(n + 1, np.int64)
    dots = 0  # at most one number to verify per '.'
    for row in range(n):
        size = 2
        if needs[row]:
            for j in range(env_start[row], env_end[row]):
                s = 4 * j
                size += 8 + 6 * (
                    env_spans[s + 1] - env_spans[s] + env_spans[s + 3] - env_spans[s + 2]
                )
                dots += _count(env_data, env_spans[s + 2], env_spans[s + 3], 46)
            for k in range(lengths[row]):
                c = first[row] + k
                for j in range(key_start[c], key_end[c]):
                    s = 4 * j
                    size += 48 + 6 * (
                        content_spans[s + 1] - content_spans[s] + content_spans[s + 3]
                        - content_spans[s + 2]
                    )  # fmt: skip
                    dots += _count(content_data, content_spans[s + 2], content_spans[s + 3], 46)
        bound[row + 1] = bound[row] + size
    out = np.empty(bound[n], np.uint8)
    checks = np.zeros(1 + 3 * dots, np.int64)
    seen = _seen()
    offsets = np.zeros(n + 1, np.int64)
    valid = np.zeros(n, np.bool_)
    fallback = np.zeros(n, np.bool_)
    pos = 0
    for row in range(n):
        offsets[row] = pos
        if not needs[row]:
            continue
        start = pos
        out[pos] = 123
        pos += 1
        count = 0
        failed = False
        for group in range(3):  # choices / parsed in schema order, then the envelope
            if group == 2:
                if _repeats(env_data, env_spans, env_start[row], env_end[row]):
                    failed = True
                    break
                for j in range(env_start[row], env_end[row]):
                    s = 4 * j
                    if _collides(env_data, env_spans[s], env_spans[s + 1]):
                        failed = True
                        break
                    pos, count = _entry(
                        out, pos, count, _CHOICES[:0], -1, env_data, env_spans, s, checks, row,
                        seen,
                    )  # fmt: skip
                    if pos < 0:
                        failed = True
                        break
                break
            parsed_group = (group == 1) == choices_first
            if parsed_group and not has_parsed:
                continue
            ks = range(0, 1) if parsed_group else range(1 if has_parsed else 0, lengths[row])
            for k in ks:
                if k >= lengths[row]:
                    break
                c = first[row] + k
                if _repeats(content_data, content_spans, key_start[c], key_end[c]):
                    failed = True
                    break
                for j in range(key_start[c], key_end[c]):
                    if parsed_group:
                        pos, count = _entry(
                            out, pos, count, _PARSED, -1, content_data, content_spans, 4 * j,
                            checks, row, seen,
                        )  # fmt: skip
                    else:
                        pos, count = _entry(
                            out, pos, count, _CHOICES, k, content_data, content_spans, 4 * j,
                            checks, row, seen,
                        )  # fmt: skip
                    if pos < 0:
                        failed = True
                        break
                if failed:
                    break
            if failed:
                break
        if failed:
            fallback[row] = True
            pos = start
            while checks[0] > 0 and checks[1 + 3 * (checks[0] - 1)] == row:
                checks[0] -= 1  # numbers noted in a row that falls back
        elif count:
            out[pos] = 125
            pos += 1
            valid[row] = True
        else:
            pos = start
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
    package writes) is read by Python's json (reading each object whole by ``json.loads`` was a
    large share of a partition that rescues a block a row, the drift corpus)."""
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
        ok = data[pos] == 123
        pos = skip_ws(data, pos + 1, end)
        if ok and pos < end and data[pos] == 125:
            continue  # {}
        while ok:
            ok = pos < end and data[pos] == _QUOTE
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
            ok = pos < end and data[pos] == 58  # :
            pos = _skip_value(data, skip_ws(data, pos + 1, end), end)
            ok = ok and pos > 0
            pos = skip_ws(data, pos, end) if ok else end
            if ok and pos < end and data[pos] == 44:  # ,
                pos = skip_ws(data, pos + 1, end)
                continue
            ok = ok and pos < end and data[pos] == 125 and skip_ws(data, pos + 1, end) == end
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
        if c == _QUOTE:
            pos = scan_string(data, pos, end, True)
            if pos < 0:
                return -1
        elif c == 123 or c == 91:
            depth += 1
            pos += 1
        elif c == 125 or c == 93:
            if depth == 0:
                return pos  # the end of the object holding a scalar
            depth -= 1
            pos += 1
        elif depth == 0 and (c == 44 or c == 32 or c == 9 or c == 10 or c == 13):
            return pos  # after a scalar
        else:
            pos += 1
        if depth == 0 and (c == _QUOTE or c == 125 or c == 93):
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
    as :func:`rescue_rows` notes them."""
    n = len(starts)
    size = 0
    dots = 0
    for i in range(n):
        # A raw control character (lenient content) is written as \\u00xx: 6 bytes for 1.
        size += 6 * (ends[i] - starts[i])
        dots += _count(data, starts[i], ends[i], 46)
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
