"""The process heap between partitions: freed memory kept, so that the next partition does not
fault in fresh pages (the deployer's choice, off by default); and the cyclic garbage collector
paused while objects are made in bulk.

A partition's work allocates a few large buffers and frees them when its rows are handed on: the
rows' bytes, the scans' events, the unescaped strings, the output's columns (several times
the bodies' size). glibc serves each buffer above its mmap threshold (128 KiB,
rising to at most 32 MiB) with a fresh mapping and unmaps it when it is freed, and it trims the
heap's free top; so every partition touches its buffers' pages for the first time again, one page
fault per 4 KiB page, a large share of a partition's time (figures: ``benchmarks/README.md``).

:func:`keep_freed_memory` raises glibc's mmap and trim thresholds to 1 GiB, once per process:
freed buffers stay in the heap and are reused. It changes malloc for the whole process, so the
library does not do it unless the deployer asks: ``DSPARK_JSON_KEEP_MEMORY=1`` in the
environment (``spark.executorEnv.DSPARK_JSON_KEEP_MEMORY`` for the executors), read where the CPU
parser or a partition's work first runs (:func:`keep_freed_memory_if_asked`), or a call of
:func:`keep_freed_memory` in the process that parses (one that calls
:func:`~dspark_json.parse_responses`). Importing the package changes nothing. The cost is memory
held: a process keeps up to its peak (plus at most 1 GiB of free heap) rather than returning it
between batches. Elsewhere than glibc (macOS, musl) this does nothing.

What it does not reach: a thread's own malloc arena maps a buffer above 64 MiB afresh whatever
the thresholds (a parse in process on several threads: about 21,000 faults remain per 100,000
vLLM answers, against 100,000 before). A Spark task parses on one thread (its task's CPUs), on
the main arena, which this covers.

:func:`gc_paused` pauses Python's cyclic garbage collector while many small containers are made
at once: each of its full passes walks the whole heap, and tens of thousands of new containers
set them off.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["KEEP_MEMORY_ENV", "gc_paused", "keep_freed_memory", "keep_freed_memory_if_asked"]

_log = logging.getLogger(__name__)

#: The environment variable by which a deployer turns this on (``1``); unset or ``0``: off.
KEEP_MEMORY_ENV = "DSPARK_JSON_KEEP_MEMORY"
_ON = frozenset({"1", "true", "yes", "on"})
_OFF = frozenset({"", "0", "false", "no", "off"})

#: glibc's ``mallopt`` parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: Buffers up to this size come from the heap and stay there when freed.
_THRESHOLD = 1 << 30


@functools.cache
def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process (once: later calls return the
    first answer): the deployer's explicit choice, whatever the environment says. Whether they
    were raised: False where the C library is not glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt  # glibc's name for itself
    except (OSError, AttributeError):  # not glibc (musl has neither the name nor mallopt)
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    raised = all(
        mallopt(parameter, _THRESHOLD) for parameter in (_M_MMAP_THRESHOLD, _M_TRIM_THRESHOLD)
    )
    _log.debug("glibc's mmap and trim thresholds raised to 1 GiB: %s", raised)
    return raised


@functools.cache
def keep_freed_memory_if_asked() -> bool:
    """:func:`keep_freed_memory` where the environment asks for it (``DSPARK_JSON_KEEP_MEMORY=1``),
    read once per process, where a partition's work or the CPU parser first runs; otherwise
    malloc is left as it is. Whether the thresholds were raised."""
    value = os.environ.get(KEEP_MEMORY_ENV, "").strip().lower()
    if value in _ON:
        return keep_freed_memory()
    if value not in _OFF:
        _log.warning(
            "%s=%r is neither 1 nor 0: malloc's thresholds left as they are. Set it to 1 to keep "
            "freed memory in the process between partitions, or unset it.",
            KEEP_MEMORY_ENV,
            value,
        )
    return False


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while rows of small objects (none holding a
    cycle) are made in bulk: at tens of thousands of rows its passes, over the whole heap, cost
    more than the rows."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
