"""How the parse kernels are compiled: the two numba decorators every kernel module uses.

- :func:`kernel`: compiled once per machine (``cache=True``: the machine code is kept beside
  the module, :mod:`dspark_json.parse.warmup` explains where), and without the GIL, so the
  scans of one batch run on threads side by side.
- :func:`leaf`: the same, without numba's reference counting (``_nrt=False``), for the functions
  that neither allocate nor return an array, which are most of them: the byte scans a scan calls
  per token. numba counts a reference to each array a compiled function receives, with an atomic
  increment on the way in and a decrement on the way out that its pruning pass does not always
  remove (``perf`` shows ``NRT_incref`` and ``NRT_decref`` in the calls of
  :func:`~dspark_json.parse.json.conform.check_row`; figures: benchmarks/README.md). A kernel's
  loop that reassigns an array (a buffer it grows) counts references on every pass, and one
  that holds several pays for it per row (6 % of a vLLM parse in the scans' row loops): such
  a loop is a leaf that returns to its kernel where it must allocate
  (:func:`~dspark_json.parse.json.scans.scan_envelope_fit`). A leaf may call only leaves; its
  caller keeps the arrays alive.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from numba import njit

__all__ = ["kernel", "leaf"]

_F = TypeVar("_F", bound=Callable[..., Any])

#: numba's flag for compiling without reference counting (not in its typed signature).
_NO_REFCOUNTS: dict[str, Any] = {"_nrt": False}
_kernel = njit(cache=True, nogil=True)
_leaf = njit(cache=True, nogil=True, **_NO_REFCOUNTS)


def kernel(function: _F) -> _F:
    """Compile ``function`` as a kernel (it may allocate arrays and return them)."""
    return cast(_F, _kernel(function))


def leaf(function: _F) -> _F:
    """Compile ``function`` as a leaf: no allocation, no array returned, only leaves called."""
    return cast(_F, _leaf(function))
