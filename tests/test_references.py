"""No dangling references: every module, test or benchmark path and every ``dspark_json.x.y``
name that the docs, the docstrings and comments, and the scripts mention exists."""

import functools
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Where references are read: the docs, the scripts, and every module's docstrings and comments.
#: Not benchmarks/results/ (records of past runs, paths as they were then) nor tests/data/.
DOCS = ["README.md", "docs", "benchmarks/README.md", "notebooks/README.md"]
SCRIPTS = ["Makefile", ".ci/run", "benchmarks/gpu/device_checks.sh"]
CODE = ["dspark_json", "tests", "benchmarks"]

#: The tests of references, whose examples of dangling ones are on purpose.
SELF = {"tests/test_references.py", "tests/test_device_checks.py"}

#: Paths named on purpose that are not in the tree, and why.
ELSEWHERE = {
    # device_checks.sh says to copy it in from ../shared/gpu/ before a device run
    "benchmarks/gpu/install-staged.sh",
    # Spark's own module, named where its behaviour is described
    "python_streaming_source_runner.py",
    # tests/test_quickstart.py writes the README's quick start there, in a temporary folder
    "quickstart.py",
    # logger names, not modules: the per-batch lines on the driver (metrics.driver_logger)
    "dspark_json.batches",
}
#: The reference pages the docs site generates at each build (docs/gen_reference.py's PAGES).
ELSEWHERE |= {
    f"docs/{page}"
    for page in re.findall(
        r'^    "(reference/\w+\.md)"', (ROOT / "docs" / "gen_reference.py").read_text(), re.M
    )
}

#: A path from the repository's root: a package, test, benchmark, doc or script path.
_ROOTED = re.compile(
    r"(?<![\w./~-])((?:dspark_json|tests|benchmarks|docs|notebooks|\.ci)/[\w./*-]*[\w*])"
)
#: A module path from the package's root, as the docs write them (``parse/json/shapes.py``).
_IN_PACKAGE = re.compile(
    r"(?<![\w./-])((?:parse|http|inputs|schema|delta|dev|examples)/[\w/]*\.py)\b"
)
#: A file named on its own (``compat.py``).
_FILE = re.compile(r"(?<![\w./-])(\w+\.py)\b")
#: A dotted name in the package (``dspark_json.http.client.AdaptiveLimit``).
_DOTTED = re.compile(r"(?<![\w./])dspark_json(?:\.\w+)+")


def _sources() -> list[Path]:
    found: list[Path] = []
    for name in DOCS:
        path = ROOT / name
        found += sorted(path.rglob("*.md")) if path.is_dir() else [path]
    found += [ROOT / name for name in SCRIPTS]
    for name in CODE:
        found += [
            p
            for p in sorted((ROOT / name).rglob("*.py"))
            if "data" not in p.relative_to(ROOT).parts[:2] and "results" not in p.parts
        ]
    return [p for p in found if p.exists() and str(p.relative_to(ROOT)) not in SELF]


def _resolves(dotted: str) -> bool:
    """``dspark_json.a.b.C.d``: the longest importable module, then attributes of it."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(found, attr):
                return False
            found = getattr(found, attr)
        return True
    return False


@functools.cache
def _python_files() -> frozenset[str]:
    """The names of the project's Python files (a file named on its own is one of them): the
    top-level modules beside the package (``pyspark_dspark_json.py``) too."""
    top = {p.name for p in ROOT.glob("*.py")}
    return frozenset({p.name for name in CODE for p in (ROOT / name).rglob("*.py")} | top)


def dangling(text: str) -> list[str]:
    """The references in ``text`` that point at nothing."""
    names = _python_files()
    bad = []
    for named in _ROOTED.findall(text):
        path = named.rstrip(".").split("::")[0]
        there = list(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()
        if not there and path not in ELSEWHERE:
            bad.append(path)
    bad += [p for p in _IN_PACKAGE.findall(text) if not (ROOT / "dspark_json" / p).exists()]
    bad += [f for f in _FILE.findall(text) if f not in names and f not in ELSEWHERE]
    bad += [d for d in _DOTTED.findall(text) if not _resolves(d) and d not in ELSEWHERE]
    return bad


def test_every_path_and_name_the_docs_scripts_and_docstrings_mention_exists():
    found = {
        str(source.relative_to(ROOT)): bad
        for source in _sources()
        if (bad := dangling(source.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_sources_read_include_the_docs_the_scripts_and_the_code():
    read = {str(p.relative_to(ROOT)) for p in _sources()}
    assert {"README.md", "docs/ARCHITECTURE.md", "benchmarks/gpu/device_checks.sh"} <= read
    assert {"dspark_json/http/client.py", "tests/conftest.py", "benchmarks/report.py"} <= read


@pytest.mark.parametrize(
    "text",
    [
        "see tests/test_conformance.py",
        "(:class:`~dspark_json.limits.AdaptiveLimit`)",
        "`dspark_json.options.NoSuchThing`",
        "the kernels in parse/json/kernels.py",
        "moved to columns.py",
        "benchmarks/gpu/*.nothing",
    ],
)
def test_a_dangling_reference_is_found(text):
    assert dangling(text) != []


def test_a_good_reference_is_not():
    text = (
        "dspark_json/parse/json/__init__.py, parse/json/shapes.py, tests/parse/test_kernels.py"
        "::test_x, `dspark_json.options.Options.parse`, compat.py, tests/spark/."
    )
    assert dangling(text) == []
