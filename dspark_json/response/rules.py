"""The kernels' rules in plain Python, for a process whose kernels are still compiling.

What valid JSON is (:mod:`dspark_json.parse.json.grammar`) restated with Python's json module: valid
UTF-8 without a byte-order mark, no NaN/Infinity, nesting at most ``MAX_NESTING``, no lone
surrogate. The reference parser runs on these (``kernels=False``) for the first small batches
(:mod:`dspark_json.parse.warmup`); the conformance suite holds both ways to the same output.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from dspark_json.rows import MAX_NESTING, exceeds_nesting

__all__ = ["json_float", "loads_python"]

_SURROGATE = re.compile("[\\ud800-\\udfff]")


def json_float(text: str) -> float | str:
    """A JSON number as a double; beyond a double's range, its text (kept, rescued, not inf)."""
    value = float(text)
    return value if math.isfinite(value) else text


def _reject(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_python(raw: bytes, *, lenient: bool = False) -> Any:
    """The JSON value of ``raw`` by the kernels' rules, without numba; ValueError when it is not
    valid JSON. ``lenient``: raw control characters allowed inside strings."""
    text = raw.decode("utf-8")  # UnicodeDecodeError is a ValueError
    if exceeds_nesting(text, MAX_NESTING):
        raise ValueError("nested too deep")
    value = json.loads(text, parse_float=json_float, parse_constant=_reject, strict=not lenient)
    stack = [value]
    while stack:  # no recursion: a lone surrogate (an escape UTF-8 cannot hold) is invalid
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise ValueError("a lone surrogate")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return value
