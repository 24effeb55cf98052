"""The first minute of a query, said as it happens: one INFO line per phase (the tasks' Python
workers starting, the parse kernels compiling in the background, the first requests sent,
requests held by the pool), once per query (or per endpoint) in each process.

The lines go to logger ``dspark_json.phases``, which writes INFO to stderr itself where nobody
configured logging (Spark's Python workers, whose stderr is Spark's console or the executor's
log); where logging is configured, it follows that configuration.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable

__all__ = ["PHASES", "phase", "stderr_logger"]

#: The logger of the phase lines.
PHASES = "dspark_json.phases"

#: The phases this process has said, by key.
_said: set[Hashable] = set()


def phase(key: Hashable, message: str, *args: object) -> None:
    """Log ``message % args`` at INFO, once per ``key`` in this process."""
    if key in _said:
        return
    _said.add(key)
    stderr_logger(PHASES).info(message, *args)


def stderr_logger(name: str) -> logging.Logger:
    """The logger ``name``, which writes INFO lines to stderr itself where nobody configured
    logging (Spark's Python workers, a stream reader's own Python process: their stderr is
    Spark's console or the executor's log); where logging is configured, it follows that
    configuration. The phase lines' and the driver's batch lines' (``metrics.driver_logger``)."""
    logger = logging.getLogger(name)
    if not logger.hasHandlers():
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s INFO dspark_json: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger
