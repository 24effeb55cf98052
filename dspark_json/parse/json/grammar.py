"""JSON's grammar token by token: the pieces of the byte scans over Arrow string buffers (the
content rule's candidates are in :mod:`.candidates`, rows copied into JSON lines in :mod:`.lines`).

Every function here works on ``data[start:end]`` of a ``uint8`` buffer, with no allocation and
no Python objects; a string's plain runs and a run compare are read a word of eight bytes at a
time (:mod:`.words`, for the CPU). Whole documents are checked in
:mod:`.conform`, which puts these pieces together.

What "valid JSON" means for dspark-json (RFC 8259, and what Arrow can hold):

- the grammar exactly: no NaN/Infinity, no comments, no trailing commas, whitespace is only
  space, tab, CR and LF, no byte-order mark;
- strings are valid UTF-8 without raw control characters (in a message's content they may be
  allowed: see :func:`scan_string`), and ``\\u`` escapes form valid code points (a lone
  surrogate is rejected: UTF-8 cannot hold it);
- nesting at most :data:`MAX_DEPTH` deep.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dspark_json.buffers.bytes import (
    ASCII_END,
    BACKSLASH,
    BACKSPACE,
    CONTROL_END,
    CR,
    DOT,
    FORM_FEED,
    LF,
    LOWER_A,
    LOWER_B,
    LOWER_E,
    LOWER_F,
    LOWER_L,
    LOWER_N,
    LOWER_R,
    LOWER_S,
    LOWER_T,
    LOWER_U,
    MINUS,
    NINE,
    PLUS,
    QUOTE,
    SLASH,
    SPACE,
    TAB,
    UPPER_A,
    UPPER_E,
    UPPER_F,
    ZERO,
)
from dspark_json.buffers.compiled import leaf
from dspark_json.buffers.words import (
    BLOCK,
    WORD,
    block_below,
    block_equal,
    block_high,
    block_unequal,
    bytes_equal,
    escaped_bytes,
    first_byte,
    leading_zeros,
    load_word,
    lowest_bit,
    string_stops,
    unicode_escapes,
)
from dspark_json.rows import MAX_NESTING

__all__ = [
    "KIND_ARRAY",
    "KIND_INVALID",
    "KIND_NONE",
    "KIND_OBJECT",
    "KIND_SCALAR",
    "MAX_DEPTH",
    "UNESCAPED",
    "find_byte",
    "hex4",
    "holds_bytes",
    "holds_escape",
    "put_utf8",
    "same_bytes",
    "same_run",
    "scan_literal",
    "scan_number",
    "scan_string",
    "skip_ws",
    "strip",
    "unicode_escape",
]

#: Deeper documents are rejected (Python's json module gives up near 1000): the row contract's
#: nesting limit.
MAX_DEPTH = MAX_NESTING

KIND_NONE = -1  # no JSON candidate was found in the text
KIND_INVALID = 0
KIND_OBJECT = 1
KIND_ARRAY = 2
KIND_SCALAR = 3


#: Bytes a string scan passes over without a second look: printable ASCII but the quote and the
#: backslash (and, read leniently, the raw control characters too).
_PLAIN = np.array(
    [CONTROL_END <= c < ASCII_END and c not in (QUOTE, BACKSLASH) for c in range(256)], np.bool_
)
_PLAIN_LENIENT = np.array(
    [c < ASCII_END and c not in (QUOTE, BACKSLASH) for c in range(256)], np.bool_
)


@leaf
def _is_ws(c: int) -> bool:
    return c == SPACE or c == TAB or c == LF or c == CR


@leaf
def skip_ws(data: Any, pos: int, end: int) -> int:
    while pos < end and _is_ws(data[pos]):
        pos += 1
    return pos


@leaf
def _hex4(data: Any, pos: int, end: int) -> int:
    if pos + 4 > end:
        return -1
    value = 0
    for i in range(pos, pos + 4):
        c = data[i]
        if ZERO <= c <= NINE:
            digit = c - ZERO
        elif LOWER_A <= c <= LOWER_F:
            digit = c - LOWER_A + 10
        elif UPPER_A <= c <= UPPER_F:
            digit = c - UPPER_A + 10
        else:
            return -1
        value = value * 16 + digit
    return value


@leaf
def _utf8_length(data: Any, pos: int, end: int) -> int:
    """Length of the valid UTF-8 sequence at ``pos`` (a non-ASCII lead byte), else 0."""
    c = data[pos]
    low, high = 0x80, 0xBF
    if 0xC2 <= c <= 0xDF:
        need = 1
    elif c == 0xE0:
        need, low = 2, 0xA0
    elif c == 0xED:
        need, high = 2, 0x9F
    elif 0xE1 <= c <= 0xEF:
        need = 2
    elif c == 0xF0:
        need, low = 3, 0x90
    elif c == 0xF4:
        need, high = 3, 0x8F
    elif 0xF1 <= c <= 0xF3:
        need = 3
    else:
        return 0
    if pos + need >= end:
        return 0
    second = data[pos + 1]
    if second < low or second > high:
        return 0
    for i in range(pos + 2, pos + need + 1):
        if data[i] < 0x80 or data[i] > 0xBF:
            return 0
    return need + 1


@leaf
def same_bytes(data: Any, a: int, a_end: int, b: int, b_end: int) -> bool:
    """Whether ``data[a:a_end]`` and ``data[b:b_end]`` are the same bytes."""
    if a_end - a != b_end - b:
        return False
    return same_run(data, a, data, b, a_end - a)


@leaf
def same_run(x: Any, a: int, y: Any, b: int, length: int) -> bool:
    """Whether ``x[a:a + length]`` and ``y[b:b + length]`` are the same bytes (both in range):
    a block of 64 at a time, then words, and the last bytes as a word (the last eight, or the
    first eight masked to the run where they are in both arrays), not one at a time."""
    i = 0
    while i + BLOCK <= length:
        if block_unequal(x, a + i, y, b + i):
            return False
        i += BLOCK
    while i + WORD <= length:
        if load_word(x, a + i) != load_word(y, b + i):
            return False
        i += WORD
    if i == length:
        return True
    if length >= WORD:  # the last word, over the end of the one before
        return bool(load_word(x, a + length - WORD) == load_word(y, b + length - WORD))
    if a + WORD <= len(x) and b + WORD <= len(y):
        differ = load_word(x, a) ^ load_word(y, b)
        return bool((differ & ((np.uint64(1) << np.uint64(8 * length)) - np.uint64(1))) == 0)
    while i < length:
        if x[a + i] != y[b + i]:
            return False
        i += 1
    return True


@leaf
def hex4(data: Any, pos: int) -> int:
    """The value of four hex digits at ``pos`` that a scan already checked."""
    value = 0
    for i in range(pos, pos + 4):
        c = data[i]
        digit = c - ZERO if c <= NINE else (c - LOWER_A + 10 if c >= LOWER_A else c - UPPER_A + 10)
        value = value * 16 + digit
    return value


#: What the letter of a valid JSON escape stands for (``\\"``, ``\\\\``, ``\\/``: itself;
#: ``\\u`` apart: :func:`unicode_escape`).
UNESCAPED = np.arange(256, dtype=np.uint8)
UNESCAPED[[LOWER_B, LOWER_F, LOWER_N, LOWER_R, LOWER_T]] = [BACKSPACE, FORM_FEED, LF, CR, TAB]


@leaf
def unicode_escape(data: Any, pos: int) -> tuple[int, int]:
    """The code point of the ``\\uXXXX`` escape at ``pos`` that a scan already checked (a
    surrogate pair as one), and the position after it."""
    code = hex4(data, pos + 2)
    if 0xD800 <= code <= 0xDBFF:
        return 0x10000 + ((code - 0xD800) << 10) + (hex4(data, pos + 8) - 0xDC00), pos + 12
    return code, pos + 6


@leaf
def put_utf8(out: Any, pos: int, code: int) -> int:
    """Code point ``code`` as UTF-8 at ``out[pos:]``; returns the position after it."""
    if code < 0x80:
        out[pos] = code
        return pos + 1
    if code < 0x800:
        out[pos] = 0xC0 | (code >> 6)
        out[pos + 1] = 0x80 | (code & 0x3F)
        return pos + 2
    if code < 0x10000:
        out[pos] = 0xE0 | (code >> 12)
        out[pos + 1] = 0x80 | ((code >> 6) & 0x3F)
        out[pos + 2] = 0x80 | (code & 0x3F)
        return pos + 3
    out[pos] = 0xF0 | (code >> 18)
    out[pos + 1] = 0x80 | ((code >> 12) & 0x3F)
    out[pos + 2] = 0x80 | ((code >> 6) & 0x3F)
    out[pos + 3] = 0x80 | (code & 0x3F)
    return pos + 4


@leaf
def _string_blocks(data: Any, pos: int, end: int, lenient: bool) -> int:
    """A string's bytes from ``pos`` (outside an escape) a block of 64 at a time, for as long
    as whole blocks fit before ``end``: ``-p`` where the string closes (``p`` after its quote),
    else where the byte scan goes on: at the first byte it must look at (a control or
    non-ASCII byte, or the backslash of an escape other than ``\\"``, ``\\\\``, ``\\/``,
    ``\\b``, ``\\f``, ``\\n``, ``\\r``, ``\\t``), or after the last whole block."""
    while pos + BLOCK <= end:
        quotes = block_equal(data, pos, QUOTE)
        slashes = block_equal(data, pos, BACKSLASH)
        odd = block_high(data, pos)
        if not lenient:
            odd |= block_below(data, pos, CONTROL_END)
        usable = BLOCK
        if slashes >> np.uint64(63):  # a run of backslashes to the end: the next block starts
            usable = BLOCK - leading_zeros(~slashes)  # at the run, outside an escape
            if usable == 0:  # 64 backslashes: 32 escapes, and outside one after them
                pos += BLOCK
                continue
        escaped = escaped_bytes(slashes)
        other = escaped & ~(quotes | slashes)
        if other:
            other &= ~(
                block_equal(data, pos, SLASH)
                | block_equal(data, pos, LOWER_B)
                | block_equal(data, pos, LOWER_F)
                | block_equal(data, pos, LOWER_N)
                | block_equal(data, pos, LOWER_R)
                | block_equal(data, pos, LOWER_T)
            )
        stops = (quotes & ~escaped) | odd | other
        if usable < BLOCK:
            stops &= (np.uint64(1) << np.uint64(usable)) - np.uint64(1)
        if not stops:
            pos += usable
            continue
        at = lowest_bit(stops)
        was_escaped = (escaped >> np.uint64(at)) & np.uint64(1)
        if not was_escaped and (quotes >> np.uint64(at)) & np.uint64(1):
            return -(pos + at + 1)
        return pos + at - int(was_escaped)
    return pos


@leaf
def scan_string(data: Any, pos: int, end: int, lenient: bool) -> int:
    """``pos`` is at an opening quote; the position after the closing quote, or -1.
    ``lenient``: raw control characters (U+0000-U+001F) are allowed inside the string, as
    Python's ``json.loads(strict=False)`` and Spark's ``allowUnquotedControlChars`` allow.

    Most strings are short and plain (a key, a word, an id): where the first byte after the
    opening quote that needs a look, in a block of 64, is the closing quote, that is the end,
    in a few instructions; else :func:`_scan_string` walks the string."""
    first = pos + 1
    if first + BLOCK <= end:
        quotes = block_equal(data, first, QUOTE)
        stops = quotes | block_equal(data, first, BACKSLASH) | block_high(data, first)
        if not lenient:
            stops |= block_below(data, first, CONTROL_END)
        lowest = stops & (~stops + np.uint64(1))
        if lowest & quotes:
            return first + lowest_bit(lowest) + 1
    return _scan_string(data, pos, end, lenient)


@leaf
def _scan_string(data: Any, pos: int, end: int, lenient: bool) -> int:
    """:func:`scan_string`'s walk: its plain runs a block or a word at a time, its escapes and
    characters beyond ASCII a step each."""
    pos += 1
    plain = _PLAIN_LENIENT if lenient else _PLAIN
    blocks = True
    while pos < end:
        if blocks:
            pos = _string_blocks(data, pos, end, lenient)
            if pos < 0:
                return -pos
        # Eight plain bytes at a time up to the next byte that needs a look.
        run = pos
        while pos + WORD <= end:
            stops = string_stops(load_word(data, pos), lenient)
            if stops:
                pos += first_byte(stops)
                break
            pos += WORD
        if pos - run >= WORD:
            blocks = True  # after a plain word
        if pos >= end:
            return -1
        c = data[pos]
        if plain[c]:  # most bytes: printable ASCII other than a quote or a backslash
            pos += 1
            continue
        if c == QUOTE:
            return pos + 1
        if c == BACKSLASH:
            if pos + 1 >= end:
                return -1
            e = data[pos + 1]
            if e == LOWER_U:  # \uXXXX
                unit = _hex4(data, pos + 2, end)
                if unit < 0:
                    return -1
                pos += 6
                if 0xD800 <= unit <= 0xDBFF:
                    if pos + 1 < end and data[pos] == BACKSLASH and data[pos + 1] == LOWER_U:
                        low = _hex4(data, pos + 2, end)
                        if 0xDC00 <= low <= 0xDFFF:
                            pos += 6
                            blocks = False
                            continue
                    return -1
                if 0xDC00 <= unit <= 0xDFFF:
                    return -1
                blocks = False  # not between two \uXXXX: a block per escape costs more
                continue
            # \" \\ \/ \b \f \n \r \t
            if e in (QUOTE, BACKSLASH, SLASH, LOWER_B, LOWER_F, LOWER_N, LOWER_R, LOWER_T):
                pos += 2
                blocks = True
                continue
            return -1
        if c < CONTROL_END and not lenient:
            return -1
        if c < ASCII_END:
            pos += 1
            continue
        length = _utf8_length(data, pos, end)
        if length == 0:
            return -1
        pos += length
        blocks = False  # not between two characters beyond ASCII: a block each costs more
    return -1


@leaf
def _scan_digits(data: Any, pos: int, end: int) -> int:
    """At least one digit at ``pos``: the position after the run, else -1."""
    if pos >= end or not (ZERO <= data[pos] <= NINE):
        return -1
    while pos < end and ZERO <= data[pos] <= NINE:
        pos += 1
    return pos


@leaf
def scan_number(data: Any, pos: int, end: int) -> int:
    if data[pos] == MINUS:
        pos += 1
    if pos >= end:
        return -1
    if data[pos] == ZERO:
        pos += 1
    else:
        pos = _scan_digits(data, pos, end)
        if pos < 0:
            return -1
    if pos < end and data[pos] == DOT:
        pos = _scan_digits(data, pos + 1, end)
        if pos < 0:
            return -1
    if pos < end and (data[pos] == LOWER_E or data[pos] == UPPER_E):
        pos += 1
        if pos < end and (data[pos] == PLUS or data[pos] == MINUS):
            pos += 1
        pos = _scan_digits(data, pos, end)
    return pos


@leaf
def scan_literal(data: Any, pos: int, end: int) -> int:
    c = data[pos]
    if c == LOWER_T:
        word = (LOWER_T, LOWER_R, LOWER_U, LOWER_E, 0)  # true
    elif c == LOWER_F:
        word = (LOWER_F, LOWER_A, LOWER_L, LOWER_S, LOWER_E)  # false
    elif c == LOWER_N:
        word = (LOWER_N, LOWER_U, LOWER_L, LOWER_L, 0)  # null
    else:
        return -1
    for i in range(5):
        if word[i] == 0:
            return pos + i
        if pos + i >= end or data[pos + i] != word[i]:
            return -1
    return pos + 5


@leaf
def strip(data: Any, start: int, end: int) -> tuple[int, int]:
    """Drop whitespace and byte-order marks (EF BB BF) from both ends."""
    while start < end:
        if _is_ws(data[start]):
            start += 1
        elif (
            start + 3 <= end
            and data[start] == 0xEF
            and data[start + 1] == 0xBB
            and data[start + 2] == 0xBF
        ):
            start += 3
        else:
            break
    while end > start:
        if _is_ws(data[end - 1]):
            end -= 1
        elif (
            end - 3 >= start
            and data[end - 3] == 0xEF
            and data[end - 2] == 0xBB
            and data[end - 1] == 0xBF
        ):
            end -= 3
        else:
            break
    return start, end


@leaf
def find_byte(data: Any, start: int, end: int, byte: int) -> int:
    """Where ``byte`` first is in ``data[start:end]`` (a word at a time), or -1."""
    i = start
    while i + WORD <= end:
        hits = bytes_equal(load_word(data, i), byte)
        if hits:
            return i + first_byte(hits)
        i += WORD
    while i < end:
        if data[i] == byte:
            return i
        i += 1
    return -1


@leaf
def holds_escape(data: Any, low: int, high: int) -> bool:
    """Whether the bytes ``data`` hold a ``\\u00XX`` escape of a code point from ``low`` to
    ``high`` (both below U+0100), inside a string or not: a block of 64 bytes a step, each
    ``\\u00`` in it found exactly (a backslash alone, as in the quotes of JSON inside a string,
    costs nothing); the last bytes seven a step to each ``\\u``."""
    pos = 0
    end = len(data) - 5  # an escape is six bytes
    while pos + 3 + BLOCK <= len(data):  # a block at a time: every \\u00 in it, exactly
        found = (
            block_equal(data, pos, BACKSLASH)
            & block_equal(data, pos + 1, LOWER_U)
            & block_equal(data, pos + 2, ZERO)
            & block_equal(data, pos + 3, ZERO)
        )
        while found:
            at = pos + lowest_bit(found)
            if at < end and low <= _hex4(data, at + 2, at + 6) <= high:
                return True
            found &= found - np.uint64(1)
        pos += BLOCK
    while pos < end:
        at = -1
        while pos + WORD <= end:
            pairs = unicode_escapes(load_word(data, pos))
            if pairs:
                at = pos + first_byte(pairs)
                break
            pos += WORD - 1
        if at < 0:  # the last few bytes
            at = pos
            while at < end and not (data[at] == BACKSLASH and data[at + 1] == LOWER_U):
                at += 1
            if at >= end:
                return False
        is_escape = data[at] == BACKSLASH and data[at + 1] == LOWER_U  # (a mask may hit falsely)
        if is_escape and data[at + 2] == ZERO and data[at + 3] == ZERO:
            code = _hex4(data, at + 2, at + 6)
            if low <= code <= high:
                return True
        pos = at + 1
    return False


@leaf
def holds_bytes(data: Any, needle: Any) -> bool:
    """Whether the bytes ``data`` hold the bytes ``needle`` (not empty): a block at a time, the
    places where both its first and its last byte are compared whole."""
    n = len(needle)
    first, last = needle[0], needle[n - 1]
    pos = 0
    while pos + n - 1 + BLOCK <= len(data):
        found = block_equal(data, pos, first) & block_equal(data, pos + n - 1, last)
        while found:
            if same_run(data, pos + lowest_bit(found), needle, 0, n):
                return True
            found &= found - np.uint64(1)
        pos += BLOCK
    while pos + n <= len(data):
        if data[pos] == first and same_run(data, pos, needle, 0, n):
            return True
        pos += 1
    return False
