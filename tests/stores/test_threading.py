"""Every call in the package to a function or class that reaches a path with the query's
storage settings passes them: those that default to the environment only (so that tests and
scripts may leave them out) are called with ``storage=`` in the library, always."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "dspark_json"

#: Callables whose ``storage`` has a default (the environment only).
DEFAULTED = {
    "PromptListing",
    "_BatchListing",
    "Segment",
    "Journal",
    "ResponseCache",
    "send_once",
    "read_records",
    "report",
    "index_rows",
    "write_files",
    "delete_files",
    "commit_files",
    "committed_version",
    "table_partitioning",
    "open_table",
    "reader_class",  # delta.sink: DeltaTableReader, or the class that pushes no filters
    "read_file",
    "read_endpoints_file",
}


def _name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def test_the_library_always_passes_the_storage_settings():
    missing = []
    seen = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and _name(node) in DEFAULTED:
                seen.add(_name(node))
                if not any(k.arg == "storage" for k in node.keywords):
                    where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
                    missing.append(f"{where} {_name(node)}(...)")
    assert not missing, "called without storage=:\n" + "\n".join(missing)
    assert seen == DEFAULTED  # each is called somewhere: the list is not stale
