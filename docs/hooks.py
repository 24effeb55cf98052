"""MkDocs hooks of the docs site (``hooks:`` in mkdocs.yml; no plugin to install).

- The how-to section of the nav lists the pages mkdocs.yml names, and every other
  ``docs/guide/*.md`` in name order before its last page, troubleshooting: a new guide page
  needs no edit here or in mkdocs.yml (place it in mkdocs.yml where a reader looks for it).
- The reference pages are generated from the code (``docs/gen_reference.py``) at every build.
- The benchmarks' own README, results and plots (``benchmarks/``) are served as they are.
- Sphinx roles (``:func:``) the docstrings use are dropped from the rendered API page.
- The changelog page takes in the fragments of ``docs/changes/*.md`` (one per change, written
  by whoever made it) where it says ``<!-- changes -->``, as one list: a fragment's headings
  (its branch's title) are dropped.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
#: The nav section that takes in every page of docs/guide/.
GUIDES = "How-to guides"
#: The how-to page that stays last: the pages mkdocs.yml does not name go before it.
LAST_GUIDE = "guide/troubleshooting.md"
#: A Markdown heading line of a changelog fragment (``# Changes: ...``): not a change.
HEADING = re.compile(r"^#{1,6} .*$", re.MULTILINE)
#: Where the changelog page takes in the fragments.
CHANGES_MARK = "<!-- changes -->"
#: A Sphinx role before an inline code span in a rendered docstring (``:func:`x```): dropped.
SPHINX_ROLE = re.compile(r":(?:func|class|data|meth|mod|attr|exc|obj):(?=<code>)")
#: Files of the repository outside docs/ that the site serves, as globs from the root.
OUTSIDE = ("benchmarks/README.md", "benchmarks/results/*.md", "benchmarks/results/*.png")


def _nav_paths(entries: Any) -> set[str]:
    found: set[str] = set()
    for entry in entries or []:
        if isinstance(entry, str):
            found.add(entry)
        elif isinstance(entry, dict):
            for value in entry.values():
                found |= _nav_paths(value) if isinstance(value, list) else {value}
    return found


def guide_pages(nav: list[Any]) -> list[Any]:
    """The nav with every docs/guide/*.md it does not name appended to its how-to section."""
    listed = _nav_paths(nav)
    extra = [
        f"guide/{p.name}"
        for p in sorted((DOCS / "guide").glob("*.md"))
        if f"guide/{p.name}" not in listed
    ]
    for entry in nav:
        if isinstance(entry, dict) and GUIDES in entry:
            listed_guides = list(entry[GUIDES])
            last = listed_guides[-1:] if listed_guides[-1:] == [LAST_GUIDE] else []
            entry[GUIDES] = [*listed_guides[: len(listed_guides) - len(last)], *extra, *last]
    return nav


def change_fragments() -> str:
    """The fragments of docs/changes/, in name order, as one list (headings dropped)."""
    parts = [
        HEADING.sub("", p.read_text(encoding="utf-8")).strip()
        for p in sorted((DOCS / "changes").glob("*.md"))
    ]
    return "\n".join(part for part in parts if part)


def on_config(config: Any) -> Any:
    if str(ROOT) not in sys.path:  # the generator imports dspark_json from this tree
        sys.path.insert(0, str(ROOT))
    if config.nav:
        config.nav = guide_pages(config.nav)
    return config


def on_files(files: Files, config: Any) -> Files:
    sys.path.insert(0, str(DOCS))
    try:
        import gen_reference
    finally:
        sys.path.remove(str(DOCS))
    for path, page in gen_reference.PAGES.items():
        files.append(File.generated(config, path, content=page()))
    for pattern in OUTSIDE:
        for found in sorted(ROOT.glob(pattern)):
            uri = str(found.relative_to(ROOT))
            files.append(File.generated(config, uri, abs_src_path=str(found)))
    return files


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if CHANGES_MARK in markdown:
        return markdown.replace(CHANGES_MARK, change_fragments())
    return markdown


def on_page_content(html: str, **_: Any) -> str:
    return SPHINX_ROLE.sub("", html)
