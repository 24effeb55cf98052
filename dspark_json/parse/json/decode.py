"""Typed JSON -> Arrow: the CPU backend's reader of the documents that fit their type.

The scans (:mod:`dspark_json.parse.json.scans`) walk every document once to check it; a document
that fits (valid JSON in the shape of its type) is, in the same walk, *shredded*: each typed
value is written as an *event* ``(type node, a, b)``, as Dremel and Arrow's own JSON reader do.
This module turns the events into Arrow arrays:

- every value of a type node, in document order, is that node's Arrow child array in order
  (a node never nests inside itself), so grouping the events by node (a counting sort) gives
  each column at once;
- a key that is missing, or ``null``, is a null for its node and for every field below it
  through structs (an Arrow struct's children are as long as the struct), none through arrays:
  one event, for its node, which stands for a null at each node of that node's *closure*
  (:class:`~dspark_json.parse.json.conform.TypeNodes`), expanded here;
- unknown keys are skipped (the scans recorded them for ``_rescued_data``).

Events: ``a = -1`` is null (at each node of the event's node's closure); else a struct or array
has ``a = 1`` (``b`` = an array's length), an integer or boolean ``b`` = its value, a string or
double ``a:b`` = its text in the data (a string's without the quotes). :func:`group_events`
reads the events twice, in document order: a tally (each node's values and string bytes), then
the scatter by node, which on the way converts the doubles (in one IEEE operation: Clinger's
exact fast path, <= 15 digits, decimal exponent within +-22; the rest, rare for model output,
by Python's ``float``, so every value is the one the reference parser reads) and unescapes the
strings, each node's into its own region (a plain string up to 64 bytes is one block copy; a
block of escapes one byte compress where the CPU has one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dspark_json.buffers.arrow import as_type
from dspark_json.buffers.bytes import (
    BACKSLASH,
    CASE_BIT,
    DOT,
    LOWER_E,
    LOWER_U,
    MINUS,
    PLUS,
    QUOTE,
    ZERO,
)
from dspark_json.buffers.compiled import kernel, leaf
from dspark_json.buffers.words import (
    BLOCK,
    COMPRESSES,
    WORD,
    backslashes,
    block_equal,
    compress_block,
    copy_block,
    escaping_backslashes,
    first_byte,
    load_word,
    lowest_bit,
    store_word,
)
from dspark_json.parse.json.conform import (
    JSON_TEXT,
    T_ARRAY,
    T_BOOL,
    T_DOUBLE,
    T_INT,
    T_MAP,
    T_STRING,
    T_STRUCT,
    TEXT_ANY,
    TypeTable,
)
from dspark_json.parse.json.grammar import UNESCAPED, put_utf8, unicode_escape
from dspark_json.parse.threads import on_threads

__all__ = ["Workspace", "read_events"]


#: 10**0 .. 10**22: exact as doubles, so one multiplication or division rounds correctly.
_POW10 = np.array([10.0**k for k in range(23)], np.float64)
_EXACT = 2**53


@kernel
def tally_events(
    events: Any, is_string: Any, closure: Any, closure_at: Any
) -> tuple[Any, Any, Any]:
    """Per node, how many values it has (a null event stands for one at each node of its
    node's closure, ``closure[closure_at[i]:closure_at[i + 1]]``), how many of them are not
    null, and the bytes of its strings as they stand (escaped: room enough for them
    unescaped), in one pass. The nulls are counted at the node they were written for, and
    spread over the closures once, after the pass."""
    seen = np.zeros(len(is_string), np.int64)
    nulls = np.zeros(len(is_string), np.int64)
    totals = np.zeros(len(is_string), np.int64)
    for e in range(len(events) // 3):
        node = events[3 * e]
        a = events[3 * e + 1]
        seen[node] += 1
        if a == -1:
            nulls[node] += 1
        elif a >= 0 and is_string[node]:
            totals[node] += events[3 * e + 2] - a
    filled = seen - nulls
    counts = filled.copy()
    for node in range(len(is_string)):
        if nulls[node]:
            for k in range(closure_at[node], closure_at[node + 1]):
                counts[closure[k]] += nulls[node]
    return counts, filled, totals


#: ``a`` of a double's event once :func:`scatter_events` converted it (its ``b`` then holds the
#: double's bits); -1 is a null, and a position (``a >= 0``) a number left to Python's float.
CONVERTED = -2


@leaf
def scatter_events(  # noqa: PLR0917  (a kernel: positional only)
    data: Any,
    events: Any,
    at: Any,
    a: Any,
    b: Any,
    b_doubles: Any,
    kind: Any,
    empty: Any,
    filled: Any,
    filled_at: Any,
    byte_at: Any,
    ends: Any,
    out: Any,
) -> None:
    """Write each event's ``a`` and ``b`` at its node's next place (``at``, advanced): one part
    of a counting sort by node; parts with disjoint places may run at once. The nodes null in
    every event (``empty``: an envelope's extras nobody sends, and what is below them, more
    than half of a vLLM envelope's values) are not written: a null is written at each node of
    its closure that is not (``filled[filled_at[i]:filled_at[i + 1]]``; none when its own node
    is empty, as all below it then are).

    The values are read on the way, in document order (a row's bytes are read while they are
    in cache, where a pass per column reads each row once per column: a cache miss per value,
    benchmarks/README.md): a double (``kind`` ``T_DOUBLE``) on the fast path is converted
    (``a`` :data:`CONVERTED`, the value in ``b_doubles``, a float64 view of ``b``), and a
    string unescaped into its node's region of ``out`` (from ``byte_at[node]``, advanced;
    ``ends[place]`` is where it ends there, a null's an empty string)."""
    for e in range(len(events) // 3):
        node = events[3 * e]
        if empty[node]:
            continue
        start, end = events[3 * e + 1], events[3 * e + 2]
        if start == -1:
            for k in range(filled_at[node], filled_at[node + 1]):
                below = filled[k]
                place = at[below]
                at[below] += 1
                a[place] = -1
                b[place] = end
                if kind[below] == T_STRING:
                    ends[place] = byte_at[below]
            continue
        place = at[node]
        at[node] += 1
        t = kind[node]
        if t == T_STRING:
            if start >= 0:
                byte_at[node] = _unescape_string(data, start, end, out, byte_at[node])
            ends[place] = byte_at[node]
        elif t == T_DOUBLE and start >= 0:
            fast, value = _double_of(data, start, end, _POW10)
            if fast:
                a[place] = CONVERTED
                b_doubles[place] = value
                continue
        a[place] = start
        b[place] = end


class Workspace:
    """Arrays a reader of events needs only while it reads (each node's ``a`` and ``b``, each
    string's end), kept from one read to the next by their owner (a parser): their pages are
    the process's already, where a fresh array's are faulted in and zeroed by the kernel. A
    read with a workspace copies what its columns keep of them (integers, doubles)."""

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}

    def take(self, name: str, size: int) -> np.ndarray:
        """The array ``name`` of ``size`` int64 entries, its values undefined."""
        held = self._arrays.get(name)
        if held is None or len(held) < size:
            held = self._arrays[name] = np.empty(size + size // 8, np.int64)
        return held[:size]


def _empty(workspace: Workspace | None, name: str, size: int) -> np.ndarray:
    return np.empty(size, np.int64) if workspace is None else workspace.take(name, size)


def _within(
    closure: np.ndarray, closure_at: np.ndarray, keep: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each node's closure (``closure[closure_at[i]:closure_at[i + 1]]``) but the nodes not
    in ``keep``, in the same form."""
    kept = keep[closure]
    at = np.zeros(len(closure) + 1, np.int64)
    np.cumsum(kept, out=at[1:])
    return closure[kept], at[closure_at]


def group_events(
    parts: Sequence[np.ndarray],
    kind: np.ndarray,
    threads: int = 1,
    *,
    closures: tuple[np.ndarray, np.ndarray] | None = None,
    data: np.ndarray | None = None,
    workspace: Workspace | None = None,
) -> tuple[
    np.ndarray, np.ndarray, np.ndarray, dict[int, tuple[np.ndarray, np.ndarray]], np.ndarray
]:
    """The events of ``parts`` (in order; a part per thread) grouped by node (``kind``: each node's
    ``T_*``), in order within each node, a null event expanded over its node's closure
    (``closures``: the table's ``closure`` and ``closure_at``; without, each node's is itself):
    their ``a`` and ``b``, where each node's run starts (``len(kind) + 1`` bounds), and every string
    node's strings, unescaped (per node, its Arrow offsets, 32-bit where they fit, and UTF-8 data,
    in the node's order). The doubles are converted on the way, as :func:`scatter_events` says (the
    strings and doubles are in ``data``). ``a`` and ``b`` are ``workspace``'s where one is given
    (valid until its next read). Last, per node, whether all its events are null (node 0 never is):
    its ``a`` and ``b`` are not written, nor its strings (the columns make it nulls at once)."""
    nodes = len(kind)
    is_string = kind == T_STRING
    if closures is None:
        closures = (np.arange(nodes, dtype=np.int64), np.arange(nodes + 1, dtype=np.int64))
    closure, closure_at = closures
    tallies = [tally_events(part, is_string, closure, closure_at) for part in parts]
    bounds = np.zeros(nodes + 1, np.int64)
    np.cumsum(np.sum([counts for counts, _, _ in tallies], axis=0), out=bounds[1:])
    empty = np.sum([filled for _, filled, _ in tallies], axis=0) == 0
    empty[0] = False  # the root's rows are read whatever they hold
    written = is_string & ~empty  # the string nodes whose strings are unescaped
    filled, filled_at = _within(closure, closure_at, ~empty)
    at, places = bounds[:-1].copy(), []
    for counts, _, _ in tallies:
        places.append(at.copy())
        at += counts
    a = _empty(workspace, "a", int(bounds[-1]))
    b = _empty(workspace, "b", int(bounds[-1]))
    # Indexed as a / b are (every event's place), though only the strings' entries are written.
    ends = _empty(workspace, "ends", max(int(bounds[-1]), 1))
    if data is None:
        data = np.zeros(1, np.uint8)
    pieces, jobs = [], []
    for part, place, (_, _, totals) in zip(parts, places, tallies, strict=True):
        # Each node's region: its strings' room, and ROOM_AFTER bytes for the copies that
        # write past its last string's end.
        room = totals + ROOM_AFTER * is_string
        starts = np.zeros(nodes, np.int64)
        np.cumsum(room[:-1], out=starts[1:])
        out = np.empty(max(int(room.sum()), 1), np.uint8)
        byte_at = starts.copy()
        pieces.append((starts, byte_at, out))
        # scatter_events advances the places it is given: each job gets a copy of its own.
        job = partial(
            scatter_events, data, part, place.copy(), a, b, b.view(np.float64), kind, empty,
            filled, filled_at, byte_at, ends, out,
        )  # fmt: skip
        jobs.append(job)
    on_threads(threads, jobs)
    strings: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for node in np.flatnonzero(written).tolist():
        first = int(bounds[node])
        sizes = [int(byte_at[node] - starts[node]) for starts, byte_at, _ in pieces]
        # Arrow's offsets, 32-bit where the node's strings take less than 2 GiB (a string
        # array's: no cast after), each part's in one pass.
        wide = sum(sizes) >= 2**31
        offsets = np.empty(int(bounds[node + 1]) - first + 1, np.int64 if wide else np.int32)
        offsets[0] = 0
        texts, size = [], 0
        for (starts, _, out), place, following, part_size in zip(
            pieces, places, [*places[1:], bounds[1:]], sizes, strict=True
        ):
            lo, hi = int(place[node]), int(following[node])
            into = offsets[lo - first + 1 : hi - first + 1]
            np.subtract(ends[lo:hi], starts[node] - size, out=into, casting="unsafe")
            texts.append(out[starts[node] : starts[node] + part_size])
            size += part_size
        text = texts[0] if len(texts) == 1 else np.concatenate(texts)
        strings[node] = (offsets, text)
    return a, b, bounds, strings, empty


#: Bytes a string's unescape may write past its room (the room: its escaped length), which
#: :func:`group_events` leaves after each node's region.
ROOM_AFTER = BLOCK


@leaf
def _unescape_blocks(data: Any, j: int, end: int, out: Any, pos: int) -> tuple[int, int]:
    """:func:`_unescape_into` a block of 64 bytes at a time: each block's backslashes found at
    once, the runs between them copied a block at a time (``data[j:end]`` from outside an
    escape); a string of one block without a backslash is one copy. Where to go on, in
    ``data`` and ``out``: at the end, at a ``\\u`` escape, or within the buffer's last two
    blocks (where a block copy would read past ``data``)."""
    while j < end and j + 2 * BLOCK <= len(data):
        base = j
        slashes = block_equal(data, base, BACKSLASH)
        stop = min(base + BLOCK, end)
        inside = ~np.uint64(0)
        if stop - base < BLOCK:
            inside = (np.uint64(1) << np.uint64(stop - base)) - np.uint64(1)
            slashes &= inside
        if COMPRESSES and slashes and not slashes >> np.uint64(63):
            # The block's escapes at once: its escaping backslashes dropped, the letters
            # of \b \f \n \r \t made control characters, in one compress (a block
            # with a \uXXXX, or a backslash run to its end, goes on below).
            escaping = escaping_backslashes(slashes)
            others = (escaping << np.uint64(1)) & ~slashes & ~block_equal(data, base, QUOTE)
            if not others & block_equal(data, base, LOWER_U):
                keep = ~escaping & inside
                pos += compress_block(data, base, out, pos, keep, others)
                j = stop
                continue
        while slashes:
            at = base + lowest_bit(slashes)
            copy_block(data, j, out, pos)  # the run to the backslash, and bytes overwritten next
            pos += at - j
            letter = data[at + 1]
            if letter == LOWER_U:  # \uXXXX
                return at, pos
            out[pos] = UNESCAPED[letter]
            pos += 1
            j = at + 2
            # The backslash, and the one it escapes if it does (``\\\\``).
            slashes &= ~(np.uint64(3) << np.uint64(at - base))
        if j < stop:
            copy_block(data, j, out, pos)
            pos += stop - j
            j = stop
    return j, pos


@leaf
def _unescape_into(data: Any, j: int, end: int, out: Any, pos: int) -> int:
    """The valid JSON string body ``data[j:end]`` unescaped into ``out`` from ``pos`` on; where
    it ends there. Runs without a backslash are copied a block or a word at a time: a copy may
    write up to :data:`ROOM_AFTER` bytes past ``out[pos + end - j]`` (an escape only
    shortens), the room the caller gave the string and the bytes it left after it (the next
    string written there overwrites them)."""
    blocks = True
    while j < end:
        if blocks:
            j, pos = _unescape_blocks(data, j, end, out, pos)
            if j >= end:
                break
        start = j
        while j + WORD <= end:
            word = load_word(data, j)
            store_word(out, pos, word)
            escapes = backslashes(word)
            if escapes:
                run = first_byte(escapes)
                j += run
                pos += run
                break
            j += WORD
            pos += WORD
        if j - start >= WORD:
            blocks = True  # after a plain word
        if j >= end:
            break
        c = data[j]
        if c != BACKSLASH:
            out[pos] = c
            pos += 1
            j += 1
            continue
        e = data[j + 1]
        if e == LOWER_U:  # \uXXXX; a surrogate pair is one code point
            code, j = unicode_escape(data, j)
            pos = put_utf8(out, pos, code)
            blocks = False  # not between two \uXXXX: a block per escape costs more
            continue
        out[pos] = UNESCAPED[e]
        pos += 1
        j += 2
        blocks = True
    return pos


@leaf
def _unescape_string(data: Any, start: int, end: int, out: Any, pos: int) -> int:
    """The valid JSON string body ``data[start:end]`` unescaped into ``out`` from ``pos`` on,
    as :func:`_unescape_into` writes it; where it ends there. Most strings are short and plain:
    one block copied here, without a call."""
    length = end - start
    if (
        0 < length <= BLOCK
        and start + 2 * BLOCK <= len(data)
        and not block_equal(data, start, BACKSLASH)
        & ((np.uint64(2) << np.uint64(length - 1)) - np.uint64(1))
    ):
        copy_block(data, start, out, pos)
        return pos + length
    if length > 0:
        return _unescape_into(data, start, end, out, pos)
    return pos


@leaf
def _decimal(data: Any, pos: int, end: int) -> tuple[bool, int, int, int]:
    """A valid JSON number at ``data[pos:end]`` as ``(negative, mantissa, significant digits,
    decimal exponent)``: its value is ``mantissa * 10**exponent`` while it has at most 19
    significant digits."""
    negative = data[pos] == MINUS
    if negative:
        pos += 1
    mantissa = digits = scale = 0
    fraction = exponent = False
    while pos < end:
        c = data[pos]
        pos += 1
        if c == DOT:
            fraction = True
        elif c | CASE_BIT == LOWER_E:  # e or E
            exponent = True
            break
        elif digits or c != ZERO:  # leading zeros are not significant
            if digits < 19:
                mantissa = mantissa * 10 + (c - ZERO)
                if fraction:
                    scale -= 1
            elif not fraction:
                scale += 1
            digits += 1
        elif fraction:
            scale -= 1
    if exponent:
        sign = 1
        if data[pos] == PLUS or data[pos] == MINUS:
            sign = -1 if data[pos] == MINUS else 1
            pos += 1
        power = 0
        while pos < end:
            if power < 100000:
                power = power * 10 + (data[pos] - ZERO)
            pos += 1
        scale += sign * power
    return negative, mantissa, digits, scale


@leaf
def _double_of(data: Any, start: int, end: int, pow10: Any) -> tuple[bool, float]:
    """The number at ``data[start:end]`` as a double, exactly, and True; or False where it
    needs Python's ``float`` (more than 15 significant digits, a decimal exponent beyond
    +-22)."""
    negative, mantissa, digits, scale = _decimal(data, start, end)
    if mantissa != 0 and (digits > 15 or mantissa > _EXACT or abs(scale) > 22):
        return False, 0.0
    value = float(mantissa)
    if mantissa != 0:
        value = value * pow10[scale] if scale >= 0 else value / pow10[-scale]
    return True, -value if negative else value


#: The JSON texts of values (``data``, their starts, their ends) as a string array, in the
#: reference parser's canonical form: given by the caller, which owns that form's Python side.
TextOf = Callable[[np.ndarray, np.ndarray, np.ndarray], pa.Array]


def read_events(
    data: np.ndarray,
    events: Sequence[np.ndarray],
    table: TypeTable,
    arrow_type: pa.DataType,
    threads: int = 1,
    *,
    text_of: TextOf | None = None,
    workspace: Workspace | None = None,
) -> pa.Array:
    """The values the events of a scan describe (one array per range of rows, in order), as
    one array of ``arrow_type`` (the read type of ``table``'s node 0): one value per document
    scanned, null where it did not fit. ``text_of`` writes the values a string node holds as
    JSON text (a table compiled with ``json_text``); ``workspace``: where the read's own
    arrays are (:class:`Workspace`)."""
    nodes = table.nodes
    a, b, bounds, strings, empty = group_events(
        events, nodes.kind, threads, closures=(nodes.closure, nodes.closure_at), data=data,
        workspace=workspace,
    )  # fmt: skip
    columns = _Columns(
        data, table, a, b, bounds, strings=strings, text_of=text_of, kept=workspace is not None,
        empty=empty,
    )  # fmt: skip
    return columns.build(0, arrow_type)


class _Columns:
    """Arrow arrays from the grouped events, node by node."""

    def __init__(
        self,
        data: np.ndarray,
        table: TypeTable,
        a: np.ndarray,
        b: np.ndarray,
        bounds: np.ndarray,
        *,
        strings: dict[int, tuple[np.ndarray, np.ndarray]],
        text_of: TextOf | None = None,
        kept: bool = False,
        empty: np.ndarray | None = None,
    ) -> None:
        self.data, self.table, self.a, self.b, self.bounds = data, table, a, b, bounds
        self.bounds_list: list[int] = bounds.tolist()
        self.nodes = table.nodes
        self.strings = strings  # per string node: its offsets and text, unescaped
        self.text_of = text_of
        #: Whether ``a`` and ``b`` are a workspace's (the columns copy what they keep of them).
        self.kept = kept
        #: Per node, whether all its events are null (:func:`group_events`: not written).
        self.empty: list[bool] = [False] * len(bounds) if empty is None else empty.tolist()

    def build(self, node: int, arrow_type: pa.DataType) -> pa.Array:
        lo, hi = self.bounds_list[node], self.bounds_list[node + 1]
        a, b = self.a[lo:hi], self.b[lo:hi]
        if node and (lo == hi or self.empty[node]):
            # Null in every row (an extra nobody sends, a field below a null), or no value at
            # all (below an empty array): the nulls at once, without a walk of what is below.
            return pa.nulls(hi - lo, arrow_type)
        kind = self.table.kinds[node]
        # Each step below is a pass over the node's values: only those its kind needs. A
        # double's ``a`` is CONVERTED (-2) where group_events converted it.
        null = a == -1 if kind == T_DOUBLE else a < 0
        nulls = bool(null.any())
        if kind == T_STRUCT:
            fields = self.table.fields[node]
            children = [self.build(fields[f.name], f.type) for f in arrow_type]
            if not children:  # a struct without fields: its length is its own events'
                return pa.StructArray.from_buffers(arrow_type, len(a), [_validity(null)])
            mask = pa.array(null) if nulls else None
            return pa.StructArray.from_arrays(children, fields=list(arrow_type), mask=mask)
        if kind == T_ARRAY:
            offsets = _list_offsets(b, null, nulls)
            values = self.build(int(self.nodes.first[node]), arrow_type.value_type)
            mask = pa.array(null) if nulls else None
            return pa.ListArray.from_arrays(offsets, values, type=arrow_type, mask=mask)
        if kind == T_MAP:
            offsets = _list_offsets(b, null, nulls)
            keys = self.build(int(self.nodes.first[node]), arrow_type.key_type)
            items = self.build(int(self.nodes.high[node]), arrow_type.item_type)
            mask = pa.array(null) if nulls else None
            return pa.MapArray.from_arrays(offsets, keys, items, type=arrow_type, mask=mask)
        if kind == T_STRING:
            offsets, text = self.strings[node]
            # Values held as their JSON text (an empty string here): a node that takes them.
            as_text = a <= JSON_TEXT if nulls and self.nodes.low[node] == TEXT_ANY else None
            held = as_text is not None and bool(as_text.any())
            if held:
                null = a == -1
            if offsets.dtype == np.int32 and not held:  # read as other types by a cast
                strings = pa.StringArray.from_buffers(
                    len(a), pa.py_buffer(offsets), pa.py_buffer(text), _validity(null)
                )
                return as_type(strings, arrow_type)
            strings = pa.LargeStringArray.from_buffers(
                len(a), pa.py_buffer(offsets.astype(np.int64)), pa.py_buffer(text),
                _validity(null),
            )  # fmt: skip
            if as_text is not None and held:
                strings = self._with_texts(strings, as_text, JSON_TEXT - a[as_text], b[as_text])
            return as_type(strings, arrow_type)
        if self.kept and kind in (T_DOUBLE, T_INT):  # the column keeps its values
            b = b.copy()
        if kind == T_DOUBLE:  # converted by group_events but the numbers Python's float reads
            values = b.view(np.float64)
            for i in np.flatnonzero(a >= 0).tolist():
                values[i] = float(self.data[a[i] : b[i]].tobytes())
            if nulls:
                values[null] = 0.0
            return as_type(pa.array(values, mask=null if nulls else None), arrow_type)
        if kind == T_INT:
            return as_type(pa.array(b, mask=null if nulls else None), arrow_type)
        if kind == T_BOOL:
            return as_type(pa.array(b != 0, mask=null if nulls else None), arrow_type)
        return pa.nulls(len(a), arrow_type)

    def _with_texts(
        self, strings: pa.Array, as_text: np.ndarray, starts: np.ndarray, ends: np.ndarray
    ) -> pa.Array:
        """``strings`` with the values at ``as_text`` replaced by their JSON texts (the values
        at ``data[starts:ends]``, in order)."""
        assert self.text_of is not None, "a table compiled with json_text needs text_of"
        texts = self.text_of(self.data, starts, ends).cast(pa.large_string())
        index = np.cumsum(as_text) - 1
        spread = texts.take(pa.array(index, mask=~as_text))
        return pc.if_else(pa.array(as_text), spread, strings)


def _list_offsets(lengths: np.ndarray, null: np.ndarray, nulls: bool) -> pa.Array:
    """The Arrow offsets of a list or map column whose rows hold ``lengths`` items (a null row,
    ``null``, none; ``nulls``: whether there is one)."""
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(np.where(null, 0, lengths) if nulls else lengths, out=offsets[1:])
    return pa.array(offsets)


def _validity(null: np.ndarray) -> pa.Buffer | None:
    if not null.any():
        return None
    return pa.py_buffer(np.packbits(~null, bitorder="little"))
