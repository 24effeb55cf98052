"""The docs site (mkdocs.yml, docs/): it builds in strict mode (no broken link, reference or nav
entry), every page of docs/guide/ and every changelog fragment is on it, its Python snippets
compile, and the generated reference pages name every option, output column, metrics field,
error class and CLI command and flag of the code, each with its words. One build per session."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import dspark_json
from dspark_json.options import OPTION_SPECS
from dspark_json.rows import COLUMNS, STATUSES

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
sys.path.insert(0, str(DOCS))
import gen_reference  # noqa: E402  (docs/ is no package: the generator is a script)
import hooks  # noqa: E402

sys.path.remove(str(DOCS))


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once in strict mode: any warning fails the build."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.yml", "-d", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "WARNING" not in done.stderr, done.stderr[-4000:]
    return out


def page(site: Path, path: str) -> str:
    """A built page's text, tags dropped (``reference/options.md`` -> its HTML's words)."""
    html = (site / path.removesuffix(".md") / "index.html").read_text(encoding="utf-8")
    return re.sub(r"<[^>]+>", "", html)


def test_the_site_builds_strict_with_every_guide_page_and_the_generated_reference(site):
    for guide in sorted((DOCS / "guide").glob("*.md")):
        assert (site / "guide" / guide.stem / "index.html").is_file(), guide.name
    for path in gen_reference.PAGES:
        assert (site / path.removesuffix(".md") / "index.html").is_file(), path
    assert (site / "benchmarks" / "results" / "shared_pool.png").is_file()


def test_a_new_guide_page_joins_the_how_to_section_of_the_nav():
    nav = [{"How-to guides": ["guide/prompt-input.md"]}, {"Reference": ["reference/cli.md"]}]
    (guides,) = (e[hooks.GUIDES] for e in hooks.guide_pages(nav) if hooks.GUIDES in e)
    assert guides[0] == "guide/prompt-input.md"
    nav = [{"How-to guides": ["guide/prompt-input.md", hooks.LAST_GUIDE]}]
    (guides,) = (e[hooks.GUIDES] for e in hooks.guide_pages(nav))
    assert guides[0] == "guide/prompt-input.md" and guides[-1] == hooks.LAST_GUIDE
    assert len(guides) == len(list((DOCS / "guide").glob("*.md")))
    assert {f"guide/{p.name}" for p in (DOCS / "guide").glob("*.md")} == set(guides)


def test_the_changelog_takes_in_every_fragment(site):
    text = page(site, "changelog.md")
    for fragment in sorted((DOCS / "changes").glob("*.md")):
        lines = fragment.read_text().splitlines()
        first = next(ln for ln in lines if ln.strip() and not ln.startswith("#"))
        words = re.sub(r"[`*\[\]]", "", first.lstrip("-# ")).split()[:4]
        assert " ".join(words) in re.sub(r"\s+", " ", text), fragment.name
        for heading in (ln.lstrip("# ") for ln in lines if ln.startswith("# ")):
            assert heading not in text, heading  # a fragment's title is no change
    assert hooks.CHANGES_MARK in (DOCS / "changelog.md").read_text()


def test_the_options_page_names_every_option(site):
    text = page(site, "reference/options.md")
    missing = [s.name for s in OPTION_SPECS if s.name not in text or not s.doc]
    assert not missing, f"options without a row (or a doc) on reference/options.md: {missing}"


def test_the_columns_page_names_and_describes_every_column_and_status(site):
    text = page(site, "reference/columns.md")
    undescribed = [c.name for c in COLUMNS if not gen_reference.COLUMN_DOCS.get(c.name)]
    assert not undescribed, (
        f"say what these hold in docs/gen_reference.py COLUMN_DOCS: {undescribed}"
    )
    assert not set(gen_reference.COLUMN_DOCS) - {c.name for c in COLUMNS}, "COLUMN_DOCS: stale"
    missing = [n for n in [*(c.name for c in COLUMNS), *STATUSES] if n not in text]
    assert not missing


def test_the_metrics_page_names_and_describes_every_field(site):
    text = page(site, "reference/metrics.md")
    fields = [name for name, _ in gen_reference.metrics_fields()]
    assert {"batch", "latency_ms.p95", "repair.budget", "models.latency_p95_ms"} <= set(fields)
    undescribed = [f for f in fields if not gen_reference.METRICS_DOCS.get(f)]
    assert not undescribed, (
        f"say what these count in docs/gen_reference.py METRICS_DOCS: {undescribed}"
    )
    assert not set(gen_reference.METRICS_DOCS) - set(fields), "METRICS_DOCS: stale entries"
    assert not [f for f in fields if f not in text]


def test_the_metrics_fields_are_read_from_the_schema():
    assert gen_reference.metrics_fields()[:3] == [
        ("batch", "BIGINT"),
        ("offset", "STRUCT<file: STRING, row: BIGINT>"),
        ("offset.file", "STRING"),
    ]


def test_the_errors_page_gives_every_error_class_with_its_fix(site):
    text = page(site, "reference/errors.md")
    classes = gen_reference.error_classes()
    assert {c.__name__ for c in classes} >= {
        name for name in dspark_json.__all__ if name.endswith(("Error", "Unavailable"))
    }
    no_fix = [c.__name__ for c in classes if not all(gen_reference.error_fix(c))]
    assert not no_fix, f"give these a fix (a docstring's second paragraph): {no_fix}"
    assert not [c.__name__ for c in classes if c.__name__ not in text]


def test_the_cli_page_names_every_command_and_flag(site):
    text = page(site, "reference/cli.md")
    commands = gen_reference.cli_commands()
    assert {"simulate", "demo", "schema", "metrics"} <= set(commands)
    for name, sub in commands.items():
        assert f"dspark-json {name}" in text
        flags = [f for a in sub._actions for f in a.option_strings if f not in ("-h", "--help")]
        positional = [a.dest for a in sub._actions if not a.option_strings]
        missing = [f for f in [*flags, *positional] if f not in text]
        assert not missing, f"dspark-json {name}: {missing}"
        assert all(isinstance(a, argparse.Action) for a in sub._actions)


def test_the_api_page_documents_every_exported_name(site):
    html = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    missing = [
        n for n in dspark_json.__all__ if n != "__version__" and f'id="dspark_json.{n}"' not in html
    ]
    assert not missing
    assert not re.search(r":(func|class|data|meth):", page(site, "reference/api.md"))


def _python_blocks() -> list[tuple[str, str]]:
    blocks = []
    for path in [README, *sorted(DOCS.rglob("*.md"))]:
        for block in re.findall(
            r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"), re.S | re.M
        ):
            blocks.append((str(path.relative_to(ROOT)), block))
    return blocks


def test_every_python_snippet_of_the_readme_and_the_site_compiles():
    blocks = _python_blocks()
    assert len(blocks) > 10
    for where, block in blocks:
        compile(block, where, "exec")  # a SyntaxError names the page


def test_one_version_everywhere():
    """dspark_json.__version__ is the one place: pyproject reads it, the changelog's newest
    heading and the README say it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "dspark_json.__version__"}
    version = dspark_json.__version__
    changelog = (DOCS / "changelog.md").read_text()
    assert re.search(r"^## (\S+)", changelog, re.M).group(1) == version  # type: ignore[union-attr]
    assert f"dspark-json {version}" in README.read_text()
    pages = [README, *DOCS.rglob("*.md")]
    said = {
        (str(p.relative_to(ROOT)), v)
        for p in pages
        for v in re.findall(r"dspark[_-]json[- ](\d+\.\d+\.\d+)", p.read_text(encoding="utf-8"))
    }
    assert {v for _, v in said} == {version}, sorted(said)


def test_the_readme_is_short_and_links_only_to_what_exists():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 200
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
        if not target.startswith(("http://", "https://")):
            assert (ROOT / target).exists(), target


def test_the_quick_start_of_the_site_is_the_readme_s():
    """tests/test_quickstart.py runs the README's; the page shows the same block."""
    from tests.test_quickstart import LOCAL, quick_start

    assert quick_start(LOCAL) == quick_start(README)


def test_the_bodies_snippet_runs_as_written():
    """docs/guide/bodies.md's first snippet, with bodies and a schema in hand."""
    import json

    text = (DOCS / "guide" / "bodies.md").read_text(encoding="utf-8")
    start = text.index("```python\n") + len("```python\n")
    choice = {"index": 0, "message": {"role": "assistant", "content": '{"score": 2}'}}
    body = {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]}
    names = {
        "bodies": [json.dumps(body), "not a body", None],
        "schema": {"type": "object", "properties": {"score": {"type": "number"}}},
    }
    exec(text[start : text.index("```\n", start)], names)
    table = names["table"]
    assert table.column("_status").to_pylist() == ["ok", "corrupt_envelope", None]
    assert table.column("parsed").to_pylist()[0] == {"score": 2.0}
