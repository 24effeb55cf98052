"""The vectorised parser's kernels, compiled (or loaded from numba's cache) once per process in
the background, so that a fresh Python worker answers its first small batches at once.

numba compiles the scans on first use: seconds per kernel on a machine whose cache is empty (a
new cluster node, a fresh container), then milliseconds to load them from the cache. Until
:func:`ready`, :class:`~dspark_json.parse.cpu.CpuParser` parses batches of fewer than
:data:`SMALL_BATCH` rows with the reference parser (same output, row by row; it needs only the
validation kernel) while a daemon thread warms the rest up; a larger batch compiles inline.

Where numba keeps its cache (decided per machine, not by us): ``__pycache__`` next to the
package's sources when writable, else the user-wide cache (``~/.cache/numba``), or
``NUMBA_CACHE_DIR`` when set. On a cluster with a read-only site-packages, set
``NUMBA_CACHE_DIR`` to a node-local writable directory (``spark.executorEnv.NUMBA_CACHE_DIR``);
an ephemeral node compiles once, in the background, per node. A cached kernel is compiled again
when its module or any module of the package it imports has changed (numba alone looks at its
module only: :mod:`dspark_json.buffers.compiled`), so an upgrade or a checkout's edit never
runs stale code and needs no cleaning of the cache.

A process that ends while the thread still compiles waits for it (:func:`_join_at_exit`, up to
:data:`EXIT_WAIT` seconds): a daemon thread stopped inside LLVM as the interpreter tears down
can abort the process ("terminate called without an active exception", exit code 134) after its
work is done. The wait happens once per machine at most where numba's cache is writable (an empty
cache), in every such process where it is not.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable

__all__ = ["SMALL_BATCH", "ready", "start", "wait"]

logger = logging.getLogger("dspark_json")

#: Batches below this many rows do not wait for the kernels.
SMALL_BATCH = 4096
#: How long a process that ends waits for the warm-up to finish (compiling every kernel on
#: an empty cache takes a while: benchmarks/README.md, cold start).
EXIT_WAIT = 120.0

_ready = threading.Event()
_lock = threading.Lock()
_thread: list[threading.Thread] = []


def ready() -> bool:
    """Whether the kernels are compiled (or loaded) in this process."""
    return _ready.is_set()


def start(job: Callable[[], None]) -> None:
    """Run ``job`` (a parse that touches every kernel) in a daemon thread, once per process;
    :func:`ready` from when it ends. The process waits for it at exit (:func:`_join_at_exit`)."""
    with _lock:
        if _thread or _ready.is_set():
            return
        thread = threading.Thread(target=_run, args=(job,), name="dspark-json-warmup", daemon=True)
        _thread.append(thread)
        atexit.register(_join_at_exit)
        thread.start()


def wait(job: Callable[[], None]) -> None:
    """:func:`start`, then block until the kernels are ready."""
    start(job)
    _ready.wait()


def _run(job: Callable[[], None]) -> None:
    started = time.perf_counter()
    try:
        job()
        logger.debug("parser kernels ready in %.2fs", time.perf_counter() - started)
    except Exception:  # the inline path compiles (and reports) again; never fail here
        logger.exception("warming the parser kernels up failed; they compile on first use")
    finally:
        _ready.set()


def _join_at_exit() -> None:
    """At interpreter exit: let a warm-up that is still compiling finish first."""
    for thread in _thread:
        if thread.is_alive():
            logger.info("waiting for the parser kernels to finish compiling before exit")
            thread.join(EXIT_WAIT)
