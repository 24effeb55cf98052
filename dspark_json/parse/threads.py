"""How the scans and reads run: row ranges on a thread pool (the numba kernels and pyarrow's
reader release the GIL)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from itertools import pairwise
from typing import Any

import numpy as np

__all__ = ["by_row_ranges", "on_threads", "row_ranges"]


def row_ranges(n: int, threads: int) -> list[tuple[int, int]]:
    """``n`` rows cut in up to ``threads`` ranges of at least 4,096 rows (one range below)."""
    parts = max(1, min(threads, n // 4096))
    bounds = np.linspace(0, n, parts + 1).astype(np.int64).tolist()
    return list(pairwise(bounds))


def on_threads(threads: int, jobs: Sequence[Callable[[], Any]]) -> list[Any]:
    """The results of ``jobs``, run on up to ``threads`` threads (the numba kernels and pyarrow's
    reader release the GIL), in order."""
    if threads <= 1 or len(jobs) <= 1:
        return [job() for job in jobs]
    with ThreadPoolExecutor(min(threads, len(jobs))) as pool:
        return list(pool.map(lambda job: job(), jobs))


def by_row_ranges(
    scan: Callable[..., Any],
    n: int,
    threads: int,
    *args: Any,
    apart: str | None = None,
    per_range: Callable[[int], tuple[Any, ...]] | None = None,
) -> Any:
    """``scan(*args, lo, hi)`` over ``n`` rows, split in ranges run on ``threads`` threads;
    results (an array or a named tuple of arrays) concatenated, but for the tuple's field
    ``apart``: a list of each range's array (to spare a large copy). ``per_range(k)``: more
    arguments, after ``hi``, for the ``k``-th range."""
    jobs = [
        partial(scan, *args, lo, hi, *(per_range(k) if per_range else ()))
        for k, (lo, hi) in enumerate(row_ranges(n, threads))
    ]
    results = on_threads(threads, jobs)
    if hasattr(results[0], "_fields"):  # a named tuple
        fields: tuple[str, ...] = results[0]._fields
        return type(results[0])(
            *(
                list(column) if field == apart else _joined(column)
                for field, column in zip(fields, zip(*results, strict=True), strict=True)
            )
        )
    return _joined(results)


def _joined(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The arrays end to end: the one array itself where there is one (no copy)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
