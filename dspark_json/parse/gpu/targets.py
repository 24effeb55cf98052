"""One definition of the parse rules, compiled for another target: the CPU kernels'
functions (:mod:`dspark_json.parse.json`, numba ``njit``) rebuilt from their Python source for
the device (``numba.cuda.jit(device=True)``) or again for the CPU.

A numba function calls the functions its module's globals name; :class:`Target` compiles a
function's Python source (``py_func``) with those names bound to the same target's versions of
its callees, so :func:`~dspark_json.parse.json.conform.check_row` runs on the device exactly as
written, the duplicate-key, nesting, number and unknown-key rules included. The few callees that
are CPU instructions (the word and block loads of :mod:`dspark_json.buffers.words`, in
``scan_string``, ``same_run`` and ``find_byte``) are replaced by byte loops
(:mod:`.grammar`, held to the CPU's by ``tests/parse/gpu/``).

Functions written for both targets here (the device's grammar and rows) are marked
:func:`portable`: plain Python, compiled by whichever :class:`Target` reaches them.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any, TypeVar

from numba.core.registry import CPUDispatcher

__all__ = ["Target", "portable"]

_F = TypeVar("_F", bound=Callable[..., Any])


def portable(function: _F) -> _F:
    """Mark ``function`` (plain Python) as compiled for each :class:`Target` that calls it."""
    function.__dict__["portable"] = True
    return function


class Target:
    """A compilation target: ``jit`` compiles one function (``numba.njit(...)``, or
    ``numba.cuda.jit(device=True)``); ``replacements`` maps a CPU-only kernel to the portable
    function that stands for it there."""

    def __init__(
        self, jit: Callable[[Any], Any], replacements: dict[Any, Callable[..., Any]]
    ) -> None:
        self.jit = jit
        self.replacements = replacements
        self._built: dict[Any, Any] = {}

    def compile(self, function: Any) -> Any:
        """``function`` (a CPU kernel or a :func:`portable` function) for this target, its
        callees bound to their versions for this target, each built once."""
        built = self._built.get(function)
        if built is not None:
            return built
        source = self.replacements.get(function, function)
        python = source.py_func if isinstance(source, CPUDispatcher) else source
        names = dict(python.__globals__)
        for name in python.__code__.co_names:
            value = names.get(name)
            if isinstance(value, CPUDispatcher) or getattr(value, "portable", False):
                names[name] = self.compile(value)
        rebuilt = types.FunctionType(
            python.__code__, names, python.__name__, python.__defaults__, python.__closure__
        )
        built = self.jit(rebuilt)
        self._built[function] = built
        return built
