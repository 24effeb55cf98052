"""The GPU backend (cuDF). Its modules are the only ones that import cuDF, RMM or CUDA, and only
on use; this one says whether the backend can run (:func:`unavailable_reason`) and gives RMM its
pool, without importing them.

- :mod:`.parser`: :class:`~.parser.GpuParser`, the vectorised path
  (:mod:`dspark_json.parse.vectorised`, shared with the CPU backend) with the fit check on the
  device and cuDF's reader;
- :mod:`.fit`: the fit check per row, the CPU kernels' ``check_row`` compiled for the device
  (:mod:`.targets`, :mod:`.grammar`), and what cuDF reads otherwise (``reader_hazards``);
- :mod:`.kernels`: the ``numba.cuda`` kernels, a thread per row;
- :mod:`.reader`: JSON lines gathered on the device, read by cuDF (``cudf.read_json``,
  ``lines=True``, explicit dtypes, column pruning; double columns as text);
- :mod:`.doubles`: the doubles' text converted on the device with the CPU's rules.

A schema cuDF's reader cannot take (a map, a tuple struct) is parsed by the CPU kernels
(:func:`.parser.beyond_lines`).

Otherwise no pass over the bytes of a row that fits runs on the CPU (the host converts only
the few doubles past the device's fast path, with ``float``, value by value).

Status: written without a device to try it on; its kernels run under numba's CUDA simulator in
the tests (``tests/parse/gpu/``). It has not run on a device yet, so ``parseMode=auto`` does not
pick it; ``parseMode=gpu`` does, and the backend conformance suite
(``tests/parse/test_backend_conformance.py``, the ``gpu`` backend) is the check it must pass on a
GPU machine before ``auto`` may choose it.
"""

from __future__ import annotations

import importlib.util
import logging

__all__ = ["INSTALL_HINT", "unavailable_reason", "use_memory_pool", "verified"]

logger = logging.getLogger("dspark_json")

INSTALL_HINT = (
    "the extra gpu (CUDA 12) or gpu-cu13 (CUDA 13): pip install '.[gpu]' in a clone of "
    "dspark-json, or the wheel with [gpu]"
)

#: Whether the cuDF parser has passed the conformance suite on a GPU (``auto`` picks it then).
verified = False

#: The RMM pool this process made (its share of device memory), once made.
_pool: dict[str, float] = {}


def unavailable_reason() -> str | None:
    """Why the GPU backend cannot run here, or ``None`` when it can."""
    if importlib.util.find_spec("cudf") is None:
        return f"cuDF is not installed ({INSTALL_HINT})"
    try:
        import cudf  # noqa: F401
        from numba import cuda
    except Exception as exc:  # cuDF raises many kinds of errors without a driver
        return f"cuDF failed to import ({type(exc).__name__}: {exc})"
    if not cuda.is_available():  # type: ignore[no-untyped-call]
        return "no CUDA device is visible to this process"
    return None


def use_memory_pool(fraction: float) -> None:
    """Give RMM a pool of ``fraction`` of the device memory (once per process), so the parser
    can share the GPU with vLLM instead of growing into its memory."""
    if _pool:
        return
    import rmm
    from numba import cuda

    free, total = cuda.current_context().get_memory_info()  # type: ignore[no-untyped-call]
    size = int(total * fraction) // 256 * 256
    if size > free:
        raise MemoryError(
            f"gpuMemoryFraction={fraction} asks for {size >> 20} MiB of GPU memory, but only "
            f"{free >> 20} MiB are free (vLLM may hold the rest). Lower gpuMemoryFraction."
        )
    rmm.reinitialize(pool_allocator=True, initial_pool_size=size, maximum_pool_size=size)
    _pool["fraction"] = fraction
    logger.info("RMM pool of %d MiB (%.0f%% of the GPU) for parsing", size >> 20, fraction * 100)
