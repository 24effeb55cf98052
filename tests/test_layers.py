"""The package's layer order, enforced: a module imports only from its own component or from
components in lower layers, and no two modules import each other, even through others.

The order is the flow of one micro-batch read bottom-up (docs/ARCHITECTURE.md draws it):
vocabulary and records at the bottom, then the response contract (bytes and Arrow buffers, then
what a response is: its envelope, the content rule, the type mapping), then the stages (parse,
schema, http, inputs), then what joins them (options, metrics, pipeline, load), then the entry
points, then tooling.

The parse stage is used through its face (``dspark_json.parse``) only, and inside it, two more
seams: the numba JSON library (``dspark_json.parse.json``) is used through its package face
only, and the backends (cpu, gpu, reference and the vectorised path they share) only through
:func:`dspark_json.parse.make_parser` and the ``Parser`` it returns.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "dspark_json"

#: Lowest first. Components in one layer must not import each other.
LAYERS: list[set[str]] = [
    {"errors", "phases"},  # phases: the first minute's INFO lines, said from any stage
    {"compat"},  # what differs between Spark versions
    {"regular"},  # a local file others can write, opened without trusting it
    {"storage"},  # the object stores' settings: one per query
    {"fs", "memory"},  # where bytes live: files, and the process heap
    {"rows"},
    {"records"},
    {"option_spec", "cost"},  # how an option is declared; what tokens cost
    {"buffers"},  # bytes and Arrow buffers: compiled byte scans' pieces, Arrow <-> numpy
    {"response"},  # the response contract: envelope, content rule, Spark <-> Arrow types
    {"parse", "schema"},  # siblings: neither imports the other
    {"http"},
    {"request"},  # request bodies: built above the transport that sends them
    {"inputs", "reask"},  # the stages above the transport: prompts in, answers judged again
    {"options"},
    {"metrics"},
    {"progress"},  # the live progress records, read back
    {"pipeline", "prometheus", "report"},
    {"load"},
    {"bodies", "generation", "delta", "source", "plan"},
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
                        where = PACKAGE.parent / sub.replace(".", "/")
                        is_module = where.with_suffix(".py").exists() or where.is_dir()
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


#: The parse stage's face: outside ``parse/``, only this module of the stage is imported.
PARSE_FACE = "dspark_json.parse"
#: The JSON library: other modules import its face (the package), never its modules.
JSON_LIBRARY = "dspark_json.parse.json"
#: The JSON library's device target: it compiles the library's kernels from their own source
#: for CUDA (parse/gpu/targets.py), so it names the modules they live in and their callees.
DEVICE_TARGET = (
    "dspark_json.parse.gpu.doubles",
    "dspark_json.parse.gpu.fit",
    "dspark_json.parse.gpu.grammar",
)
#: The backends and what they are made of: only the choice of backend (``make_parser``) and the
#: backends themselves import them; every other module gets a ``Parser`` from ``make_parser``.
BACKENDS = {
    "dspark_json.parse.cpu",
    "dspark_json.parse.gpu.parser",
    "dspark_json.parse.gpu.reader",
    "dspark_json.parse.reference",
    "dspark_json.parse.vectorised",
    "dspark_json.parse.plan",
    "dspark_json.parse.content_pass",
    "dspark_json.parse.outcomes",
    "dspark_json.parse.rescued",
}
#: Who may import a backend module.
BACKEND_USERS = {"dspark_json.parse.choice", *BACKENDS}
#: The modules that talk to a GPU: imported lazily, by the GPU backend only.
GPU_MODULES = ("cudf", "cupy", "rmm", "numba.cuda")


def _reaching_inside(face: str, exempt: tuple[str, ...] = ()) -> list[str]:
    """Who imports a module inside the package ``face`` from outside it (``exempt`` aside)."""
    return sorted(
        f"{module} imports {target} (import {face} instead)"
        for module, targets in _imports().items()
        for target in targets
        if target.startswith(face + ".")
        and not (module == face or module.startswith(face + "."))
        and module not in exempt
    )


def test_nothing_outside_the_parse_stage_imports_its_insides():
    wrong = _reaching_inside(PARSE_FACE)
    assert not wrong, "\n".join(wrong)


def test_nothing_outside_the_json_library_imports_its_insides():
    wrong = _reaching_inside(JSON_LIBRARY, DEVICE_TARGET)
    assert not wrong, "\n".join(wrong)


def test_the_backends_are_reached_only_through_make_parser():
    wrong = [
        f"{module} imports {target} (use dspark_json.parse.make_parser)"
        for module, targets in _imports().items()
        for target in targets
        if target in BACKENDS and module not in BACKEND_USERS
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_only_the_gpu_backend_imports_gpu_modules_and_only_on_use():
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        name = _module_name(path)
        tree = ast.parse(path.read_text())
        top_level = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for imported in names:
                if not imported.startswith(GPU_MODULES):
                    continue
                if not name.startswith("dspark_json.parse.gpu"):
                    wrong.append(f"{name} imports {imported}")
                elif id(node) in top_level:
                    wrong.append(f"{name} imports {imported} at import time")
    assert not wrong, "\n".join(sorted(wrong))


def test_the_seam_checks_see_a_wrong_import(monkeypatch):
    """The seams above can fail: an input reaching into a JSON library module, or a stage
    building a backend itself, is caught."""
    graph = _imports()
    graph["dspark_json.parse.calls"].add("dspark_json.parse.json.conform")
    graph["dspark_json.parse.batch"].add("dspark_json.parse.cpu")
    graph["dspark_json.inputs.recorded"].add("dspark_json.parse.content")
    monkeypatch.setattr(__import__(__name__, fromlist=["_imports"]), "_imports", lambda: graph)
    for check, expected in [
        (test_nothing_outside_the_json_library_imports_its_insides, "calls imports"),
        (test_the_backends_are_reached_only_through_make_parser, "batch imports"),
        (test_nothing_outside_the_parse_stage_imports_its_insides, "recorded imports"),
    ]:
        try:
            check()
        except AssertionError as exc:
            assert expected in str(exc)
        else:
            raise AssertionError(f"{check.__name__} let a wrong import through")


def test_the_layer_check_sees_a_wrong_import(tmp_path, monkeypatch):
    """The checks above can fail: a stage importing the pipeline, the type stage importing the
    parser (its sibling), the contract importing a stage, are each caught."""
    for module, target in [
        ("dspark_json.parse.cpu", "dspark_json.pipeline"),
        ("dspark_json.schema.tools", "dspark_json.parse"),
        ("dspark_json.parse.reference", "dspark_json.schema.output"),
        ("dspark_json.response.envelope", "dspark_json.schema.tools"),
        ("dspark_json.buffers.arrow", "dspark_json.response.convert"),
    ]:
        graph = _imports()
        graph[module].add(target)
        monkeypatch.setattr(
            __import__(__name__, fromlist=["_imports"]), "_imports", lambda graph=graph: graph
        )
        try:
            test_imports_go_down_the_layers()
        except AssertionError as exc:
            assert f"{module} imports {target}" in str(exc)
        else:
            raise AssertionError(f"{module} importing {target} went unnoticed")
