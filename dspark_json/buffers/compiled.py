"""How the parse kernels are compiled: the two numba decorators every kernel module uses.

- :func:`kernel`: compiled once per machine (numba's cache, as ``cache=True``: the machine code
  is kept beside the module, :mod:`dspark_json.parse.warmup` explains where), and without the
  GIL, so the scans of one batch run on threads side by side.
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

When a cached kernel is stale: numba keeps a kernel while the one file that defines it is
unchanged, but a kernel compiles into itself the leaves and constants of the modules it imports
(``scan_envelope_fit`` in ``scans.py`` holds ``conform.py``'s ``emit_null``), so an edit of
``conform.py`` alone would leave it running the old code. Our decorators give each kernel a
cache (:class:`_PackageCache`) whose stamp adds a digest of its module's package imports, read
from the sources (:func:`package_digest`: every module of the same top-level package it imports,
transitively; about 220 KB for all the parser's modules, read once per process). The cache stays
where numba puts it. Where numba's private cache classes change, a kernel falls back to numba's
own cache (a debug log says so).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import os
import re
from collections.abc import Callable
from typing import Any, TypeVar, cast

from numba import njit

__all__ = ["kernel", "leaf", "package_digest"]

logger = logging.getLogger("dspark_json")

_F = TypeVar("_F", bound=Callable[..., Any])

#: numba's flag for compiling without reference counting (not in its typed signature).
_NO_REFCOUNTS: dict[str, Any] = {"_nrt": False}
_kernel = njit(nogil=True)
_leaf = njit(nogil=True, **_NO_REFCOUNTS)

#: ``from a.b import c, d`` (group 1, 2) and ``import a.b`` (group 3), also inside a function.
_IMPORT = re.compile(
    rb"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)|import[ \t]+([\w.]+))",
    re.MULTILINE,
)


def kernel(function: _F) -> _F:
    """Compile ``function`` as a kernel (it may allocate arrays and return them)."""
    return cast(_F, _cached(_kernel(function)))


def leaf(function: _F) -> _F:
    """Compile ``function`` as a leaf: no allocation, no array returned, only leaves called."""
    return cast(_F, _cached(_leaf(function)))


@functools.cache
def _source(path: str) -> tuple[bytes, tuple[str, ...]]:
    """The SHA-256 of the file at ``path`` and the modules it imports (by name, as written)."""
    with open(path, "rb") as file:
        text = file.read()
    names: list[str] = []
    for origin, imported, module in _IMPORT.findall(text):
        if module:
            names.append(module.decode())
            continue
        base = origin.decode()
        names.append(base)
        for name in re.sub(rb"#[^\n]*", b"", imported).strip(b"()").split(b","):
            words = name.split()  # "a as b"
            if words and words[0].decode().isidentifier():
                names.append(f"{base}.{words[0].decode()}")  # a submodule, where it is one
    return hashlib.sha256(text).digest(), tuple(names)


@functools.cache
def _module_file(root: str, name: str) -> str | None:
    path = os.path.join(root, *name.split("."))
    for candidate in (f"{path}.py", os.path.join(path, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


@functools.cache
def package_digest(path: str, module: str) -> str:
    """A digest of the source file ``path`` (the module named ``module``) and of every module of
    the same top-level package it imports, transitively: what a kernel defined there can compile
    into itself. Read from the files, once per process."""
    top = module.partition(".")[0]
    depth = module.count(".") + (os.path.basename(path) == "__init__.py")
    root = os.path.dirname(os.path.abspath(path))
    for _ in range(depth):
        root = os.path.dirname(root)
    seen = {os.path.abspath(path)}
    todo = list(seen)
    while todo:
        for name in _source(todo.pop())[1]:
            if name.partition(".")[0] != top:
                continue
            found = _module_file(root, name)
            if found is not None and found not in seen:
                seen.add(found)
                todo.append(found)
    digest = hashlib.sha256()
    for file in sorted(seen):
        digest.update(os.path.relpath(file, root).encode())
        digest.update(_source(file)[0])
    return digest.hexdigest()


def _cached(dispatcher: Any) -> Any:
    """Cache ``dispatcher``'s machine code with :class:`_PackageCache`, else numba's own."""
    if _PackageCache is not None and hasattr(dispatcher, "_cache"):  # numba's NullCache so far
        try:
            dispatcher._cache = _PackageCache(dispatcher.py_func)
            return dispatcher
        except Exception as error:  # numba's private classes changed: its own cache then
            logger.debug("numba's default cache for %s: %r", dispatcher.py_func.__name__, error)
    dispatcher.enable_caching()
    return dispatcher


def _package_cache() -> Any:
    """numba's ``FunctionCache`` with a stamp that adds :func:`package_digest`; None where numba's
    private classes are not the ones this was written against (numba's own cache then)."""
    try:
        from numba.core.caching import (
            CompileResultCacheImpl,
            FunctionCache,
            _CacheLocator,
        )
    except ImportError as error:
        logger.debug("numba's default kernel cache (no stamp of imported modules): %r", error)
        return None

    class PackageLocator(_CacheLocator):
        """numba's locator (same place), its stamp with the digest of the package imports."""

        def __init__(self, located: Any, digest: str) -> None:
            self._located = located
            self._digest = digest

        def __getattr__(self, name: str) -> Any:
            return getattr(self._located, name)

        def ensure_cache_path(self) -> None:
            self._located.ensure_cache_path()

        def get_cache_path(self) -> Any:
            return self._located.get_cache_path()

        def get_source_stamp(self) -> Any:
            return (self._located.get_source_stamp(), self._digest)

        def get_disambiguator(self) -> Any:
            return self._located.get_disambiguator()

    class PackageCacheImpl(CompileResultCacheImpl):
        def __init__(self, py_func: Any) -> None:
            super().__init__(py_func)  # type: ignore[no-untyped-call]
            path = inspect.getfile(py_func)
            digest = package_digest(path, py_func.__module__)
            self._locator = PackageLocator(self._locator, digest)

    class PackageCache(FunctionCache):
        _impl_class = PackageCacheImpl

    return PackageCache


#: The cache of our kernels (:func:`_package_cache`).
_PackageCache = _package_cache()
