# mypy: disable-error-code="attr-defined,no-untyped-def,misc"
"""The device kernels (``numba.cuda``; imported on use, by :mod:`.fit`): one launch runs
:func:`~dspark_json.parse.gpu.fit.visit` over rows, a thread per row, a grid-stride loop over
the batch, each thread on its own row of the scratch. A module of its own because numba's CUDA
simulator rebinds the ``cuda`` a kernel's module imports (``NUMBA_ENABLE_CUDASIM=1``)."""

from __future__ import annotations

import functools
from typing import Any

from numba import cuda

__all__ = ["fit_kernel", "gather_kernel"]


@functools.cache
def fit_kernel() -> Any:
    """The fit check's kernel, compiled on first use."""
    from dspark_json.parse.gpu.fit import device_target, visit

    one = device_target().compile(visit)

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
def gather_kernel() -> Any:
    """Rows copied into JSON lines on the device (:func:`~dspark_json.parse.gpu.reader.gather_row`
    per row, at the line offsets the host computed from the lengths)."""
    from dspark_json.parse.gpu.fit import device_target
    from dspark_json.parse.gpu.reader import gather_row

    one = device_target().compile(gather_row)

    @cuda.jit
    def kernel(data, starts, ends, take, prefix, suffix, line_at, out):
        t = cuda.grid(1)
        for i in range(t, starts.shape[0], cuda.gridsize(1)):
            one(data, starts[i], ends[i], take[i], prefix, suffix, out, line_at[i])

    return kernel
