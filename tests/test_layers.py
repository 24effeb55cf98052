"""The package's layer order, enforced: a module imports only from its own component or from
components in lower layers, and no two modules import each other, even through others.

The order is the flow of one micro-batch read bottom-up (docs/ARCHITECTURE.md draws it):
vocabulary and records at the bottom, then the stages (parse, schema, http, inputs), then what
joins them (options, metrics, pipeline, load), then the entry points, then tooling.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dspark_json"

#: Lowest first. Components in one layer must not import each other.
LAYERS: list[set[str]] = [
    {"errors"},
    {"compat"},  # what differs between Spark versions
    {"fs", "memory"},  # where bytes live: files, and the process heap
    {"rows"},
    {"records"},
    {"option_spec"},
    {"parse"},
    {"schema"},
    {"http"},
    {"inputs"},
    {"options"},
    {"metrics"},
    {"pipeline"},
    {"load"},
    {"bodies", "generation", "delta", "source"},
    {"dev"},
    {"__init__"},  # the public API
    {"cli"},  # uses the public API
    {"__main__"},
]
LAYER = {component: i for i, layer in enumerate(LAYERS) for component in layer}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 2:
        parts.pop()
    return ".".join(parts)


def _component(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports() -> dict[str, set[str]]:
    """Every module of the package -> the package modules it imports (anywhere in it)."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module.startswith("dspark_json"):
                    for alias in node.names:
                        sub = f"{node.module}.{alias.name}"
                        is_module = (PACKAGE.parent / (sub.replace(".", "/") + ".py")).exists()
                        found.add(sub if is_module else node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("dspark_json")}
        graph[name] = found - {name}
    return graph


def test_every_component_has_a_layer():
    components = {_component(m) for m in _imports()}
    assert components <= set(LAYER), f"put these in LAYERS: {sorted(components - set(LAYER))}"


def test_imports_go_down_the_layers():
    wrong = []
    for module, targets in _imports().items():
        here = _component(module)
        for target in targets:
            there = _component(target)
            if there != here and LAYER[there] >= LAYER[here]:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "imports against the layer order:\n" + "\n".join(sorted(wrong))


def test_no_import_cycles():
    graph = _imports()
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if target == module.rsplit(".", 1)[0]:
                continue  # a package's own __init__, imported by its modules
            if state.get(target) == 1:
                cycle = [*path[path.index(target) :], target] if target in path else [target]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if target in graph and state.get(target) is None:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if state.get(module) is None:
            visit(module, [module])


def test_the_layer_check_sees_a_wrong_import(tmp_path, monkeypatch):
    """The checks above can fail: a stage importing the pipeline is caught."""
    graph = _imports()
    graph["dspark_json.parse.cpu"].add("dspark_json.pipeline")
    monkeypatch.setattr(__import__(__name__, fromlist=["_imports"]), "_imports", lambda: graph)
    try:
        test_imports_go_down_the_layers()
    except AssertionError as exc:
        assert "dspark_json.parse.cpu imports dspark_json.pipeline" in str(exc)
    else:
        raise AssertionError("a wrong import went unnoticed")
