"""numba's cache of our kernels (:mod:`dspark_json.buffers.compiled`): a kernel compiles into
itself the leaves and constants of the modules it imports, so its cached machine code must go
stale when one of those modules changes, not only its own; and stay fresh when nothing does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numba.core.caching
import pytest

import dspark_json.parse.json.scans as scans
from dspark_json.buffers import compiled

_REPO = Path(__file__).resolve().parents[2]

_KERNEL = """from dspark_json.buffers.compiled import kernel
from kpkg.leaves import value


@kernel
def run() -> int:
    return value() + 100
"""
_LEAF = """from dspark_json.buffers.compiled import leaf
from kpkg.numbers import TEN


@leaf
def value() -> int:
    return TEN + {one}
"""
_RUN = """import json, kpkg.kernels as k
print(json.dumps([k.run(), sum(k.run.stats.cache_hits.values())]))
"""


def _module(package: Path, name: str) -> Path:
    return package / f"{name}.py"


def _write(package: Path, name: str, text: str) -> None:
    _module(package, name).write_text(text)


def _run(root: Path) -> tuple[int, int]:
    """``kpkg.kernels.run()`` in a fresh interpreter, and how many of its overloads numba's
    cache held."""
    env = {
        **os.environ,
        "NUMBA_CACHE_DIR": str(root / "cache"),
        "PYTHONPATH": os.pathsep.join([str(root), str(_REPO)]),
    }
    done = subprocess.run(
        [sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, check=True
    )
    value, hits = json.loads(done.stdout.splitlines()[-1])
    return value, hits


def test_a_kernel_sees_the_new_code_of_the_modules_it_imports(tmp_path: Path) -> None:
    package = tmp_path / "kpkg"
    package.mkdir()
    _write(package, "__init__", "")
    _write(package, "kernels", _KERNEL)
    _write(package, "leaves", _LEAF.format(one=1))
    _write(package, "numbers", "TEN = 10\n")
    kernels = _module(package, "kernels").stat()

    assert _run(tmp_path) == (111, 0)  # compiled, cached
    assert _run(tmp_path) == (111, 1)  # loaded: nothing changed

    _write(package, "leaves", _LEAF.format(one=2))  # the leaf only
    assert _run(tmp_path)[0] == 112
    _write(package, "numbers", "TEN = 20\n")  # a constant, two imports away
    assert _run(tmp_path)[0] == 122
    assert _run(tmp_path) == (122, 1)

    after = _module(package, "kernels").stat()
    assert (after.st_mtime_ns, after.st_size) == (kernels.st_mtime_ns, kernels.st_size)


def test_our_kernels_use_the_package_cache() -> None:
    """With the numba this is tested against (a newer one that changed its private cache classes
    falls back to numba's own cache: this test says so)."""
    cache = scans.scan_envelope_fit._cache
    assert compiled._PackageCache is not None and isinstance(cache, compiled._PackageCache)


def test_the_digest_covers_the_modules_a_kernel_imports(tmp_path: Path) -> None:
    package = tmp_path / "kpkg"
    package.mkdir()
    _write(package, "__init__", "")
    _write(package, "kernels", "from kpkg import leaves\nimport os\n")
    _write(package, "leaves", "ONE = 1\n")
    path = str(_module(package, "kernels"))
    before = compiled.package_digest(path, "kpkg.kernels")
    compiled.package_digest.cache_clear()
    compiled._source.cache_clear()
    _write(package, "leaves", "ONE = 2\n")
    assert compiled.package_digest(path, "kpkg.kernels") != before


def test_without_numbas_private_cache_classes_numbas_own_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(numba.core.caching, "_CacheLocator")
    assert compiled._package_cache() is None
    for cache in (None, _Broken):
        monkeypatch.setattr(compiled, "_PackageCache", cache)
        dispatcher = compiled.kernel(lambda: 1)
        assert type(dispatcher._cache) is numba.core.caching.FunctionCache
    assert dispatcher() == 1


class _Broken:
    def __init__(self, py_func: object) -> None:
        raise AttributeError("_locator")
