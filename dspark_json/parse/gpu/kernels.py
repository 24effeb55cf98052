# mypy: disable-error-code="attr-defined,no-untyped-def,misc"
"""The device kernels (``numba.cuda``), a grid-stride loop each: the fit check's (one launch
runs :func:`~dspark_json.parse.gpu.fit.visit` over rows, a thread per row, each thread on its
own row of the scratch), the lines' gathering and the doubles' conversion (a thread per line or
value); and whether numba's simulator runs them (:func:`simulated`). ``numba.cuda`` is
imported on first use, into this module's globals: numba's CUDA simulator
(``NUMBA_ENABLE_CUDASIM=1``) swaps the ``cuda`` a kernel's globals hold for its own, not one a
closure holds."""

from __future__ import annotations

import functools
import os
from typing import Any

__all__ = [
    "LINE_BLOCK",
    "LINE_THREADS",
    "doubles_kernel",
    "fit_kernel",
    "gather_kernel",
    "simulated",
]

cuda: Any = None
#: Threads per launch, and per block, of the kernels with a thread per line or per value
#: (:func:`gather_kernel`, :func:`doubles_kernel`).
LINE_THREADS, LINE_BLOCK = 65536, 256


def simulated() -> bool:
    """Whether numba's CUDA simulator runs the kernels (``NUMBA_ENABLE_CUDASIM=1``): a Python
    thread per device thread, so a launch takes a few threads only, and bytes are widened to
    int64 (NumPy's uint8 arithmetic wraps where the device widens a byte first)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"


def _import_cuda() -> None:
    global cuda  # noqa: PLW0603  (on use: see the module's docstring)
    if cuda is None:
        from numba import cuda as module

        cuda = module


@functools.cache
def fit_kernel(one: Any) -> Any:
    """The fit check's kernel over ``one`` (:func:`~dspark_json.parse.gpu.fit.visit` compiled
    for the device), compiled on first use."""
    _import_cuda()

    @cuda.jit
    def kernel(
        rows, content, lenient, offsets, data, valid, kind, first, count, low, high,
        field_node, key_start, key_end, keys, closure, closure_at, stack, stack_node,
        stack_stamp, stamps, clock, found, found_n, stack_count, no_events, codes, starts,
        ends, hazards, counts, write, top_at, spans, nested_at, nested,
    ):  # fmt: skip
        t = cuda.grid(1)
        for r in range(t, rows.shape[0], cuda.gridsize(1)):
            one(
                rows[r], content, lenient, offsets, data, valid, kind, first, count, low, high,
                field_node, key_start, key_end, keys, closure, closure_at, stack[t],
                stack_node[t], stack_stamp[t], stamps[t], clock[t], found[t], found_n[t],
                stack_count[t], no_events, codes, starts, ends, hazards, counts, write, top_at,
                spans, nested_at, nested,
            )  # fmt: skip

    return kernel


@functools.cache
def gather_kernel(one: Any) -> Any:
    """Rows copied into JSON lines on the device: ``one``
    (:func:`~dspark_json.parse.gpu.reader.gather_row` compiled for the device) per row, at the
    line offsets the host computed from the lengths."""
    _import_cuda()

    @cuda.jit
    def kernel(data, starts, ends, take, prefix, suffix, line_at, out):
        t = cuda.grid(1)
        for i in range(t, starts.shape[0], cuda.gridsize(1)):
            one(data, starts[i], ends[i], take[i], prefix, suffix, out, line_at[i])

    return kernel


@functools.cache
def doubles_kernel(one: Any) -> Any:
    """Numbers' text converted to doubles on the device: ``one``
    (:func:`~dspark_json.parse.gpu.doubles.double_row` compiled for the device) per value."""
    _import_cuda()

    @cuda.jit
    def kernel(data, offsets, pow10, values, how):
        t = cuda.grid(1)
        for i in range(t, values.shape[0], cuda.gridsize(1)):
            one(data, offsets, i, pow10, values, how)

    return kernel
