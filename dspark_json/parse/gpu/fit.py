"""The fit check on the device: a ``numba.cuda`` kernel, a thread per body, decides for each
body (or message text) what the CPU scans decide
(:func:`~dspark_json.parse.json.scans.scan_envelope_fit`,
:func:`~dspark_json.parse.json.scans.scan_content_fit`): valid JSON, the fit code against the
type, where a content's JSON lies, and the unknown keys to rescue; without the shredding
events, for cuDF reads the rows that fit. The rules are the CPU kernels' own source compiled for
the device (:mod:`.targets`; :func:`~dspark_json.parse.json.conform.check_row` itself), so the
depth limit (512), the codes and the statuses are the CPU's.

The same pass flags, in the rows that fit, what cuDF's JSON reader reads otherwise than the
CPU rules (:func:`reader_hazards`); those rows go to the reference parser, so the output
stays the reference's. What the CPU rules already set aside never reaches cuDF: duplicate
keys, escaped keys, integers of 19 digits or more or out of their column's range, ``-0`` for a
double, magnitudes past 1e300, invalid UTF-8, lone surrogates, raw control characters.
Doubles are no hazard: cuDF reads them as text and the device converts the text with the
CPU's own rules (:mod:`.doubles`), whatever their fraction, exponent or digits. What cuDF may
read otherwise in a row the CPU rules take (its source, ``cpp/src/io/utilities/
parsing_utils.cuh``, read for this):

- :data:`HAZARD_DIGITS`: an integer (no fraction, no exponent) of more than 15 digits: cuDF
  accumulates an integer column's digits in int64, which is exact to 18 digits by its source,
  but that is unverified on a device (benchmarks/gpu/cudf_numbers.py checks it); the flag
  cannot tell an integer column from a double one, so a long integer in a double column counts
  too;
- :data:`HAZARD_ESCAPE`: a ``\\u`` escape of a surrogate pair or of U+0000 in a string (cuDF's
  unescaping of those is unverified).

The flags look at the bytes, not the type (a long integer under an unknown key counts too):
they send a few rows more to the reference parser than needed, never one fewer.

Two launches per batch: the first gives every row its code and unknown-key counts, the second
(rows with keys to rescue only) writes their spans at offsets the counts give. Scratch is per
thread in device memory (``threads`` x 512 entries of bracket, node, stamp and count stacks).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from dspark_json.parse.gpu import grammar as device_grammar
from dspark_json.parse.gpu.kernels import simulated
from dspark_json.parse.gpu.targets import Target, portable
from dspark_json.parse.json import grammar
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
    TypeTable,
    check_row,
)
from dspark_json.parse.json.grammar import (
    KIND_INVALID,
    KIND_NONE,
    KIND_OBJECT,
    MAX_DEPTH,
    strip,
)
from dspark_json.parse.json.scans import ContentScan, EnvelopeScan

__all__ = [
    "HAZARD_DIGITS",
    "HAZARD_ESCAPE",
    "DeviceFit",
    "Fitted",
    "device_target",
    "reader_hazards",
]

logger = logging.getLogger("dspark_json")

HAZARD_DIGITS = 1
HAZARD_ESCAPE = 2
#: Digits of an integer that need no check of cuDF's integer parse (a double's 15: the
#: bound the hazard had when doubles were cuDF's).
_EXACT_DIGITS = 15
#: Threads of the device kernels (each with its own scratch: ~13 KiB).
_DEVICE_THREADS = 16384
_BLOCK = 128
_TOP = 4 * FOUND
_SCRATCH = _TOP + NESTED_STRIDE * 32  # check_row's ``found``: top-level, then nested keys

#: The CPU kernels that are CPU instructions, and the byte loops that stand for them.
_REPLACEMENTS: dict[Any, Callable[..., Any]] = {
    grammar.scan_string: device_grammar.scan_string,
    grammar.same_run: device_grammar.same_run,
    grammar.find_byte: device_grammar.find_byte,  # candidates' find_byte too: the same kernel
}


@portable
def reader_hazards(data: Any, start: int, end: int) -> int:
    """What of ``data[start:end]`` (valid JSON) cuDF's reader reads otherwise than the CPU
    rules: ``HAZARD_*`` bits (see the module's docstring)."""
    hazards = 0
    in_string = False
    number = False  # inside a number's bytes
    whole = True  # and no fraction or exponent so far
    digits = 0  # its integer digits
    pos = start
    while pos < end:
        c = data[pos]
        if in_string:
            if c == 92:  # an escape: \uXXXX of a surrogate or of U+0000
                if data[pos + 1] == 117:
                    a, b = data[pos + 2], data[pos + 3]
                    surrogate = (a == 100 or a == 68) and (
                        b == 56 or b == 57 or b == 97 or b == 98 or b == 65 or b == 66
                    )
                    nul = a == 48 and b == 48 and data[pos + 4] == 48 and data[pos + 5] == 48
                    if surrogate or nul:
                        hazards |= HAZARD_ESCAPE
                    pos += 6
                else:
                    pos += 2
                continue
            if c == 34:
                in_string = False
            pos += 1
            continue
        if 48 <= c <= 57:
            if not number:
                number, whole, digits = True, True, 0
            if whole:
                digits += 1
        elif number and (c == 46 or c == 101 or c == 69 or c == 43 or c == 45):
            whole = False  # . e E + -: a fraction or an exponent
        else:
            if number and whole and digits > _EXACT_DIGITS:
                hazards |= HAZARD_DIGITS
            number = False
            if c == 34:
                in_string = True
        pos += 1
    if number and whole and digits > _EXACT_DIGITS:  # a number that ends the document
        hazards |= HAZARD_DIGITS
    return hazards


@portable
def envelope_row(
    data: Any, start: int, end: int, valid: bool, nodes: TypeNodes, work: Scratch, found: Found,
    no_events: Any,
) -> int:  # fmt: skip
    """One body's code, as :func:`~dspark_json.parse.json.scans.scan_envelope_fit` gives it."""
    if not valid:
        return CODE_NULL
    json_kind, code = check_row(data, start, end, nodes, work, found, False, no_events, no_events)
    return code if json_kind == KIND_OBJECT else CODE_INVALID


@portable
def content_row(
    data: Any, start: int, end: int, valid: bool, lenient: bool, nodes: TypeNodes,
    work: Scratch, found: Found, no_events: Any,
) -> tuple[int, int, int]:  # fmt: skip
    """One message text's ``(code, start, end)``, as
    :func:`~dspark_json.parse.json.scans.scan_content_fit` gives them (the content rule:
    whole, fence, outermost braces; leniently valid JSON is ``CODE_MISFIT``)."""
    if not valid:
        return CODE_NULL, 0, 0
    start, end = strip(data, start, end)
    json_kind, code = KIND_NONE, CODE_MISFIT
    if start < end:
        json_kind, code = check_row(
            data, start, end, nodes, work, found, False, no_events, no_events
        )
        if json_kind == KIND_INVALID and data[start] != 123 and data[start] != 91:
            located, start, end = fallback_candidate(data, start, end)
            if located:
                json_kind, code = check_row(
                    data, start, end, nodes, work, found, False, no_events, no_events
                )
            else:
                json_kind = KIND_NONE
        if json_kind == KIND_INVALID and lenient:
            json_kind, code = check_row(
                data, start, end, nodes, work, found, lenient, no_events, no_events
            )
            code = CODE_MISFIT
    if json_kind == KIND_NONE:
        return CODE_NONE, start, end
    if json_kind == KIND_INVALID:
        return CODE_INVALID, start, end
    if data[start] == 110:  # a bare null: the reference decides whether it fits
        return CODE_MISFIT, start, end
    return code, start, end


@portable
def keep_found(found: Found, i: int, top_at: Any, spans: Any, nested_at: Any, nested: Any) -> None:
    """Row ``i``'s recorded unknown keys (``found``, as check_row records them) copied to
    ``spans`` from key ``top_at[i]`` and ``nested`` from key ``nested_at[i]`` on."""
    at = 4 * top_at[i]
    for k in range(4 * found.counts[0]):
        spans[at + k] = found.spans[k]
    at = NESTED_STRIDE * nested_at[i]
    for k in range(NESTED_STRIDE * found.counts[1]):
        nested[at + k] = found.spans[_TOP + k]


@portable
def visit(
    i: int, content: bool, lenient: bool, offsets: Any, data: Any, valid: Any,
    kind: Any, first: Any, count: Any, low: Any, high: Any, field_node: Any, key_start: Any,
    key_end: Any, keys: Any, closure: Any, closure_at: Any,
    stack: Any, stack_node: Any, stack_count: Any, stack_stamp: Any, stamps: Any, clock: Any,
    found_spans: Any, found_counts: Any, no_events: Any,
    codes: Any, starts: Any, ends: Any, hazards: Any, counts: Any,
    write: bool, top_at: Any, spans: Any, nested_at: Any, nested: Any,
) -> None:  # fmt: skip
    """Row ``i`` of a launch: its code, span, hazards and unknown-key counts (and, with
    ``write``, its unknown keys' spans). The kernel passes arrays (this thread's rows of the
    scratch); the CPU kernels' structures are built here."""
    nodes = TypeNodes(
        kind, first, count, low, high, field_node, key_start, key_end, keys, closure, closure_at
    )
    work = Scratch(stack, stack_node, stack_count, stack_stamp, stamps, clock)
    found = Found(found_spans, found_counts)
    start, end = offsets[i], offsets[i + 1]
    if content:
        code, start, end = content_row(
            data, start, end, valid[i], lenient, nodes, work, found, no_events
        )
    else:
        code = envelope_row(data, start, end, valid[i], nodes, work, found, no_events)
    codes[i] = code
    starts[i] = start
    ends[i] = end
    fits = code == CODE_FITS or code == CODE_EXTRA
    hazards[i] = reader_hazards(data, start, end) if fits else 0
    if code == CODE_EXTRA:
        counts[2 * i] = found_counts[0]
        counts[2 * i + 1] = found_counts[1]
        if write and found_counts[0] >= 0:
            keep_found(found, i, top_at, spans, nested_at, nested)
    else:
        counts[2 * i] = 0
        counts[2 * i + 1] = 0


class _Scratch:
    """Per-thread scratch for check_row in device memory: ``threads`` rows of each stack,
    kept across batches (the stamps and their clock, zeroed once, go on as on the CPU, where
    ``scratch`` is made once per scan; the other stacks are written before they are read)."""

    def __init__(self, threads: int, fields: int) -> None:
        from numba import cuda

        def empty(shape: tuple[int, int], dtype: Any) -> Any:
            return cuda.device_array(shape, dtype)

        self.threads = threads
        self.stack = empty((threads, MAX_DEPTH), np.uint8)
        self.stack_node = empty((threads, MAX_DEPTH), np.int32)
        self.stack_stamp = empty((threads, MAX_DEPTH), np.int32)
        self.stack_count = empty((threads, MAX_DEPTH), np.int32)
        self.stamps = cuda.to_device(np.zeros((threads, max(fields, 1)), np.int32))
        self.clock = cuda.to_device(np.zeros((threads, 1), np.int32))
        self.found = empty((threads, _SCRATCH), np.int64)
        self.found_n = empty((threads, 2), np.int64)

    def arrays(self) -> tuple[Any, ...]:
        """In :func:`visit`'s order: the :class:`Scratch` fields, then the :class:`Found`'s."""
        return (
            self.stack,
            self.stack_node,
            self.stack_count,
            self.stack_stamp,
            self.stamps,
            self.clock,
            self.found,
            self.found_n,
        )


@functools.cache
def device_target() -> Target:
    """The device's rules compiled for CUDA (``cuda.jit(device=True)``; under
    ``NUMBA_ENABLE_CUDASIM=1``, numba's simulator runs them on the CPU)."""
    from numba import cuda

    return Target(cuda.jit(device=True), _REPLACEMENTS)  # type: ignore[no-untyped-call]


class Fitted:
    """What one fit pass found, by row: ``codes``, ``starts``/``ends`` (the content's JSON;
    the body for envelopes), ``hazards`` (``HAZARD_*`` bits of rows that fit), and the unknown
    keys in the scans' form (``deep``, ``rows``/``spans``, ``nested_rows``/``nested``)."""

    def __init__(self, **arrays: np.ndarray) -> None:
        self.codes: np.ndarray = arrays["codes"]
        self.starts: np.ndarray = arrays["starts"]
        self.ends: np.ndarray = arrays["ends"]
        self.hazards: np.ndarray = arrays["hazards"]
        self.deep: np.ndarray = arrays["deep"]
        self.rows: np.ndarray = arrays["rows"]
        self.spans: np.ndarray = arrays["spans"]
        self.nested_rows: np.ndarray = arrays["nested_rows"]
        self.nested: np.ndarray = arrays["nested"]

    def hazardous(self) -> np.ndarray:
        """The rows that fit but hold a construct cuDF reads otherwise."""
        fits = (self.codes == CODE_FITS) | (self.codes == CODE_EXTRA)
        return fits & (self.hazards != 0)  # type: ignore[no-any-return]

    def routed(self) -> np.ndarray:
        """The codes the vectorised path acts on: the :meth:`hazardous` rows are
        ``CODE_MISFIT`` (the reference parser's)."""
        codes = self.codes.copy()
        codes[self.hazardous()] = CODE_MISFIT
        return codes


class DeviceFit:
    """The fit check for the GPU backend, on the CUDA device (or numba's simulator): the
    vectorised path's scans without a CPU pass over the bytes
    (:class:`~dspark_json.parse.vectorised.Fit`). ``threads``: threads per launch, each with
    its own scratch."""

    def __init__(self, *, threads: int | None = None) -> None:
        self.simulated = simulated()
        # The simulator runs a Python thread per device thread: a few are enough.
        self.threads = threads or (4 if self.simulated else _DEVICE_THREADS)
        #: The rows of the last batch that fit but went to the reference for a hazard.
        self.hazard_rows = 0
        #: The rows of the last scan (envelope or content) made misfits for a hazard.
        self.routed = np.zeros(0, np.bool_)
        self._scratch: dict[int, _Scratch] = {}

    def fit(
        self,
        offsets: np.ndarray,
        data: np.ndarray,
        valid: np.ndarray,
        table: TypeTable,
        *,
        content: bool = False,
        lenient: bool = False,
    ) -> Fitted:
        """Codes, spans, hazards and unknown keys of every row of an Arrow string buffer."""
        n = len(valid)
        offsets = np.ascontiguousarray(offsets, np.int64)
        codes = np.zeros(n, np.int8)
        starts = np.zeros(n, np.int64)
        ends = np.zeros(n, np.int64)
        hazards = np.zeros(n, np.int8)
        counts = np.zeros(2 * n, np.int64)
        empty = np.zeros(1, np.int64)
        rows = np.arange(n, dtype=np.int64)
        inputs = self._to_device(offsets, data, valid, table)
        out = [codes, starts, ends, hazards, counts, False, empty, empty, empty, empty]
        self._launch(rows, content, lenient, inputs, out)
        top = counts[0::2]
        deep = (codes == CODE_EXTRA) & (top < 0)
        extra = codes == CODE_EXTRA
        keyed = np.flatnonzero(extra & ~deep & ((top > 0) | (counts[1::2] > 0)))
        top_n = np.where(deep, 0, top)
        nested_n = np.where(deep, 0, counts[1::2])
        top_at = np.concatenate([[0], np.cumsum(top_n)]).astype(np.int64)
        nested_at = np.concatenate([[0], np.cumsum(nested_n)]).astype(np.int64)
        spans = np.zeros(4 * int(top_at[-1]), np.int64)
        nested = np.zeros(NESTED_STRIDE * int(nested_at[-1]), np.int64)
        if len(keyed):
            out = [codes, starts, ends, hazards, counts, True, top_at, spans, nested_at, nested]
            self._launch(keyed.astype(np.int64), content, lenient, inputs, out)
        fitted = Fitted(
            codes=codes,
            starts=starts,
            ends=ends,
            hazards=hazards,
            deep=deep,
            rows=np.repeat(np.arange(n), top_n),
            spans=spans,
            nested_rows=np.repeat(np.arange(n), nested_n),
            nested=nested,
        )
        self.routed = fitted.hazardous()
        self.hazard_rows += int(np.count_nonzero(self.routed))
        return fitted

    def envelope(
        self, offsets: np.ndarray, data: np.ndarray, valid: np.ndarray, table: TypeTable
    ) -> EnvelopeScan:
        """:func:`~dspark_json.parse.json.scans.scan_envelope_fit`'s results (no events, no
        groups), hazardous rows as misfits."""
        self.hazard_rows = 0
        f = self.fit(offsets, data, valid, table)
        groups = np.full(len(valid), -1, np.int64)
        no_events = np.zeros(0, np.int64)  # the rows that fit are read by cuDF
        return EnvelopeScan(
            f.routed(), f.deep, f.rows, f.spans, no_events, f.nested_rows, f.nested, groups
        )

    def content(
        self,
        offsets: np.ndarray,
        data: np.ndarray,
        valid: np.ndarray,
        table: TypeTable,
        lenient: bool,
    ) -> ContentScan:
        """:func:`~dspark_json.parse.json.scans.scan_content_fit`'s results (no events),
        hazardous rows as misfits."""
        f = self.fit(offsets, data, valid, table, content=True, lenient=lenient)
        no_events = np.zeros(0, np.int64)
        return ContentScan(
            f.starts, f.ends, f.routed(), f.deep, f.rows, f.spans, no_events, f.nested_rows,
            f.nested,
        )  # fmt: skip

    def _launch(
        self,
        rows: np.ndarray,
        content: bool,
        lenient: bool,
        inputs: tuple[Any, ...],
        out: list[Any],
    ) -> None:
        """One launch over ``rows``: ``inputs`` (offsets, data, valid, then the type table's
        arrays) already on the device; ``out`` copied back."""
        from numba import cuda

        from dspark_json.parse.gpu.kernels import fit_kernel

        threads = max(1, min(self.threads, len(rows)))
        block = min(_BLOCK, threads)
        grid = (threads + block - 1) // block
        scratch = self._scratch_for(grid * block, inputs)
        on_device = [cuda.to_device(a) if isinstance(a, np.ndarray) else a for a in out]
        fit_kernel(device_target().compile(visit))[grid, block](
            cuda.to_device(rows), content, lenient, *inputs, *scratch.arrays(),
            cuda.to_device(np.zeros(0, np.int64)), *on_device,
        )  # fmt: skip
        for host, dev in zip(out, on_device, strict=True):
            if isinstance(host, np.ndarray):
                dev.copy_to_host(host)

    def _scratch_for(self, threads: int, inputs: tuple[Any, ...]) -> _Scratch:
        """Scratch for ``threads`` threads and the table in ``inputs`` (its fields' count)."""
        fields = max(len(inputs[8]), 1)  # field_node
        scratch = self._scratch.get(fields)
        if scratch is None or scratch.threads < threads:
            scratch = self._scratch[fields] = _Scratch(max(threads, self.threads), fields)
        return scratch

    def _to_device(
        self, offsets: np.ndarray, data: np.ndarray, valid: np.ndarray, table: TypeTable
    ) -> tuple[Any, ...]:
        """A batch's inputs on the device, once for both launches."""
        from numba import cuda

        if self.simulated:
            # The simulator runs the kernels as Python with NumPy's scalar rules, under which
            # uint8 arithmetic wraps (``c - 87`` of a hex digit); numba's typing on the device
            # widens a byte first. Widened here, the simulator computes what the device does.
            data = data.astype(np.int64)
        return tuple(
            cuda.to_device(np.ascontiguousarray(a)) for a in (offsets, data, valid, *table.nodes)
        )
