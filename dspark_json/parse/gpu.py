"""The GPU backend (cuDF). The only module that imports cuDF, RMM or CUDA, and only on use.

This version detects whether the GPU path can run and says why not; the cuDF parser itself is
the next step (see the parser issue). ``parseMode=auto`` therefore runs on the CPU and logs why.
"""

from __future__ import annotations

import importlib.util

__all__ = ["INSTALL_HINT", "unavailable_reason"]

INSTALL_HINT = "pip install 'dspark-json[gpu]' (CUDA 12) or 'dspark-json[gpu-cu13]' (CUDA 13)"


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
    return "the cuDF parser is not built yet in this version of dspark-json"
