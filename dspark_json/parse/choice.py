"""Which parser runs: ``select_backend`` (auto, cpu, gpu; loud where the GPU is asked for and
missing, a logged fallback for auto), then ``make_parser(schema, backend)``: the one place that
picks a backend's class (the GPU's imported here, on use, and nowhere else)."""

from __future__ import annotations

import logging

from pyspark.sql.types import StructType

from dspark_json.errors import BackendUnavailable
from dspark_json.parse import gpu
from dspark_json.parse.cpu import CpuParser
from dspark_json.parse.parser import Parser, RescueScope
from dspark_json.rows import Backend, ParseMode

__all__ = ["make_parser", "select_backend"]

logger = logging.getLogger("dspark_json")

_fallbacks_logged: set[str] = set()


def select_backend(parse_mode: ParseMode) -> Backend:
    """The backend that will run: ``gpu`` fails loudly when it cannot; ``auto`` says when it
    falls back to the CPU (once per process, at INFO: the usual case, no fault)."""
    if parse_mode == "cpu":
        return "cpu"
    reason = gpu.unavailable_reason()
    if reason is None and parse_mode == "gpu":
        if not gpu.verified and "unverified" not in _fallbacks_logged:
            _fallbacks_logged.add("unverified")
            logger.warning(
                "parseMode=gpu: the cuDF parser has not passed the conformance suite on a GPU "
                "yet; check its output (or use parseMode=cpu)."
            )
        return "gpu"
    if reason is None:
        if gpu.verified:
            return "gpu"
        reason = "the cuDF parser has not passed the conformance suite on a GPU yet"
    if parse_mode == "gpu":
        raise BackendUnavailable(
            f"parseMode=gpu was asked for, but the GPU parser cannot run: {reason}. "
            "Use parseMode=auto to fall back to the CPU, or parseMode=cpu."
        )
    if not gpu.verified:  # installing cuDF would not change auto's choice: say so, not how
        reason = (
            "auto does not pick the GPU parser until it has passed the conformance suite on a "
            "GPU (parseMode=gpu runs it where cuDF and a CUDA device are there)"
        )
    if reason not in _fallbacks_logged:
        _fallbacks_logged.add(reason)
        logger.info("parseMode=auto: parsing on the CPU because %s.", reason)
    return "cpu"


def make_parser(
    schema: StructType,
    backend: Backend,
    *,
    gpu_memory_fraction: float | None = None,
    lenient: bool = True,
    rescue: RescueScope = "all",
) -> Parser:
    """A parser for the response columns of ``schema`` on ``backend``.

    Parameters
    ----------
    schema:
        The response columns wanted (envelope, ``parsed``, system columns).
    backend:
        ``cpu`` or ``gpu``, as :func:`select_backend` chose.
    gpu_memory_fraction:
        The GPU parser's share of device memory (option ``gpuMemoryFraction``).
    lenient:
        Accept raw control characters inside JSON strings in a message's content (option
        ``allowUnquotedControlChars``); the envelope is always strict.
    rescue:
        What ``_rescued_data`` gathers (:data:`~.parser.RescueScope`): ``all``, or ``parsed``
        where the caller's output has no such column and only the misfit check reads it.
    """
    if backend == "gpu":  # pragma: no cover - needs a GPU
        from dspark_json.parse.gpu.parser import GpuParser

        return GpuParser(
            schema, memory_fraction=gpu_memory_fraction, lenient=lenient, rescue=rescue
        )
    return CpuParser(schema, lenient=lenient, rescue=rescue)
